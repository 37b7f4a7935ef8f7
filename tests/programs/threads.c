/* A second thread, joined: clone, futex waits and two PT streams. */
#include <pthread.h>
#include <stdio.h>

static int counter;

__attribute__((noinline)) int spin(int n) {
    int acc = 0;
    for (int i = 0; i < n; i++) acc += i & 7;
    return acc;
}

static void *worker(void *arg) {
    counter += spin(2000);
    return arg;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    int mine = spin(1000);
    pthread_join(t, NULL);
    printf("%d %d\n", mine, counter);
    return 0;
}
