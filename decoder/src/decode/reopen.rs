//! A model read back from the model cache, made whole again: checked
//! against the files its names came from, then given a fine-pass source
//! built again from the snapshot and the cached recipe, without walking
//! the trace.
//!
//! Reading every binary's symbols again took most of a re-open, and only
//! the fine pass needs them (the cached model holds its names). So the
//! check only finds the files, and the source is built on a thread of its
//! own while the model is already shown ([`LineSource::later`]).
//!
//! Copying the files a snapshot carries out of its archive (some 16 MB
//! for python3) took the two cores the model's read wants, and the check
//! needs no more of them than their bytes: so it reads those in the
//! archive, and the copy is left to the thread that builds the fine
//! pass's source, which reads them as files ([`Unpacking`]). A mapped
//! binary the snapshot does not carry is checked where it is, after the
//! copy (its debug file may be one the snapshot carries).

use crate::decoded::Decoded;
use crate::inputs::cache::Cached;
use crate::passes::fine::LineSource;
use ptscope_formats::snapshot::{Snapshot, Unpack};
use ptscope_formats::FileError;
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

/// A snapshot's carried files, left in its archive until something needs
/// them as files: the first to ask copies them out ([`Unpack::run`]).
pub(crate) struct Unpacking(Option<Unpack>);

impl Unpacking {
    /// `unpack`, not run yet.
    pub(crate) fn later(unpack: Unpack) -> Unpacking {
        Unpacking(Some(unpack))
    }

    /// Copies the files out, unless that was done (and its error, if any,
    /// told) before.
    pub(crate) fn finish(&mut self) -> Result<(), FileError> {
        self.0.take().map_or(Ok(()), Unpack::run)
    }
}

/// The model of `snap` from what the model cache kept of an earlier
/// decode with the same options: its spans as they were, and a fine-pass
/// source built again from the snapshot and the cached recipe, on a
/// thread of its own, which copies the carried files out first
/// (`unpacking`).
pub(crate) fn reopen(
    snap: Snapshot,
    opts: &DecodeOptions,
    cached: Cached,
    mut unpacking: Unpacking,
) -> Result<Reopened, DecodeError> {
    let trace = snap.trace().map_err(DecodeError::File)?;
    let Prepared {
        cfg, mut symbols, ..
    } = prepare(&snap, &trace, opts)?;
    let recipe = cached.recipe;
    let fresh = unchanged(
        (&snap, &trace),
        (&recipe, &cached.model.missing_binaries),
        &mut symbols,
        &mut unpacking,
    )?;
    if !fresh {
        drop(trace);
        // Decoded afresh, from the files.
        unpacking.finish().map_err(DecodeError::File)?;
        return Ok(Reopened::Stale(Box::new(snap)));
    }
    drop(trace);
    let funcs = cached.model.funcs.clone();
    let engine = opts.engine;
    let threads = opts.threads.clone();
    let lines = LineSource::later(move || {
        unpacking.finish().map_err(|e| e.to_string())?;
        build(snap, cfg, engine, threads, recipe, symbols, funcs).map_err(|e| e.to_string())
    });
    Ok(Reopened::Model(Decoded {
        model: cached.model,
        lines: Some(Arc::new(lines)),
    }))
}

/// Whether the files the cached model's names came from (`recipe`'s
/// sources, and the binaries it lacked) are those `symbols` finds now for
/// `snap`, found as the decode found them but not read: a carried binary
/// by its bytes in the archive, any other where it is, once `unpacking`
/// has copied the carried files out (its debug file may be one of them).
fn unchanged(
    (snap, trace): (&Snapshot, &ptscope_formats::snapshot::Trace),
    (recipe, missing_then): (&crate::passes::fine::FineRecipe, &[String]),
    symbols: &mut crate::names::resolve::SymbolCache,
    unpacking: &mut Unpacking,
) -> Result<bool, DecodeError> {
    let mut missing_binaries = Vec::new();
    let mut notes = Vec::new();
    for &pid in &recipe.pids {
        let (secs, missing) = crate::names::image::sections_noting(
            snap,
            trace,
            Some(pid),
            symbols.lookup(),
            &mut notes,
        );
        for s in &secs {
            match snap.carried_bytes(&s.file) {
                Some(bytes) => symbols.identify_carried(&s.file, &s.mapped_path, &bytes),
                None => {
                    unpacking.finish().map_err(DecodeError::File)?;
                    symbols.locate_mapped(&s.file, &s.mapped_path);
                }
            }
        }
        for m in missing {
            if !missing_binaries.contains(&m) {
                missing_binaries.push(m);
            }
        }
    }
    let mut missing_then = missing_then.to_vec();
    missing_then.sort();
    missing_binaries.sort();
    Ok(symbols.sources() == recipe.sources && missing_binaries == missing_then)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::cache::ModelCache;

    /// A re-open gives its model with the snapshot's files still in its
    /// archive (the check reads their bytes there), and its fine pass's
    /// source copies them out and is built from them (holding them open),
    /// re-decoding as the fresh decode's does.
    #[test]
    fn a_reopen_leaves_the_unpack_to_the_fine_pass() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModelCache::new(dir.path().join("cache"), u64::MAX);
        let fresh = crate::testing::demo_decoded();
        cache.store("demo", &fresh).unwrap();
        let cached = cache.load("demo", None).unwrap().unwrap();
        let (snap, unpack) = Snapshot::open_unpacking_later(&crate::testing::demo_path()).unwrap();
        let carried: Vec<_> = snap.carried_files().map(|f| f.to_path_buf()).collect();
        assert!(!carried.is_empty());
        let mut unpacking = Unpacking::later(unpack);
        {
            let trace = snap.trace().unwrap();
            let opts = DecodeOptions::default();
            let mut symbols = prepare(&snap, &trace, &opts).unwrap().symbols;
            let recipe = (&cached.recipe, &cached.model.missing_binaries[..]);
            let fresh = unchanged((&snap, &trace), recipe, &mut symbols, &mut unpacking);
            assert!(fresh.unwrap(), "the demo's cached model is stale");
        }
        assert!(unpacking.0.is_some(), "the check copied the files out");
        assert!(carried.iter().all(|f| !f.exists()));
        let reopened = reopen(snap, &DecodeOptions::default(), cached, unpacking);
        let Ok(Reopened::Model(model)) = reopened else {
            panic!("the demo's cached model was not taken");
        };
        let lines = model.lines.as_ref().unwrap();
        lines.wait().unwrap();
        let (thread, ours) = (&model.model.threads[0], &fresh.model.threads[0]);
        let theirs = fresh.lines.as_ref().unwrap();
        for i in 0..thread.checkpoints.len().min(3) {
            let a = lines.decode_segment(thread, i, None).unwrap();
            let b = theirs.decode_segment(ours, i, None).unwrap();
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
    }
}
