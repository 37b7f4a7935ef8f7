/* 200 threads that wait on a condition that never comes, and a main
   thread that ticks: a target with hundreds of threads to attach to. */
#include <pthread.h>
#include <unistd.h>

#define THREADS 200

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

static void *wait_forever(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) pthread_cond_wait(&never, &lock);
    return 0;
}

__attribute__((noinline)) int tick(int i) { return i * 3 + 1; }

int main(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], 0, wait_forever, 0);
    volatile long s = 0;
    for (int i = 0;; i++) {
        s += tick(i);
        usleep(1000);
    }
}
