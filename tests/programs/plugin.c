/* Built as a shared library and loaded with dlopen by dlopen.c. */
__attribute__((noinline)) int plugin_entry(int x) {
    int acc = 0;
    for (int i = 0; i < x; i++) acc += (i % 2) ? i : -i;
    return acc;
}
