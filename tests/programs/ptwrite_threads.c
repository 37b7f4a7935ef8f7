// Two threads that instrument their requests with PTWRITE (the request id
// on entry, its result on exit), for the README's screenshot of marks
// rows and CPU lanes: recorded per CPU by the emulated backend, which
// executes PTWRITE on any CPU.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

static inline void ptwrite64(uint64_t v) { __asm__ volatile("ptwriteq %0" ::"r"(v)); }

__attribute__((noinline)) uint64_t serve(uint64_t id) {
    ptwrite64(id);
    uint64_t acc = 0;
    for (uint64_t i = 0; i < 200 + (id % 7) * 150; i++) acc += i ^ id;
    ptwrite64(acc);
    return acc;
}

static void *worker(void *arg) {
    uint64_t base = (uint64_t)(uintptr_t)arg, sum = 0;
    for (uint64_t r = 0; r < 40; r++) sum += serve(base + r);
    return (void *)(uintptr_t)sum;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, (void *)(uintptr_t)0x2000);
    worker((void *)(uintptr_t)0x1000);
    pthread_join(t, NULL);
    puts("done");
    return 0;
}
