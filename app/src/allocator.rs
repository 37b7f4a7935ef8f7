//! How the process asks glibc's allocator for memory, through its FFI.
//!
//! A decode grows the store's lanes by doubling, to hundreds of megabytes.
//! glibc serves a block below its mmap threshold from its heap, and it
//! raises that threshold by itself (up to 32 MiB) each time a mapped block
//! is freed: so lanes soon grow on the heap, where growing one copies it
//! and leaves its old place a hole that the next, larger block does not
//! fit. A fixed threshold maps every large block on its own instead:
//! growing one remaps its pages without a copy, and freeing it gives them
//! back. On the benchmark's 16 MiB qsort trace, a decode's peak memory
//! fell from 42 to 36 bytes a span (BENCHMARKS.md).

/// Blocks from this size up are mapped on their own.
const MMAP_THRESHOLD: libc::c_int = 256 << 10;

/// Sets the allocator up for decoding; true if glibc took it. Call it
/// first thing in `main`, before any other thread runs.
pub fn tune() -> bool {
    // SAFETY: `mallopt` only sets a parameter of glibc's allocator, and
    // any threshold is valid; it is called before other threads allocate.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 }
}

#[cfg(test)]
mod tests {
    /// Bytes in blocks glibc mapped on their own.
    fn mapped() -> usize {
        // SAFETY: `mallinfo2` only reads the allocator's counters.
        unsafe { libc::mallinfo2() }.hblkhd
    }

    /// Once a large block is freed, glibc on its own would serve the next
    /// one from its heap; with the threshold set, it maps it on its own.
    #[test]
    fn a_large_block_is_mapped_on_its_own_after_one_is_freed() {
        assert!(super::tune());
        drop(std::hint::black_box(vec![1u8; 96 << 20]));
        let before = mapped();
        let block = std::hint::black_box(vec![1u8; 64 << 20]);
        let during = mapped();
        assert!(
            during >= before + (48 << 20),
            "{before} -> {during} bytes mapped"
        );
        drop(block);
    }
}
