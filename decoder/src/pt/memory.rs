//! A process's code as bytes at addresses, for our own flow decoder
//! ([`crate::pt::flow`]): the same sections libipt's image gets, mapped from
//! the snapshot's binaries once and shared between processes that map
//! them. This is one of the modules allowed `unsafe`: it maps binaries,
//! for the flow decoder and for the symbol tables ([`map_binary`]), and
//! model cache entries ([`map_entry`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ptscope_formats::FileError;

use crate::names::image::Section;

/// Shared, immutable file bytes: a read-only map of a file, or bytes in
/// memory.
pub(crate) type Bytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

pub(crate) use ptscope_model::{Aligned, Backing, SharedSlice};

/// File contents, mapped once per path.
#[derive(Default)]
pub struct FileCache {
    files: HashMap<PathBuf, Bytes>,
}

impl FileCache {
    /// The bytes of `path`. Mapped, not read: the decoder touches only the
    /// pages of code that ran.
    pub fn read(&mut self, path: &Path) -> std::io::Result<Bytes> {
        if let Some(b) = self.files.get(path) {
            return Ok(b.clone());
        }
        let file = std::fs::File::open(path)?;
        let bytes: Bytes = if file.metadata()?.len() == 0 {
            // An empty file cannot be mapped.
            Arc::new(Vec::<u8>::new())
        } else {
            Arc::new(map_binary(&file)?)
        };
        self.files.insert(path.to_path_buf(), bytes.clone());
        Ok(bytes)
    }
}

/// Maps `file`, a binary, read-only. It is the one place the decoder maps
/// a file: symbol tables and the model cache's entries read through it too.
pub(crate) fn map_binary(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: a private read-only map of a binary extracted from a snapshot
    // (or named by the user), or of a model cache entry (replaced by rename,
    // never rewritten in place), which nothing rewrites while we read it;
    // every read of it is bounds-checked.
    unsafe { memmap2::Mmap::map(file) }
}

/// Maps `file`, a model cache entry, read-only. Its pages come in as they
/// are read: a re-open checks a few lanes first to show them
/// ([`SharedSlice::populate`] then asks for the rest at once).
pub(crate) fn map_entry(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: as for `map_binary`: an entry is replaced by rename, never
    // rewritten in place, and every read of it is bounds-checked.
    unsafe { memmap2::Mmap::map(file) }
}

#[derive(Clone)]
struct Mapped {
    vaddr: u64,
    end: u64,
    file: Bytes,
    /// Offset of `vaddr` in `file`.
    offset: usize,
}

/// The code a process can run: mapped sections, later ones on top.
#[derive(Clone, Default)]
pub struct Memory {
    /// Sorted by address, without overlaps.
    maps: Vec<Mapped>,
}

impl Memory {
    /// The image of `sections`, each clipped to its file; where two
    /// overlap, the later one wins (a later mmap replaces the earlier).
    /// A file that cannot be read is an error that names it.
    pub fn new(sections: &[Section], files: &mut FileCache) -> Result<Memory, FileError> {
        let mut m = Memory::default();
        for s in sections {
            let file = files.read(&s.file).map_err(|e| FileError::io(&s.file, e))?;
            let Ok(offset) = usize::try_from(s.offset) else {
                continue;
            };
            m.map(s.vaddr, s.size, file, offset);
        }
        Ok(m)
    }

    /// Maps `len` bytes of `file` from `offset` at `vaddr`, over whatever
    /// was there.
    pub fn map(&mut self, vaddr: u64, len: u64, file: Bytes, offset: usize) {
        // Never trust a length: clip it to the file.
        let flen = (*file).as_ref().len();
        let len = len.min(flen.saturating_sub(offset) as u64);
        let end = vaddr.saturating_add(len);
        if len == 0 {
            return;
        }
        let mut kept = Vec::with_capacity(self.maps.len() + 2);
        for m in self.maps.drain(..) {
            if m.end <= vaddr || m.vaddr >= end {
                kept.push(m);
                continue;
            }
            if m.vaddr < vaddr {
                kept.push(Mapped {
                    end: vaddr,
                    ..m.clone()
                });
            }
            if m.end > end {
                kept.push(Mapped {
                    vaddr: end,
                    offset: m.offset + (end - m.vaddr) as usize,
                    ..m
                });
            }
        }
        kept.push(Mapped {
            vaddr,
            end,
            file,
            offset,
        });
        kept.sort_by_key(|m| m.vaddr);
        self.maps = kept;
    }

