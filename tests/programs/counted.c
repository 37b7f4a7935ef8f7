/* A function whose instruction count its source fixes: a mov, 1000 trips
 * of a two-instruction loop (dec, jnz), and a ret, 2002 instructions per
 * call, called three times. What a trace decodes for it can be judged by
 * that count, which no tracer's own log gave. */
__attribute__((noinline, naked)) void counted(void) {
    __asm__ volatile("mov $1000, %ecx\n"
                     "1: dec %ecx\n"
                     "jnz 1b\n"
                     "ret");
}

int main(void) {
    for (int i = 0; i < 3; i++) counted();
    return 0;
}
