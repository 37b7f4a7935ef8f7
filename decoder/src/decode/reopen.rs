//! A model read back from the model cache, made whole again: checked
//! against the files its names came from, then given a fine-pass source
//! built again from the snapshot and the cached recipe, without walking
//! the trace.
//!
//! Reading every binary's symbols again took most of a re-open, and only
//! the fine pass needs them (the cached model holds its names). So the
//! check only finds the files, and the source is built on a thread of its
//! own while the model is already shown ([`LineSource::later`]).

use crate::decoded::Decoded;
use crate::inputs::cache::Cached;
use crate::passes::fine::LineSource;
use ptscope_formats::snapshot::Snapshot;
use std::collections::HashMap;
use std::sync::Arc;

use super::trace::line_source;
use super::*;

/// What [`reopen`] made of a cached model.
pub(crate) enum Reopened {
    /// The model, its fine pass being built.
    Model(Decoded),
    /// Stale: the binaries or debug files its names came from are not
    /// those found now. The snapshot, to be decoded afresh.
    Stale(Box<Snapshot>),
}

/// The model of `snap` from what the model cache kept of an earlier
/// decode with the same options: its spans as they were, and a fine-pass
/// source built again from the snapshot and the cached recipe, on a
/// thread of its own.
pub(crate) fn reopen(
    snap: Snapshot,
    opts: &DecodeOptions,
    cached: Cached,
) -> Result<Reopened, DecodeError> {
    let trace = snap.trace().map_err(DecodeError::File)?;
    let Prepared {
        cfg, mut symbols, ..
    } = prepare(&snap, &trace, opts)?;
    let recipe = cached.recipe;
    // The files each process's names would come from, found as the
    // decode found them, but not read.
    let mut missing_binaries = Vec::new();
    let mut notes = Vec::new();
    for &pid in &recipe.pids {
        let (secs, missing) = crate::names::image::sections_noting(
            &snap,
            &trace,
            Some(pid),
            symbols.lookup(),
            &mut notes,
        );
        for s in &secs {
            symbols.locate_mapped(&s.file, &s.mapped_path);
        }
        for m in missing {
            if !missing_binaries.contains(&m) {
                missing_binaries.push(m);
            }
        }
    }
    let mut missing_then = cached.model.missing_binaries.clone();
    missing_then.sort();
    missing_binaries.sort();
    if symbols.sources() != recipe.sources || missing_binaries != missing_then {
        drop(trace);
        return Ok(Reopened::Stale(Box::new(snap)));
    }
    drop(trace);
    let funcs = cached.model.funcs.clone();
    let engine = opts.engine;
    let threads = opts.threads.clone();
    let lines = LineSource::later(move || {
        build(snap, cfg, engine, threads, recipe, symbols, funcs).map_err(|e| e.to_string())
    });
    Ok(Reopened::Model(Decoded {
        model: cached.model,
        lines: Some(Arc::new(lines)),
    }))
}

/// The fine-pass source of `snap` from the cached `recipe`: each process's
/// image and resolver made again, taught the functions its walk learned.
fn build(
    snap: Snapshot,
    cfg: crate::pt::block::DecoderConfig,
    engine: Engine,
    threads: Option<Vec<i32>>,
    recipe: crate::passes::fine::FineRecipe,
    mut symbols: crate::names::resolve::SymbolCache,
    funcs: crate::passes::event::FuncTable,
) -> Result<LineSource, DecodeError> {
    let trace = snap.trace().map_err(DecodeError::File)?;
    let trace = &trace;
    let mut loaders = loaders(&snap, engine)?;
    let mut procs: HashMap<i32, Proc> = HashMap::new();
    let mut missing_binaries = Vec::new();
    for (&pid, learned) in recipe.pids.iter().zip(&recipe.learned) {
        let (_, resolver) = add_proc(
            &mut procs,
            pid,
            (&snap, trace),
            &mut loaders,
            &mut symbols,
            &mut missing_binaries,
            // On the thread the source is built on, beside the window.
            1,
        )?;
        resolver.relearn(learned.iter().copied());
    }
    let (to_ns, unit) = clock_of(trace);
    let wanted = |tid: i32| threads.as_ref().is_none_or(|t| t.contains(&tid));
    let queue_psbs: Vec<Vec<u64>> = trace.streams.iter().map(|s| psbs_of(&s.data)).collect();
    Ok(line_source(
        (&snap, trace),
        cfg,
        (to_ns, unit),
        (recipe.pids.clone(), &mut procs),
        (&mut loaders, &symbols),
        (queue_psbs, &wanted, recipe.schedules()),
        recipe.cpu_slots(),
        funcs,
    ))
}
