//! The decode driver: from a snapshot (or a raw PT dump, or perf-script
//! text) to a [`Decoded`] model. It builds each process's image and
//! resolver from the sideband, runs the coarse pass over every AUX queue
//! (in chunks on every core, or one walk), and collects spans, checkpoints
//! and warnings.
//!
//! The parts, one file each:
//! - here: the options ([`DecodeOptions`], [`Engine`]), [`DecodeError`],
//!   and what a trace's times count ([`time_unit`]);
//! - `inputs`: what every decode sets up first: the decoder's
//!   configuration, each process's code and resolver, the symbols;
//! - `trace`: a snapshot's trace, in stages that each take the run as it
//!   stands: the per-thread queues, the per-CPU queues, then the marks,
//!   the fine pass's source and the warnings ([`decode_trace`]);
//! - `reopen`: a model read back from the model cache, made whole;
//! - `raw`: raw PT dumps against raw images ([`decode_raw`]);
//! - `script`: `perf script` text ([`from_script`]);
//! - `warnings`: what a decode tells the user that no span shows.

use crate::decoded::Decoded;
use crate::passes::coarse::chunks::Parallel;
use crate::progress::DecodeProgress;
use crate::pt::block::PtError;
use crate::pt::packet::psb_offsets;
use crate::pt::timing::ToNs;
use ptscope_formats::FileError;
use ptscope_formats::{snapshot::Snapshot, snapshot::Trace};
use ptscope_model::TimeUnit;
use std::path::PathBuf;
use std::sync::Arc;

mod inputs;
mod raw;
mod reopen;
mod script;
mod trace;
mod warnings;

use inputs::*;
pub use raw::decode_raw;
pub(crate) use reopen::{reopen, Reopened, Unpacking};
pub use script::from_script;
pub use trace::decode_trace;
use warnings::*;

/// Why a snapshot could not be decoded at all. Problems inside a trace
/// (decode errors, missing binaries) are not errors: they become labelled
/// spans.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The file could not be read; the error names it.
    #[error(transparent)]
    File(ptscope_formats::FileError),
    /// The engine could not start on the trace at `path`.
    #[error("{path}: the decoder could not start: {error}")]
    Setup { path: PathBuf, error: PtError },
    /// A binary of the input (`path`) could not be read; `error` names it.
    #[error("{path}: cannot read one of its binaries: {error}")]
    Binary { path: PathBuf, error: FileError },
    /// libipt could not map the binary at `path` into its image.
    #[cfg(feature = "libipt")]
    #[error("{path}: libipt cannot map it: {error}")]
    LibiptMap { path: PathBuf, error: PtError },
    #[error("{path}: {problem}")]
    Input { path: PathBuf, problem: String },
    #[error("{path}: decoding was cancelled")]
    Cancelled { path: PathBuf },
    /// `perf script` text that could not be imported; the error names it.
    #[error(transparent)]
    Script(#[from] crate::inputs::perf_script::ScriptError),
}

/// Which threads to decode, and how.
///
/// What it serializes to is every option that changes the model a decode
/// gives (the model cache's key): how the work spreads over cores, and
/// where progress goes, change nothing and are skipped. A field added here
/// is part of the key unless it says otherwise.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DecodeOptions {
    pub threads: Option<Vec<i32>>,
    /// Counters to report to, a cancel flag, and partial models.
    #[serde(skip)]
    pub progress: Option<Arc<DecodeProgress>>,
    pub engine: Engine,
    /// How the flow engine's coarse pass spreads over cores.
    #[serde(skip)]
    pub parallel: Parallel,
    /// The CPU whose errata to work around, over the trace's cpuid.
    pub cpu: Option<crate::pt::block::Cpu>,
    /// The IP filter the trace was written under, over the one it records.
    pub ip_filter: Option<crate::pt::ip_filter::IpFilter>,
    /// Our flow decoder walks every run instead of replaying what its
    /// memo recorded (`--no-memo`): the reference the memo is held to. The
    /// models are the same; a cross-check decodes afresh, as its own key.
    pub no_memo: bool,
    /// Where names come from beyond the snapshot and the binaries.
    pub names: crate::names::lookup::NameOptions,
}

/// What walks the trace in the coarse pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Engine {
    /// Our own flow decoder ([`crate::FlowDecoder`]): the fast one.
    #[default]
    Flow,
    /// libipt's block decoder: the reference (with the `libipt` feature).
    #[cfg(feature = "libipt")]
    Libipt,
}

/// Decodes every thread of `snap` (or those `opts` selects).
pub fn decode_snapshot(snap: &Snapshot, opts: &DecodeOptions) -> Result<Decoded, DecodeError> {
    let trace = snap.trace().map_err(DecodeError::File)?;
    decode_trace(snap, &trace, opts)
}

/// What a trace's times can count: nanoseconds when it has TSC packets,
/// else instructions. The recorded config says; where it cannot (no TSC
/// bit is known), the packets do, as for a raw dump.
pub fn time_unit(trace: &Trace) -> TimeUnit {
    let tsc_bit = trace.params.tsc_bit;
    if tsc_bit != 0 {
        return match trace.pt_attr.config & tsc_bit {
            0 => TimeUnit::Insns,
            _ => TimeUnit::Ns,
        };
    }
    match trace.streams.iter().any(|s| has_timing(&s.data)) {
        true => TimeUnit::Ns,
        false => TimeUnit::Insns,
    }
}

/// Whether `pt` holds a packet that tells time (TSC, MTC or CYC). A trace
/// with none is laid out on the instruction axis: instructions retired,
/// counted exactly by the walk. Any timing keeps nanoseconds.
pub fn has_timing(pt: &[u8]) -> bool {
    crate::pt::packet::Packets::new(pt).any(|(_, p)| {
        matches!(
            p,
            Ok(crate::pt::packet::Packet::Tsc(_)
                | crate::pt::packet::Packet::Mtc(_)
                | crate::pt::packet::Packet::Cyc(_))
        )
    })
}

/// perf time of a TSC value, and what the model's times count.
pub(super) fn clock_of(trace: &Trace) -> (ToNs, TimeUnit) {
    let unit = time_unit(trace);
    let to_ns = match unit {
        TimeUnit::Ns => ToNs::perf(&trace.params),
        TimeUnit::Insns => ToNs::IDENTITY,
    };
    (to_ns, unit)
}

pub(super) fn psbs_of(data: &[u8]) -> Vec<u64> {
    psb_offsets(data).into_iter().map(|o| o as u64).collect()
}

/// MHz per unit of CBR ratio, as perf takes it: the TSC's frequency (from
/// the perf time conversion) over the maximum non-turbo ratio; 0 when
/// either is unknown.
pub(super) fn cbr_mhz(params: &ptscope_formats::pt_params::PtParams) -> f64 {
    if params.time_mult == 0 || params.max_nonturbo_ratio == 0 {
        return 0.0;
    }
    let tsc_hz = 1e9 * (1u64 << params.time_shift.min(63)) as f64 / params.time_mult as f64;
    tsc_hz / params.max_nonturbo_ratio as f64 / 1e6
}

#[cfg(test)]
mod tests;
