/* A loop of identical calls: with the emulated clock (one instruction, one
 * nanosecond) every call of step() must last exactly as many nanoseconds as
 * step() has instructions. */
#include <stdio.h>

__attribute__((noinline)) long step(long x) {
    __asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop");
    return x * 3 + 1;
}

int main(void) {
    long acc = 0;
    for (int i = 0; i < 1000; i++)
        acc = step(acc) & 0xffff;
    printf("%ld\n", acc);
    return 0;
}
