//! The snapshot file. A `.ptscope` snapshot is a tar archive holding a
//! standard `perf.data`, every binary the trace maps laid out as perf's
//! build-id cache (`.build-id/xx/yyyy…/elf`, `…/vdso`), and `ptscope.json`.
//! Untarred, `perf --buildid-dir DIR script -i DIR/perf.data` decodes it.
//!
//! Beside each stripped binary the snapshot carries the debug file found
//! for it at capture (`.build-id/xx/yyyy…/debug`, as perf's cache keeps
//! them; [`Metadata::debug_files`] says where each came from), so that
//! another machine names what this one named. A kernel trace carries the
//! kernel's symbols as `/proc/kallsyms` listed them ([`KALLSYMS_MEMBER`])
//! and its modules as `/proc/modules` did ([`MODULES_MEMBER`]), or says in
//! [`Metadata::kallsyms_missing`] why it could not.
//!
//! ptscope also opens plain perf.data files recorded by `perf record -e
//! intel_pt//u`; their binaries are looked up by build id in `~/.debug`,
//! then by path.

mod metadata;
mod rewrite;
mod trace;
mod write;

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Seek};
use std::path::{Component, Path, PathBuf};

pub use metadata::{Metadata, TriggerCall, FILE_NAME as METADATA_FILE, FORMAT_VERSION};
pub use rewrite::{with_aux as rewrite_aux, with_members as rewrite_members};
pub use trace::{AuxStream, CpuSwitch, MmapEvent, ThreadInfo, Trace};
pub use write::{write_archive, SAMPLE_TYPE};

use crate::buildid;
use crate::error::FileError;
use crate::mapped::{FileBytes, SharedBytes};
use crate::perf_data::{FormatError, PerfDataFile, MAGIC};

/// The archive member holding a copy of `/proc/kallsyms` taken at
/// capture: the kernel's and its modules' symbols at their run-time
/// addresses.
pub const KALLSYMS_MEMBER: &str = "kernel/kallsyms";

/// The archive member holding a copy of `/proc/modules` taken at capture:
/// each loaded module's name, size and address.
pub const MODULES_MEMBER: &str = "kernel/modules";

/// Largest member we extract from an archive; a larger one is an error,
/// not an allocation.
const MAX_MEMBER: u64 = 4 << 30;

/// An opened snapshot: the perf.data bytes and where its binaries are.
#[derive(Debug)]
pub struct Snapshot {
    pub path: PathBuf,
    /// Mapped from the file where it can be: see [`FileBytes`].
    pub perf_data: FileBytes,
    pub metadata: Option<Metadata>,
    /// The kernel's symbols in `/proc/kallsyms`' format: the snapshot's
    /// [`KALLSYMS_MEMBER`], or a file the user gave for a plain perf.data.
    pub kallsyms: Option<Vec<u8>>,
    /// The kernel's modules in `/proc/modules`' format ([`MODULES_MEMBER`]).
    pub modules: Option<Vec<u8>>,
    /// The extracted build-id cache of a `.ptscope` file (shared with its
    /// [`Unpack`], so that one run after the snapshot is gone writes into
    /// a directory that still exists, and is removed with it).
    cache: Option<std::sync::Arc<tempfile::TempDir>>,
    /// The files the archive carries into `cache`, by name there: where
    /// each one's bytes lie in the archive (its last member of the name,
    /// as the unpack leaves it). Known before the unpack runs.
    carried: BTreeMap<PathBuf, (u64, u64)>,
    /// The whole archive, mapped: the carried files' bytes, read in place
    /// before they are unpacked ([`Snapshot::carried_bytes`]).
    archive: Option<FileBytes>,
}

fn bad(path: &Path, kind: &'static str, problem: impl Into<String>) -> FileError {
    FileError::BadFile {
        path: path.to_path_buf(),
        kind,
        problem: problem.into(),
    }
}

/// Whether an archive member name is a plain relative path with no `..`.
fn safe_member(name: &Path) -> bool {
    name.components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && name.components().count() > 0
}

