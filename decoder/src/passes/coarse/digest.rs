//! What the walker made of a memo entry's blocks, kept to be made again
//! without them.
//!
//! The flow decoder's memo replays the same entries (a run of blocks from
//! one address with the same TNT bits ahead) again and again; each replay
//! used to hand the walker every block, which it then turned into events
//! one by one: the block's counters, the branch it ends in, both ends of
//! that branch looked up among the functions, the event built and pushed
//! to the clock. On a steady loop that was three blocks for every event.
//!
//! So the walker asks for entries whole ([`BlockItem::Entry`]) and keeps,
//! per entry, what its blocks after the first make: the events, already
//! resolved, each at its instruction offset from the entry's start, and
//! the tick that may bind among them, in order; then how many blocks and
//! instructions there were and the branch left pending. The first block
//! still goes the usual way, since the branch it settles was pending from
//! before the entry. The next time an entry of that id comes, the walker
//! pushes the kept events and takes the tick as it would have, without a
//! block.
//!
//! It holds exactly while the lookups would give what they gave: an entry
//! is the same code with the same branches taken, and an id is never
//! reused ([`crate::pt::block::MemoEntry::id`]), so only the functions can
//! change. The walker clears everything whenever it forgets its cached
//! ranges (it learned a function's entry, or the process changed), and
//! keeps nothing of an entry whose blocks made anything but plain resolved
//! events (a lookup the replay must make, a stop). A walk that watches
//! blocks (the fine pass) does not ask for entries at all. The plain walk
//! (`--no-memo`) has no entries, so the tests and the fuzz targets that
//! hold the memo's walk to it hold this too.
//!
//! [`BlockItem::Entry`]: crate::pt::block::BlockItem::Entry

use crate::passes::event::{Event, EventKind, FuncId};
use crate::pt::block::BlockEnd;

/// Slots of the direct-mapped table (a power of two).
const SLOTS: usize = 1 << 12;
/// Operations kept in all before everything is dropped and kept anew
/// (32 bytes each).
const MAX_OPS: usize = 1 << 14;

/// One thing an entry's blocks did: an event (resolved, untimed), or the
/// tick (`kind` `None`), at `off` instructions from the entry's start.
#[derive(Clone, Copy, Debug)]
pub(super) struct Op {
    off: u32,
    from_fn: FuncId,
    to_fn: FuncId,
    kind: Option<EventKind>,
    to_is_entry: bool,
    from: u64,
    to: u64,
}

impl Op {
    pub(super) fn tick(off: u32) -> Op {
        Op {
            off,
            from_fn: 0,
            to_fn: 0,
            kind: None,
            to_is_entry: false,
            from: 0,
            to: 0,
        }
    }

    /// `ev` as pushed at `off`; `None` if it is not a plain resolved event
    /// (one with a time or an exact stamp, which no block makes).
    pub(super) fn event(off: u32, ev: &Event) -> Option<Op> {
        (ev.time == 0 && ev.estimated).then_some(Op {
            off,
            from_fn: ev.from_fn,
            to_fn: ev.to_fn,
            kind: Some(ev.kind),
            to_is_entry: ev.to_is_entry,
            from: ev.from,
            to: ev.to,
        })
    }

    pub(super) fn off(&self) -> u64 {
        self.off as u64
    }

    /// The event, or `None` for the tick.
    pub(super) fn as_event(&self) -> Option<Event> {
        Some(Event {
            time: 0,
            kind: self.kind?,
            from: self.from,
            to: self.to,
            from_fn: self.from_fn,
            to_fn: self.to_fn,
            to_is_entry: self.to_is_entry,
            estimated: true,
        })
    }
}

/// What an entry's blocks after its first made: `ops[first..first + len]`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Digest {
    id: u64,
    first: u32,
    len: u32,
    pub blocks: u32,
    pub insns: u32,
    /// The branch its last block left pending.
    pub branch: Option<(BlockEnd, u64)>,
}

impl Digest {
    /// Where its operations are.
    pub(super) fn ops(&self) -> std::ops::Range<usize> {
        self.first as usize..(self.first + self.len) as usize
    }
}

const NO_DIGEST: Digest = Digest {
    id: 0,
    first: 0,
    len: 0,
    blocks: 0,
    insns: 0,
    branch: None,
};

/// The walker's digests of entries.
#[derive(Default)]
pub(crate) struct Digests {
    slots: Vec<Digest>,
    ops: Vec<Op>,
    /// Where the digest being made starts in `ops`, and whether it is
    /// spoiled (it will not be kept).
    making: Option<(usize, bool)>,
}

impl Digests {
    fn slot(id: u64) -> usize {
        // Ids are handed out in order: their low bits spread well.
        id as usize & (SLOTS - 1)
    }

