//! Durations as users type them (`800ns`, `2.5us`, `2.5µs`, `1ms`, `3s`),
//! for the command line and the Capture panel alike. A bare number is in
//! nanoseconds, the unit every time in ptscope counts.

use ptscope_capture::trigger::ArmAfter;

/// A duration in ns: a number (decimals allowed) with an optional unit
/// `ns`, `us`/`µs`, `ms` or `s`; blanks around the parts are allowed.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("`{t}` is not a duration (e.g. 800ns, 2.5us, 1ms)")),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{t}` is not a duration (e.g. 800ns, 2.5us, 1ms)"))?;
    let ns = (n * scale).round();
    if !ns.is_finite() || ns >= u64::MAX as f64 {
        return Err(format!("`{t}` is too long"));
    }
    Ok(ns as u64)
}

/// `--arm-after` as users type it: a duration of history, or `full`.
pub fn parse_arm_after(s: &str) -> Result<ArmAfter, String> {
    match s.trim() {
        "full" => Ok(ArmAfter::Full),
        t => parse_duration(t)
            .map(ArmAfter::History)
            .map_err(|e| format!("{e}, or `full`")),
    }
}

/// `--arm-after` as [`parse_arm_after`] reads it back.
pub fn format_arm_after(a: ArmAfter) -> String {
    match a {
        ArmAfter::History(ns) => format_duration(ns),
        ArmAfter::Full => "full".into(),
    }
}

/// `ns` as [`parse_duration`] reads it back: the largest unit that keeps
/// it whole.
pub fn format_duration(ns: u64) -> String {
    match ns {
        0 => "0ns".into(),
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_typed() {
        assert_eq!(parse_duration("800"), Ok(800));
        assert_eq!(parse_duration("800ns"), Ok(800));
        assert_eq!(parse_duration(" 2.5 us "), Ok(2500));
        assert_eq!(parse_duration("2.5µs"), Ok(2500));
        assert_eq!(parse_duration("1ms"), Ok(1_000_000));
        assert_eq!(parse_duration("3s"), Ok(3_000_000_000));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("5 min").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("1e30s").is_err());
        for ns in [0, 1, 999, 1000, 2500, 1_000_000, 3_000_000_000, 1_234_567] {
            assert_eq!(parse_duration(&format_duration(ns)), Ok(ns));
        }
        assert_eq!(parse_arm_after("full"), Ok(ArmAfter::Full));
        assert_eq!(parse_arm_after("5ms"), Ok(ArmAfter::History(5_000_000)));
        assert!(parse_arm_after("soon").unwrap_err().ends_with("or `full`"));
        for a in [ArmAfter::Full, ArmAfter::History(2500)] {
            assert_eq!(parse_arm_after(&format_arm_after(a)), Ok(a));
        }
    }
}
