//! What every decode sets up before it walks: the decoder's configuration,
//! each process's code (for libipt's section cache or our own flow decoder)
//! and its resolver, and the symbols, with what the user should hear of
//! setting them up.

use crate::names::resolve::{ProcessSymbols, SymbolCache};
use crate::pt::block::decoder_config;
use crate::pt::block::DecoderConfig;
#[cfg(feature = "libipt")]
use crate::pt::ffi::{Image, SectionCache};
use crate::pt::memory::{FileCache, Memory};
use ptscope_formats::{snapshot::Snapshot, snapshot::Trace};
use std::collections::HashMap;

use super::*;

/// A process's code, as the engine reads it.
pub(super) enum ProcImage {
    /// Section ids in libipt's section cache.
    #[cfg(feature = "libipt")]
    Libipt(Vec<i32>),
    Flow(Memory),
}

/// A process's image and resolver.
pub(super) type Proc = (ProcImage, ProcessSymbols);

/// Where a process's code comes from: libipt's section cache or our files.
pub(super) struct Loaders {
    pub(super) engine: Engine,
    #[cfg(feature = "libipt")]
    pub(super) cache: SectionCache,
    pub(super) files: FileCache,
}

/// Builds the image and resolver of process `pid`, once.
pub(super) fn add_proc<'p>(
    procs: &'p mut HashMap<i32, Proc>,
    pid: i32,
    (snap, trace): (&Snapshot, &Trace),
    loaders: &mut Loaders,
    symbols: &mut SymbolCache,
    missing_binaries: &mut Vec<String>,
    workers: usize,
) -> Result<&'p mut Proc, DecodeError> {
    if let std::collections::hash_map::Entry::Vacant(e) = procs.entry(pid) {
        let mut notes = Vec::new();
        let (secs, missing) = crate::names::image::sections_noting(
            snap,
            trace,
            Some(pid),
            symbols.lookup(),
            &mut notes,
        );
        notes.into_iter().for_each(|n| symbols.note(n));
        let image = match loaders.engine {
            #[cfg(feature = "libipt")]
            Engine::Libipt => {
                let mut isids = Vec::new();
                for sec in &secs {
                    isids.push(
                        loaders
                            .cache
                            .add_file(&sec.file, sec.offset, sec.size, sec.vaddr)
                            .map_err(|error| DecodeError::LibiptMap {
                                path: sec.file.clone(),
                                error,
                            })?,
                    );
                }
                ProcImage::Libipt(isids)
            }
            Engine::Flow => {
                ProcImage::Flow(Memory::new(&secs, &mut loaders.files).map_err(|error| {
                    DecodeError::Binary {
                        path: snap.path.clone(),
                        error,
                    }
                })?)
            }
        };
        // The kernel and its modules (pid -1) are mapped in every process,
        // and no image of theirs is ever at hand.
        let missing_maps: Vec<(u64, u64, String)> = trace
            .mmaps
            .iter()
            .filter(|m| (m.pid == pid && missing.contains(&m.path)) || (m.kernel && m.pid == -1))
            .map(|m| (m.start, m.len, m.path.clone()))
            .collect();
        for m in missing {
            if !missing_binaries.contains(&m) {
                missing_binaries.push(m);
            }
        }
        // Its binaries' symbols, on two cores where the decode has them:
        // the walk cannot start before them.
        symbols.preload(
            secs.iter()
                .map(|s| (s.file.as_path(), s.mapped_path.as_str())),
            workers > 1,
        );
        let resolver = ProcessSymbols::new(&secs, &missing_maps, symbols);
        e.insert((image, resolver));
    }
    Ok(procs.get_mut(&pid).expect("inserted above"))
}

#[cfg(feature = "libipt")]
pub(super) fn new_image<'c>(
    cache: &'c SectionCache,
    isids: &[i32],
) -> Result<Image<'c>, crate::pt::block::PtError> {
    let mut image = Image::new(cache)?;
    for &isid in isids {
        image.add(isid)?;
    }
    Ok(image)
}

/// What every decode of a trace sets up before it walks: the decoder's
/// configuration, the code loaders and the symbols, and what the user
/// should hear of setting them up.
pub(super) struct Prepared {
    pub(super) cfg: DecoderConfig,
    pub(super) loaders: Loaders,
    pub(super) symbols: SymbolCache,
    pub(super) filter_warning: Vec<String>,
    pub(super) kernel_warning: Option<String>,
}

/// The code loaders of a decode by `engine` of `snap`.
pub(super) fn loaders(snap: &Snapshot, engine: Engine) -> Result<Loaders, DecodeError> {
    #[cfg(not(feature = "libipt"))]
    let _ = snap;
    Ok(Loaders {
        engine,
        #[cfg(feature = "libipt")]
        cache: SectionCache::new().map_err(|error| DecodeError::Setup {
            path: snap.path.clone(),
            error,
        })?,
        files: FileCache::default(),
    })
}

pub(super) fn prepare(
    snap: &Snapshot,
    trace: &Trace,
    opts: &DecodeOptions,
) -> Result<Prepared, DecodeError> {
    let mut cfg = decoder_config(trace);
    if let Some(cpu) = opts.cpu {
        cfg = cfg.with_cpu(cpu);
    }
    cfg.no_memo = opts.no_memo;
    let mut filter_warning = Vec::new();
    match (
        opts.ip_filter,
        crate::pt::ip_filter::IpFilter::recorded(trace),
    ) {
        (Some(f), _) => cfg = cfg.with_filter(f),
        (None, Err(e)) => filter_warning.push(format!(
            "{e}; SKL014 is not worked around (give the ranges with --ip-filter)"
        )),
        (None, Ok(_)) => {}
    }
    let loaders = loaders(snap, opts.engine)?;
    let lookup = crate::names::lookup::Lookup::new(Some(snap), opts.names.lookup.clone());
    let mut symbols = SymbolCache::new(lookup);
    let (kernel, kernel_warning) = crate::names::symbols::kallsyms::for_trace(
        snap,
        trace,
        opts.names.kallsyms.as_deref(),
        opts.names.vmlinux.as_deref(),
    );
    symbols.kernel = kernel;
    Ok(Prepared {
        cfg,
        loaders,
        symbols,
        filter_warning,
        kernel_warning,
    })
}
