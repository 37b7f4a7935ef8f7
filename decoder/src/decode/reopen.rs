//! A model read back from the model cache, made whole again: the fine
//! pass's source rebuilt from the snapshot and the cached recipe, without
//! walking the trace.

use crate::decoded::Decoded;
use ptscope_formats::snapshot::Snapshot;
use std::collections::HashMap;
use std::sync::Arc;

use super::trace::line_source;
use super::*;

/// The model of `snap` from what the model cache kept of an earlier
/// decode with the same options: its spans as they were, and a fine-pass
/// source built again from the snapshot and the cached recipe, without
/// walking the trace. `None` if the cached model is stale: the binaries
/// or debug files its names came from are not those found now.
pub(crate) fn reopen(
    snap: &Snapshot,
    opts: &DecodeOptions,
    cached: crate::inputs::cache::Cached,
) -> Result<Option<Decoded>, DecodeError> {
    let trace = snap.trace().map_err(DecodeError::File)?;
    let trace = &trace;
    let Prepared {
        cfg,
        mut loaders,
        mut symbols,
        ..
    } = prepare(snap, trace, opts)?;
    let recipe = cached.recipe;
    let mut procs: HashMap<i32, Proc> = HashMap::new();
    let mut missing_binaries = Vec::new();
    for (&pid, learned) in recipe.pids.iter().zip(&recipe.learned) {
        let (_, resolver) = add_proc(
            &mut procs,
            pid,
            (snap, trace),
            &mut loaders,
            &mut symbols,
            &mut missing_binaries,
        )?;
        resolver.relearn(learned.iter().copied());
    }
    let mut missing_then = cached.model.missing_binaries.clone();
    missing_then.sort();
    missing_binaries.sort();
    if symbols.sources() != recipe.sources || missing_binaries != missing_then {
        return Ok(None);
    }
    let (to_ns, unit) = clock_of(trace);
    let wanted = |tid: i32| opts.threads.as_ref().is_none_or(|t| t.contains(&tid));
    let queue_psbs: Vec<Vec<u64>> = trace.streams.iter().map(|s| psbs_of(&s.data)).collect();
    let lines = line_source(
        (snap, trace),
        cfg,
        (Box::new(to_ns), unit),
        (recipe.pids.clone(), &mut procs),
        (&mut loaders, &symbols),
        (queue_psbs, &wanted, recipe.schedules()),
        recipe.cpu_slots(),
        cached.model.funcs.clone(),
    );
    drop(procs);
    drop(loaders);
    Ok(Some(Decoded {
        model: cached.model,
        lines: Some(Arc::new(lines)),
    }))
}