/// The binaries and debug files a `.ptscope` snapshot carries, still to
/// be copied out of the archive into its build-id directory
/// ([`Snapshot::open_unpacking_later`]): some 16 MB for a python3
/// capture, as long as re-opening one that was decoded before, whose
/// check of them reads them in place ([`Snapshot::carried_bytes`]) and
/// leaves the copy to the thread that builds its line zoom's source.
#[derive(Debug)]
#[must_use = "the snapshot's binaries are not there until it runs"]
pub struct Unpack {
    archive: PathBuf,
    dir: Option<std::sync::Arc<tempfile::TempDir>>,
    members: Vec<Member>,
}

/// A member to unpack: its name, and where its bytes lie in the archive
/// (offset, length).
type Member = (PathBuf, u64, u64);

impl Unpack {
    /// The snapshot whose files these are.
    pub fn archive(&self) -> &Path {
        &self.archive
    }

    /// Copies the members out, through handles of the archive's own, the
    /// members split by size between this thread and one more (the kernel
    /// copies each, and two cores copy 16 MB in about half the time); an
    /// error names the archive and the member.
    pub fn run(self) -> Result<(), FileError> {
        let Unpack {
            archive,
            dir,
            mut members,
        } = self;
        let Some(dir) = dir else {
            return Ok(());
        };
        // A name the archive holds twice is the last one's, as copied in
        // archive order: only that one is copied (two threads would write
        // one file at once): kept walking from the last member back.
        let mut seen = HashSet::new();
        members.reverse();
        members.retain(|(name, ..)| seen.insert(name.clone()));
        // The largest first, each to the share with fewer bytes so far.
        members.sort_by_key(|&(_, _, size)| std::cmp::Reverse(size));
        let mut shares: [(u64, Vec<Member>); 2] = Default::default();
        for m in members {
            let lighter = usize::from(shares[1].0 < shares[0].0);
            shares[lighter].0 += m.2;
            shares[lighter].1.push(m);
        }
        let [(_, mine), (_, theirs)] = shares;
        let copy = |members: &[Member]| copy_members(&archive, dir.path(), members);
        std::thread::scope(|s| {
            let other = (!theirs.is_empty())
                .then(|| std::thread::Builder::new().spawn_scoped(s, || copy(&theirs)));
            let here = copy(&mine);
            let there = match other {
                Some(Ok(h)) => h
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had: this one copies them too.
                Some(Err(_)) => copy(&theirs),
                None => Ok(()),
            };
            here.and(there)
        })
    }
}

/// Copies `members` (each a name, and where its bytes lie) out of the
/// `.ptscope` archive at `path` into `dir`.
fn copy_members(path: &Path, dir: &Path, members: &[Member]) -> Result<(), FileError> {
    let kind = ".ptscope snapshot";
    let mut from: Option<std::fs::File> = None;
    for &(ref name, at, size) in members {
        // Copied from the archive to its file by the kernel. Read and
        // written through this process, these were most of a re-open's
        // time.
        let dest = dir.join(name);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| FileError::io(parent, e))?;
        }
        let truncated = |e: std::io::Error| {
            bad(
                path,
                kind,
                format!("member `{}` is truncated ({e})", name.display()),
            )
        };
        let from = match &mut from {
            Some(from) => from,
            None => from.insert(std::fs::File::open(path).map_err(|e| FileError::io(path, e))?),
        };
        from.seek(std::io::SeekFrom::Start(at)).map_err(truncated)?;
        let mut to = std::fs::File::create(&dest).map_err(|e| FileError::io(&dest, e))?;
        let copied = std::io::copy(&mut (&*from).take(size), &mut to)
            .map_err(|e| FileError::io(&dest, e))?;
        if copied != size {
            return Err(bad(
                path,
                kind,
                format!("member `{}` is truncated", name.display()),
            ));
        }
    }
    Ok(())
}

impl Snapshot {
    /// Opens a `.ptscope` snapshot or a perf.data file, by content.
    pub fn open(path: &Path) -> Result<Snapshot, FileError> {
        let (snap, unpack) = Self::open_unpacking_later(path)?;
        unpack.run()?;
        Ok(snap)
    }

