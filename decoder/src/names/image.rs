//! The memory image of a traced process: which file bytes sit at which
//! address, from MMAP2 sideband and the binaries the snapshot carries (or
//! this machine has, or the user's `--binaries` directories hold).

use std::collections::HashMap;
use std::path::PathBuf;

use ptscope_formats::{snapshot::Snapshot, snapshot::Trace};

use crate::names::lookup::Lookup;

/// One mapped file section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub file: PathBuf,
    pub offset: u64,
    pub size: u64,
    pub vaddr: u64,
    /// The path the process had mapped.
    pub mapped_path: String,
}

/// A binary found for a mapping, and its length.
type Bundled = (PathBuf, u64);

/// `file` is an ELF file for a machine other than x86 (whose trace this
/// cannot be). A file `snap` carries is read in the archive: it may not be
/// unpacked yet.
fn foreign_elf(snap: &Snapshot, file: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    let read = match snap.carried_bytes(file) {
        Some(bytes) => bytes
            .get(..head.len())
            .map(|b| head.copy_from_slice(b))
            .ok_or(()),
        None => std::fs::File::open(file)
            .and_then(|mut f| f.read_exact(&mut head))
            .map_err(drop),
    };
    if read.is_err() || &head[..4] != b"\x7fELF" {
        return false;
    }
    // e_machine, in the file's byte order: EM_386 or EM_X86_64.
    let machine = match head[5] {
        2 => u16::from_be_bytes([head[18], head[19]]),
        _ => u16::from_le_bytes([head[18], head[19]]),
    };
    !matches!(machine, 3 | 62)
}

/// The sections of process `pid` (all processes with `None`), and the
/// mapped paths whose binaries could not be found (or are for another
/// machine), with the binaries the snapshot and this machine have.
pub fn sections(snap: &Snapshot, trace: &Trace, pid: Option<i32>) -> (Vec<Section>, Vec<String>) {
    sections_with(snap, trace, pid, &Lookup::new(Some(snap), None))
}

/// [`sections`], with the binaries not at their paths looked for where
/// `lookup` says as well ([`crate::names::lookup::find_binary`]).
pub fn sections_with(
    snap: &Snapshot,
    trace: &Trace,
    pid: Option<i32>,
    lookup: &Lookup,
) -> (Vec<Section>, Vec<String>) {
    sections_noting(snap, trace, pid, lookup, &mut Vec::new())
}

/// [`sections_with`], adding to `notes` what went wrong asking debuginfod
/// for a binary (a server down), which would otherwise go unsaid.
pub(crate) fn sections_noting(
    snap: &Snapshot,
    trace: &Trace,
    pid: Option<i32>,
    lookup: &Lookup,
    notes: &mut Vec<String>,
) -> (Vec<Section>, Vec<String>) {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    // A binary is mapped several times (text, data, ...): look it up once.
    let mut found: HashMap<(Option<&[u8]>, &str), Option<Bundled>> = HashMap::new();
    for m in trace
        .mmaps
        .iter()
        .filter(|m| pid.is_none_or(|p| p == m.pid))
    {
        let key = (m.build_id.as_deref(), m.path.as_str());
        let hit = found.entry(key).or_insert_with(|| {
            // Code for another machine cannot be what ran: as good as missing.
            let file = crate::names::lookup::find_binary(
                snap,
                lookup,
                m.build_id.as_deref(),
                &m.path,
                notes,
            )
            .filter(|f| !foreign_elf(snap, f))?;
            let len = snap
                .carried_len(&file)
                .unwrap_or_else(|| std::fs::metadata(&file).map_or(0, |md| md.len()));
            Some((file, len))
        });
        match hit.clone() {
            Some((file, file_len)) => {
                if m.pgoff >= file_len {
                    continue;
                }
                out.push(Section {
                    size: m.len.min(file_len - m.pgoff),
                    file,
                    offset: m.pgoff,
                    vaddr: m.start,
                    mapped_path: m.path.clone(),
                });
            }
            None => {
                if !missing.contains(&m.path) {
                    missing.push(m.path.clone());
                }
            }
        }
    }
    (out, missing)
}
