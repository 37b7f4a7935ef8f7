//! The time axis: this module picks the tick marks and formats every time
//! and duration the viewer prints.
//!
//! Ticks fall on a 1-2-5 scale, and their labels read in s, ms, µs or ns,
//! counted from the trace's start or in absolute perf time ([`TimeMode`]).
//! Tick values are integer nanoseconds computed with integer arithmetic,
//! so a label reads exactly even 10^15 ns into a trace, where floats would
//! round neighbouring ticks together. The timeline draws the axis; this
//! module only says what goes on it.
//!
//! A trace without timing (`tsc=0`) has times that count instructions
//! retired ([`TimeUnit::Insns`]): the same scale then reads in insns,
//! k insns, M insns and G insns (the `_in` functions take the unit).

use crate::timeline::time_window::TimeWindow;
pub(crate) use ptscope_model::TimeUnit;

/// The names of `unit` at 1, 10^3, 10^6 and 10^9.
fn magnitudes(unit: TimeUnit) -> [&'static str; 4] {
    match unit {
        TimeUnit::Ns => ["ns", "µs", "ms", "s"],
        TimeUnit::Insns => ["insns", "k insns", "M insns", "G insns"],
    }
}

/// What tick labels count from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum TimeMode {
    /// Nanoseconds since the trace's first timestamp.
    #[default]
    Relative,
    /// perf clock time.
    Absolute,
}

/// One tick mark.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tick {
    /// Offset from the axis's left edge, px.
    pub x: f32,
    pub label: String,
}

/// The smallest step of the 1-2-5 scale (in ns) at least `min_ns`.
pub(crate) fn nice_step(min_ns: f64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1u64, 2, 5] {
            let s = step.saturating_mul(m);
            if s as f64 >= min_ns || s == u64::MAX {
                return s;
            }
        }
        if step > u64::MAX / 10 {
            return u64::MAX;
        }
        step *= 10;
    }
}

/// Formats a tick value `v` (ns, may be negative) so that multiples of
/// `step` are told apart: the unit follows the value's magnitude and the
/// decimals follow the step.
pub(crate) fn format_tick(v: i128, step: u64) -> String {
    format_tick_in(TimeUnit::Ns, v, step)
}

/// [`format_tick`] for times that count `unit`.
pub(crate) fn format_tick_in(unit: TimeUnit, v: i128, step: u64) -> String {
    let names = magnitudes(unit);
    let mag = v.unsigned_abs().max(step as u128);
    let (unit, div_exp) = if mag >= 1_000_000_000 {
        (names[3], 9)
    } else if mag >= 1_000_000 {
        (names[2], 6)
    } else if mag >= 1_000 {
        (names[1], 3)
    } else {
        (names[0], 0)
    };
    // Decimals: enough for the step's last significant digit.
    let step_exp = (step as f64).log10().floor() as i32;
    let decimals = (div_exp - step_exp).max(0) as usize;
    format_fixed(v, div_exp as u32, decimals, unit)
}

/// `v / 10^div_exp` with `decimals` decimals, exactly (no float).
fn format_fixed(v: i128, div_exp: u32, decimals: usize, unit: &str) -> String {
    let sign = if v < 0 { "-" } else { "" };
    let a = v.unsigned_abs();
    let div = 10u128.pow(div_exp);
    let whole = a / div;
    if decimals == 0 {
        return format!("{sign}{whole} {unit}");
    }
    let frac = a % div;
    // frac has div_exp digits; keep the first `decimals`.
    let digits = format!("{frac:0width$}", width = div_exp as usize);
    format!(
        "{sign}{whole}.{} {unit}",
        &digits[..decimals.min(digits.len())]
    )
}

/// A duration for tooltips and tables: three significant digits.
pub fn format_duration(ns: u64) -> String {
    format_duration_f(ns as f64)
}

/// [`format_duration`] for fractional durations (window widths).
pub(crate) fn format_duration_f(ns: f64) -> String {
    format_duration_in(TimeUnit::Ns, ns)
}

/// [`format_duration_f`] for durations that count `unit`.
pub(crate) fn format_duration_in(unit: TimeUnit, ns: f64) -> String {
    let names = magnitudes(unit);
    let (v, unit) = if ns >= 1e9 {
        (ns / 1e9, names[3])
    } else if ns >= 1e6 {
        (ns / 1e6, names[2])
    } else if ns >= 1e3 {
        (ns / 1e3, names[1])
    } else {
        let unit = names[0];
        return if ns.fract() == 0.0 {
            format!("{ns} {unit}")
        } else {
            format!("{ns:.1} {unit}")
        };
    };
    if v >= 100.0 {
        format!("{v:.1} {unit}")
    } else if v >= 10.0 {
        format!("{v:.2} {unit}")
    } else {
        format!("{v:.3} {unit}")
    }
}

/// The label of time `t` alone (the hover readout, the range heading).
pub(crate) fn format_time(t: u64, origin: u64, mode: TimeMode) -> String {
    let v = match mode {
        TimeMode::Relative => t as i128 - origin as i128,
        TimeMode::Absolute => t as i128,
    };
    format_tick(v, 1)
}

