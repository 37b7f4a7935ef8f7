/* The main thread spins, without syscalls, on a flag the second thread
 * sets: it only ends if the tracer preempts the spinning thread. The spin
 * is bounded so a tracer that never preempts still terminates. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

static atomic_int flag;

static void *worker(void *arg) {
    volatile int acc = 0;
    for (int i = 0; i < 2000; i++) acc += i;
    atomic_store(&flag, 1);
    return arg;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    long spins = 0;
    while (!atomic_load(&flag) && spins < 200000) spins++;
    int seen = atomic_load(&flag);
    pthread_join(t, NULL);
    printf(seen ? "flag seen\n" : "flag never seen\n");
    return seen ? 0 : 3;
}
