//! The bundled demo snapshot, built into the binary so that an installed
//! `ptscope` opens it with no source tree around.
//!
//! The snapshot is a file like any other to the rest of the app (it is
//! decoded from a path, mapped, and its Source pane looks for `demo.c`
//! beside it), so the first use writes it and its source to the user's
//! cache directory. The directory's name carries the snapshot's size and a
//! hash of its bytes: a binary with another demo never reads a stale copy.
//! The QEMU plugin ([`crate::qemu_plugin`]) is unpacked the same way.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The snapshot: `assets/demo/demo.ptscope`.
pub const SNAPSHOT: &[u8] = include_bytes!("../../assets/demo/demo.ptscope");
/// Its program's source, for the Source pane: `assets/demo/demo.c`.
pub const SOURCE: &[u8] = include_bytes!("../../assets/demo/demo.c");

/// The file name the demo opens under, which the window's title shows.
pub const FILE_NAME: &str = "demo.ptscope";

/// FNV-1a over `data`: a fingerprint of the embedded snapshot, not a
/// security measure.
pub(crate) fn fingerprint(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Where the demo is unpacked: `$XDG_CACHE_HOME/ptscope`, else
/// `~/.cache/ptscope`, else the temporary directory.
pub(crate) fn cache_root() -> PathBuf {
    let xdg = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty());
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty());
    match (xdg, home) {
        (Some(x), _) => PathBuf::from(x),
        (None, Some(h)) => Path::new(&h).join(".cache"),
        (None, None) => std::env::temp_dir(),
    }
    .join("ptscope")
}

/// Writes `data` to `path` unless it already holds exactly that: through a
/// temporary file renamed into place, so a reader never sees half a file.
pub(crate) fn write_once(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|have| have == data) {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// The demo snapshot's path, unpacked into the cache on first use.
pub fn path() -> Result<PathBuf> {
    path_in(&cache_root())
}

/// [`path`] under `root`; the temporary directory is the fallback when
/// `root` cannot be written (a read-only home).
fn path_in(root: &Path) -> Result<PathBuf> {
    let name = format!("demo-{}-{:016x}", SNAPSHOT.len(), fingerprint(SNAPSHOT));
    let unpack = |dir: PathBuf| -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&dir)?;
        write_once(&dir.join("demo.c"), SOURCE)?;
        let snap = dir.join(FILE_NAME);
        write_once(&snap, SNAPSHOT)?;
        Ok(snap)
    };
    unpack(root.join(&name))
        .or_else(|_| unpack(std::env::temp_dir().join("ptscope").join(&name)))
        .with_context(|| format!("cannot unpack the bundled demo under {}", root.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_unpacks_once_and_is_the_bundled_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let snap = path_in(dir.path()).unwrap();
        assert_eq!(snap.file_name().unwrap(), FILE_NAME);
        assert_eq!(std::fs::read(&snap).unwrap(), SNAPSHOT);
        assert_eq!(
            std::fs::read(snap.with_file_name("demo.c")).unwrap(),
            SOURCE
        );
        // A damaged copy is replaced; an intact one is left alone.
        std::fs::write(&snap, b"damaged").unwrap();
        let again = path_in(dir.path()).unwrap();
        assert_eq!(again, snap);
        assert_eq!(std::fs::read(&again).unwrap(), SNAPSHOT);
        assert!(ptscope_formats::Snapshot::open(&again).is_ok());
    }
}
