// Iterators, a trait object and recursion in Rust.
trait Op {
    fn apply(&self, x: u64) -> u64;
}
struct Add(u64);
struct Mul(u64);
impl Op for Add {
    fn apply(&self, x: u64) -> u64 {
        x + self.0
    }
}
impl Op for Mul {
    fn apply(&self, x: u64) -> u64 {
        x * self.0
    }
}

#[inline(never)]
fn depth(n: u32) -> u32 {
    if n == 0 { 0 } else { 1 + depth(n - 1) }
}

fn main() {
    let ops: Vec<Box<dyn Op>> = vec![Box::new(Add(3)), Box::new(Mul(2))];
    let mut x = 1u64;
    for i in 0..20 {
        x = ops[i % 2].apply(x) % 1_000_003;
    }
    let s: u64 = (0..100u64).filter(|v| v % 3 == 0).sum();
    println!("{} {} {}", x, s, depth(30));
}
