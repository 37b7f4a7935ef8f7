//! The IP filter a trace was written under, as the PT unit held it: up to
//! four address ranges (IA32_RTIT_ADDRn_A/B, each inclusive at both ends),
//! each either a FilterEn range, where tracing is on, or a TraceStop range,
//! where it stops (ADDRn_CFG 1 and 2 in IA32_RTIT_CTL). libipt's
//! `pt_conf_addr_filter` is the same.
//!
//! A decoder needs it for one thing: erratum SKL014, under which a direct
//! call or jump out of a FilterEn range writes its TIP.PGD without the
//! target IP, so the filter alone says which branch the disable binds to.
//!
//! Where it comes from: the filter perf records in AUXTRACE_INFO (file
//! offsets, see [`ptscope_formats::filter`]) placed where the trace's
//! MMAP records put those files ([`IpFilter::recorded`]), or the user's
//! `--ip-filter` for a raw dump, which records nothing
//! ([`IpFilter::from_str`]).

use std::fmt;
use std::str::FromStr;

use ptscope_formats::snapshot::Trace;
use ptscope_formats::{filter, filter::FilterAction, filter::FilterStart, filter::MappedFile};

/// How many ranges a PT unit has at most (and libipt's configuration).
pub(crate) const MAX_RANGES: usize = 4;

/// What is wrong with a filter for the decoder.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IpFilterError {
    #[error("bad IP filter range `{range}`: {why}")]
    Syntax { range: String, why: String },
    #[error("the IP filter places {0} ranges, more than a PT unit's {MAX_RANGES}")]
    TooMany(usize),
    #[error("the recorded filter `{0}` cannot be read: {1}")]
    Recorded(String, String),
}

/// One range of the filter: `first..=last`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IpRange {
    pub first: u64,
    pub last: u64,
    /// A TraceStop range, not a FilterEn one.
    pub stop: bool,
}

/// The PT unit's address filter; the default has no range and traces
/// everywhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IpFilter {
    ranges: [IpRange; MAX_RANGES],
    len: u8,
}

impl IpFilter {
    /// A filter of `ranges`, if the unit can hold them.
    pub fn new(ranges: &[IpRange]) -> Result<IpFilter, IpFilterError> {
        if ranges.len() > MAX_RANGES {
            return Err(IpFilterError::TooMany(ranges.len()));
        }
        let mut f = IpFilter::default();
        f.ranges[..ranges.len()].copy_from_slice(ranges);
        f.len = ranges.len() as u8;
        Ok(f)
    }

    pub fn ranges(&self) -> &[IpRange] {
        &self.ranges[..self.len as usize]
    }

    /// Whether any range is set: without one the trace was not filtered.
    pub fn is_configured(&self) -> bool {
        self.len > 0
    }

    /// Whether tracing is on at `ip` (FilterEn and not TraceStop): outside
    /// every TraceStop range, and inside a FilterEn range if there is any.
    pub fn traces(&self, ip: u64) -> bool {
        let hit = |r: &&IpRange| r.first <= ip && ip <= r.last;
        let ranges = self.ranges();
        if ranges.iter().filter(|r| r.stop).any(|r| hit(&r)) {
            return false;
        }
        let mut filters = ranges.iter().filter(|r| !r.stop).peekable();
        filters.peek().is_none() || filters.any(|r| hit(&r))
    }

    /// The filter recorded with `trace` (perf's AUXTRACE_INFO string),
    /// placed where the trace maps its files: none when none was recorded.
    /// A file mapped in several places (several processes) gives a range
    /// per place, as the kernel programs it in each.
    pub fn recorded(trace: &Trace) -> Result<IpFilter, IpFilterError> {
        let text = trace.params.filter.trim();
        if text.is_empty() {
            return Ok(IpFilter::default());
        }
        let bad = |why: String| IpFilterError::Recorded(text.into(), why);
        let specs = filter::parse(text).map_err(|e| bad(e.to_string()))?;
        let mut ranges = Vec::new();
        for spec in specs {
            let FilterStart::Address(offset) = spec.start else {
                return Err(bad(
                    "perf records resolved filters; this names a symbol".into()
                ));
            };
            let maps = trace.mmaps.iter().map(|m| MappedFile {
                start: m.start,
                len: m.len,
                offset: m.pgoff,
                path: &m.path,
            });
            let size = spec.size.unwrap_or(0);
            for (start, end) in filter::place(offset, size, spec.file.as_deref(), maps) {
                let range = IpRange {
                    first: start,
                    last: end.saturating_sub(1).max(start),
                    stop: spec.action == FilterAction::Stop,
                };
                if !ranges.contains(&range) {
                    ranges.push(range);
                }
            }
        }
        IpFilter::new(&ranges)
    }
}

