//! What a chunk walk records instead of timing it: every event and
//! checkpoint at its instruction position, with the clock's anchors in
//! between, so that the replay in [`super::chunks`] times the chunks in
//! order through one clock, as one walk does, and mends their seams.
//!
//! A chunk does not time its items itself: its first items need the
//! chunk before's last anchor, and timing the rest in the chunk, then
//! carrying each item's time to the replay, moved every item through
//! memory once more than the replay's own timing costs.

use super::Held;
use crate::passes::event::{Event, EventKind};

/// What a chunk walk records in place of an event or checkpoint.
#[derive(Clone, Debug)]
pub(crate) enum Item {
    Held(Held),
    /// An event (of a thread slot) that touches code no symbol covers:
    /// resolved, filtered and learned from by the replay, in order, as one
    /// walk would have (chunks do not learn).
    Raw(Event, usize),
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

/// What a [`Rec`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tag {
    /// An event of thread slot `slot`.
    Event,
    /// A timing anchor: the TSC is in `ev.time`.
    Anchor,
    /// Another item: `others[slot]`.
    Other,
}

/// A recorded item at its instruction position, laid out for the replay,
/// which reads each one once, from another core: nearly every item is an
/// event or an anchor, kept inline, and the rare others aside. 56 bytes
/// (an item with its time took 88 before), and a 16 MiB trace records
/// some 20 million.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rec {
    pub pos: u64,
    pub ev: Event,
    pub slot: u32,
    pub seam: u8,
    pub tag: Tag,
}

const _: () = assert!(std::mem::size_of::<Rec>() == 56);

impl Rec {
    /// The item it holds, taken out of `others` if it is one of them;
    /// `None` for an anchor.
    pub(crate) fn item(&self, others: &mut [Option<Item>]) -> Option<Item> {
        match self.tag {
            Tag::Event => Some(Item::Held(Held::Event(self.ev, self.slot as usize))),
            Tag::Anchor => None,
            Tag::Other => others.get_mut(self.slot as usize).and_then(Option::take),
        }
    }
}

/// A chunk walk's output.
#[derive(Default)]
pub(crate) struct Recording {
    /// Its items and anchors in walk order.
    pub body: Vec<Rec>,
    /// The body's items other than events.
    pub others: Vec<Option<Item>>,
    /// At the end: instructions walked, and whether tracing was off
    /// (`None`: the chunk did not tell, it owes only its sync's begin).
    pub end_pos: u64,
    pub end_need_begin: Option<bool>,
    /// Its PSBs that wait for the next chunk's first checkpoint.
    pub orphans: Vec<u64>,
    pub(super) any_checkpoint: bool,
}

impl Recording {
    /// A recording that fills `body` (a recycled buffer).
    pub(crate) fn with_body(mut body: Vec<Rec>) -> Recording {
        body.clear();
        Recording {
            body,
            ..Recording::default()
        }
    }

    pub(super) fn push(&mut self, pos: u64, item: Item, seam: u8) {
        let rec = match item {
            Item::Held(Held::Event(ev, slot)) => Rec {
                pos,
                ev,
                slot: slot as u32,
                seam,
                tag: Tag::Event,
            },
            other => {
                self.others.push(Some(other));
                Rec {
                    pos,
                    ev: Event::new(0, EventKind::Error),
                    slot: (self.others.len() - 1) as u32,
                    seam,
                    tag: Tag::Other,
                }
            }
        };
        self.body.push(rec);
    }

    pub(super) fn anchor(&mut self, pos: u64, tsc: u64) {
        self.body.push(Rec {
            pos,
            ev: Event::new(tsc, EventKind::Error),
            slot: 0,
            seam: 0,
            tag: Tag::Anchor,
        });
    }

    pub(super) fn finish(&mut self, pos: u64, need_begin: Option<bool>) {
        self.end_pos = pos;
        self.end_need_begin = need_begin;
    }
}
