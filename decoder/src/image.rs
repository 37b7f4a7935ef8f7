//! The memory image of a traced process: which file bytes sit at which
//! address, from MMAP2 sideband and the binaries the snapshot carries.

use std::path::PathBuf;

use ptscope_capture::snapshot::{Snapshot, Trace};

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

/// The sections of process `pid` (all processes with `None`), and the
/// mapped paths whose binaries could not be found.
pub fn sections(snap: &Snapshot, trace: &Trace, pid: Option<i32>) -> (Vec<Section>, Vec<String>) {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for m in trace
        .mmaps
        .iter()
        .filter(|m| pid.is_none_or(|p| p == m.pid))
    {
        match snap.find_binary(m.build_id.as_deref(), &m.path) {
            Some(file) => {
                let file_len = std::fs::metadata(&file).map(|md| md.len()).unwrap_or(0);
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
