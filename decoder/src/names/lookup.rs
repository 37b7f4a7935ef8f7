//! Where a trace's names come from, beyond the binaries themselves: the
//! places the decoder looks for a stripped binary's separate debug file
//! (its names, DWARF lines and inline frames), and for binaries that are
//! not at their recorded paths.
//!
//! The order, for each mapped binary:
//! 1. its own `.symtab` and DWARF, when it has them;
//! 2. the debug files a snapshot carries (its build-id cache);
//! 3. the system's debug directory (`/usr/lib/debug`), then the user's
//!    `--debug-dir`s, by build id;
//! 4. `.gnu_debuglink`, its CRC checked, beside the binary, in its
//!    `.debug/`, and under each debug directory;
//! 5. perf's build-id cache (`~/.debug`);
//! 6. debuginfod, through `DEBUGINFOD_URLS` (unless turned off).
//!
//! [`ptscope_debuginfo::Search`] does the looking; this module builds the
//! one the decoder uses ([`search`]) and adds the binaries the user points
//! at with `--binaries` to the snapshot's own lookup ([`find_binary`]).
//! The debug file gives names and lines only: its code sections are empty
//! (`NOBITS`), so code is always read from the binary.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use ptscope_debuginfo::debuginfod::{Client, Progress, ProgressFn};
pub use ptscope_debuginfo::Search;

use crate::progress::DecodeProgress;
use ptscope_formats::snapshot::Snapshot;

/// Where names come from beyond the snapshot and the binaries themselves:
/// the user's directories, debuginfod, and the kernel's symbols.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct NameOptions {
    /// Debug directories to search after the system's (`--debug-dir`), by
    /// build id and by `.gnu_debuglink`.
    pub debug_dirs: Vec<PathBuf>,
    /// Directories of binaries that are not at their recorded paths
    /// (`--binaries`), searched by build id and by name.
    pub binary_dirs: Vec<PathBuf>,
    /// Ask the debuginfod servers `DEBUGINFOD_URLS` names for debug files.
    /// Off by default; the command line and the window turn it on unless
    /// told `--no-debuginfod`.
    pub debuginfod: bool,
    /// Who hears of debuginfod transfers as they go, besides a window's
    /// progress: the command line passes a reporter that writes to
    /// stderr. The decoder itself prints nothing.
    #[serde(skip)]
    pub on_transfer: Option<TransferReport>,
    /// The kernel's symbols in kallsyms' format (`--kallsyms`), over those
    /// a snapshot carries.
    pub kallsyms: Option<PathBuf>,
    /// A vmlinux whose symbols name kernel code (`--vmlinux`), over both.
    pub vmlinux: Option<PathBuf>,
}

/// What a caller is told of each debuginfod transfer, at its start, as it
/// goes and at its end; returning `Break` cancels it.
#[derive(Clone)]
pub struct TransferReport(pub Arc<ProgressFn>);

impl std::fmt::Debug for TransferReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransferReport(..)")
    }
}

/// The search the decoder uses for `snap`: the debug files it carries
/// first, then the machine's places ([`Search::system`]) with the user's
/// `debug_dirs` after the system's, and the user's `binary_dirs`;
/// debuginfod only with `debuginfod`.
pub fn search(
    snap: Option<&Snapshot>,
    debug_dirs: &[PathBuf],
    binary_dirs: &[PathBuf],
    debuginfod: bool,
) -> Search {
    let mut s = Search::system();
    s.carried = snap
        .and_then(Snapshot::buildid_dir)
        .map(|d| vec![d.to_path_buf()])
        .unwrap_or_default();
    s.debug_dirs.extend(debug_dirs.iter().cloned());
    s.binary_dirs = binary_dirs.to_vec();
    if !debuginfod {
        s.debuginfod = None;
    }
    s
}

/// `client`, reporting its transfers to the caller's `report` and to a
/// window's `progress`, which shows what the decode waits on and whose
/// Cancel stops a transfer.
pub fn reporting(
    client: Client,
    report: Option<TransferReport>,
    progress: Option<Arc<DecodeProgress>>,
) -> Client {
    if report.is_none() && progress.is_none() {
        return client;
    }
    client.with_progress(Arc::new(move |p: &Progress<'_>| {
        if let Some(f) = &report {
            (f.0)(p)?;
        }
        let Some(progress) = &progress else {
            return ControlFlow::Continue(());
        };
        progress.set_waiting_on((!p.is_complete()).then(|| {
            let mib = |n: u64| n as f64 / (1u64 << 20) as f64;
            match p.total {
                Some(t) => format!(
                    "fetching the {} of {} from {}: {:.1} of {:.1} MiB",
                    p.artifact,
                    p.build_id,
                    p.server,
                    mib(p.done),
                    mib(t)
                ),
                None => format!(
                    "fetching the {} of {} from {}: {:.1} MiB",
                    p.artifact,
                    p.build_id,
                    p.server,
                    mib(p.done)
                ),
            }
        }));
        if progress.is_cancelled() {
            progress.set_waiting_on(None);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }))
}

/// The file holding the binary a trace mapped at `path` (with `build_id`):
/// the snapshot's copy, perf's build-id cache or the file at its path
/// ([`Snapshot::find_binary`]), else one of the `--binaries` directories
/// ([`Search::binary`]). The vdso is found there only by build id, in
/// perf's cache layout (as `perf archive` packs it). What went wrong
/// asking debuginfod for it (a server down) goes to `notes`.
pub fn find_binary(
    snap: &Snapshot,
    search: &Search,
    build_id: Option<&[u8]>,
    path: &str,
    notes: &mut Vec<String>,
) -> Option<PathBuf> {
    snap.find_binary(build_id, path).or_else(|| {
        if path == "[vdso]" {
            let rel = ptscope_formats::buildid::cache_path(build_id?, true);
            return search
                .binary_dirs
                .iter()
                .map(|d| d.join(&rel))
                .find(|p| p.is_file());
        }
        search.binary_noting(build_id, path, notes)
    })
}
