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
//! Copying the files a snapshot carries out of its archive took as long
//! as reading the cached model (some 5 ms of python3's 16 MB), and the
//! check needs no more of them than their headers: so it reads those in
//! the archive, and the copy goes on beside the model's read and the
//! check ([`Unpacking`]), waited for by the fine pass's source alone.

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

/// A snapshot's carried files being copied out of its archive on a
/// thread of their own ([`Unpack::run`]), for whatever reads them as files
/// to wait for.
pub(crate) struct Unpacking {
    thread: Option<std::thread::JoinHandle<Result<(), FileError>>>,
}

impl Unpacking {
    /// Starts `unpack` on a thread of its own.
    pub(crate) fn start(unpack: Unpack) -> Result<Unpacking, FileError> {
        let archive = unpack.archive().to_path_buf();
        let thread = std::thread::Builder::new()
            .name("ptscope-unpack".into())
            .spawn(move || unpack.run())
            .map_err(|e| FileError::io(&archive, e))?;
        Ok(Unpacking {
            thread: Some(thread),
        })
    }

    /// Waits until the files are out: at once if it was waited for
    /// before (whose error, if any, was told then).
    pub(crate) fn wait(&mut self) -> Result<(), FileError> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            None => Ok(()),
        }
    }
}

/// The model of `snap` from what the model cache kept of an earlier
/// decode with the same options: its spans as they were, and a fine-pass
/// source built again from the snapshot and the cached recipe, on a
/// thread of its own once `unpacking` is done.
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
            // A carried binary is known by its bytes in the archive. Any
            // other is opened where it is, and its debug file may be one
            // the unpack writes.
            match snap.carried_bytes(&s.file) {
                Some(bytes) => symbols.identify_carried(&s.file, &s.mapped_path, &bytes),
                None => {
                    unpacking.wait().map_err(DecodeError::File)?;
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
    let mut missing_then = cached.model.missing_binaries.clone();
    missing_then.sort();
    missing_binaries.sort();
    if symbols.sources() != recipe.sources || missing_binaries != missing_then {
        drop(trace);
        // Decoded afresh, from the files.
        unpacking.wait().map_err(DecodeError::File)?;
        return Ok(Reopened::Stale(Box::new(snap)));
    }
    drop(trace);
    let funcs = cached.model.funcs.clone();
    let engine = opts.engine;
    let threads = opts.threads.clone();
    let lines = LineSource::later(move || {
        unpacking.wait().map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::cache::ModelCache;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A re-open gives its model while the snapshot's files are still in
    /// its archive (the check reads their headers there), and only the
    /// fine pass's source waits for them to be copied out; it is then
    /// built from them (and holds them open), re-decoding as the fresh
    /// decode's does.
    #[test]
    fn a_reopen_waits_for_no_unpack() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModelCache::new(dir.path().join("cache"), u64::MAX);
        let fresh = crate::testing::demo_decoded();
        cache.store("demo", &fresh).unwrap();
        let cached = cache.load("demo", None).unwrap().unwrap();
        let (snap, unpack) = Snapshot::open_unpacking_later(&crate::testing::demo_path()).unwrap();
        let carried: Vec<_> = snap.carried_files().map(|f| f.to_path_buf()).collect();
        assert!(!carried.is_empty());
        // The unpack is held until the model is in hand.
        let (go, held) = mpsc::channel::<()>();
        let unpacking = Unpacking {
            thread: Some(std::thread::spawn(move || {
                let _ = held.recv();
                unpack.run()
            })),
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(reopen(snap, &DecodeOptions::default(), cached, unpacking));
        });
        let reopened = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the re-open waited for the unpack");
        let Ok(Reopened::Model(model)) = reopened else {
            panic!("the demo's cached model was not taken");
        };
        assert!(carried.iter().all(|f| !f.exists()), "unpacked already");
        go.send(()).unwrap();
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