    /// The digest of entry `id`, if kept; its operations are
    /// [`op`](Self::op)`(i)` for `i` in [`ops`](Digest::ops).
    #[inline]
    pub(super) fn get(&self, id: u64) -> Option<Digest> {
        let d = self.slots.get(Self::slot(id))?;
        (d.id == id).then_some(*d)
    }

    /// A kept operation (the digests are not changed while one is
    /// replayed: only making one does that).
    #[inline(always)]
    pub(super) fn op(&self, i: usize) -> Op {
        self.ops[i]
    }

    /// Drops every digest (the functions may have changed).
    pub(super) fn clear(&mut self) {
        if !self.slots.is_empty() {
            self.slots.fill(NO_DIGEST);
        }
        self.ops.clear();
        // What the digest being made kept is gone: it is not whole.
        if self.making.is_some() {
            self.making = Some((0, true));
        }
    }

    /// Starts making a digest: the operations [`keep`](Self::keep) is
    /// given from now on are the entry's.
    pub(super) fn start(&mut self) {
        if self.ops.len() >= MAX_OPS {
            self.clear();
        }
        self.making = Some((self.ops.len(), false));
    }

    /// Whether a digest is being made.
    #[inline(always)]
    pub(super) fn making(&self) -> bool {
        self.making.is_some()
    }

    /// Keeps `op` for the digest being made; `None` spoils it.
    pub(super) fn keep(&mut self, op: Option<Op>) {
        match op {
            Some(op) => self.ops.push(op),
            None => self.spoil(),
        }
    }

    /// The digest being made will not be kept: its blocks made something
    /// a replay would have to make again.
    pub(super) fn spoil(&mut self) {
        if let Some((_, spoiled)) = &mut self.making {
            *spoiled = true;
        }
    }

    /// Ends the digest being made: kept as entry `id`'s, unless it was
    /// spoiled or everything was dropped meanwhile.
    pub(super) fn finish(
        &mut self,
        id: u64,
        blocks: u32,
        insns: u64,
        branch: Option<(BlockEnd, u64)>,
    ) {
        let Some((first, spoiled)) = self.making.take() else {
            return;
        };
        let (Ok(insns), false) = (u32::try_from(insns), spoiled) else {
            self.ops.truncate(first);
            return;
        };
        if self.slots.is_empty() {
            self.slots = vec![NO_DIGEST; SLOTS];
        }
        self.slots[Self::slot(id)] = Digest {
            id,
            first: first as u32,
            len: (self.ops.len() - first) as u32,
            blocks,
            insns,
            branch,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind, to_fn: FuncId) -> Event {
        Event {
            time: 0,
            kind,
            from: 0x10,
            to: 0x20,
            from_fn: 3,
            to_fn,
            to_is_entry: true,
            estimated: true,
        }
    }

    #[test]
    fn a_kept_digest_gives_back_its_events_and_tick_in_order() {
        let mut d = Digests::default();
        d.start();
        d.keep(Op::event(2, &ev(EventKind::Call, 4)));
        d.keep(Some(Op::tick(5)));
        d.keep(Op::event(9, &ev(EventKind::Return, 3)));
        d.finish(7, 3, 12, Some((BlockEnd::Jump, 0x30)));
        let dig = d.get(7).expect("kept");
        assert_eq!((dig.blocks, dig.insns), (3, 12));
        let got: Vec<_> = dig
            .ops()
            .map(|i| (d.op(i).off(), d.op(i).as_event()))
            .collect();
        assert_eq!(
            got,
            [
                (2, Some(ev(EventKind::Call, 4))),
                (5, None),
                (9, Some(ev(EventKind::Return, 3)))
            ]
        );
        // Another id in the same slot is not this one.
        assert!(d.get(7 + SLOTS as u64).is_none());
    }

    #[test]
    fn a_spoiled_or_interrupted_digest_is_not_kept() {
        let mut d = Digests::default();
        d.start();
        d.keep(Op::event(1, &ev(EventKind::Call, 4)));
        // A timed event is not a block's.
        let mut timed = ev(EventKind::Call, 4);
        timed.time = 5;
        d.keep(Op::event(2, &timed));
        d.finish(1, 2, 3, None);
        assert!(d.get(1).is_none());
        assert!(d.ops.is_empty());
        d.start();
        d.keep(Op::event(1, &ev(EventKind::Call, 4)));
        d.clear();
        d.keep(Op::event(2, &ev(EventKind::Call, 4)));
        d.finish(2, 2, 3, None);
        assert!(d.get(2).is_none());
        assert!(d.ops.is_empty());
        // Kept again afterwards.
        d.start();
        d.finish(3, 1, 1, None);
        assert!(d.get(3).is_some());
    }
}
