/* The ptscope demo: a tiny request loop where one request in sixteen takes
 * a slow path. The snapshot is taken when `slow_path` is first entered, so
 * the trace shows the ordinary requests before it and the one that went
 * wrong. */
#include <stdio.h>
#include <string.h>

struct request {
    int id;
    char key[32];
    unsigned hash;
};

__attribute__((noinline)) static unsigned hash_key(const char *s) {
    unsigned h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

__attribute__((noinline)) static int parse(struct request *r, int id) {
    r->id = id;
    snprintf(r->key, sizeof r->key, "user:%d", id * 7919 % 1000);
    return (int)strlen(r->key);
}

__attribute__((noinline)) int slow_path(struct request *r) {
    unsigned acc = 0;
    for (int i = 0; i < 2000; i++) acc += hash_key(r->key) >> (i & 7);
    return (int)(acc & 0xff);
}

__attribute__((noinline)) static int lookup(struct request *r) {
    r->hash = hash_key(r->key);
    if ((r->hash & 15) == 0) return slow_path(r);
    return (int)(r->hash & 0xff);
}

__attribute__((noinline)) static int handle(int id) {
    struct request r;
    parse(&r, id);
    return lookup(&r);
}

int main(void) {
    int total = 0;
    for (int id = 0; id < 200; id++) total += handle(id);
    printf("handled 200 requests, checksum %d\n", total);
    return 0;
}
