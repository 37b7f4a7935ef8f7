//! The passes over a trace, from branches to the model.
//!
//! - [`coarse`]: the coarse pass, PT into timed branch [`event`]s, one walk
//!   or in chunks on every core with the same result;
//! - [`stack`]: call-stack reconstruction, the heart of it: events in,
//!   nested spans out, into the model's span store; a chunk's builder
//!   guesses the frames below its start, and its stitch checks them;
//! - [`mark_scan`]: what a trace says besides the flow (PTWRITE values,
//!   frequency and power states), read by a scan of its packets;
//! - [`fine`]: the fine pass, one PSB segment re-decoded down to
//!   instructions and source lines on demand.

pub(crate) mod coarse;
pub(crate) mod event;
pub(crate) mod fine;
pub(crate) mod mark_scan;
pub(crate) mod stack;
