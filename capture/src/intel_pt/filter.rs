//! This module checks an IP filter against what the CPU's Intel PT can do
//! and turns it into the string `PERF_EVENT_IOC_SET_FILTER` takes. The
//! kernel places a file's filter in every mapping of the file, now and at
//! later mmaps, so the string names files and file offsets, never runtime
//! addresses.

use std::ffi::CString;

use super::pmu::Caps;
use crate::filter::{check_count, kernel_string, FilterError, FilterRange};

/// The filter string for the kernel, once `ranges` are known to fit this
/// CPU (`caps/ip_filtering`, `caps/num_address_ranges`). The kernel takes
/// file filters only on per-thread events.
pub(crate) fn kernel_filter(
    caps: &Caps,
    ranges: &[FilterRange],
    per_cpu: bool,
) -> Result<Option<CString>, FilterError> {
    if ranges.is_empty() {
        return Ok(None);
    }
    let max = if caps.ip_filtering {
        caps.num_address_ranges as usize
    } else {
        0
    };
    check_count(ranges, max)?;
    if per_cpu && ranges.iter().any(|r| r.file.is_some()) {
        return Err(FilterError::Syntax {
            filter: kernel_string(ranges),
            why:
                "the kernel applies filters in files to per-thread events only, not with --per-cpu"
                    .into(),
        });
    }
    let text = kernel_string(ranges);
    CString::new(text.clone())
        .map_err(|_| FilterError::Syntax {
            filter: text,
            why: "a file name holds a NUL byte".into(),
        })
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(ranges: u32) -> Caps {
        Caps {
            ip_filtering: ranges > 0,
            num_address_ranges: ranges,
            ..Caps::default()
        }
    }

    fn range(file: Option<&str>) -> FilterRange {
        FilterRange {
            action: crate::filter::FilterAction::Filter,
            offset: 0x1139,
            size: 0x2f,
            file: file.map(Into::into),
        }
    }

    #[test]
    fn the_string_is_the_kernels() {
        let s = kernel_filter(&caps(2), &[range(Some("/bin/x"))], false).unwrap();
        assert_eq!(s.unwrap().to_str().unwrap(), "filter 0x1139/0x2f@/bin/x");
        assert_eq!(kernel_filter(&caps(0), &[], false).unwrap(), None);
        // A tracestop range is the kernel's `stop` with a size, as perf
        // turns `tracestop` into (ADDRn_CFG = 2); it takes an address range
        // of its own.
        let stop = FilterRange {
            action: crate::filter::FilterAction::Stop,
            ..range(Some("/bin/y"))
        };
        let s = kernel_filter(&caps(2), &[range(Some("/bin/x")), stop.clone()], false).unwrap();
        assert_eq!(
            s.unwrap().to_str().unwrap(),
            "filter 0x1139/0x2f@/bin/x,stop 0x1139/0x2f@/bin/y"
        );
        assert_eq!(
            kernel_filter(&caps(1), &[range(None), stop], false).unwrap_err(),
            FilterError::TooMany { given: 2, max: 1 }
        );
    }

    #[test]
    fn what_the_cpu_cannot_do_is_refused() {
        assert_eq!(
            kernel_filter(&caps(0), &[range(None)], false).unwrap_err(),
            FilterError::TooMany { given: 1, max: 0 }
        );
        let three = vec![range(None); 3];
        assert_eq!(
            kernel_filter(&caps(2), &three, false).unwrap_err(),
            FilterError::TooMany { given: 3, max: 2 }
        );
        let e = kernel_filter(&caps(2), &[range(Some("/bin/x"))], true).unwrap_err();
        assert!(e.to_string().contains("per-thread"), "{e}");
        let e = kernel_filter(&caps(2), &[range(Some("/bin/\0x"))], false).unwrap_err();
        assert!(e.to_string().contains("NUL"), "{e}");
    }

    /// The CPUs' own caps, as sysfs reports them: Skylake has two address
    /// ranges, Broadwell none.
    #[test]
    fn the_caps_come_from_sysfs() {
        let caps = |cpu: &str| {
            let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs")
                .join(cpu)
                .join("intel_pt");
            crate::intel_pt::Pmu::read(&dir).unwrap().caps
        };
        let two = vec![range(Some("/bin/x")); 2];
        assert!(kernel_filter(&caps("skylake"), &two, false).is_ok());
        assert_eq!(
            kernel_filter(&caps("broadwell"), &two[..1], false).unwrap_err(),
            FilterError::TooMany { given: 1, max: 0 }
        );
    }
}