/// The ticks of `win` over `width_px` pixels, labelled in `unit`.
/// `origin` is time zero in relative mode. Labels are spaced for their own
/// length.
pub(crate) fn ticks_in(
    unit: TimeUnit,
    win: &TimeWindow,
    width_px: f32,
    origin: u64,
    mode: TimeMode,
) -> Vec<Tick> {
    let ppn = win.px_per_ns(width_px);
    let base = match mode {
        TimeMode::Relative => origin as i128,
        TimeMode::Absolute => 0,
    };
    // Value of the left edge in label coordinates (integer part).
    let left = win.start as i128 - base;
    // Start at 90 px and widen until labels fit (about 7 px a char).
    let mut step = nice_step(90.0 / ppn);
    for _ in 0..4 {
        let right = left + win.width.ceil() as i128;
        let len = format_tick_in(unit, right, step).chars().count().max(6) as f64;
        if (step as f64) * ppn >= len * 7.0 + 16.0 {
            break;
        }
        step = nice_step((len * 7.0 + 16.0) / ppn);
    }
    let s = step as i128;
    let mut v = left.div_euclid(s) * s;
    if v < left {
        v += s;
    }
    let mut out = Vec::new();
    loop {
        let rel = (v - left) as f64 - win.frac;
        let x = rel * ppn;
        if x > width_px as f64 + 1.0 || out.len() > 1000 {
            break;
        }
        if x >= -1.0 {
            out.push(Tick {
                x: x as f32,
                label: format_tick_in(unit, v, step),
            });
        }
        v += s;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_follow_1_2_5() {
        assert_eq!(nice_step(0.3), 1);
        assert_eq!(nice_step(1.5), 2);
        assert_eq!(nice_step(3.0), 5);
        assert_eq!(nice_step(7.0), 10);
        assert_eq!(nice_step(180_000.0), 200_000);
    }

    #[test]
    fn labels_pick_units_and_decimals() {
        assert_eq!(format_tick(0, 100), "0 ns");
        assert_eq!(format_tick(500, 100), "500 ns");
        assert_eq!(format_tick(1_500_000, 500_000), "1.5 ms");
        assert_eq!(format_tick(2_000_000_000, 1_000_000_000), "2 s");
        assert_eq!(format_tick(1_234_567_891, 1), "1.234567891 s");
        assert_eq!(format_tick(-20_000, 10_000), "-20 µs");
        // Absolute time deep in a trace keeps every digit.
        assert_eq!(format_tick(1_000_000_000_000_005, 5), "1000000.000000005 s");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(format_duration(12), "12 ns");
        assert_eq!(format_duration(1_234), "1.234 µs");
        assert_eq!(format_duration(56_780_000), "56.78 ms");
        assert_eq!(format_duration(3_000_000_000), "3.000 s");
    }

    #[test]
    fn a_trace_without_timing_reads_in_instructions() {
        assert_eq!(format_tick_in(TimeUnit::Insns, 500, 100), "500 insns");
        assert_eq!(
            format_tick_in(TimeUnit::Insns, 1_500_000, 500_000),
            "1.5 M insns"
        );
        assert_eq!(format_duration_in(TimeUnit::Insns, 12.0), "12 insns");
        assert_eq!(
            format_duration_in(TimeUnit::Insns, 1_234.0),
            "1.234 k insns"
        );
        let w = TimeWindow::new(0, 1_000_000.0);
        let t = ticks_in(TimeUnit::Insns, &w, 1000.0, 0, TimeMode::Relative);
        assert!(t.len() >= 3);
        assert_eq!(t[0].label, "0 k insns");
        assert!(t.iter().all(|k| k.label.ends_with("insns")), "{t:?}");
    }

    #[test]
    fn ticks_cover_the_window_in_order() {
        let w = TimeWindow::new(1_000_000, 1_000_000.0);
        let t = ticks_in(TimeUnit::Ns, &w, 1000.0, 1_000_000, TimeMode::Relative);
        assert!(t.len() >= 3);
        assert_eq!(t[0].label, "0 µs");
        assert!(t.windows(2).all(|p| p[0].x < p[1].x));
        assert!(t.iter().all(|k| k.x >= -1.0 && k.x <= 1001.0));
        // Deep zoom at a large absolute time: ns ticks, exact labels.
        let base = 1_000_000_000_000_000u64;
        let w = TimeWindow::new(base + 3, 20.0);
        let t = ticks_in(TimeUnit::Ns, &w, 2000.0, 0, TimeMode::Absolute);
        assert!(t.len() >= 2, "{t:?}");
        assert!(t[0].label.starts_with("1000000.0000000"), "{t:?}");
        let t = ticks_in(TimeUnit::Ns, &w, 2000.0, base, TimeMode::Relative);
        assert!(t.iter().any(|k| k.label == "10 ns"), "{t:?}");
    }
}
