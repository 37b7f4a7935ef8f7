/* Loops, conditionals, direct and indirect calls, recursion, a syscall,
 * setjmp/longjmp and a signal handler: the control flow a PT encoder must
 * get right. Deterministic: no timing-dependent branches. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static jmp_buf env;
static volatile int hits;

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }

__attribute__((noinline)) int work(int n) {
    int acc = 0;
    for (int i = 0; i < n; i++) {
        if (i % 3 == 0)
            acc += leaf(i);
        else
            acc -= i;
    }
    return acc;
}

__attribute__((noinline)) int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

typedef int (*op_fn)(int);
__attribute__((noinline)) int twice(int x) { return 2 * x; }
__attribute__((noinline)) int negate(int x) { return -x; }

__attribute__((noinline)) void deep_jump(int depth) {
    if (depth == 0)
        longjmp(env, 1);
    deep_jump(depth - 1);
}

static void on_signal(int sig) { hits += sig; }

int main(void) {
    op_fn ops[2] = {twice, negate};
    int total = work(50);
    for (int i = 0; i < 10; i++)
        total += ops[i & 1](i);
    total += fib(12);
    if (setjmp(env) == 0)
        deep_jump(5);
    signal(SIGUSR1, on_signal);
    raise(SIGUSR1);
    char buf[64];
    int n = snprintf(buf, sizeof buf, "total %d hits %d\n", total, hits);
    write(1, buf, n);
    return 0;
}
