//! Independent pieces of work spread over threads: what a loop does when
//! each turn stands alone and the turns are many and large.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f(0)`, …, `f(n - 1)` in order, computed on up to `workers` threads
/// that each take the next index not yet taken. One worker runs them on
/// the calling thread.
pub(crate) fn map_indexed<T: Send>(
    n: usize,
    workers: usize,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    if workers <= 1 || n <= 1 {
        return (0..n).map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..workers.min(n) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let r = f(i);
                *out[i].lock() = Some(r);
            });
        }
    });
    out.into_iter()
        .map(|m| m.into_inner().expect("every index was taken"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_on_any_number_of_threads() {
        for workers in [1, 2, 5] {
            let out = map_indexed(100, workers, |i| i * i);
            assert_eq!(out, (0..100).map(|i| i * i).collect::<Vec<_>>());
        }
        assert!(map_indexed(0, 4, |i| i).is_empty());
    }
}
