// Range capture: main sets up, then runs three rounds of
// begin_work (START), work, end_work (STOP) with noise between them, then
// finishes. It prints the runtime addresses of START and STOP, so that a
// test can cut the ptrace log where the range begins and ends.
#include <stdio.h>

volatile unsigned sink;

__attribute__((noinline)) void noise(int n) {
    for (int i = 0; i < n; i++) sink += i * 3;
}
__attribute__((noinline)) void begin_work(void) { sink++; }
__attribute__((noinline)) void work(int round) {
    for (int i = 0; i <= round * 10; i++) sink ^= i;
}
__attribute__((noinline)) void end_work(void) { sink--; }
__attribute__((noinline)) void finish(void) { sink = 0; }
/* Never called: a range START that is never entered. */
__attribute__((noinline)) void never_called(void) { sink = 7; }

int main(void) {
    printf("%p %p\n", (void *)begin_work, (void *)end_work);
    fflush(stdout);
    noise(200);
    for (int round = 0; round < 3; round++) {
        begin_work();
        work(round);
        end_work();
        noise(100);
    }
    finish();
    return 0;
}
