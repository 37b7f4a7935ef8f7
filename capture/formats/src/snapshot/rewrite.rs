//! Rewriting a snapshot: with new trace bytes ([`with_aux`]: every record
//! is kept, the AUX data of each queue is replaced, and the binaries, debug
//! files, kernel symbols and metadata go along; the benchmark generator
//! grows a small genuine capture this way), or with files added to its
//! build-id cache ([`with_members`]: the binaries and debug files a user
//! supplied for a trace, so that the saved snapshot carries them).

use std::io::Cursor;
use std::path::Path;

use super::{write::write_archive, Metadata, Snapshot};
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

/// Writes `snap` to `dst` as a `.ptscope` archive: its perf.data as it is,
/// every file its build-id cache holds, and `extra`, each a member name
/// (a build-id cache path, [`crate::buildid::cache_path`] or
/// [`crate::buildid::debug_cache_path`]) and the file to store there. A
/// member the snapshot already carries keeps its own file. A plain
/// perf.data becomes a snapshot, with `meta` as its metadata; a snapshot
/// keeps its own.
pub fn with_members(
    snap: &Snapshot,
    dst: &Path,
    extra: &[(String, std::path::PathBuf)],
    meta: &Metadata,
) -> Result<(), FileError> {
    let mut members: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(root) = snap.buildid_dir() {
        collect(root, root, &mut members).map_err(|e| FileError::io(root, e))?;
    }
    for (name, file) in extra {
        let data = std::fs::read(file).map_err(|e| FileError::io(file, e))?;
        members.push((name.clone(), data));
    }
    let refs: Vec<(String, &[u8])> = members
        .iter()
        .map(|(n, d)| (n.clone(), d.as_slice()))
        .collect();
    let meta = snap.metadata.as_ref().unwrap_or(meta);
    write_archive(dst, &snap.perf_data, &refs, meta)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/demo/demo.ptscope")
    }

    /// Files added to a snapshot are carried beside its own; a plain
    /// perf.data becomes a snapshot carrying them.
    #[test]
    fn added_members_are_carried_and_the_trace_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let extra = dir.path().join("found.debug");
        std::fs::write(&extra, b"debug bytes").unwrap();
        let name = crate::buildid::debug_cache_path(&[0xab, 0xcd, 0xef]);
        let snap = Snapshot::open(&demo()).unwrap();
        let own = snap.buildid_dir().unwrap().to_path_buf();
        let mut carried = Vec::new();
        collect(&own, &own, &mut carried).unwrap();
        assert!(!carried.is_empty());
        let plain = dir.path().join("plain.data");
        std::fs::write(&plain, &snap.perf_data).unwrap();
        let meta = Metadata {
            backend: "perf.data".into(),
            ..Metadata::default()
        };
        for (from, want_meta) in [
            (demo(), snap.metadata.clone().unwrap()),
            (plain, meta.clone()),
        ] {
            let src = Snapshot::open(&from).unwrap();
            let dst = dir.path().join("saved.ptscope");
            with_members(&src, &dst, &[(name.clone(), extra.clone())], &meta).unwrap();
            let saved = Snapshot::open(&dst).unwrap();
            assert_eq!(saved.perf_data, snap.perf_data);
            assert_eq!(saved.metadata.as_ref(), Some(&want_meta));
            let root = saved.buildid_dir().unwrap();
            assert_eq!(std::fs::read(root.join(&name)).unwrap(), b"debug bytes");
            if src.buildid_dir().is_some() {
                for (member, data) in &carried {
                    assert_eq!(&std::fs::read(root.join(member)).unwrap(), data);
                }
            }
        }
    }
}
