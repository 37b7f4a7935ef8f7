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
use crate::passes::event::{EndReason, Event, EventKind};
use crate::passes::stack::{Guessed, Stitch};
use crate::pt::timing::ClockState;
use ptscope_model::Checkpoint;

/// What a chunk walk records in place of an event or checkpoint.
#[derive(Clone, Debug)]
pub(crate) enum Item {
    Held(Held),
    /// An event (of a thread slot) that touches code no symbol covers:
    /// resolved, filtered and learned from by the replay, in order, as one
    /// walk would have (chunks do not learn).
    Raw(Event, usize),
    /// Where the chunk's own stacks go ([`Recording::built`]), after its
    /// first anchor.
    Built,
}

/// A chunk whose walker built its stacks from its first anchor to its last
/// (see `passes::stack::speculate`).
pub(crate) struct Built {
    pub stitch: Stitch,
    pub checkpoints: Vec<Guessed<Checkpoint>>,
    /// Its first anchor (position, TSC): the record before [`Item::Built`].
    pub first: (u64, u64),
    /// Its clock after its last anchor.
    pub clock: ClockState,
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
#[repr(u8)]
pub(crate) enum Tag {
    /// An event of thread slot `slot`.
    Event,
    /// A timing anchor: the TSC is in `from`.
    Anchor,
    /// Another item: `others[from_fn]`.
    Other,
    /// The position's high 32 bits from here on are in `from`.
    High,
}

/// A recorded item at its instruction position, laid out for the replay,
/// which reads each one once, from another core: nearly every item is an
/// event or an anchor, kept inline, and the rare others aside. 32 bytes:
/// an event's addresses and functions, its kind, and the low half of its
/// position (a [`Tag::High`] record gives the high half where it changes).
/// A 16 MiB trace records some 20 million; at 56 bytes, those in flight
/// were most of what two cores add to a decode's peak memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rec {
    from: u64,
    to: u64,
    from_fn: u32,
    to_fn: u32,
    pos: u32,
    slot: u16,
    /// The event's kind ([`kind_code`]), and [`TO_IS_ENTRY`].
    kind: u8,
    /// The [`Tag`] in the low 2 bits, the seam marks above.
    tag: u8,
}

const _: () = assert!(std::mem::size_of::<Rec>() == 32);

/// In `Rec::kind`: the event's `to_is_entry`.
const TO_IS_ENTRY: u8 = 0x80;

/// An event kind as one byte, and back.
fn kind_code(kind: EventKind) -> u8 {
    match kind {
        EventKind::Call => 0,
        EventKind::Return => 1,
        EventKind::Jump => 2,
        EventKind::TraceBegin => 3,
        EventKind::TraceEnd(EndReason::Other) => 4,
        EventKind::TraceEnd(EndReason::Syscall) => 5,
        EventKind::TraceEnd(EndReason::Async) => 6,
        EventKind::Syscall => 7,
        EventKind::Interrupt => 8,
        EventKind::KernelReturn => 9,
        EventKind::Error => 10,
    }
}

fn code_kind(code: u8) -> EventKind {
    match code & !TO_IS_ENTRY {
        0 => EventKind::Call,
        1 => EventKind::Return,
        2 => EventKind::Jump,
        3 => EventKind::TraceBegin,
        4 => EventKind::TraceEnd(EndReason::Other),
        5 => EventKind::TraceEnd(EndReason::Syscall),
        6 => EventKind::TraceEnd(EndReason::Async),
        7 => EventKind::Syscall,
        8 => EventKind::Interrupt,
        9 => EventKind::KernelReturn,
        _ => EventKind::Error,
    }
}

impl Rec {
    fn bare(pos: u64, tag: Tag, seam: u8) -> Rec {
        Rec {
            from: 0,
            to: 0,
            from_fn: 0,
            to_fn: 0,
            pos: pos as u32,
            slot: 0,
            kind: 0,
            tag: tag as u8 | seam << 2,
        }
    }

    pub(crate) fn tag(&self) -> Tag {
        match self.tag & 3 {
            0 => Tag::Event,
            1 => Tag::Anchor,
            2 => Tag::Other,
            _ => Tag::High,
        }
    }

    /// Its [`seam`] marks.
    pub(crate) fn seam(&self) -> u8 {
        self.tag >> 2
    }

    /// Its position's low 32 bits: the chunk's position, with the high
    /// bits of the last [`Tag::High`] record before it.
    pub(crate) fn pos_low(&self) -> u64 {
        u64::from(self.pos)
    }

    /// An anchor's TSC, or a [`Tag::High`] record's high bits.
    pub(crate) fn value(&self) -> u64 {
        self.from
    }

    /// The event of a [`Tag::Event`] record (untimed, as the walk held it:
    /// the clock gives it its time) and its thread slot.
    pub(crate) fn event(&self) -> (Event, usize) {
        let ev = Event {
            time: 0,
            kind: code_kind(self.kind),
            from: self.from,
            to: self.to,
            from_fn: self.from_fn,
            to_fn: self.to_fn,
            to_is_entry: self.kind & TO_IS_ENTRY != 0,
            estimated: true,
        };
        (ev, usize::from(self.slot))
    }

    /// The item it holds, taken out of `others` if it is one of them;
    /// `None` for an anchor or a position's high bits.
    pub(crate) fn item(&self, others: &mut [Option<Item>]) -> Option<Item> {
        match self.tag() {
            Tag::Event => {
                let (ev, slot) = self.event();
                Some(Item::Held(Held::Event(ev, slot)))
            }
            Tag::Anchor | Tag::High => None,
            Tag::Other => others.get_mut(self.from_fn as usize).and_then(Option::take),
        }
    }
}

