//! The Intel PT backend captures real Intel PT through perf_event_open. Its
//! modules discover the `intel_pt` PMU from sysfs (`pmu`), turn a timing
//! preset into config terms the CPU supports (`timing`), build the PT
//! event's attr (`event`), check IP filters (`filter`), time a
//! function's calls with breakpoints for the slow-call trigger
//! ([`slow_call`]), pause and resume the trace for range capture
//! (`range`) and run captures ([`backend`]); this file defines
//! [`crate::PtSetupError`], what can go wrong setting up Intel PT. The AUXTRACE_INFO
//! parameters perf stores for decoders are a file format, so they live in
//! [`ptscope_formats::pt_params`].

pub mod backend;
pub(crate) mod event;
pub(crate) mod filter;
pub(crate) mod pmu;
pub(crate) mod range;
pub mod slow_call;
pub(crate) mod timing;

pub(crate) use crate::error::PtSetupError;
pub use pmu::Pmu;
pub use timing::{PtConfig, Timing};
