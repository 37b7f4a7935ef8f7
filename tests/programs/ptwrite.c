// PTWRITE from user code: each request writes its id (a 64-bit register
// operand) on entry and its result (a 32-bit memory operand) on exit, as
// a program instruments itself for Intel PT. On a CPU without PTWRITE
// (every machine here) the instruction faults, so this program runs only
// under ptscope's emulated backend, which executes PTWRITE as the CPU
// would: a no-op that writes a PTW packet.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint32_t result;

static inline void ptwrite64(uint64_t v) { __asm__ volatile("ptwriteq %0" ::"r"(v)); }
static inline void ptwrite32_mem(const uint32_t *p) {
    __asm__ volatile("ptwritel %0" ::"m"(*p));
}

__attribute__((noinline)) uint32_t handle(uint64_t id) {
    ptwrite64(0x1000 + id);
    uint32_t acc = 0;
    for (uint64_t i = 0; i <= id; i++) acc += (uint32_t)(i * 7);
    result = acc;
    ptwrite32_mem(&result);
    return acc;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5;
    uint32_t sum = 0;
    for (int i = 0; i < n; i++) sum += handle((uint64_t)i);
    printf("%u\n", sum);
    return 0;
}
