/* A known inlined call: `mix` is always inlined into `churn`'s loop, so its
 * lines show up as an inlined frame under the line that calls it. */
#include <stdio.h>

static inline __attribute__((always_inline)) unsigned mix(unsigned h, unsigned x) {
    h ^= x;
    h *= 16777619u;
    return h;
}

__attribute__((noinline)) unsigned churn(int n) {
    unsigned h = 2166136261u;
    for (int i = 0; i < n; i++)
        h = mix(h, (unsigned)i * 2654435761u);
    return h;
}

int main(void) {
    printf("%u\n", churn(40));
    return 0;
}
