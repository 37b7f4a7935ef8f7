//! The Intel PT backend captures real Intel PT through perf_event_open. Its
//! modules discover the `intel_pt` PMU from sysfs ([`pmu`]), turn a timing
//! preset into config terms the CPU supports ([`timing`]), build the PT
//! event's attr ([`event`]), check IP filters ([`filter`]), time a
//! function's calls with breakpoints for the slow-call trigger
//! ([`slow_call`]), pause and resume the trace for range capture
//! ([`range`]) and run captures ([`backend`]); this file defines
//! [`PtSetupError`], what can go wrong setting up Intel PT. The AUXTRACE_INFO
//! parameters perf stores for decoders are a file format, so they live in
//! [`ptscope_formats::pt_params`].

use std::path::PathBuf;

pub mod backend;
pub mod event;
pub mod filter;
pub mod pmu;
pub mod range;
pub mod slow_call;
pub mod timing;

pub use pmu::Pmu;
pub use timing::{PtConfig, Timing};

/// What can go wrong setting up Intel PT.
#[derive(Debug, thiserror::Error)]
pub enum PtSetupError {
    #[error(
        "no Intel PT on this machine: {} does not exist ({cpu}). Intel PT needs an Intel CPU \
         from Broadwell on, not virtualised away, and a kernel with CONFIG_PERF_EVENTS_INTEL_PT; \
         use the emulated backend (--backend emulated) instead",
        dir.display()
    )]
    NoPmu { dir: PathBuf, cpu: String },
    #[error("{}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {problem}", path.display())]
    BadSysfs { path: PathBuf, problem: String },
    #[error("{}: the intel_pt PMU has no `{term}` term in format/", dir.display())]
    NoTerm { dir: PathBuf, term: String },
    #[error("timing `{timing}`: {problem}")]
    Timing { timing: String, problem: String },
}
