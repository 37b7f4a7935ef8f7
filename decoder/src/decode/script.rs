//! `perf script` text: branch events imported by our rules, run through
//! the same stack reconstruction as a trace's.

use ptscope_model::{Model, ThreadModel, TimeUnit};

use super::*;

/// Rebuilds the spans of imported `perf script` text.
pub fn from_script(script: crate::inputs::perf_script::ScriptTrace) -> Model {
    let crate::inputs::perf_script::ScriptTrace { threads, funcs, .. } = script;
    let threads = threads
        .into_iter()
        .map(|t| {
            let mut b = crate::passes::stack::StackBuilder::new(t.pid, t.tid, String::new());
            for ev in &t.events {
                b.event(ev, &funcs);
            }
            let (spans, stack) = b.finish();
            ThreadModel {
                stack,
                ..ThreadModel::from_spans(spans)
            }
        })
        .collect::<Vec<_>>();
    Model {
        funcs,
        missing_binaries: Vec::new(),
        warnings: stack_warnings(&threads),
        threads,
        unit: TimeUnit::Ns,
        ..Model::default()
    }
}
