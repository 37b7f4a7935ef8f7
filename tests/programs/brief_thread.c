/* A main thread that runs long and a second thread that runs briefly: on
 * a per-CPU trace the second thread's whole run usually falls between two
 * PSBs, so no PSB checkpoint of its own covers it. */
#include <pthread.h>
#include <stdio.h>

static volatile int sink;

__attribute__((noinline)) int brief(int n) {
    int acc = 0;
    for (int i = 0; i < n; i++) acc += i;
    return acc;
}

__attribute__((noinline)) long busy(long n) {
    long acc = 0;
    for (long i = 0; i < n; i++) acc += i ^ (acc >> 3);
    return acc;
}

static void *worker(void *arg) {
    sink = brief(8);
    return arg;
}

int main(void) {
    long a = busy(20000);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    a += busy(20000);
    printf("%ld %d\n", a & 1, sink);
    return 0;
}
