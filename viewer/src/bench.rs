//! Helpers the benchmarks share, here and in the app's: the median of
//! timed runs, and this process's resident memory; and the timeline's
//! insides the frame and line benchmarks time one by one. Hidden from the
//! docs: they are not part of the viewer's API.

use std::time::Duration;

pub use crate::color::{extend_styles, FuncStyle};
pub use crate::timeline::frame_mesh::{layout_lane, rect, FrameBuf, LaneGeom, Paint};
pub use crate::timeline::line_detail::{runs, Run};
pub use crate::timeline::LANE_H;

/// The median of `times` (the upper one of an even count).
///
/// # Panics
/// If `times` is empty: a benchmark that timed nothing is a bug.
pub fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

/// [`median`] in milliseconds.
pub fn median_ms(times: Vec<Duration>) -> f64 {
    median(times).as_secs_f64() * 1e3
}

/// This process's resident memory in bytes (`VmRSS`), 0 where `/proc`
/// does not say.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_memory() {
        let ms = Duration::from_millis;
        assert_eq!(median(vec![ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(median(vec![ms(4), ms(1), ms(2), ms(3)]), ms(3));
        assert_eq!(median_ms(vec![ms(5)]), 5.0);
        // This test process holds at least its own code.
        assert!(rss_bytes() > 1 << 20);
    }
}
