//! Rewriting a snapshot with new trace bytes: every record is kept, the
//! AUX data of each queue is replaced, and the binaries, debug files,
//! kernel symbols and metadata go along. The benchmark generator grows a
//! small genuine capture this way.

use std::io::Cursor;
use std::path::Path;

use super::{write::write_archive, Snapshot};
use crate::error::FileError;
use crate::perf_data::{PerfDataWriter, Record};

/// Writes `snap` to `dst` with each AUX queue's bytes replaced by
/// `new_aux(idx, old)`. The AUX records' times move by `shift_ns`, to the
/// end of the longer trace.
pub fn with_aux(
    snap: &Snapshot,
    dst: &Path,
    shift_ns: u64,
    new_aux: &dyn Fn(u32, &[u8]) -> Vec<u8>,
) -> Result<(), FileError> {
    let file = snap.perf()?;
    let io = |e| FileError::io(dst, e);
    let trace = snap.trace()?;
    let new: std::collections::HashMap<u32, Vec<u8>> = trace
        .streams
        .iter()
        .map(|s| (s.idx, new_aux(s.idx, &s.data)))
        .collect();
    let mut w = PerfDataWriter::new(Cursor::new(Vec::new()), file.sample_type()).map_err(io)?;
    let mut done = std::collections::HashSet::new();
    for rec in file.records() {
        let (_, rec) = rec.map_err(|e| FileError::format(&snap.path, e))?;
        match rec {
            Record::Auxtrace {
                offset,
                reference,
                idx,
                tid,
                cpu,
                ..
            } => {
                // Queues made of several buffers become one.
                if !done.insert(idx) {
                    continue;
                }
                let data = new.get(&idx).map_or(&[][..], Vec::as_slice);
                w.write(&Record::Auxtrace {
                    offset,
                    reference: reference + shift_ns,
                    idx,
                    tid,
                    cpu,
                    data,
                })
                .map_err(io)?;
            }
            Record::Aux {
                offset,
                flags,
                mut sample_id,
                ..
            } => {
                let size = trace
                    .streams
                    .iter()
                    .find(|s| {
                        s.tid == Some(sample_id.tid as i32)
                            || (s.tid.is_none() && s.cpu == Some(sample_id.cpu))
                    })
                    .and_then(|s| new.get(&s.idx))
                    .map_or(0, |d| d.len() as u64);
                sample_id.time += shift_ns;
                w.write(&Record::Aux {
                    offset,
                    size,
                    flags,
                    sample_id,
                })
                .map_err(io)?;
            }
            other => w.write(&other).map_err(io)?,
        }
    }
    let perf_data = w
        .finish(&file.attrs, file.features.clone())
        .map_err(io)?
        .into_inner();
    let mut members: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(root) = snap.buildid_dir() {
        collect(root, root, &mut members).map_err(|e| FileError::io(root, e))?;
    }
    for (name, data) in [
        (super::KALLSYMS_MEMBER, &snap.kallsyms),
        (super::MODULES_MEMBER, &snap.modules),
    ] {
        if let Some(data) = data {
            members.push((name.to_string(), data.clone()));
        }
    }
    let refs: Vec<(String, &[u8])> = members
        .iter()
        .map(|(n, d)| (n.clone(), d.as_slice()))
        .collect();
    let meta = snap.metadata.clone().unwrap_or_default();
    write_archive(dst, &perf_data, &refs, &meta)
}

/// Every file under `dir`, by path relative to `root`.
fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        if e.file_type()?.is_dir() {
            collect(root, &p, out)?;
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push((rel.to_string_lossy().into_owned(), std::fs::read(&p)?));
        }
    }
    out.sort();
    Ok(())
}
