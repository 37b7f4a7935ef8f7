//! The Intel PT packet format, read and written side by side as object
//! keeps `read/elf` and `write/elf`: [`read`] parses packets (bounds-checked,
//! never past the buffer), [`write`](mod@write) encodes them, and [`errata`] says
//! which CPUs write which packets wrong. The decoder reads traces with the
//! first; the emulated unit, the QEMU plugin and the tests write them with
//! the second, and the tests hold each to the other.

pub mod errata;
pub mod read;
pub mod write;