/// Reads a chunk's records back in order from the `skip`th, emptying
/// `body`: each record with its position in the chunk, the high half put
/// back from the [`Tag::High`] records (which are not yielded).
pub(crate) fn read_back(body: &mut Vec<Rec>, skip: usize) -> impl Iterator<Item = (u64, Rec)> + '_ {
    let skip = skip.min(body.len());
    let mut high = body[..skip]
        .iter()
        .rfind(|r| r.tag() == Tag::High)
        .map_or(0, |r| r.value());
    body.drain(..).skip(skip).filter_map(move |rec| {
        if rec.tag() == Tag::High {
            high = rec.value();
            return None;
        }
        Some((high << 32 | rec.pos_low(), rec))
    })
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
    /// Its own stacks, if its walker built them.
    pub built: Option<Box<Built>>,
    /// Its walker tried to build its stacks and could not: the recording
    /// is cut short, and the chunk is walked again.
    pub gave_up: bool,
    /// Where [`Item::Built`] is in `body` (records before it are the
    /// chunk's head, which a walk of it without `built` records alike).
    pub built_at: usize,
    /// PSB segments it checkpointed, for the progress.
    pub segments: u64,
    pub(super) any_checkpoint: bool,
    /// The high 32 bits of the positions recorded so far.
    high: u64,
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
        self.at(pos);
        let rec = match item {
            // Nearly every item. An event of a thread slot past what 16
            // bits hold is kept whole, with the others.
            Item::Held(Held::Event(ev, slot)) if slot < usize::from(u16::MAX) => Rec {
                from: ev.from,
                to: ev.to,
                from_fn: ev.from_fn,
                to_fn: ev.to_fn,
                pos: pos as u32,
                slot: slot as u16,
                kind: kind_code(ev.kind) | if ev.to_is_entry { TO_IS_ENTRY } else { 0 },
                tag: Tag::Event as u8 | seam << 2,
            },
            other => {
                self.others.push(Some(other));
                Rec {
                    // `others` can outgrow 16 bits: its index goes in
                    // `from_fn`'s place.
                    from_fn: (self.others.len() - 1) as u32,
                    ..Rec::bare(pos, Tag::Other, seam)
                }
            }
        };
        self.body.push(rec);
    }

    pub(super) fn anchor(&mut self, pos: u64, tsc: u64) {
        self.at(pos);
        self.body.push(Rec {
            from: tsc,
            ..Rec::bare(pos, Tag::Anchor, 0)
        });
    }

    /// Records the high half of `pos` if it is not the last one's.
    fn at(&mut self, pos: u64) {
        let high = pos >> 32;
        if high != self.high {
            self.high = high;
            self.body.push(Rec {
                from: high,
                ..Rec::bare(pos, Tag::High, 0)
            });
        }
    }

    pub(super) fn finish(&mut self, pos: u64, need_begin: Option<bool>) {
        self.end_pos = pos;
        self.end_need_begin = need_begin;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, to_is_entry: bool) -> Event {
        Event {
            from: 0x1234_5678_9abc,
            to: 0xffff_ffff_8100_0000,
            from_fn: 7,
            to_fn: u32::MAX,
            to_is_entry,
            // As the walk holds an event: the clock times it.
            estimated: true,
            ..Event::new(0, kind)
        }
    }

    /// Every event kind, a slot past 16 bits, an anchor and positions
    /// that cross 2^32 (a chunk can retire that many instructions in a
    /// loop its TNTs compress) come back as recorded.
    #[test]
    fn records_read_back_as_written() {
        let kinds = [
            EventKind::Call,
            EventKind::Return,
            EventKind::Jump,
            EventKind::TraceBegin,
            EventKind::TraceEnd(EndReason::Other),
            EventKind::TraceEnd(EndReason::Syscall),
            EventKind::TraceEnd(EndReason::Async),
            EventKind::Syscall,
            EventKind::Interrupt,
            EventKind::KernelReturn,
            EventKind::Error,
        ];
        let positions = [
            0,
            5,
            (1 << 32) - 1,
            1 << 32,
            (1 << 32) + 9,
            3 << 32,
            (3 << 32) + 1,
            u64::MAX >> 1,
        ];
        let mut rec = Recording::default();
        let mut want = Vec::new();
        for (i, &pos) in positions.iter().enumerate() {
            for (k, &kind) in kinds.iter().enumerate() {
                let ev = event(kind, k % 2 == 0);
                let slot = if k == 3 { 70_000 } else { k };
                let seam = (k % 8) as u8;
                rec.push(pos, Item::Held(Held::Event(ev, slot)), seam);
                want.push((pos, Some((ev, slot, seam)), None));
            }
            rec.anchor(pos, 1000 + i as u64);
            want.push((pos, None, Some(1000 + i as u64)));
        }
        let Recording {
            mut body,
            mut others,
            ..
        } = rec;
        let got: Vec<_> = read_back(&mut body, 0)
            .map(|(pos, r)| match r.tag() {
                Tag::Anchor => (pos, None, Some(r.value())),
                _ => {
                    let seam = r.seam();
                    let Some(Item::Held(Held::Event(ev, slot))) = r.item(&mut others) else {
                        panic!("not an event at {pos}");
                    };
                    (pos, Some((ev, slot, seam)), None)
                }
            })
            .collect();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w);
        }
        assert!(body.is_empty());
    }
}
