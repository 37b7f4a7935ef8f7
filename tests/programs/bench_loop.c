/* Many short calls, for the coarse-pass benchmark (app/benches/coarse.rs):
 * direct, indirect and recursive calls with their returns, and
 * conditional branches, with no system call in the loop. It runs ROUNDS
 * rounds (argv[1], default 10^7) and exits; the benchmark snapshots it
 * after a fixed time under the emulated backend, then lets it finish. */
#include <stdlib.h>

typedef unsigned (*op_fn)(unsigned);

__attribute__((noinline, noclone)) unsigned leaf(unsigned x) { return (x * 2654435761u) >> 7; }
__attribute__((noinline, noclone)) unsigned add1(unsigned x) { return leaf(x) + 1; }
__attribute__((noinline, noclone)) unsigned mix(unsigned x) { return leaf(x ^ 0x9e37u) ^ x; }

__attribute__((noinline, noclone)) unsigned depth(unsigned x, int n) {
    return n ? depth(x + (unsigned)n, n - 1) + 1 : leaf(x);
}

static op_fn ops[2] = {add1, mix};

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 10000000;
    unsigned acc = 1;
    for (long i = 0; i < rounds; i++) {
        acc += ops[i & 1](acc);
        acc ^= depth(acc, 3);
        if (acc & 1)
            acc += leaf(acc);
    }
    return acc == 42;
}
