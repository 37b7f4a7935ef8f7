// Virtual calls and a C++ exception thrown through several frames.
#include <cstdio>
#include <stdexcept>

struct Shape {
    virtual ~Shape() {}
    virtual int area() const = 0;
};
struct Square : Shape {
    int s;
    explicit Square(int s) : s(s) {}
    int area() const override { return s * s; }
};
struct Rect : Shape {
    int w, h;
    Rect(int w, int h) : w(w), h(h) {}
    int area() const override { return w * h; }
};

__attribute__((noinline)) int thrower(int depth) {
    if (depth == 0) throw std::runtime_error("deep");
    return thrower(depth - 1) + 1;
}

int main() {
    Square sq(3);
    Rect r(2, 5);
    const Shape *shapes[] = {&sq, &r, &sq};
    int total = 0;
    for (const Shape *s : shapes) total += s->area();
    try {
        total += thrower(4);
    } catch (const std::exception &e) {
        total += 100;
    }
    std::printf("total %d\n", total);
    return 0;
}
