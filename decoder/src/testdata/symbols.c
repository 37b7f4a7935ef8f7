/* The symbolizer's test program: a static function with an always-inline
 * callee in a loop, calls through the PLT (puts, printf), and a function
 * pointer to a libc function (a GLOB_DAT GOT slot). Built at test time. */
#include <stdio.h>
#include <stdlib.h>

static int counter;

static inline __attribute__((always_inline)) int bump(int x) {
    counter += x * 3;
    return counter ^ x;
}

static __attribute__((noinline, noipa)) int sum_bumps(int n) {
    int s = 0;
    for (int i = 0; i < n; i++)
        s += bump(i); /* CALL-BUMP */
    return s;
}

int (*volatile say)(const char *) = puts;

int main(int argc, char **argv) {
    (void)argv;
    puts("hello");
    printf("%d\n", sum_bumps(argc * 100));
    say("bye");
    return abs(argc - 3);
}