    /// [`open`](Self::open), but the binaries and debug files a snapshot
    /// carries are left in the archive: the snapshot's build-id
    /// directory holds them once [`Unpack::run`] has, and nothing may
    /// read them there before ([`Snapshot::find_binary`] names them, and
    /// [`Snapshot::carried_bytes`] reads them in the archive, at once;
    /// nothing to do for a perf.data file).
    pub fn open_unpacking_later(path: &Path) -> Result<(Snapshot, Unpack), FileError> {
        let meta = std::fs::metadata(path).map_err(|e| FileError::io(path, e))?;
        if meta.is_dir() {
            return Err(bad(path, "snapshot", "is a directory, not a file"));
        }
        if meta.len() == 0 {
            return Err(bad(path, "snapshot", "the file is empty"));
        }
        let mut file = std::fs::File::open(path).map_err(|e| FileError::io(path, e))?;
        let mut head = [0u8; 8];
        let n = file.read(&mut head).map_err(|e| FileError::io(path, e))?;
        if n == 8 && u64::from_le_bytes(head) == MAGIC {
            // Read, not mapped: a perf.data is often overwritten in place
            // (`cp`), which would pull pages from under a map.
            let perf_data = std::fs::read(path)
                .map_err(|e| FileError::io(path, e))?
                .into();
            let snap = Snapshot {
                path: path.to_path_buf(),
                perf_data,
                metadata: None,
                kallsyms: None,
                modules: None,
                cache: None,
                carried: BTreeMap::new(),
                archive: None,
            };
            let nothing = Unpack {
                archive: path.to_path_buf(),
                dir: None,
                members: Vec::new(),
            };
            return Ok((snap, nothing));
        }
        Self::open_archive(path)
    }

    /// A plain perf.data already in memory; `path` names it in messages.
    pub fn from_perf_data(path: &Path, perf_data: Vec<u8>) -> Snapshot {
        Snapshot {
            path: path.to_path_buf(),
            perf_data: perf_data.into(),
            metadata: None,
            kallsyms: None,
            modules: None,
            cache: None,
            carried: BTreeMap::new(),
            archive: None,
        }
    }

    /// Only the metadata of a `.ptscope` snapshot (None for a plain
    /// perf.data or an archive without it), without extracting anything:
    /// the archive's other members are skipped by seeking.
    pub fn read_metadata(path: &Path) -> Result<Option<Metadata>, FileError> {
        let kind = ".ptscope snapshot";
        let file = std::fs::File::open(path).map_err(|e| FileError::io(path, e))?;
        let mut archive = tar::Archive::new(file);
        let Ok(entries) = archive.entries_with_seek() else {
            return Ok(None);
        };
        for entry in entries {
            let Ok(mut entry) = entry else {
                return Ok(None);
            };
            let is_meta = entry
                .path()
                .is_ok_and(|n| n.as_os_str() == metadata::FILE_NAME);
            if !is_meta {
                continue;
            }
            // The metadata is a small JSON file; a header claiming more lies.
            if entry.size() > 1 << 20 {
                return Err(bad(
                    path,
                    kind,
                    format!("{} claims {} bytes", metadata::FILE_NAME, entry.size()),
                ));
            }
            let mut data = Vec::new();
            entry
                .read_to_end(&mut data)
                .map_err(|e| FileError::io(path, e))?;
            return serde_json::from_slice(&data).map(Some).map_err(|e| {
                bad(
                    path,
                    kind,
                    format!("{} is invalid: {e}", metadata::FILE_NAME),
                )
            });
        }
        Ok(None)
    }

