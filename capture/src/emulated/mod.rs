//! The emulated Intel PT backend.

pub mod hardware;
pub mod insn;
pub mod packets;
// The ptrace FFI: each unsafe block says why it is sound.
#[allow(unsafe_code)]
pub mod ptrace;
pub mod ring;
pub mod settings;
pub mod snapshot;
pub mod tracer;