/// `FIRST-LAST` ranges of runtime addresses, inclusive as the MSRs are,
/// separated by commas; `stop:FIRST-LAST` is a TraceStop range.
impl FromStr for IpFilter {
    type Err = IpFilterError;

    fn from_str(text: &str) -> Result<IpFilter, IpFilterError> {
        let mut ranges = Vec::new();
        for one in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = |why: &str| IpFilterError::Syntax {
                range: one.into(),
                why: why.into(),
            };
            let (stop, span) = match one.strip_prefix("stop:") {
                Some(rest) => (true, rest),
                None => (false, one),
            };
            let (a, b) = span
                .split_once('-')
                .ok_or_else(|| bad("expected FIRST-LAST, e.g. 0x401000-0x4010ff"))?;
            let (first, last) = match (filter::parse_number(a), filter::parse_number(b)) {
                (Some(a), Some(b)) => (a, b),
                _ => return Err(bad("an address is not a number")),
            };
            if last < first {
                return Err(bad("the range ends before it begins"));
            }
            ranges.push(IpRange { first, last, stop });
        }
        if ranges.is_empty() {
            return Err(IpFilterError::Syntax {
                range: text.into(),
                why: "no range given".into(),
            });
        }
        IpFilter::new(&ranges)
    }
}

impl fmt::Display for IpFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges().iter().enumerate() {
            let sep = if i > 0 { "," } else { "" };
            let stop = if r.stop { "stop:" } else { "" };
            write!(f, "{sep}{stop}{:#x}-{:#x}", r.first, r.last)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_inside_filter_ranges_and_outside_stop_ranges() {
        let none = IpFilter::default();
        assert!(!none.is_configured() && none.traces(0) && none.traces(u64::MAX));
        let f: IpFilter = "0x1000-0x10ff, stop:0x1080-0x108f".parse().unwrap();
        assert!(f.traces(0x1000) && f.traces(0x10ff) && f.traces(0x107f));
        assert!(!f.traces(0xfff) && !f.traces(0x1100) && !f.traces(0x1080));
        let stop_only: IpFilter = "stop:0x10-0x1f".parse().unwrap();
        assert!(stop_only.traces(0) && !stop_only.traces(0x1f) && stop_only.traces(0x20));
        assert_eq!(f.to_string(), "0x1000-0x10ff,stop:0x1080-0x108f");
        assert_eq!(f.to_string().parse::<IpFilter>().unwrap(), f);
    }

    #[test]
    fn bad_ranges_are_named() {
        for (text, want) in [
            ("0x1000", "FIRST-LAST"),
            ("0x1000-zz", "not a number"),
            ("0x2000-0x1000", "ends before"),
            ("", "no range"),
        ] {
            let e = text.parse::<IpFilter>().unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        assert_eq!(
            "1-2,3-4,5-6,7-8,9-10".parse::<IpFilter>().unwrap_err(),
            IpFilterError::TooMany(5)
        );
    }

    #[test]
    fn a_recorded_filter_lands_where_its_file_is_mapped() {
        let snap = crate::testing::demo_snapshot();
        let mut trace = snap.trace().unwrap();
        assert_eq!(IpFilter::recorded(&trace), Ok(IpFilter::default()));
        let m = trace.mmaps.iter().find(|m| !m.kernel).unwrap().clone();
        trace.params.filter = format!("filter {:#x}/0x20@{}", m.pgoff + 0x10, m.path);
        let f = IpFilter::recorded(&trace).unwrap();
        let want = IpRange {
            first: m.start + 0x10,
            last: m.start + 0x2f,
            stop: false,
        };
        assert_eq!(f.ranges(), [want]);
        trace.params.filter = "filter main @ /bin/x".into();
        assert!(matches!(
            IpFilter::recorded(&trace),
            Err(IpFilterError::Recorded(..))
        ));
    }
}