    fn open_archive(path: &Path) -> Result<(Snapshot, Unpack), FileError> {
        let kind = ".ptscope snapshot";
        let file = std::fs::File::open(path).map_err(|e| FileError::io(path, e))?;
        let len = file.metadata().map_err(|e| FileError::io(path, e))?.len();
        // Seeking past the members it maps rather than reading them.
        let mut archive = tar::Archive::new(&file);
        let entries = archive.entries_with_seek().map_err(|e| {
            bad(
                path,
                kind,
                format!("not a perf.data file or a snapshot archive ({e})"),
            )
        })?;
        let cache = tempfile::Builder::new()
            .prefix("ptscope-snapshot-")
            .tempdir()
            .map_err(|e| FileError::io(&std::env::temp_dir(), e))?;
        let mut perf_data = None;
        let mut metadata = None;
        let mut kallsyms = None;
        let mut modules = None;
        let mut members = 0usize;
        let mut carried = Vec::new();
        for entry in entries {
            let mut entry = entry.map_err(|e| {
                if members == 0 {
                    bad(path, kind, "not a perf.data file or a snapshot archive")
                } else {
                    bad(path, kind, format!("the archive is damaged ({e})"))
                }
            })?;
            members += 1;
            let name = entry
                .path()
                .map_err(|e| bad(path, kind, format!("bad member name ({e})")))?
                .into_owned();
            let size = entry.header().size().unwrap_or(u64::MAX);
            if !entry.header().entry_type().is_file() {
                // Links, devices and directories are never followed or made.
                continue;
            }
            if !safe_member(&name) {
                return Err(bad(
                    path,
                    kind,
                    format!("member `{}` escapes the archive", name.display()),
                ));
            }
            if size > MAX_MEMBER {
                return Err(bad(
                    path,
                    kind,
                    format!("member `{}` claims {size} bytes", name.display()),
                ));
            }
            // The size the archive reads by (a PAX record can set it)
            // must be the header's: the members below are read in place,
            // by the header's.
            if entry.size() != size {
                return Err(bad(
                    path,
                    kind,
                    format!("member `{}` has two sizes", name.display()),
                ));
            }
            if name.as_os_str() == "perf.data" {
                // The trace, by far the largest member: mapped in place.
                let at = entry.raw_file_position();
                let data = FileBytes::map(&file, at, size).map_err(|e| {
                    bad(
                        path,
                        kind,
                        format!("member `{}` is truncated ({e})", name.display()),
                    )
                })?;
                perf_data = Some(data);
                continue;
            }
            let name_str = name.to_string_lossy();
            if name_str.starts_with(".build-id/") {
                // A binary or debug file, by far most of the rest: left for
                // the unpack, unless the archive ends before it does.
                let at = entry.raw_file_position();
                if at.checked_add(size).is_none_or(|end| end > len) {
                    return Err(bad(
                        path,
                        kind,
                        format!("member `{}` is truncated", name.display()),
                    ));
                }
                carried.push((name, at, size));
                continue;
            }
            let mut data = Vec::with_capacity(size.min(1 << 24) as usize);
            (&mut entry)
                .take(MAX_MEMBER)
                .read_to_end(&mut data)
                .map_err(|e| {
                    bad(
                        path,
                        kind,
                        format!("member `{}` is truncated ({e})", name.display()),
                    )
                })?;
            if data.len() as u64 != size {
                return Err(bad(
                    path,
                    kind,
                    format!("member `{}` is truncated", name.display()),
                ));
            }
            if name_str == metadata::FILE_NAME {
                metadata = Some(serde_json::from_slice(&data).map_err(|e| {
                    bad(
                        path,
                        kind,
                        format!("{} is invalid: {e}", metadata::FILE_NAME),
                    )
                })?);
            } else if name_str == KALLSYMS_MEMBER {
                kallsyms = Some(data);
            } else if name_str == MODULES_MEMBER {
                modules = Some(data);
            }
        }
        if members == 0 {
            return Err(bad(
                path,
                kind,
                "not a perf.data file or a snapshot archive",
            ));
        }
        let perf_data =
            perf_data.ok_or_else(|| bad(path, kind, "the archive holds no perf.data"))?;
        // Every member's bytes were found inside the file above.
        let archive = FileBytes::map(&file, 0, len).map_err(|e| FileError::io(path, e))?;
        let carried_at = carried
            .iter()
            .map(|(name, at, size)| (cache.path().join(name), (*at, *size)))
            .collect();
        let cache = std::sync::Arc::new(cache);
        let unpack = Unpack {
            archive: path.to_path_buf(),
            dir: Some(cache.clone()),
            members: carried,
        };
        let snap = Snapshot {
            path: path.to_path_buf(),
            perf_data,
            metadata,
            kallsyms,
            modules,
            cache: Some(cache),
            carried: carried_at,
            archive: Some(archive),
        };
        Ok((snap, unpack))
    }

