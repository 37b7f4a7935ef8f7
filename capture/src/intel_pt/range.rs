//! Range capture on Intel PT (`--range START STOP`), through the kernel's
//! AUX pause and resume (Linux 6.13's aux-action): the PT event opens
//! paused (`aux_start_paused`), and two execute breakpoints in its group
//! resume it at START's entry (`aux_resume`) and pause it at STOP's
//! (`aux_pause`), each in the kernel at the breakpoint, with no round trip
//! to ptscope. A kernel without aux-action is refused up front with what
//! it lacks.

use ptscope_formats::{perf_data::aux_action, perf_data::PerfEventAttr};

use crate::perf_event::breakpoint::breakpoint_attr;

/// The first kernel with aux-action (`aux_start_paused`, `aux_pause`,
/// `aux_resume`).
pub(crate) const FIRST_KERNEL: (u32, u32) = (6, 13);

/// Whether kernel `release` (as `uname -r` prints it) has aux-action;
/// the reason when not.
pub(crate) fn check_kernel(release: &str) -> Result<(), String> {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if version >= FIRST_KERNEL {
        Ok(())
    } else {
        Err(format!(
            "--range needs the kernel's AUX pause and resume (aux-action, Linux {}.{} or newer); \
             this kernel is {release}",
            FIRST_KERNEL.0, FIRST_KERNEL.1
        ))
    }
}

/// The breakpoint that resumes (`resume`) or pauses the PT event it is
/// grouped with, at `addr`: it samples nothing, its overflow is the
/// action.
pub(crate) fn breakpoint(addr: u64, resume: bool) -> PerfEventAttr {
    PerfEventAttr {
        sample_type: 0,
        sample_regs_user: 0,
        wakeup_events: 0,
        aux_action: if resume {
            aux_action::RESUME
        } else {
            aux_action::PAUSE
        },
        ..breakpoint_attr(addr, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aux_action_came_with_6_13() {
        assert!(check_kernel("6.18.44-fc-v769").is_ok());
        assert!(check_kernel("6.13.0").is_ok());
        assert!(check_kernel("7.0.1-arch").is_ok());
        let e = check_kernel("6.12.9-amd64").unwrap_err();
        assert!(
            e.contains("Linux 6.13 or newer") && e.contains("6.12.9-amd64"),
            "{e}"
        );
        assert!(check_kernel("5.10.0").is_err());
    }

    #[test]
    fn the_breakpoints_carry_their_action_and_sample_nothing() {
        let r = breakpoint(0x401000, true);
        assert_eq!(r.aux_action, aux_action::RESUME);
        assert_eq!((r.config1, r.sample_type), (0x401000, 0));
        assert_eq!(breakpoint(0x401000, false).aux_action, aux_action::PAUSE);
    }
}
