//! The PT event's `perf_event_attr`, as `perf record -e intel_pt/.../`
//! would open it.

use super::pmu::Pmu;
use super::timing::PtConfig;
use crate::perf_data::{flag, sample, PerfEventAttr};

/// How the PT event is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventOptions {
    /// Trace the kernel too (needs privilege).
    pub kernel: bool,
    /// CPU-wide events (sample ids then carry the CPU).
    pub per_cpu: bool,
    /// Start disabled and let the kernel enable at the target's exec.
    pub enable_on_exec: bool,
}

/// The sample-id layout of PT records (ITRACE_START, AUX, LOST).
pub const SAMPLE_TYPE: u64 = sample::IP | sample::TID | sample::TIME | sample::CPU | sample::IDENTIFIER;

pub fn pt_attr(pmu: &Pmu, cfg: &PtConfig, opts: EventOptions) -> PerfEventAttr {
    PerfEventAttr {
        kind: pmu.kind,
        config: cfg.config,
        config1: cfg.config1,
        config2: cfg.config2,
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        // PERF_FORMAT_ID, as perf asks for.
        read_format: 4,
        flags: flag::EXCLUDE_HV
            | flag::SAMPLE_ID_ALL
            | if opts.kernel { 0 } else { flag::EXCLUDE_KERNEL }
            | if opts.enable_on_exec {
                flag::DISABLED | flag::ENABLE_ON_EXEC
            } else {
                0
            },
        ..Default::default()
    }
}