    /// Parses the perf.data inside.
    pub fn perf(&self) -> Result<PerfDataFile<'_>, FileError> {
        PerfDataFile::parse(&self.perf_data).map_err(|e| self.format_error(e))
    }

    /// The trace model: PT parameters, per-thread AUX data and sideband.
    pub fn trace(&self) -> Result<Trace<'_>, FileError> {
        let file = self.perf()?;
        Trace::from_perf(&file).map_err(|e| self.format_error(e))
    }

    fn format_error(&self, e: FormatError) -> FileError {
        let name = if self.cache.is_some() {
            self.path.join("perf.data")
        } else {
            self.path.clone()
        };
        FileError::format(&name, e)
    }

    /// The build-id cache root of a `.ptscope` snapshot.
    pub fn buildid_dir(&self) -> Option<&Path> {
        self.cache.as_ref().map(|c| c.path())
    }

    /// The length of `path`, a file this snapshot carries into its
    /// build-id directory, whether or not it is unpacked yet; `None` for
    /// any other path.
    pub fn carried_len(&self, path: &Path) -> Option<u64> {
        self.carried.get(path).map(|&(_, size)| size)
    }

    /// The bytes of `path`, a file this snapshot carries into its build-id
    /// directory, read in the archive where they lie: what is known of it
    /// before [`Unpack::run`] has copied it out. `None` for any other path.
    pub fn carried_bytes(&self, path: &Path) -> Option<SharedBytes> {
        let &(at, size) = self.carried.get(path)?;
        let archive = self.archive.as_ref()?;
        let part = archive.get(usize::try_from(at).ok()?..)?;
        archive.share(part.get(..usize::try_from(size).ok()?)?)
    }

    /// Every file this snapshot carries, by its path in the build-id
    /// directory.
    pub fn carried_files(&self) -> impl Iterator<Item = &Path> + '_ {
        self.carried.keys().map(PathBuf::as_path)
    }

    /// Finds a mapped binary: in the snapshot (whether or not it is
    /// unpacked yet), then in `~/.debug` by build id, then at its recorded
    /// path.
    pub fn find_binary(&self, build_id: Option<&[u8]>, path: &str) -> Option<PathBuf> {
        let vdso = path == "[vdso]";
        if let Some(id) = build_id {
            let rel = buildid::cache_path(id, vdso);
            if let Some(dir) = self.buildid_dir() {
                let p = dir.join(&rel);
                if self.carried.contains_key(&p) {
                    return Some(p);
                }
            }
            if let Some(home) = std::env::var_os("HOME") {
                let p = Path::new(&home).join(".debug").join(&rel);
                if p.is_file() {
                    return Some(p);
                }
            }
        }
        let p = Path::new(path);
        if vdso || !p.is_absolute() || !p.is_file() {
            return None;
        }
        // Another build at the same path is another binary: its code is not
        // what ran.
        if let Some(id) = build_id {
            let data = std::fs::read(p).ok()?;
            let local = buildid::id_of(&data);
            if local != id {
                return None;
            }
        }
        Some(p.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_are_checked() {
        assert!(safe_member(Path::new(".build-id/ab/cd/elf")));
        assert!(!safe_member(Path::new("../etc/passwd")));
        assert!(!safe_member(Path::new("/etc/passwd")));
        assert!(!safe_member(Path::new(".build-id/../../x")));
    }

    #[test]
    fn rejects_empty_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.ptscope");
        std::fs::write(&empty, b"").unwrap();
        let e = Snapshot::open(&empty).unwrap_err().to_string();
        assert!(e.contains("empty.ptscope") && e.contains("empty"), "{e}");
        let junk = dir.path().join("junk.ptscope");
        std::fs::write(&junk, vec![0x5a; 3000]).unwrap();
        let e = Snapshot::open(&junk).unwrap_err().to_string();
        assert!(e.contains("junk.ptscope"), "{e}");
        let e = Snapshot::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("directory"), "{e}");
    }

    /// A snapshot opened with its unpack left for later has its carried
    /// files once the unpack runs, each as the archive holds it, and an
    /// unpack run late leaves nothing behind; a member the archive ends
    /// before is an error at the open, naming it.
    #[test]
    fn carried_files_are_there_once_unpacked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.ptscope");
        let elf = crate::buildid::cache_path(&[0xab, 0xcd], false);
        let debug = crate::buildid::debug_cache_path(&[0xab, 0xcd]);
        let members = [
            (elf.clone(), &b"the binary"[..]),
            (debug.clone(), &[7u8; 5000][..]),
        ];
        write_archive(&path, b"not a trace", &members, &Metadata::default()).unwrap();
        let (snap, unpack) = Snapshot::open_unpacking_later(&path).unwrap();
        let root = snap.buildid_dir().unwrap().to_path_buf();
        assert!(!root.join(&elf).exists());
        // Known, and read in the archive, before they are unpacked.
        let carried: Vec<PathBuf> = snap.carried_files().map(Path::to_path_buf).collect();
        assert_eq!(carried, [root.join(&debug), root.join(&elf)]);
        for (name, data) in &members {
            let at = root.join(name);
            assert_eq!(snap.carried_len(&at), Some(data.len() as u64));
            assert_eq!(&snap.carried_bytes(&at).unwrap()[..], *data);
        }
        assert_eq!(snap.carried_len(&root.join("perf.data")), None);
        assert!(snap.carried_bytes(Path::new("/etc/passwd")).is_none());
        assert_eq!(
            snap.find_binary(Some(&[0xab, 0xcd]), "/usr/bin/x"),
            Some(root.join(&elf))
        );
        unpack.run().unwrap();
        for (name, data) in members {
            assert_eq!(std::fs::read(root.join(name)).unwrap(), data);
        }
        assert_eq!(&snap.perf_data[..], b"not a trace");
        drop(snap);
        assert!(
            !root.exists(),
            "the build-id directory outlives its snapshot"
        );

        // An unpack run after its snapshot is gone writes into the
        // directory the snapshot had, which goes with the unpack.
        let (snap, unpack) = Snapshot::open_unpacking_later(&path).unwrap();
        let root = snap.buildid_dir().unwrap().to_path_buf();
        drop(snap);
        assert!(root.exists());
        unpack.run().unwrap();
        assert!(!root.exists(), "a late unpack left its files behind");

        // Cut inside the second member's bytes.
        let bytes = std::fs::read(&path).unwrap();
        let at = bytes.windows(4).position(|w| w == [7; 4]).unwrap();
        let cut = dir.path().join("cut.ptscope");
        std::fs::write(&cut, &bytes[..at + 100]).unwrap();
        let e = Snapshot::open_unpacking_later(&cut)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cut.ptscope") && e.contains("truncated"), "{e}");
    }

    /// A name the archive holds twice (no writer of ours makes one; a
    /// hand-made archive can) unpacks to its last member, as copying in
    /// archive order would, whichever thread copies what.
    #[test]
    fn a_member_the_archive_holds_twice_is_its_last() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("twice.ptscope");
        let elf = crate::buildid::cache_path(&[0xab, 0xcd], false);
        let other = crate::buildid::cache_path(&[0xef, 0x01], false);
        let json = serde_json::to_vec(&Metadata::default()).unwrap();
        {
            let file = std::fs::File::create(&path).unwrap();
            let mut tar = tar::Builder::new(file);
            let mut add = |name: &str, data: &[u8]| {
                let mut header = tar::Header::new_gnu();
                header.set_size(data.len() as u64);
                header.set_mode(0o644);
                header.set_entry_type(tar::EntryType::Regular);
                tar.append_data(&mut header, name, data).unwrap();
            };
            add("perf.data", b"not a trace");
            add(&elf, &[1u8; 50_000]);
            add(&other, &[2u8; 30_000]);
            add(&elf, b"the last one");
            add(metadata::FILE_NAME, &json);
            tar.into_inner().unwrap();
        }
        let snap = Snapshot::open(&path).unwrap();
        let root = snap.buildid_dir().unwrap();
        assert_eq!(std::fs::read(root.join(&elf)).unwrap(), b"the last one");
        assert_eq!(
            &snap.carried_bytes(&root.join(&elf)).unwrap()[..],
            b"the last one"
        );
        assert_eq!(std::fs::read(root.join(&other)).unwrap(), [2u8; 30_000]);
    }
}
