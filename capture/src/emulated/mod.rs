//! The emulated backend captures a process on a machine without Intel PT: it
//! single-steps every thread with ptrace and writes the packets a PT unit
//! would have written for the same run, so that decoders read its trace as
//! they would a real one.
//!
//! - [`tracer`] runs the process one instruction at a time and returns what it recorded.
//! - [`crate::insn`] (shared with the Intel PT backend's slow-call trigger)
//!   classifies each instruction by the packets it produces.
//! - [`filter`] holds the unit's IP filter and the rules of FilterEn.
//! - [`hardware`] emulates the PT unit that turns retired instructions into packets.
//! - `packets` encodes those packets byte by byte.
//! - `ring` keeps the newest bytes, as an AUX area in snapshot mode does.
//! - [`settings`] says which CPU and PT event the trace claims to come from.
//! - `ptrace` wraps the ptrace calls only this backend makes.

pub mod filter;
pub mod hardware;
/// The packet encoder, which lives with the parser in the formats crate
/// (`ptscope_formats::pt`): the PT format in one place.
pub(crate) use ptscope_formats::pt::write as packets;
pub(crate) mod ptrace;
pub(crate) mod ring;
pub mod settings;
pub mod tracer;
