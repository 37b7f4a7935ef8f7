/* The ptscope demo: a request loop where a few requests take a slow path.
 * After each request the loop checks whether it was slow; the first time
 * one is, it calls `on_slow_request`, the snapshot's trigger. The trace then
 * holds the slow request whole and the ordinary ones before it: what a
 * latency hunter wants to see. */
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
    snprintf(r->key, sizeof r->key, "user:%d", id * 7919 % 100000);
    return (int)strlen(r->key);
}

/* The slow path: a cache miss that rehashes the key many times. */
__attribute__((noinline)) int slow_path(struct request *r) {
    unsigned acc = 0;
    for (int i = 0; i < 300; i++) acc += hash_key(r->key) >> (i & 7);
    return (int)(acc & 0xff);
}

__attribute__((noinline)) static int lookup(struct request *r, int *slow) {
    r->hash = hash_key(r->key);
    if ((r->hash & 255) == 0) {
        *slow = 1;
        return slow_path(r);
    }
    return (int)(r->hash & 0xff);
}

__attribute__((noinline)) static int handle(int id, int *slow) {
    struct request r;
    parse(&r, id);
    return lookup(&r, slow);
}

/* The trigger: called once a request has turned out slow. */
__attribute__((noinline)) void on_slow_request(int id) {
    printf("request %d was slow\n", id);
}

int main(void) {
    int total = 0;
    for (int id = 0; id < 100000; id++) {
        int slow = 0;
        total += handle(id, &slow);
        if (slow) {
            on_slow_request(id);
            break;
        }
    }
    printf("checksum %d\n", total);
    return 0;
}
