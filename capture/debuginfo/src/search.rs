//! The order in which debug files and binaries are looked for, and what a
//! look found. Every candidate is checked before it is taken: a file found
//! by build id is named by it, a debuglink's by its CRC, a binary by its
//! build id where the trace recorded one.

use std::path::{Path, PathBuf};

use ptscope_formats::buildid;
use ptscope_formats::{DebugFile, FileLookup};

use crate::debuginfod;
use crate::debuglink;

/// Where a debug file came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A build-id cache carried with the snapshot.
    Snapshot,
    /// A debug directory's `.build-id/` tree (the directory).
    BuildIdDir(PathBuf),
    /// The binary's `.gnu_debuglink`, its CRC matching.
    Debuglink,
    /// perf's build-id cache (`~/.debug`).
    PerfCache,
    /// A debuginfod server (its URL), or its client cache.
    Debuginfod(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Snapshot => write!(f, "the snapshot"),
            Origin::BuildIdDir(d) => write!(f, "{}/.build-id", d.display()),
            Origin::Debuglink => write!(f, ".gnu_debuglink"),
            Origin::PerfCache => write!(f, "perf's build-id cache"),
            Origin::Debuginfod(url) => write!(f, "debuginfod {url}"),
        }
    }
}

/// A debug file found for a binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub origin: Origin,
}

/// Where to look. [`Search::system`] is what perf and gdb look in on this
/// machine; tests and the user's flags change the lists.
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// Build-id caches a snapshot carries, in perf's layout
    /// (`.build-id/xx/yyyy…/debug`), searched first.
    pub carried: Vec<PathBuf>,
    /// Debug directories: `/usr/lib/debug`, then the user's `--debug-dir`s.
    pub debug_dirs: Vec<PathBuf>,
    /// perf's build-id cache root (`~/.debug`).
    pub perf_cache: Option<PathBuf>,
    /// Directories the user gave for binaries not at their paths
    /// (`--binaries`).
    pub binary_dirs: Vec<PathBuf>,
    /// The debuginfod servers, from `DEBUGINFOD_URLS`.
    pub debuginfod: Option<debuginfod::Client>,
}

/// The standard debug directory, where distributions install their
/// `-dbg`/`-dbgsym` packages.
pub(crate) const SYSTEM_DEBUG_DIR: &str = "/usr/lib/debug";

impl Search {
    /// The places the ecosystem's tools look on this machine: the system
    /// debug directory, perf's build-id cache in `$HOME`, and the
    /// debuginfod servers `DEBUGINFOD_URLS` names.
    pub fn system() -> Search {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Search {
            carried: Vec::new(),
            debug_dirs: vec![PathBuf::from(SYSTEM_DEBUG_DIR)],
            perf_cache: home.map(|h| h.join(".debug")),
            binary_dirs: Vec::new(),
            debuginfod: debuginfod::Client::from_env(),
        }
    }

    /// The debug file of the binary read from `binary`, which the trace
    /// mapped as `mapped_path` with `build_id`. `None` when none is found
    /// or the binary needs none is the caller's to decide; what went wrong
    /// on the way (a debuginfod server down) is added to `notes`.
    pub fn debug_file(
        &self,
        binary: &Path,
        mapped_path: &str,
        build_id: Option<&[u8]>,
        notes: &mut Vec<String>,
    ) -> Option<Found> {
        let link = || debuglink::read_file(binary);
        self.debug_file_linked(link, mapped_path, build_id, notes)
    }

    /// [`Search::debug_file`], the binary's debuglink read by `link` if
    /// the search comes to it.
    fn debug_file_linked(
        &self,
        link: impl FnOnce() -> Option<debuglink::Debuglink>,
        mapped_path: &str,
        build_id: Option<&[u8]>,
        notes: &mut Vec<String>,
    ) -> Option<Found> {
        let found = |path: PathBuf, origin: Origin| Some(Found { path, origin });
        if let Some(id) = build_id.filter(|id| !id.is_empty()) {
            for root in &self.carried {
                if let Some(p) = buildid::cached_debug_file(root, id) {
                    return found(p, Origin::Snapshot);
                }
            }
            let by_id = buildid::debug_dir_path(id);
            for dir in &self.debug_dirs {
                let p = dir.join(&by_id);
                if p.is_file() {
                    return found(p, Origin::BuildIdDir(dir.clone()));
                }
            }
        }
        if let Some(p) = link().and_then(|link| self.by_debuglink(&link, mapped_path)) {
            return found(p, Origin::Debuglink);
        }
        if let Some(id) = build_id.filter(|id| !id.is_empty()) {
            if let Some(p) =
                (self.perf_cache.as_deref()).and_then(|root| buildid::cached_debug_file(root, id))
            {
                return found(p, Origin::PerfCache);
            }
            if let Some(client) = &self.debuginfod {
                match client.debuginfo(id) {
                    Ok(fetched) => return found(fetched.path, Origin::Debuginfod(fetched.source)),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => notes.push(format!("{mapped_path}: {e}")),
                }
            }
        }
        None
    }

