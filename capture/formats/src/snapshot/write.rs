//! Writing a `.ptscope` archive: a tar holding `perf.data`, the mapped
//! binaries as perf's build-id cache, the vdso and metadata. The archive is
//! written to a temporary file and renamed into place, so a failed write
//! never leaves something that looks like a snapshot.

use std::io::Write;
use std::path::Path;

use crate::error::FileError;
use crate::perf_data::sample;
use crate::snapshot::metadata::{self, Metadata};

/// Every record's sample-id layout.
pub const SAMPLE_TYPE: u64 = sample::IP | sample::TID | sample::TIME | sample::IDENTIFIER;

fn append(tar: &mut tar::Builder<impl Write>, name: &str, data: &[u8]) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, name, data)
}

/// Writes a `.ptscope` archive: `perf.data`, the binaries at their build-id
/// cache paths, and the metadata. It goes to a temporary file renamed into
/// place, so a failed write never leaves something that looks like a
/// snapshot.
pub fn write_archive(
    path: &Path,
    perf_data: &[u8],
    members: &[(String, &[u8])],
    meta: &Metadata,
) -> Result<(), FileError> {
    let io = |e| FileError::io(path, e);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".ptscope-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(io)?;
    {
        let mut tar = tar::Builder::new(std::io::BufWriter::new(tmp.as_file()));
        append(&mut tar, "perf.data", perf_data).map_err(io)?;
        let mut seen = std::collections::HashSet::new();
        for (name, data) in members {
            if seen.insert(name.clone()) {
                append(&mut tar, name, data).map_err(io)?;
            }
        }
        let json = serde_json::to_vec_pretty(meta).map_err(|e| io(std::io::Error::other(e)))?;
        append(&mut tar, metadata::FILE_NAME, &json).map_err(io)?;
        tar.into_inner().map_err(io)?.flush().map_err(io)?;
    }
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = tmp
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}
