//! The emulated Intel PT backend.

pub mod hardware;
pub mod insn;
pub mod packets;
pub mod ptrace;
pub mod ring;
pub mod settings;
pub mod snapshot;
pub mod tracer;
