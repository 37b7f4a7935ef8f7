//! The bytes a span store can read its lanes from: a map of a model cache
//! entry, or aligned bytes in memory. The store reads spans in place, so
//! the bytes must be aligned for them, and shared, since the lanes of every
//! thread point into one entry.

use std::sync::Arc;

/// What a [`SharedSlice`] is a range of: a map of a file, or aligned
/// bytes in memory. An enum, not a shared `dyn AsRef<[u8]>`, so that reading through it
/// (per span, in the store) costs no call.
pub enum Backing {
    Map(memmap2::Mmap),
    Memory(Aligned),
}

impl Backing {
    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Memory(a) => a.as_ref(),
        }
    }
}

/// A range of [`Backing`] bytes, shared: what the lanes of a model read
/// back from the model cache point into, the entry's map kept alive by
/// them.
#[derive(Clone)]
pub struct SharedSlice {
    bytes: Arc<Backing>,
    range: std::ops::Range<usize>,
}

impl SharedSlice {
    /// Asks for every page of a mapped backing now, in one call, since all
    /// of it is about to be read: faulting them in one at a time costs
    /// more. Only advice: where the kernel cannot (before Linux 5.14), the
    /// pages still come in as they are read.
    pub fn populate(&self) {
        if let Backing::Map(m) = &*self.bytes {
            if m.advise(memmap2::Advice::PopulateRead).is_err() {
                let _ = m.advise(memmap2::Advice::WillNeed);
            }
        }
    }

    /// All of `bytes`.
    pub fn new(bytes: Backing) -> SharedSlice {
        let len = bytes.bytes().len();
        SharedSlice {
            bytes: Arc::new(bytes),
            range: 0..len,
        }
    }

    /// `len` bytes from `at` on, if they are there.
    pub fn slice(&self, at: u64, len: u64) -> Option<SharedSlice> {
        let at = usize::try_from(at).ok()?;
        let len = usize::try_from(len).ok()?;
        let start = self.range.start.checked_add(at)?;
        let end = start.checked_add(len)?;
        (end <= self.range.end).then(|| SharedSlice {
            bytes: self.bytes.clone(),
            range: start..end,
        })
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes.bytes()[self.range.clone()]
    }
}

impl std::fmt::Debug for SharedSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedSlice({:?})", self.range)
    }
}

/// Bytes in memory aligned for any plain value up to 16 bytes, as a map
/// is (to a page): a model cache entry that was not mapped, for tests.
pub struct Aligned {
    words: Vec<u128>,
    len: usize,
}

impl Aligned {
    pub fn copy_of(bytes: &[u8]) -> Aligned {
        let mut words = vec![0u128; bytes.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Aligned {
            words,
            len: bytes.len(),
        }
    }
}

impl AsRef<[u8]> for Aligned {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        &bytemuck::cast_slice::<u128, u8>(&self.words)[..self.len]
    }
}
