//! Timing: from a trace's timing packets to a time for every branch.
//!
//! - [`packets`]: the time a trace position stands for, decoded from its
//!   timing packets (TSC, MTC with TMA, CYC with CBR), by the SDM's rules;
//! - [`interpolation`]: only some branches get a time of their own, so
//!   the [`Clock`] spreads time between two such anchors by instruction
//!   count and releases everything it held, in order, once timed.

pub(crate) mod interpolation;
pub(crate) mod packets;

pub(crate) use interpolation::{Clock, Stamp};
pub(crate) use packets::Time;
