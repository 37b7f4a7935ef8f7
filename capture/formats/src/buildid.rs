//! Build ids: how perf names a binary independent of its path.

use std::path::{Path, PathBuf};

use object::Object;

/// The GNU build id of an ELF image, if it has one.
pub fn elf_build_id(data: &[u8]) -> Option<Vec<u8>> {
    let file = object::File::parse(data).ok()?;
    file.build_id().ok().flatten().map(|id| id.to_vec())
}

/// The id a file is known by: its GNU build id, else [`content_id`].
pub fn id_of(data: &[u8]) -> Vec<u8> {
    elf_build_id(data).unwrap_or_else(|| content_id(data))
}

/// A stand-in id for binaries built without one: 20 bytes derived from the
/// contents (FNV-1a over four lanes), stable across captures.
pub fn content_id(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    for lane in 0..3u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ lane.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for &b in data {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        out.extend_from_slice(&h.to_le_bytes());
    }
    out.truncate(20);
    out
}

pub fn to_hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The path of a binary in perf's build-id cache, relative to the cache
/// root: `.build-id/xx/yyyy…/elf` (or `/vdso` for the vdso).
pub fn cache_path(id: &[u8], vdso: bool) -> String {
    let hex = to_hex(id);
    let (head, tail) = hex.split_at(2.min(hex.len()));
    format!(
        ".build-id/{head}/{tail}/{}",
        if vdso { "vdso" } else { "elf" }
    )
}

/// The path of a debug file in perf's build-id cache (and in a
/// snapshot), relative to the cache root: `.build-id/xx/yyyy…/debug`.
pub fn debug_cache_path(id: &[u8]) -> String {
    let hex = to_hex(id);
    let (head, tail) = hex.split_at(2.min(hex.len()));
    format!(".build-id/{head}/{tail}/debug")
}

/// The debug file of build id `id` in the build-id cache at `root`
/// (perf's `~/.debug`, or one a snapshot carries), if it is there.
pub fn cached_debug_file(root: &Path, id: &[u8]) -> Option<PathBuf> {
    if id.is_empty() {
        return None;
    }
    let path = root.join(debug_cache_path(id));
    path.is_file().then_some(path)
}

/// The path of a debug file in a debug directory (`/usr/lib/debug`),
/// relative to it: `.build-id/xx/yyyy….debug`, as Debian's `-dbg` and
/// `-dbgsym` packages install it.
pub fn debug_dir_path(id: &[u8]) -> String {
    let hex = to_hex(id);
    let (head, tail) = hex.split_at(2.min(hex.len()));
    format!(".build-id/{head}/{tail}.debug")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_build_id_and_formats_paths() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        // Test binaries built by cargo on Linux carry a GNU build id.
        let id = elf_build_id(&exe).expect("build id");
        assert!(id.len() >= 8);
        assert_eq!(
            cache_path(&[0xab, 0xcd, 0xef], false),
            ".build-id/ab/cdef/elf"
        );
        assert_eq!(cache_path(&[0xab, 0xcd], true), ".build-id/ab/cd/vdso");
        assert_eq!(debug_cache_path(&[0xab, 0xcd]), ".build-id/ab/cd/debug");
        assert_eq!(
            debug_dir_path(&[0xab, 0xcd, 0xef]),
            ".build-id/ab/cdef.debug"
        );
        assert_ne!(content_id(b"a"), content_id(b"b"));
        assert_eq!(content_id(b"a").len(), 20);
    }
}
