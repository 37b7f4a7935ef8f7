//! The emulated Intel PT backend.

pub mod hardware;
pub mod insn;
pub mod packets;
#[allow(unsafe_code)] // SAFETY comments on each block.
pub mod ptrace;
pub mod ring;
pub mod settings;
pub mod snapshot;
pub mod tracer;
