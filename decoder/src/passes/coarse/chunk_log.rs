//! What a chunk walk records instead of timing it: every event and
//! checkpoint at its instruction position with the clock's anchors, so the
//! replay in [`super::chunks`] times the chunks in order through one clock
//! and mends their seams.

use super::walker::NO_STAMP;
use super::Held;
use crate::passes::event::Event;
use crate::pt::timing::{Clock, Stamp};

/// What a chunk walk records in place of an event or checkpoint.
#[derive(Clone, Debug)]
pub(crate) enum Item {
    Held(Held),
    /// An event (of a thread slot) that touches code no symbol covers:
    /// resolved, filtered and learned from by the replay, in order, as one
    /// walk would have (chunks do not learn).
    Raw(Event, usize),
    /// A timing anchor: TSC at the entry's position.
    Anchor(u64),
}

/// Marks on the items at a chunk's start that the replay mends.
pub(crate) mod seam {
    /// The trace-begin its initial sync made, if that was the first event.
    pub(crate) const SYNC_BEGIN: u8 = 1;
    /// Its first checkpoint (at the chunk's own PSB).
    pub(crate) const FIRST_CHECKPOINT: u8 = 2;
    /// A checkpoint taken while the chunk owes only the trace-begin its
    /// sync asks for: where one walk had tracing on, it begins nothing.
    pub(crate) const SYNC_CHECKPOINT: u8 = 4;
}

/// A recorded item at its instruction position, with the time the chunk's
/// own clock gave it (in `body` only).
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub pos: u64,
    pub stamp: Stamp,
    pub item: Item,
    pub seam: u8,
}

/// A chunk walk's output. The chunk times what lies between its first and
/// last timing anchors itself, exactly as one walk would; what comes
/// before the first (`head`) and after the last (`tail`) needs its
/// neighbours' anchors, and the replay times it.
#[derive(Default)]
pub(crate) struct Recording {
    pub head: Vec<Entry>,
    pub first_anchor: Option<(u64, u64)>,
    /// Timed items in order, with every anchor after the first (so the
    /// replay can time them itself instead).
    pub body: Vec<Entry>,
    pub tail: Vec<Entry>,
    /// The clock at the end: last anchor, and the rate before it.
    pub end_anchor: Option<(u64, u64)>,
    pub end_rate: Option<(u64, u64)>,
    /// At the end: instructions walked, and whether tracing was off
    /// (`None`: the chunk did not tell, it owes only its sync's begin).
    pub end_pos: u64,
    pub end_need_begin: Option<bool>,
    /// Its PSBs that wait for the next chunk's first checkpoint.
    pub orphans: Vec<u64>,
    pub(super) any_checkpoint: bool,
    clock: Clock<(u64, Item, u8)>,
}

impl Recording {
    /// A recording that fills `body` (a recycled buffer).
    pub(crate) fn with_body(mut body: Vec<Entry>) -> Recording {
        body.clear();
        Recording {
            body,
            ..Recording::default()
        }
    }

    pub(super) fn push(&mut self, pos: u64, item: Item, seam: u8) {
        if self.first_anchor.is_none() {
            self.head.push(Entry {
                pos,
                stamp: NO_STAMP,
                item,
                seam,
            });
        } else {
            self.clock.push(pos, (pos, item, seam));
        }
    }

    pub(super) fn anchor(&mut self, pos: u64, tsc: u64) {
        if self.first_anchor.is_none() {
            self.first_anchor = Some((pos, tsc));
            self.clock.anchor(pos, tsc, |_, _| {});
            return;
        }
        let body = &mut self.body;
        self.clock.anchor(pos, tsc, |stamp, (pos, item, seam)| {
            body.push(Entry {
                pos,
                stamp,
                item,
                seam,
            })
        });
        body.push(Entry {
            pos,
            stamp: NO_STAMP,
            item: Item::Anchor(tsc),
            seam: 0,
        });
    }

    pub(super) fn finish(&mut self, pos: u64, need_begin: Option<bool>) {
        self.tail = self
            .clock
            .take_pending()
            .into_iter()
            .map(|(_, (pos, item, seam))| Entry {
                pos,
                stamp: NO_STAMP,
                item,
                seam,
            })
            .collect();
        (self.end_anchor, self.end_rate) = self.clock.state();
        self.end_pos = pos;
        self.end_need_begin = need_begin;
    }
}
