/* A thread created late, after the capture started, that calls
 * late_work() at once; the main thread never calls it. A trigger on
 * late_work must fire on whichever thread reaches it. */
#include <pthread.h>
#include <stdint.h>

static volatile uint64_t sink;

__attribute__((noinline)) uint64_t late_work(uint64_t n) {
    uint64_t h = n;
    for (uint64_t i = 0; i < n; i++)
        h = h * 31 + i;
    return h;
}

static void *worker(void *arg) {
    (void)arg;
    sink += late_work(500);
    return 0;
}

int main(void) {
    /* Run a while first, so the thread comes late. */
    for (uint64_t i = 0; i < 20000; i++)
        sink += i * 7;
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    pthread_join(t, 0);
    return 0;
}
