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
//! The decoder looks in what the snapshot carries (2) itself. Everything
//! else is its caller's to supply, as a [`FileLookup`] in
//! [`NameOptions::lookup`]: the decoder does no network I/O and prints
//! nothing. The app passes `ptscope_debuginfo::Search`, which looks in the
//! order above, with debuginfod's progress reported where the app shows it
//! (stderr, or the window's progress line and its Cancel). [`Lookup`] is
//! the two together; [`find_binary`] adds the caller's binaries to the
//! snapshot's own.
//!
//! The debug file gives names and lines only: its code sections are empty
//! (`NOBITS`), so code is always read from the binary.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ptscope_formats::snapshot::Snapshot;
pub use ptscope_formats::{DebugFile, FileLookup};

/// Where names come from beyond the snapshot and the binaries themselves:
/// the caller's lookup, and the kernel's symbols.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct NameOptions {
    /// Where debug files, and binaries not at their recorded paths, are
    /// looked for beyond the snapshot. `None`: nowhere else (the binaries'
    /// own paths and the snapshot only). Its [`FileLookup::key`] is part
    /// of the model cache's key.
    #[serde(serialize_with = "lookup_key")]
    pub lookup: Option<Arc<dyn FileLookup>>,
    /// The kernel's symbols in kallsyms' format (`--kallsyms`), over those
    /// a snapshot carries.
    pub kallsyms: Option<PathBuf>,
    /// A vmlinux whose symbols name kernel code (`--vmlinux`), over both.
    pub vmlinux: Option<PathBuf>,
}

fn lookup_key<S: serde::Serializer>(
    lookup: &Option<Arc<dyn FileLookup>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_some(&lookup.as_ref().map(|l| l.key()))
}

/// Where the decoder looks for the files of one snapshot: the build-id
/// cache the snapshot carries first (what was found at capture), then the
/// caller's lookup.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    /// The snapshot's build-id cache, where it is (or will be) unpacked.
    carried: Option<PathBuf>,
    /// The files the snapshot carries there, known before they are
    /// unpacked.
    carried_files: Arc<BTreeSet<PathBuf>>,
    caller: Option<Arc<dyn FileLookup>>,
}

impl Lookup {
    /// Looks in what `snap` carries, then in `caller`.
    pub fn new(snap: Option<&Snapshot>, caller: Option<Arc<dyn FileLookup>>) -> Lookup {
        Lookup {
            carried: snap.and_then(Snapshot::buildid_dir).map(Path::to_path_buf),
            carried_files: Arc::new(
                snap.into_iter()
                    .flat_map(Snapshot::carried_files)
                    .map(Path::to_path_buf)
                    .collect(),
            ),
            caller,
        }
    }

    /// Whether `path` is a file the snapshot carries, unpacked or not.
    pub fn is_carried(&self, path: &Path) -> bool {
        self.carried_files.contains(path)
    }

    /// The debug file of build id `id` that the snapshot carries, whether
    /// or not it is unpacked yet.
    fn carried_debug_file(&self, id: &[u8]) -> Option<PathBuf> {
        if id.is_empty() {
            return None;
        }
        let path = self
            .carried
            .as_deref()?
            .join(ptscope_formats::buildid::debug_cache_path(id));
        self.carried_files.contains(&path).then_some(path)
    }

    /// The snapshot's build-id cache, if it carries one.
    pub fn carried(&self) -> Option<&Path> {
        self.carried.as_deref()
    }

    /// The debug file of the binary whose bytes are `binary`, which the
    /// trace mapped as `mapped_path` with `build_id`; what went wrong on
    /// the way (a server down) goes to `notes`.
    pub fn debug_file(
        &self,
        binary: &[u8],
        mapped_path: &str,
        build_id: Option<&[u8]>,
        notes: &mut Vec<String>,
    ) -> Option<DebugFile> {
        if let Some(path) = build_id.and_then(|id| self.carried_debug_file(id)) {
            return Some(DebugFile {
                path,
                origin: "the snapshot".into(),
            });
        }
        self.caller
            .as_ref()?
            .debug_file(binary, mapped_path, build_id, notes)
    }
}

/// The file holding the binary a trace mapped at `path` (with `build_id`):
/// the snapshot's copy, perf's build-id cache or the file at its path
/// ([`Snapshot::find_binary`]), else wherever the caller's lookup finds
/// it. What went wrong asking there (a server down) goes to `notes`.
pub fn find_binary(
    snap: &Snapshot,
    lookup: &Lookup,
    build_id: Option<&[u8]>,
    path: &str,
    notes: &mut Vec<String>,
) -> Option<PathBuf> {
    snap.find_binary(build_id, path)
        .or_else(|| lookup.caller.as_ref()?.binary(build_id, path, notes))
}
