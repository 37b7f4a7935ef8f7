/* A request handler that is nearly always fast: one request in 25 finds
 * its index stale, takes the slow branch, rebuilds the index, and probes
 * with a long loop. The outlier tests know this structure by the markers
 * in the comments: which function is the slow path, which line is the
 * branch only slow calls take, and how many trips each loop makes. */
#include <stdint.h>
#include <stdlib.h>

static volatile uint64_t sink;

__attribute__((noinline)) uint64_t parse(uint64_t r) {
    return r * 2654435761u ^ (r >> 3);
}

__attribute__((noinline)) uint64_t probe(uint64_t k, int trips) {
    uint64_t h = k;
    for (int i = 0; i < trips; i++) /* marker: probe-loop */
        h = h * 31 + (uint64_t)i;
    return h;
}

__attribute__((noinline)) uint64_t rebuild(uint64_t k) {
    uint64_t h = 0;
    for (int i = 0; i < 120; i++) /* marker: rebuild-loop, 120 trips */
        h ^= (k + (uint64_t)i) * 0x9e3779b97f4a7c15u;
    return h;
}

__attribute__((noinline)) uint64_t handle(uint64_t r) {
    uint64_t k = parse(r);
    int trips = 3; /* marker: fast trips */
    if (r % 25 == 24) {
        k = rebuild(k); /* marker: slow-branch */
        trips = 40;     /* marker: slow trips */
    }
    return probe(k, trips);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200;
    for (int r = 0; r < n; r++)
        sink += handle((uint64_t)r);
    return 0;
}
