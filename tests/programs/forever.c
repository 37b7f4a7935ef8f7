/* Runs until killed: a target for `ptscope attach`. */
#include <unistd.h>
__attribute__((noinline)) int tick(int i) {
    int a = 0;
    for (int k = 0; k < 200; k++) a += k ^ i;
    return a;
}
int main(void) {
    volatile long t = 0;
    for (int i = 0;; i++) {
        t += tick(i);
        if (i % 100 == 0) usleep(1000);
    }
}
