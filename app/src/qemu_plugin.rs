//! The QEMU backend's plugin (`capture/qemu-plugin`), built by
//! `app/build.rs` and embedded in the binary, so that an installed
//! `ptscope` needs nothing beside it: the first capture under QEMU writes
//! it to the user's cache directory, under a name that carries its size
//! and a hash of its bytes, where QEMU loads it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::demo::{cache_root, fingerprint, write_once};

/// The plugin library.
pub const PLUGIN: &[u8] = include_bytes!(env!("PTSCOPE_QEMU_PLUGIN"));

/// The plugin's path, unpacked into the cache on first use.
pub fn path() -> Result<PathBuf> {
    path_in(&cache_root())
}

fn path_in(root: &Path) -> Result<PathBuf> {
    let name = format!(
        "qemu-plugin-{}-{:016x}.so",
        PLUGIN.len(),
        fingerprint(PLUGIN)
    );
    let unpack = |dir: PathBuf| -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&dir)?;
        let lib = dir.join(&name);
        write_once(&lib, PLUGIN)?;
        Ok(lib)
    };
    unpack(root.to_path_buf())
        .or_else(|_| unpack(std::env::temp_dir().join("ptscope")))
        .with_context(|| format!("cannot unpack the QEMU plugin under {}", root.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_unpacks_as_a_shared_library_qemu_can_load() {
        let dir = tempfile::tempdir().unwrap();
        let lib = path_in(dir.path()).unwrap();
        let bytes = std::fs::read(&lib).unwrap();
        assert_eq!(bytes, PLUGIN);
        // An ELF shared object (ET_DYN) exporting QEMU's entry points.
        assert_eq!(&bytes[..4], b"\x7fELF");
        assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 3);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("qemu_plugin_install") && text.contains("qemu_plugin_version"));
    }
}
