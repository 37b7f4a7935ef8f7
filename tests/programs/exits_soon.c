/* Ticks for about a second, then exits with status 3: a target that ends
   while it is being captured. */
#include <unistd.h>
__attribute__((noinline)) int tick(int i) { return i * 7 + 1; }
int main(void) {
    volatile long s = 0;
    for (int i = 0; i < 100; i++) {
        s += tick(i);
        usleep(10000);
    }
    return 3;
}