    /// The bytes from `addr` to the end of its section; `None` if nothing
    /// is mapped there.
    pub fn bytes_at(&self, addr: u64) -> Option<&[u8]> {
        let i = self.maps.partition_point(|m| m.vaddr <= addr);
        let m = self.maps.get(i.checked_sub(1)?)?;
        if addr >= m.end {
            return None;
        }
        let start = m.offset + (addr - m.vaddr) as usize;
        let end = m.offset + (m.end - m.vaddr) as usize;
        (*m.file).as_ref().get(start..end)
    }

    /// Copies the bytes from `addr` into `buf` across sections mapped back
    /// to back (an instruction may straddle two); how many were there.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(bytes) = addr.checked_add(n as u64).and_then(|a| self.bytes_at(a)) else {
                break;
            };
            let k = bytes.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&bytes[..k]);
            n += k;
        }
        n
    }

    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: u8, len: usize) -> Bytes {
        Arc::new(vec![n; len])
    }

    #[test]
    fn reads_to_the_end_of_the_section_and_nothing_outside() {
        let mut m = Memory::default();
        m.map(0x1000, 0x10, bytes(1, 0x20), 4);
        assert_eq!(m.bytes_at(0x1000).unwrap().len(), 0x10);
        assert_eq!(m.bytes_at(0x100f).unwrap().len(), 1);
        assert!(m.bytes_at(0x1010).is_none());
        assert!(m.bytes_at(0xfff).is_none());
    }

    #[test]
    fn a_later_mapping_replaces_the_middle_of_an_earlier_one() {
        let mut m = Memory::default();
        m.map(0x1000, 0x100, bytes(1, 0x100), 0);
        m.map(0x1040, 0x10, bytes(2, 0x10), 0);
        assert_eq!(m.bytes_at(0x1000).unwrap(), &[1u8; 0x40][..]);
        assert_eq!(m.bytes_at(0x1040).unwrap(), &[2u8; 0x10][..]);
        assert_eq!(m.bytes_at(0x1050).unwrap().len(), 0xb0);
        assert_eq!(m.bytes_at(0x1050).unwrap()[0], 1);
    }

    #[test]
    fn reads_across_sections_mapped_back_to_back_and_stops_at_a_gap() {
        let mut m = Memory::default();
        m.map(0x1000, 4, bytes(1, 4), 0);
        m.map(0x1004, 4, bytes(2, 4), 0);
        m.map(0x1010, 4, bytes(3, 4), 0);
        let mut buf = [0u8; 6];
        assert_eq!(m.read(0x1002, &mut buf), 6);
        assert_eq!(buf, [1, 1, 2, 2, 2, 2]);
        let mut buf = [0u8; 15];
        assert_eq!(m.read(0x1006, &mut buf), 2);
        assert_eq!(m.read(0x100c, &mut buf), 0);
    }

    #[test]
    fn a_length_past_the_file_is_never_read() {
        let mut m = Memory::default();
        // A corrupt section claims more than the file has.
        m.map(0x1000, 0x100, bytes(1, 0x10), 8);
        assert_eq!(m.bytes_at(0x1000).unwrap().len(), 8);
        assert!(m.bytes_at(0x1008).is_none());
        m.map(0x2000, 0x100, bytes(1, 0x10), 0x20);
        assert!(m.bytes_at(0x2000).is_none());
    }
}
