/* Asynchronous signals landing anywhere in a loop of conditional branches:
 * an interval timer's SIGALRM arrives between a branch and whatever runs
 * next, and its handler returns through sigreturn. The QEMU backend must
 * record exactly the instructions that ran, handler included. */
#include <signal.h>
#include <string.h>
#include <sys/time.h>

static volatile int alarms;

static void on_alarm(int sig) {
    (void)sig;
    alarms++;
}

__attribute__((noinline)) unsigned step(unsigned x) {
    if (x & 1)
        x = x * 3 + 1;
    else
        x >>= 1;
    return x;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval t = {{0, 500}, {0, 500}};
    setitimer(ITIMER_REAL, &t, 0);
    unsigned x = 27, n = 0;
    while (alarms < 20) {
        x = step(x);
        if (x == 1)
            x = 27 + (n++ & 15);
    }
    return 0;
}
