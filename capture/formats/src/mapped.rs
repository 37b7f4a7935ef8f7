//! File bytes read in place: a `.ptscope` snapshot's perf.data is mapped
//! rather than read, so that opening a gigabyte of trace costs the pages
//! the decoder touches, not a copy of them all first. This is the crate's
//! one module allowed `unsafe`, for the map.

use std::fs::File;
use std::io;
use std::sync::Arc;

/// Bytes of a file: read into memory, or mapped from it.
#[derive(Clone)]
pub enum FileBytes {
    /// Shared, so that a part of them can outlive a borrow
    /// ([`FileBytes::share`]) without a copy.
    Read(Arc<Vec<u8>>),
    Mapped {
        map: Arc<memmap2::Mmap>,
        start: usize,
        len: usize,
    },
}

impl FileBytes {
    /// `len` bytes of `file` from `start`, mapped; an error if the file is
    /// shorter than that.
    pub fn map(file: &File, start: u64, len: u64) -> io::Result<FileBytes> {
        let short = || io::Error::new(io::ErrorKind::UnexpectedEof, "the file ends early");
        let end = start.checked_add(len).ok_or_else(short)?;
        if len == 0 {
            return Ok(FileBytes::Read(Arc::new(Vec::new())));
        }
        if file.metadata()?.len() < end {
            return Err(short());
        }
        // SAFETY: a private read-only map of a `.ptscope` snapshot the user
        // opened. ptscope writes snapshots to a temporary file renamed into
        // place, so the bytes under a map do not change while it lives;
        // every read through it is bounds-checked (`Deref` gives a slice
        // of the map's length). A snapshot truncated in place by another
        // program while it is open would fault: plain perf.data files,
        // which tools do overwrite in place, are read instead.
        let map = unsafe { memmap2::Mmap::map(file)? };
        let (start, len) = (usize::try_from(start).map_err(|_| short())?, len as usize);
        if map.len() < start + len {
            return Err(short());
        }
        Ok(FileBytes::Mapped {
            map: Arc::new(map),
            start,
            len,
        })
    }
}

impl FileBytes {
    /// `part` of these bytes, held by what holds them (the map, or the
    /// bytes read), not copied; `None` if `part` does not lie within them.
    /// What a decode hands to a pass that outlives its borrow of the file,
    /// as the line zoom does the trace: a gigabyte of it is not copied.
    pub fn share(&self, part: &[u8]) -> Option<SharedBytes> {
        let whole: &[u8] = self;
        // Where `part` starts, as addresses: no pointer is made from them.
        let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
        if start.checked_add(part.len())? > whole.len() {
            return None;
        }
        Some(SharedBytes {
            bytes: self.clone(),
            start,
            len: part.len(),
        })
    }
}

/// A part of a file's bytes that shares them ([`FileBytes::share`]), or
/// bytes of its own.
#[derive(Clone)]
pub struct SharedBytes {
    /// A handle on the whole (a clone shares the map or the bytes read).
    bytes: FileBytes,
    start: usize,
    len: usize,
}

impl From<Vec<u8>> for SharedBytes {
    fn from(v: Vec<u8>) -> Self {
        SharedBytes {
            start: 0,
            len: v.len(),
            bytes: FileBytes::from(v),
        }
    }
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len)
    }
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Read(v) => v,
            FileBytes::Mapped { map, start, len } => &map[*start..*start + *len],
        }
    }
}

impl AsRef<[u8]> for FileBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Vec<u8>> for FileBytes {
    fn from(v: Vec<u8>) -> Self {
        FileBytes::Read(Arc::new(v))
    }
}

impl PartialEq for FileBytes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for FileBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self {
            FileBytes::Read(_) => "read",
            FileBytes::Mapped { .. } => "mapped",
        };
        write!(f, "FileBytes({} bytes, {how})", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_range_of_a_file_reads_as_its_bytes_and_a_short_file_is_an_error() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        assert_eq!(&*FileBytes::map(&f, 2, 5).unwrap(), b"23456");
        assert_eq!(&*FileBytes::map(&f, 10, 0).unwrap(), b"");
        assert!(FileBytes::map(&f, 8, 5).is_err());
        assert!(FileBytes::map(&f, u64::MAX, 2).is_err());
    }

    /// A part of the bytes, mapped or read, is shared as those bytes; a
    /// slice from elsewhere, or reaching past them, is not theirs.
    #[test]
    fn a_part_is_shared_and_a_slice_from_elsewhere_is_not() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let mapped = FileBytes::map(&f, 2, 6).unwrap();
        let read = FileBytes::from(b"234567".to_vec());
        for bytes in [&mapped, &read] {
            let shared = bytes.share(&bytes[1..4]).unwrap();
            assert_eq!(&*shared, b"345");
            assert_eq!(&*bytes.share(&bytes[6..]).unwrap(), b"");
            let other = b"345".to_vec();
            assert!(bytes.share(&other).is_none());
        }
        // A slice of the map beyond the bytes' range is not theirs.
        let FileBytes::Mapped { map, .. } = &mapped else {
            panic!("not mapped");
        };
        assert!(mapped.share(&map[7..10]).is_none());
        assert!(mapped.share(&map[0..3]).is_none());
        assert_eq!(&*SharedBytes::from(b"ab".to_vec()), b"ab");
    }
}
