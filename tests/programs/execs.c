/* Runs a little, then replaces itself with another program. */
#include <unistd.h>
__attribute__((noinline)) int tick(int i) { return i * 5 + 2; }
int main(void) {
    volatile long s = 0;
    for (int i = 0; i < 20; i++) s += tick(i);
    execl("/bin/true", "true", (char *)0);
    return 1;
}
