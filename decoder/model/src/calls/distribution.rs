//! The durations of a function's calls as a distribution: log-scaled
//! buckets, four to a doubling, so that a 50 ns mode and a 50 µs one are
//! both visible in one chart, and the percentiles a latency hunter reads
//! (median, p90, p99, max).

/// Buckets per doubling of duration.
pub const PER_DOUBLING: u32 = 4;

/// Calls whose durations lie in `[from, to)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Bucket {
    pub from: u64,
    pub to: u64,
    pub count: u64,
}

/// How a function's call durations are spread.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Distribution {
    pub calls: u64,
    pub min: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    /// From the bucket holding `min` to the one holding `max`, empty ones
    /// included, so that gaps between modes show.
    pub buckets: Vec<Bucket>,
}

/// The lower edge of log bucket `k`: ⌈2^(k/4)⌉.
fn edge(k: u32) -> u64 {
    let e = (2f64).powf(k as f64 / PER_DOUBLING as f64).ceil();
    if e >= u64::MAX as f64 {
        u64::MAX
    } else {
        e as u64
    }
}

/// The `q`-quantile (0 < q ≤ 1) of sorted durations, by nearest rank: a
/// duration some call really took.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Distribution {
    /// The distribution of `durations` (any order).
    pub fn of(durations: impl IntoIterator<Item = u64>) -> Distribution {
        let mut sorted: Vec<u64> = durations.into_iter().collect();
        sorted.sort_unstable();
        let (Some(&min), Some(&max)) = (sorted.first(), sorted.last()) else {
            return Distribution::default();
        };
        // Edges: 0, then ⌈2^(k/4)⌉ for k = 0, 1, ... (merged where two
        // round to the same integer), from the one at or below `min` to the
        // first above `max`.
        let mut edges: Vec<u64> = vec![0];
        let mut k = 0u32;
        loop {
            let e = edge(k);
            if edges.last() != Some(&e) {
                edges.push(e);
            }
            if e > max || e == u64::MAX {
                break;
            }
            k += 1;
        }
        let first = edges.partition_point(|&e| e <= min).saturating_sub(1);
        let mut buckets: Vec<Bucket> = edges[first..]
            .windows(2)
            .map(|w| Bucket {
                from: w[0],
                to: w[1],
                count: 0,
            })
            .collect();
        if buckets.is_empty() {
            // `max` is u64::MAX: one last bucket holds it.
            buckets.push(Bucket {
                from: edges[first],
                to: u64::MAX,
                count: 0,
            });
        }
        let mut b = 0;
        for &d in &sorted {
            while b + 1 < buckets.len() && d >= buckets[b].to {
                b += 1;
            }
            buckets[b].count += 1;
        }
        Distribution {
            calls: sorted.len() as u64,
            min,
            p50: percentile(&sorted, 0.5),
            p90: percentile(&sorted, 0.9),
            p99: percentile(&sorted, 0.99),
            max,
            buckets,
        }
    }

    /// The durations these buckets hold, `[from, to)`, for a brush.
    pub fn bucket_of(&self, duration: u64) -> Option<usize> {
        self.buckets
            .iter()
            .position(|b| duration >= b.from && duration < b.to)
            .or_else(|| {
                (self.buckets.last()?.to == u64::MAX && duration == u64::MAX)
                    .then(|| self.buckets.len() - 1)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_durations_some_call_took() {
        let d: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&d, 0.5), 50);
        assert_eq!(percentile(&d, 0.9), 90);
        assert_eq!(percentile(&d, 0.99), 99);
        assert_eq!(percentile(&d, 1.0), 100);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn two_modes_fall_in_buckets_apart_with_empty_ones_between() {
        let mut d = vec![40u64; 95];
        d.extend([1000u64; 5]);
        let dist = Distribution::of(d);
        assert_eq!((dist.calls, dist.min, dist.max), (100, 40, 1000));
        assert_eq!((dist.p50, dist.p90, dist.p99), (40, 40, 1000));
        let full: Vec<&Bucket> = dist.buckets.iter().filter(|b| b.count > 0).collect();
        assert_eq!(full.len(), 2);
        assert!(full[0].from <= 40 && 40 < full[0].to && full[0].count == 95);
        assert!(full[1].from <= 1000 && 1000 < full[1].to && full[1].count == 5);
        // Buckets tile [first, last) with no gap, and stay log-sized.
        assert!(dist.buckets.windows(2).all(|w| w[0].to == w[1].from));
        assert!(dist
            .buckets
            .iter()
            .all(|b| b.to <= b.from.saturating_mul(2) || b.from < 4));
        assert!(dist.buckets.len() > 10);
        assert_eq!(
            dist.bucket_of(40),
            dist.buckets.iter().position(|b| b.count == 95)
        );
    }

    #[test]
    fn every_duration_lands_in_the_bucket_that_covers_it() {
        let mut rng = fastrand::Rng::with_seed(27);
        for _ in 0..200 {
            let n = rng.usize(1..50);
            let d: Vec<u64> = (0..n)
                .map(|_| match rng.u8(0..4) {
                    0 => rng.u64(0..4),
                    1 => rng.u64(0..1 << 20),
                    2 => rng.u64(..),
                    _ => u64::MAX,
                })
                .collect();
            let dist = Distribution::of(d.clone());
            assert_eq!(dist.buckets.iter().map(|b| b.count).sum::<u64>(), n as u64);
            for &x in &d {
                let b = dist.bucket_of(x).expect("covered");
                assert!(dist.buckets[b].count > 0);
            }
            assert!(dist.buckets[0].from <= dist.min);
        }
        assert_eq!(Distribution::of([]), Distribution::default());
    }
}
