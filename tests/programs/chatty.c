/* Writes bytes that are not UTF-8, with no newline, to stdout and stderr
   while it ticks for about three seconds: a recorded command whose output
   must never be taken for ptscope's own. */
#include <unistd.h>
__attribute__((noinline)) int tick(int i) { return i * 7 + 1; }
int main(void) {
    static const char junk[] = "\xff\xfe{\"Done\":{\"saved\":[]}} \x80";
    volatile long s = 0;
    for (int i = 0; i < 300; i++) {
        s += tick(i);
        if (write(1, junk, sizeof junk - 1) < 0 || write(2, junk, sizeof junk - 1) < 0)
            return 9; /* a broken pipe: the test sees status 9 */
        usleep(10000);
    }
    return 0;
}