    /// The debuglink's file, where gdb looks for it: beside the binary, in
    /// its `.debug/`, and under each debug directory at the binary's path;
    /// only a file whose CRC is the one the link records.
    fn by_debuglink(&self, link: &debuglink::Debuglink, mapped_path: &str) -> Option<PathBuf> {
        let dir = Path::new(mapped_path).parent()?;
        let mut candidates = vec![dir.join(&link.name), dir.join(".debug").join(&link.name)];
        let relative = dir.strip_prefix("/").unwrap_or(dir);
        for root in &self.debug_dirs {
            candidates.push(root.join(relative).join(&link.name));
        }
        candidates.into_iter().find(|p| {
            // The binary itself may carry its own name as the link.
            p.is_file()
                && p.as_path() != Path::new(mapped_path)
                && debuglink::file_crc(p).is_ok_and(|crc| crc == link.crc)
        })
    }

    /// A binary the trace mapped at `mapped_path` that is not there (or is
    /// another build there), from the user's `--binaries` directories: by
    /// build id (`.build-id/xx/yyyy…/elf` or `.build-id/xx/yyyy`), then by
    /// name, the file's own or under the directory as under a sysroot, or
    /// anywhere a few levels below it. With a build id, only a file with
    /// that id is taken. Last, with a build id, the debuginfod servers'
    /// `executable`; what went wrong there is dropped (see
    /// [`Search::binary_noting`]).
    pub fn binary(&self, build_id: Option<&[u8]>, mapped_path: &str) -> Option<PathBuf> {
        self.binary_noting(build_id, mapped_path, &mut Vec::new())
    }

    /// [`Search::binary`], adding to `notes` what went wrong asking
    /// debuginfod (a server down), as [`Search::debug_file`] does.
    pub fn binary_noting(
        &self,
        build_id: Option<&[u8]>,
        mapped_path: &str,
        notes: &mut Vec<String>,
    ) -> Option<PathBuf> {
        if let Some(p) = self.binary_in_dirs(build_id, mapped_path) {
            return Some(p);
        }
        let id = build_id.filter(|id| !id.is_empty())?;
        match self.debuginfod.as_ref()?.executable(id) {
            Ok(fetched) => Some(fetched.path),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                notes.push(format!("{mapped_path}: {e}"));
                None
            }
        }
    }

    /// The `--binaries` part of [`Search::binary`]. The vdso is found there
    /// only by build id, in perf's cache layout (as `perf archive` packs
    /// it): its name says nothing.
    fn binary_in_dirs(&self, build_id: Option<&[u8]>, mapped_path: &str) -> Option<PathBuf> {
        let id = build_id.filter(|id| !id.is_empty());
        if mapped_path == "[vdso]" {
            let rel = buildid::cache_path(id?, true);
            return self
                .binary_dirs
                .iter()
                .map(|d| d.join(&rel))
                .find(|p| p.is_file());
        }
        let matches = |p: &Path| {
            p.is_file()
                && match id {
                    Some(id) => std::fs::read(p).is_ok_and(|data| buildid::id_of(&data) == id),
                    None => true,
                }
        };
        let name = Path::new(mapped_path).file_name()?;
        let relative = Path::new(mapped_path).strip_prefix("/").ok();
        for dir in &self.binary_dirs {
            let mut candidates = Vec::new();
            if let Some(id) = id {
                candidates.push(dir.join(buildid::cache_path(id, false)));
                candidates
                    .push(dir.join(Path::new(&buildid::debug_dir_path(id)).with_extension("")));
            }
            candidates.push(dir.join(name));
            if let Some(rel) = relative {
                candidates.push(dir.join(rel));
            }
            if let Some(p) = candidates.into_iter().find(|p| matches(p)) {
                return Some(p);
            }
            if let Some(p) = find_below(dir, name, 4, &matches) {
                return Some(p);
            }
        }
        None
    }
}

