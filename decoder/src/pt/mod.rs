//! Reading PT: from trace bytes to the blocks of instructions that ran.
//!
//! - [`packet`]: our bounds-checked PT packet parser (the formats crate's
//!   `pt::read`, beside its encoder);
//! - [`errata`]: the CPU errata that affect decoding (libipt's table,
//!   ported), and [`ip_filter`]: the IP filter a trace was written under;
//! - [`timing`]: timing packets to times, spread over the branches
//!   between them;
//! - [`block`]: what both engines report ([`block::BlockItem`]), their
//!   configuration and libipt's error codes;
//! - the engines: [`flow`] over [`memory`], our own flow decoder, and
//!   `ffi`, libipt's block and instruction decoders, the reference (with
//!   the `libipt` feature, on by default).

pub(crate) mod block;
pub(crate) mod errata;
// The FFI to libipt: each unsafe block says why it is sound. Behind the
// `libipt` feature (on by default), for `--decoder libipt`, the tests and
// the benchmarks.
#[cfg(feature = "libipt")]
#[allow(unsafe_code)]
pub mod ffi;
pub(crate) mod flow;
pub(crate) mod ip_filter;
// Maps binaries: its one unsafe block says why it is sound.
#[allow(unsafe_code)]
pub(crate) mod memory;
/// The packet parser, which lives with the encoder in the formats crate
/// (`ptscope_formats::pt`): the PT format in one place.
pub(crate) use ptscope_formats::pt::read as packet;
pub(crate) mod timing;
