/* Maps a library mid-run: the image must follow MMAP2 sideband. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*entry)(int) = (int (*)(int))dlsym(h, "plugin_entry");
    printf("%d\n", entry(100));
    dlclose(h);
    return 0;
}
