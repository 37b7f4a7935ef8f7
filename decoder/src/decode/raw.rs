//! Raw PT dumps: a trace with no sideband, decoded against raw binary
//! images loaded at fixed addresses, as ptxed's `--raw FILE:ADDR` does.

use crate::decoded::Decoded;
use crate::names::image::Section;
use crate::names::resolve::{ProcessSymbols, SymbolCache};
use crate::passes::coarse::decode_thread;
use crate::passes::event::FuncTable;
use crate::passes::fine::{CpuSlots, LineSource, QueueParts};
use crate::passes::mark_scan;
use crate::pt::block::DecoderConfig;
#[cfg(feature = "libipt")]
use crate::pt::ffi::{BlockDecoder, SectionCache};
use crate::pt::flow::FlowDecoder;
use crate::pt::memory::{FileCache, Memory};
use crate::pt::packet::psb_offsets;
use crate::pt::timing::ToNs;
use ptscope_model::Marks;
use ptscope_model::{Model, ThreadModel, TimeUnit};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ptscope_formats::SharedBytes;

use super::*;

/// Decodes a raw PT dump against raw binary images loaded at fixed
/// addresses, like ptxed's `--raw FILE:ADDR`. Times are TSC ticks. The
/// dump's bytes are kept, not copied, for the line zoom.
pub fn decode_raw(
    pt_path: &Path,
    bytes: SharedBytes,
    images: &[(PathBuf, u64)],
    cfg: &DecoderConfig,
    engine: Engine,
) -> Result<Decoded, DecodeError> {
    let pt: &[u8] = &bytes;
    let setup = |error| DecodeError::Setup {
        path: pt_path.to_path_buf(),
        error,
    };
    let mut secs = Vec::new();
    for (file, addr) in images {
        let len = std::fs::metadata(file)
            .map_err(|e| DecodeError::Input {
                path: file.clone(),
                problem: format!("cannot read the raw image: {e}"),
            })?
            .len();
        if len == 0 {
            return Err(DecodeError::Input {
                path: file.clone(),
                problem: "the raw image is empty".into(),
            });
        }
        secs.push(Section {
            file: file.clone(),
            offset: 0,
            size: len,
            vaddr: *addr,
            mapped_path: file.display().to_string(),
        });
    }
    let psbs: Vec<u64> = psb_offsets(pt).into_iter().map(|o| o as u64).collect();
    if psbs.is_empty() {
        return Err(DecodeError::Input {
            path: pt_path.to_path_buf(),
            problem: "no PSB packet: this is not Intel PT data".into(),
        });
    }
    // A dump without timing packets counts instructions, as a snapshot
    // recorded with tsc=0 does; else times are TSC ticks.
    let unit = match has_timing(pt) {
        true => TimeUnit::Ns,
        false => TimeUnit::Insns,
    };
    let mut symbols = SymbolCache::default();
    let mut resolver = ProcessSymbols::new(&secs, &[], &mut symbols);
    let mut funcs = FuncTable::default();
    let thread = (0, 0, "raw".to_string());
    let mem =
        Memory::new(&secs, &mut FileCache::default()).map_err(|error| DecodeError::Binary {
            path: pt_path.to_path_buf(),
            error,
        })?;
    let d = match engine {
        #[cfg(feature = "libipt")]
        Engine::Libipt => {
            let mut cache = SectionCache::new().map_err(setup)?;
            let mut isids = Vec::new();
            for s in &secs {
                isids.push(cache.add_file(&s.file, s.offset, s.size, s.vaddr).map_err(
                    |error| DecodeError::LibiptMap {
                        path: s.file.clone(),
                        error,
                    },
                )?);
            }
            let image = new_image(&cache, &isids).map_err(setup)?;
            let dec = BlockDecoder::new(pt, cfg).map_err(setup)?;
            decode_thread(
                dec,
                0,
                &image,
                &mut resolver,
                &mut funcs,
                (&ToNs::IDENTITY, unit),
                &psbs,
                thread,
                None,
            )
        }
        Engine::Flow => {
            let dec = FlowDecoder::new(pt, cfg);
            decode_thread(
                dec,
                0,
                &mem,
                &mut resolver,
                &mut funcs,
                (&ToNs::IDENTITY, unit),
                &psbs,
                thread,
                None,
            )
        }
    }
    .map_err(setup)?;
    let lines = LineSource::new(
        *cfg,
        (ToNs::IDENTITY, unit),
        vec![QueueParts {
            idx: 0,
            tid: Some(0),
            data: bytes.clone(),
            psbs,
            schedule: Vec::new(),
        }],
        vec![(0, mem, resolver)],
        CpuSlots::default(),
        funcs.clone(),
    );
    let mut thread = ThreadModel::new(d, None);
    let scan = mark_scan::scan(pt, cfg, &ToNs::IDENTITY);
    thread.marks = Marks::new(scan.marks);
    let threads = vec![thread];
    let mut warnings = stack_warnings(&threads);
    warnings.extend(no_cpu_warning(cfg, &threads));
    warnings.extend(libipt_resync_warning(engine, &threads));
    Ok(Decoded {
        model: Model {
            funcs,
            missing_binaries: Vec::new(),
            warnings,
            threads,
            unit,
            ..Model::default()
        },
        lines: Some(Arc::new(lines)),
    })
}
