//! How the process's allocator hands out large blocks: the one setting
//! ptscope makes of glibc's malloc, at start-up, before any thread runs.
//! The module is FFI (`mallopt`, and `mallinfo2` in its test), the one
//! `unsafe` of the application.
//!
//! A decode's memory is a few large buffers grown as it goes (a thread's
//! spans by depth, a chunk's events), beside many small ones. glibc serves
//! a block from its heap unless it is larger than a threshold that it
//! raises each time a mapped block is freed, up to 32 MiB. Blocks that
//! were once mapped then come from the heap, where a buffer that grows
//! leaves its old block as a hole that stays resident and cannot be
//! returned to the system while smaller blocks live above it. Measured on
//! 16 MiB of the qsort loop, one core: the decode's peak was 78 MB with
//! the moving threshold and 65 MB with it fixed at 1 MiB, as fast (see
//! BENCHMARKS.md). A fixed threshold maps every block of 1 MiB or more on
//! its own: growing one moves no bytes (the kernel remaps its pages), and
//! freeing one gives its memory back at once.

/// Blocks of this many bytes or more are mapped on their own. Small
/// enough for a decode's growing buffers; large enough that a frame of
/// the window, which frees and allocates its meshes each time, rarely maps
/// anything.
const MAP_FROM: usize = 1 << 20;

/// Fixes glibc's threshold for mapping a block at 1 MiB. Call it
/// first in `main` (and in a benchmark that measures a decode as the app
/// runs it). Elsewhere than glibc it does nothing.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` takes two integers and only sets a parameter
        // of the allocator; glibc serialises it with its own lock. A
        // threshold of 1 MiB is within the range it accepts (up to 32 MiB
        // on 64-bit), so it cannot fail; a 0 return would only leave the
        // default in place.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MAP_FROM as libc::c_int);
        }
    }
}

/// Bytes of the blocks glibc has mapped on their own, process-wide.
#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
fn mapped_bytes() -> usize {
    // SAFETY: `mallinfo2` takes nothing and returns a struct of counters
    // by value, read under glibc's own arena locks.
    unsafe { libc::mallinfo2() }.hblkhd
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use std::process::Command;

    /// Set in the process the test runs its check in.
    const ALONE: &str = "PTSCOPE_ALLOCATOR_TEST_ALONE";
    const NAME: &str =
        "allocator::tests::a_large_block_is_mapped_on_its_own_and_returned_when_freed";

    /// After [`tune`](super::tune), a block of the threshold's size is
    /// mapped on its own, and unmapped when freed: glibc's count of mapped
    /// bytes grows by it and shrinks back. Without the call, glibc's
    /// threshold (128 KiB at start, but raised by every mapped block
    /// freed) decides. That count is the process's, which other tests
    /// move from their threads (and `/proc/self/maps`, which an earlier
    /// version read, merges neighbouring maps), so the check runs in a
    /// process of its own: this test binary, run again for it alone.
    #[test]
    fn a_large_block_is_mapped_on_its_own_and_returned_when_freed() {
        if std::env::var_os(ALONE).is_some() {
            check();
            return;
        }
        let out = Command::new(std::env::current_exe().unwrap())
            .args([NAME, "--exact", "--test-threads=1", "--nocapture"])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "the check failed:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("1 passed"),
            "the check did not run:\n{stdout}"
        );
    }

    fn check() {
        super::tune();
        // Raise glibc's moving threshold as a decode does: free a large
        // mapped block. Untuned, the next blocks below 8 MiB would come
        // from the heap.
        drop(std::hint::black_box(vec![1u8; 8 << 20]));
        let size = 2 << 20;
        let before = super::mapped_bytes();
        let block = std::hint::black_box(vec![1u8; size]);
        let held = super::mapped_bytes();
        assert!(
            held >= before + size,
            "a {size}-byte block is not a mapping of its own: {before} -> {held} bytes mapped"
        );
        drop(block);
        let after = super::mapped_bytes();
        assert!(
            after + size <= held,
            "a freed {size}-byte block is still mapped: {held} -> {after} bytes mapped"
        );
    }
}
