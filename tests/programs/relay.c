/* Three threads pass a turn around a ring, each running a little code on
 * its turn, then waking the others and sleeping until its turn comes back:
 * they take turns on the CPUs, so in a per-CPU capture each thread's trace
 * is spread over several CPUs. */
#include <pthread.h>
#include <stdio.h>

#define THREADS 3
#define ROUNDS 100

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_changed = PTHREAD_COND_INITIALIZER;
static int turn;
static long total;

__attribute__((noinline)) long work(long seed) {
    long acc = seed;
    for (int i = 0; i < 500; i++) acc = acc * 31 + (i & 7);
    return acc;
}

static void *player(void *arg) {
    int me = (int)(long)arg;
    for (int r = 0; r < ROUNDS; r++) {
        pthread_mutex_lock(&lock);
        while (turn != me) pthread_cond_wait(&turn_changed, &lock);
        total += work(r) & 0xff;
        turn = (me + 1) % THREADS;
        pthread_cond_broadcast(&turn_changed);
        pthread_mutex_unlock(&lock);
    }
    return 0;
}

int main(void) {
    pthread_t t[THREADS];
    for (long i = 1; i < THREADS; i++) pthread_create(&t[i], 0, player, (void *)i);
    player(0);
    for (int i = 1; i < THREADS; i++) pthread_join(t[i], 0);
    printf("%ld\n", total);
    return 0;
}
