//! What the user should know about a decode that no span shows: trace with
//! nothing to synchronize on, data the kernel lost, stacks that outgrew
//! the store, errata without a CPU, and where libipt resumes after errors.

use crate::pt::block::DecoderConfig;
use crate::pt::packet::find_psb;
use ptscope_formats::snapshot::Trace;
use ptscope_model::ThreadModel;

use super::*;

/// What no span of the model will show: a queue with trace but no PSB
/// (nothing to synchronize on, so none of it decodes), and data the
/// kernel reported lost.
pub(super) fn input_warnings(trace: &Trace, wanted: &dyn Fn(i32) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for s in &trace.streams {
        if s.data.is_empty() || s.tid.is_some_and(|t| !wanted(t)) || find_psb(&s.data).is_some() {
            continue;
        }
        let whose = match (s.tid, s.cpu) {
            (Some(tid), _) => format!("thread {tid}"),
            (None, Some(cpu)) => format!("CPU {cpu}"),
            (None, None) => format!("queue {}", s.idx),
        };
        out.push(format!(
            "the {} bytes of trace of {whose} hold no PSB packet to synchronize on: none of it can be decoded",
            s.data.len()
        ));
    }
    if trace.truncated_aux > 0 {
        out.push(format!(
            "{} trace buffer(s) were truncated by the kernel: trace was lost there",
            trace.truncated_aux
        ));
    }
    if trace.lost_records > 0 {
        out.push(format!(
            "the kernel lost {} sideband record(s): mappings or thread names may be missing",
            trace.lost_records
        ));
    }
    out
}

/// Threads whose call stack outgrew what the store keeps: their timeline
/// starts over at the top there, which no span says.
pub(super) fn stack_warnings(threads: &[ThreadModel]) -> Vec<String> {
    threads
        .iter()
        .filter(|t| t.stack.depth_resets > 0)
        .map(|t| {
            format!(
                "thread {}: its calls nested more than {} levels deep {} time(s), counting callers the trace began inside (runaway recursion, or a damaged trace); its timeline starts over at the top there",
                t.spans.tid,
                crate::passes::stack::MAX_DEPTH,
                t.stack.depth_resets
            )
        })
        .collect()
}

/// libipt can resume only at a PSB after a decode error, where ptscope's
/// engine resumes at the next packet that gives the flow's IP (as perf
/// does): the trace between is decoded by one and not the other. Said
/// when the libipt engine met errors.
pub(super) fn libipt_resync_warning(engine: Engine, threads: &[ThreadModel]) -> Option<String> {
    let errors: usize = threads.iter().map(|t| t.walk.errors.len()).sum();
    (cfg!(feature = "libipt") && engine != Engine::Flow && errors > 0).then(|| {
        format!(
            "the libipt engine met {errors} decode error(s), and libipt resumes only at the next PSB \
             after one: the trace up to it is not decoded here; ptscope's engine (the default) \
             resumes at the next packet that gives an IP, as perf does"
        )
    })
}

/// A raw dump records no CPU: decoded without `--cpu`, neither engine
/// works around an erratum (both assume the same: no CPU, no errata), and
/// errors that are an erratum's look like damage. Said when there are
/// errors to explain.
pub(super) fn no_cpu_warning(cfg: &DecoderConfig, threads: &[ThreadModel]) -> Option<String> {
    let errors: usize = threads.iter().map(|t| t.walk.errors.len()).sum();
    (cfg.family == 0 && errors > 0).then(|| {
        format!(
            "{errors} decode error(s), and the dump records no CPU: errata are not worked around, \
             and a CPU erratum's errors (BDM70, SKD022, SKL014, SKZ84, ...) look like these; \
             give the CPU it ran on with --cpu FAMILY/MODEL[/STEPPING]"
        )
    })
}