/// The decoder's caller passes a `Search` as where to look.
impl FileLookup for Search {
    fn debug_file(
        &self,
        binary: &[u8],
        mapped_path: &str,
        build_id: Option<&[u8]>,
        notes: &mut Vec<String>,
    ) -> Option<DebugFile> {
        let link = || debuglink::read(binary);
        self.debug_file_linked(link, mapped_path, build_id, notes)
            .map(|f| DebugFile {
                path: f.path,
                origin: f.origin.to_string(),
            })
    }

    fn binary(
        &self,
        build_id: Option<&[u8]>,
        mapped_path: &str,
        notes: &mut Vec<String>,
    ) -> Option<PathBuf> {
        self.binary_noting(build_id, mapped_path, notes)
    }

    fn key(&self) -> String {
        // Every place looked in, the servers by URL: what the client's
        // cache holds is theirs.
        format!(
            "carried {:?}, debug dirs {:?}, perf cache {:?}, binaries {:?}, debuginfod {:?}",
            self.carried,
            self.debug_dirs,
            self.perf_cache,
            self.binary_dirs,
            self.debuginfod.as_ref().map(|c| c.urls())
        )
    }
}

/// A file named `name` at most `depth` directories below `dir` that
/// `matches`, in a stable (sorted) order; symbolic links to directories
/// are not followed, so a loop cannot trap the walk.
fn find_below(
    dir: &Path,
    name: &std::ffi::OsStr,
    depth: u32,
    matches: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in &entries {
        let p = e.path();
        if e.file_name() == name && matches(&p) {
            return Some(p);
        }
    }
    if depth == 0 {
        return None;
    }
    entries
        .iter()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| find_below(&e.path(), name, depth - 1, matches))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of this test binary (it has a build id) in `dir`.
    fn binary_in(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let id = buildid::elf_build_id(&data).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, &data).unwrap();
        (p, id)
    }

    fn local(root: &Path) -> Search {
        Search {
            debug_dirs: vec![root.join("usr/lib/debug")],
            perf_cache: Some(root.join("home/.debug")),
            ..Search::default()
        }
    }

    #[test]
    fn finds_by_build_id_in_the_order_the_tools_do() {
        let t = tempfile::tempdir().unwrap();
        let (bin, id) = binary_in(&t.path().join("usr/bin"), "app");
        let s = Search {
            carried: vec![t.path().join("snap")],
            ..local(t.path())
        };
        let mut notes = Vec::new();
        let look = |s: &Search, notes: &mut Vec<String>| {
            s.debug_file(&bin, "/usr/bin/app", Some(&id), notes)
                .map(|f| f.origin)
        };
        assert_eq!(look(&s, &mut notes), None);
        let put = |p: PathBuf| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"debug").unwrap();
        };
        put(t
            .path()
            .join("home/.debug")
            .join(buildid::debug_cache_path(&id)));
        assert_eq!(look(&s, &mut notes), Some(Origin::PerfCache));
        let dir = t.path().join("usr/lib/debug");
        put(dir.join(buildid::debug_dir_path(&id)));
        assert_eq!(look(&s, &mut notes), Some(Origin::BuildIdDir(dir)));
        put(t.path().join("snap").join(buildid::debug_cache_path(&id)));
        assert_eq!(look(&s, &mut notes), Some(Origin::Snapshot));
        assert!(notes.is_empty());
    }

    #[test]
    fn binaries_are_found_by_build_id_and_by_name_but_never_another_build() {
        let t = tempfile::tempdir().unwrap();
        let (_, id) = binary_in(&t.path().join("bins/deep/er"), "libx.so");
        let s = Search {
            binary_dirs: vec![t.path().join("bins")],
            ..Search::default()
        };
        let got = s.binary(Some(&id), "/usr/lib/libx.so").unwrap();
        assert!(got.ends_with("deep/er/libx.so"), "{got:?}");
        // Another build of the same name is not it.
        assert_eq!(s.binary(Some(&[1, 2, 3]), "/usr/lib/libx.so"), None);
        // Without a build id, the name decides.
        assert!(s.binary(None, "/opt/libx.so").is_some());
        // By build id, whatever the name.
        let cached = t.path().join("bins").join(buildid::cache_path(&id, false));
        std::fs::create_dir_all(cached.parent().unwrap()).unwrap();
        std::fs::copy("/proc/self/exe", &cached).unwrap();
        assert_eq!(s.binary(Some(&id), "/usr/lib/renamed.so"), Some(cached));
    }
}
