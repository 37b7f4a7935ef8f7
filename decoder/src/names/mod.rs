//! Names: which function an address is in, and where the files that say
//! so are found.
//!
//! - [`image`]: the process image from MMAP2 sideband and the bundled
//!   binaries;
//! - [`symbols`]: ELF, PLT and DWARF symbols, and the kernel's;
//! - [`resolve`]: addresses to functions, per process;
//! - [`lookup`] (its items are here too): where a stripped binary's separate
//!   debug file, and a binary not at its path, are looked for: in the
//!   snapshot, then wherever the caller's [`FileLookup`] says.

pub(crate) mod image;
pub(crate) mod lookup;
pub(crate) mod resolve;
pub(crate) mod symbols;

pub use lookup::*;
