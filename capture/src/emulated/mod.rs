//! The emulated Intel PT backend.

pub mod hardware;
pub mod insn;
pub mod packets;
pub mod ring;
