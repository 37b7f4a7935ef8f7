/* A second steady loop for the scale benchmark (app/benches/scale.rs):
 * numbers sorted by libc's qsort through a comparison callback (calls from
 * the library back into the program), a string copied and hashed. Its
 * spans are mostly library code, fewer per byte of trace than
 * bench_loop's. It runs ROUNDS rounds (argv[1], default 10^6: seconds
 * on its own) and exits; the benchmark snapshots it after a fixed time
 * under the emulated backend, then lets it finish. */
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline, noclone)) static unsigned hash(const char *s) {
    unsigned h = 5381;
    while (*s)
        h = h * 33 + (unsigned char)*s++;
    return h;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000000;
    int a[48];
    char buf[64];
    unsigned seed = 1, acc = 0;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < 48; i++) {
            seed = seed * 1103515245u + 12345u;
            a[i] = (int)(seed >> 16);
        }
        qsort(a, 48, sizeof a[0], cmp);
        memcpy(buf, "steady loops make periods", 26);
        acc += hash(buf) ^ (unsigned)a[acc % 48];
    }
    return acc == 42;
}
