//! The engines the coarse pass walks with, behind one trait: libipt's
//! block decoder (the reference) and our own flow decoder (the fast one),
//! which report the same blocks and events.

use crate::pt::block::{Block, BlockItem, MemoEntry, PtError};
#[cfg(feature = "libipt")]
use crate::pt::ffi::{BlockDecoder, Image};
use crate::pt::flow::{FlowDecoder, MemoFigures};
use crate::pt::memory::Memory;

/// A block walk over one AUX queue: libipt's block decoder, or our own
/// flow decoder that agrees with it ([`crate::pt::flow`]).
pub trait Blocks<'i> {
    /// What the process's code is read from.
    type Image: 'i;
    /// Decodes against `image` from now on (e.g. after a context switch).
    fn set_image(&mut self, image: &'i Self::Image) -> Result<(), PtError>;
    /// How far into the trace decoding has got.
    fn offset(&self) -> u64;
    /// While PSB+ status is reported: an offset past that PSB.
    fn status_offset(&self) -> u64 {
        self.offset()
    }
    /// PSBs at or before this offset are behind the blocks reported from
    /// now on. libipt reads a PSB+ with the packet before it, so its
    /// offset is all it can tell.
    fn psbs_behind(&self) -> u64 {
        self.offset()
    }
    /// The PSB whose PSB+ was read last, if the decoder tells.
    fn psb_entered(&self) -> Option<u64> {
        None
    }
    /// Walks the whole buffer; `on_item` returns false to stop.
    fn walk(&mut self, on_item: impl FnMut(&mut Self, BlockItem) -> bool);
    /// How the flow decoder's memo fared (nothing for libipt's).
    fn memo_figures(&self) -> MemoFigures {
        MemoFigures::default()
    }
    /// Reports memo entries whole ([`BlockItem::Entry`]) if `on` (libipt's
    /// has no memo).
    fn report_entries(&mut self, on: bool) {
        let _ = on;
    }
    /// The blocks of an entry being reported, after its first
    /// ([`FlowDecoder::entry_blocks`]).
    fn entry_blocks(&self, entry: &MemoEntry, out: &mut Vec<(Block, bool)>) {
        let _ = (entry, out);
    }
}

#[cfg(feature = "libipt")]
impl<'i> Blocks<'i> for BlockDecoder<'i> {
    type Image = Image<'i>;
    fn set_image(&mut self, image: &'i Image<'i>) -> Result<(), PtError> {
        BlockDecoder::set_image(self, image)
    }
    fn offset(&self) -> u64 {
        BlockDecoder::offset(self)
    }
    fn walk(&mut self, on_item: impl FnMut(&mut Self, BlockItem) -> bool) {
        BlockDecoder::walk(self, on_item)
    }
}

impl<'i> Blocks<'i> for FlowDecoder<'i> {
    type Image = Memory;
    fn set_image(&mut self, image: &'i Memory) -> Result<(), PtError> {
        FlowDecoder::set_image(self, image)
    }
    fn offset(&self) -> u64 {
        FlowDecoder::offset(self)
    }
    fn status_offset(&self) -> u64 {
        FlowDecoder::status_offset(self)
    }
    fn psbs_behind(&self) -> u64 {
        // Not a PSB that starts right where the trace is consumed to (a
        // TIP just before it ended the block): it is still ahead.
        FlowDecoder::offset(self).saturating_sub(1)
    }
    fn psb_entered(&self) -> Option<u64> {
        FlowDecoder::psb_entered(self)
    }
    fn walk(&mut self, on_item: impl FnMut(&mut Self, BlockItem) -> bool) {
        FlowDecoder::walk(self, on_item)
    }
    fn memo_figures(&self) -> MemoFigures {
        FlowDecoder::memo_figures(self)
    }
    fn report_entries(&mut self, on: bool) {
        FlowDecoder::report_entries(self, on)
    }
    fn entry_blocks(&self, entry: &MemoEntry, out: &mut Vec<(Block, bool)>) {
        FlowDecoder::entry_blocks(self, entry, out)
    }
}
