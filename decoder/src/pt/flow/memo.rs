//! The memo: what the walk did from an address with the same TNT bits
//! ahead, recorded once and replayed after.
//!
//! Real programs run the same code with the same branch outcomes again and
//! again, so the walk keeps what it found: from an instruction address and
//! the TNT bits the current TNT packet still holds, the blocks it reports,
//! the ticks among them, the return addresses it pushes and pops, where
//! the flow goes and how many bits that took. A repeat replays the
//! entry's blocks without touching an instruction or a run.
//!
//! What an entry may cover is what makes replaying it exact. It depends on
//! nothing but its key and the image's code:
//! - it stays inside one TNT packet: the branch that takes the packet's
//!   last bit ends it, and the replay takes that bit as the walk does,
//!   consuming the packet, so that what follows (a timing packet, a PSB,
//!   an event) is read as the walk reads it, and ends the block where the
//!   walk would;
//! - inside the packet a tick can only bind to its first bit, when its
//!   time is news (the key says whether it is), so the ticks inside an
//!   entry are known;
//! - a compressed return inside it pops what a call inside it pushed, so
//!   its target is known; a return into older frames pops the walk's own
//!   return stack and ends the entry (where it goes is not the entry's to
//!   know), and a branch that needs a TIP ends it before that branch;
//! - the return stack, the idle count and the block under construction
//!   are updated as the walk would update them, so the walk takes over
//!   where an entry ends as if it had walked there itself.
//!
//! Entries live with the image's runs ([`super::run_cache::RunCache`]), so
//! they are dropped exactly when runs are: a new mode drops both, and
//! another image (another process, after a context switch or an exec)
//! has its own, and a caller that switches images while an entry is
//! replayed stops the replay at that block. The table is direct-mapped
//! (24 bytes a slot, so that it stays in cache) and its steps bounded:
//! when they fill up, everything is dropped and recorded anew.
//!
//! A walk that asks ([`super::FlowDecoder::report_entries`]: the coarse
//! pass's walker) is handed an entry seen before whole, as one
//! [`BlockItem::Entry`] with its first block, rather than block by block:
//! it keeps what it made of the entry's other blocks the first time, which
//! [`FlowDecoder::entry_blocks`] gives it, and makes that again without
//! them. An entry just recorded, and one of a single block, are reported
//! block by block.
//!
//! The plain walk stays the reference ([`super::FlowDecoder::without_memo`],
//! `--no-memo`): the tests and a fuzz target hold the two to the same
//! items.

use super::run_cache::{decode_run, Class, Run};
use super::walk::{Acc, Halt, MAX_IDLE_RUNS};
use super::{binding::Ev, FlowDecoder};
use crate::pt::block::{Block, BlockItem, MemoEntry};

/// Slots of the direct-mapped table (a power of two).
const SLOTS: usize = 1 << 12;
/// Steps kept in all before the memo starts over (48 bytes each).
const MAX_STEPS: usize = 1 << 14;
/// Runs one entry follows at most: bounds the return addresses it can
/// push (fewer than the walk's 64-entry return stack holds).
const MAX_ENTRY_RUNS: u32 = 48;

/// An entry: its key (the address and the TNT bits it may take, with how
/// many there are and whether the first ticks, packed by [`pack`]), and
/// its `len` steps from `first`, followed by its tail.
#[derive(Clone, Copy)]
struct Entry {
    ip: u64,
    bits: u64,
    /// Unique in the process ([`MemoEntry::id`]).
    id: u64,
    first: u32,
    len: u8,
    /// Its last step returns into frames older than the entry: the walk's
    /// return stack must hold one.
    older: bool,
    /// One of its steps ticks.
    ticks: bool,
}

const NO_ENTRY: Entry = Entry {
    ip: u64::MAX,
    bits: 0,
    id: 0,
    first: 0,
    len: 0,
    older: false,
    ticks: false,
};

/// The next entry's id: entries of every decoder are numbered apart, so
/// that a walk keeping what it made of entries (a walker of chunks, from
/// one chunk's decoder to the next) can never take one for another.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The bits of the TNT packet still to take (oldest first from bit
/// `avail - 1`), how many, and whether the first ticks, as one key: TNT
/// packets hold at most 47 bits.
fn pack(bits: u64, avail: u8, tick: bool) -> u64 {
    bits | (avail as u64) << 56 | (tick as u64) << 63
}

/// One block an entry reports; after its blocks, its tail: the block
/// still under construction (`ninsn` 0: none) and where the flow goes.
#[derive(Clone, Copy)]
struct Step {
    ip: u64,
    last: u64,
    /// The return address its call pushes (0: none).
    push: u64,
    /// Where the flow goes after it, unless it pops a return address.
    next: u64,
    ninsn: u32,
    class: Class,
    /// A tick binds to its last instruction.
    tick: bool,
    /// Its return pops the walk's return stack, and goes there.
    pop: bool,
    /// TNT bits taken, runs followed, and runs since the last bit taken,
    /// from the entry's start to its end: the walk's state after it.
    bits: u8,
    runs: u8,
    runs_since_bit: u8,
    /// In a tail: its last run is a branch that takes the packet's last
    /// bit (not counted in `bits`). A conditional one goes to `push` if
    /// taken, to `next` if not.
    last_bit: bool,
}

impl Step {
    /// The block it reports.
    fn block(&self, bitness: u8) -> Block {
        Block {
            ip: self.ip,
            end_ip: self.last,
            ninsn: self.ninsn,
            end: self.class.block_end(),
            bitness,
        }
    }
}

const NO_STEP: Step = Step {
    ip: 0,
    last: 0,
    push: 0,
    next: 0,
    ninsn: 0,
    class: Class::Other,
    tick: false,
    pop: false,
    bits: 0,
    runs: 0,
    runs_since_bit: 0,
    last_bit: false,
};

/// How the memo fared over one walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoFigures {
    /// Places the walk looked an entry up.
    pub lookups: u64,
    /// … and found one recorded before.
    pub hits: u64,
    /// Blocks reported from entries, replayed or just recorded.
    pub blocks: u64,
    /// Times the memo filled up and started over.
    pub flushes: u64,
    /// The most bytes its table and steps held.
    pub peak_bytes: u64,
}

impl MemoFigures {
    /// Adds `other`'s counts (its peak is the larger).
    pub fn add(&mut self, other: &MemoFigures) {
        self.lookups += other.lookups;
        self.hits += other.hits;
        self.blocks += other.blocks;
        self.flushes += other.flushes;
        self.peak_bytes = self.peak_bytes.max(other.peak_bytes);
    }
}

/// One image's entries.
#[derive(Default)]
pub(super) struct Memo {
    slots: Vec<Entry>,
    steps: Vec<Step>,
}

impl Memo {
    /// Drops every entry (the runs they were made of are gone).
    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.steps.clear();
    }

    fn bytes(&self) -> u64 {
        (self.slots.capacity() * std::mem::size_of::<Entry>()
            + self.steps.capacity() * std::mem::size_of::<Step>()) as u64
    }

    #[inline]
    fn slot(ip: u64, bits: u64) -> usize {
        let h = ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ bits.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & (SLOTS - 1)
    }
}

impl FlowDecoder<'_> {
    /// Before the walk follows runs from here: replays what the memo
    /// recorded for where the flow is and the TNT bits ahead, recording it
    /// first if it is new. The walk then goes on from where the entry
    /// ends, at a run the entry could not take.
    ///
    /// True if the entry took the packet's last bit, and so consumed it:
    /// the walk must look at the event after it before it goes on.
    #[inline]
    pub(super) fn replay<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<bool, Halt> {
        let (bits, count) = match self.ev {
            Ev::Tnt { bits, count } => (bits, count),
            Ev::Tip(Some(_)) => (0, 0),
            _ => return Ok(false),
        };
        // The last address marks an empty slot: it is never remembered.
        if self.acc.ninsn != 0
            || self.tick.is_some()
            || self.cache.bitness != self.rd.bitness
            || self.ip == NO_ENTRY.ip
        {
            return Ok(false);
        }
        let tick = count > 0 && self.ev_tsc.is_some() && self.ev_tsc != self.told_tsc;
        let key = pack(bits & ((1u64 << count) - 1), count, tick);
        self.memo_figures.lookups += 1;
        let slot = Memo::slot(self.ip, key);
        if self.cache.memo.slots.is_empty() {
            self.cache.memo.slots = vec![NO_ENTRY; SLOTS];
        }
        let mut e = self.cache.memo.slots[slot];
        let seen = e.ip == self.ip && e.bits == key;
        if seen {
            self.memo_figures.hits += 1;
        } else {
            e = self.record(self.ip, key);
            self.cache.memo.slots[slot] = e;
            self.memo_figures.peak_bytes =
                self.memo_figures.peak_bytes.max(self.cache.memo.bytes());
        }
        let end = (e.first + e.len as u32) as usize;
        let tail = self.cache.memo.steps[end];
        if self.idle + tail.runs as u32 > MAX_IDLE_RUNS || (e.older && self.ret_len == 0) {
            // The walk fails somewhere inside: it finds where.
            return Ok(false);
        }
        self.memo_figures.blocks += e.len as u64;
        let bitness = self.rd.bitness as u8;
        let (image, idle) = (self.cur, self.idle);
        let mut ip = self.ip;
        // An entry of one block is reported as the walk reports it, and so
        // is one just recorded: many are never seen again, and a walk that
        // keeps what it makes of an entry would keep those for nothing.
        let whole = self.entries && e.len > 1 && seen;
        if whole {
            let s = self.cache.memo.steps[e.first as usize];
            let entry = MemoEntry {
                id: e.id,
                first: s.block(bitness),
                first_ticks: s.tick,
                tsc: self.ev_tsc.filter(|_| e.ticks),
                steps: (e.first, e.len),
            };
            self.emit(f, BlockItem::Entry(entry))?;
            debug_assert!(
                self.cur == image,
                "images switched while an entry was taken"
            );
            if e.ticks {
                self.told_tsc = self.ev_tsc;
            }
            // Only the return stack changes step by step; the rest is the
            // last step's.
            for i in e.first as usize..end {
                let (push, pop) = (self.cache.memo.steps[i].push, self.cache.memo.steps[i].pop);
                if push != 0 {
                    self.push_ret(push);
                }
                if pop {
                    ip = self.pop_ret().expect("checked before the replay");
                }
            }
            let last = &self.cache.memo.steps[end - 1];
            if !last.pop {
                ip = last.next;
            }
            self.after_branch = !matches!(last.class, Class::Other | Class::MovCr3);
        }
        for i in (e.first as usize..end).filter(|_| !whole) {
            let s = self.cache.memo.steps[i];
            if s.push != 0 {
                self.push_ret(s.push);
            }
            ip = match s.pop {
                true => self.pop_ret().expect("checked before the replay"),
                false => s.next,
            };
            self.after_branch = !matches!(s.class, Class::Other | Class::MovCr3);
            self.emit(f, BlockItem::Block(s.block(bitness)))?;
            if s.tick {
                let tsc = self.ev_tsc.expect("a tick has a time");
                self.told_tsc = self.ev_tsc;
                self.emit(
                    f,
                    BlockItem::Tick {
                        ip: Some(s.last),
                        tsc,
                    },
                )?;
            }
            if self.cur != image {
                // The caller switched images (a context switch): the rest
                // of the entry is the other code's to walk, from here.
                self.replayed(bits, count, &s, idle);
                self.ip = ip;
                return Ok(false);
            }
        }
        self.replayed(bits, count, &tail, idle);
        if tail.ninsn > 0 {
            self.acc = Acc {
                ip: tail.ip,
                ninsn: tail.ninsn,
                last: tail.last,
                end: Some(tail.class),
                bitness,
            };
        }
        if !tail.last_bit {
            self.ip = if e.older { ip } else { tail.next };
            return Ok(false);
        }
        // The branch that takes the packet's last bit ends the entry: it is
        // in the block under construction; the bit is taken as the walk
        // takes it (consuming the packet, and a tick if the next one's
        // time is news), and the block ends where the walk ends it.
        let bit = self.take_bit()?;
        let ended = match tail.class {
            Class::Return => {
                self.ip = self.pop_ret().expect("checked before the replay");
                true
            }
            _ if bit => {
                self.ip = tail.push;
                true
            }
            _ => {
                self.ip = tail.next;
                let more = matches!(self.ev, Ev::Tnt { .. } | Ev::Tip(_) | Ev::Pgd(None));
                self.tick.is_some() || !more
            }
        };
        if ended {
            // The entry built this block: it counts as one it reports.
            self.memo_figures.blocks += 1;
            self.end_block(f)?;
        }
        Ok(true)
    }

    /// The blocks of `entry` after its first, each with whether a tick
    /// follows it, into `out` (for the walk that is taking it).
    pub fn entry_blocks(&self, entry: &MemoEntry, out: &mut Vec<(Block, bool)>) {
        let (first, len) = (entry.steps.0 as usize, entry.steps.1 as usize);
        let steps = self.cache.memo.steps.get(first + 1..first + len);
        out.extend(
            steps
                .unwrap_or_default()
                .iter()
                .map(|s| (s.block(entry.first.bitness), s.tick)),
        );
    }

    /// The walk's state after a replay up to `s` (a step, or the tail),
    /// from a TNT packet's `bits` with `count` left before it; the walk
    /// was `idle` runs without trace before it.
    fn replayed(&mut self, bits: u64, count: u8, s: &Step, idle: u32) {
        if s.bits > 0 {
            self.ev = Ev::Tnt {
                bits,
                count: count - s.bits,
            };
            self.idle = s.runs_since_bit as u32;
        } else {
            self.idle = idle + s.runs as u32;
        }
    }

    /// The run at `ip`, decoded and cached if new; `None` if it cannot be
    /// read (the walk reports that, not the memo).
    fn memo_run(&mut self, ip: u64) -> Option<Run> {
        if let Some(r) = self.cache.get(ip) {
            return Some(r);
        }
        let r = decode_run(self.images[self.cur?], ip, self.rd.bitness).ok()?;
        self.cache.insert(ip, r);
        Some(r)
    }

    /// Follows runs from `ip` with the TNT bits of `key`, as the walk
    /// would, into a new entry: up to a branch it cannot take (one that
    /// needs a TIP, or a return the walk fails on) or the one that takes
    /// the packet's last bit, which its tail holds.
    #[cold]
    fn record(&mut self, ip: u64, key: u64) -> Entry {
        if self.cache.memo.steps.len() + MAX_ENTRY_RUNS as usize + 1 > MAX_STEPS {
            // The table stays allocated: only its entries go.
            self.cache.memo.slots.fill(NO_ENTRY);
            self.cache.memo.steps.clear();
            self.memo_figures.flushes += 1;
        }
        let avail = (key >> 56 & 0x7f) as u8;
        let tick = key >> 63 != 0;
        let first = self.cache.memo.steps.len();
        let mut e = Entry {
            ip,
            bits: key,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            first: first as u32,
            ..NO_ENTRY
        };
        // The block under construction, and the state after it.
        let mut b = NO_STEP;
        // The return addresses pushed by this entry's calls.
        let mut pushed = [0u64; MAX_ENTRY_RUNS as usize];
        let mut depth = 0;
        let mut ip = ip;
        let next_bit = |taken: u8| (key >> (avail - 1 - taken)) & 1 != 0;
        while (b.runs as u32) < MAX_ENTRY_RUNS && !e.older {
            let Some(r) = self.memo_run(ip) else { break };
            let takes = match r.class {
                Class::Other | Class::MovCr3 | Class::Call | Class::Jump => true,
                Class::CondJump => b.bits < avail,
                // Not one the walk fails on.
                Class::Return => b.bits < avail && next_bit(b.bits),
                _ => false,
            };
            if !takes {
                break;
            }
            b.runs += 1;
            b.runs_since_bit += 1;
            if b.ninsn == 0 {
                b.ip = ip;
            }
            b.ninsn += r.ninsn;
            b.last = r.last;
            b.class = r.class;
            if matches!(r.class, Class::CondJump | Class::Return) && b.bits + 1 == avail {
                // The packet's last bit: the replay takes it as the walk
                // does, and the entry ends with this run.
                b.last_bit = true;
                match r.class {
                    Class::CondJump => (b.push, b.next) = (r.target, r.next),
                    _ => e.older = depth == 0,
                }
                break;
            }
            let ends = match r.class {
                Class::Other | Class::MovCr3 => {
                    ip = r.next;
                    false
                }
                Class::Call => {
                    if r.target != r.next {
                        b.push = r.next;
                        pushed[depth] = r.next;
                        depth += 1;
                    }
                    ip = r.target;
                    true
                }
                Class::Jump => {
                    ip = r.target;
                    true
                }
                Class::CondJump => {
                    let taken = next_bit(b.bits);
                    b.tick = tick && b.bits == 0;
                    b.bits += 1;
                    b.runs_since_bit = 0;
                    ip = if taken { r.target } else { r.next };
                    taken || b.tick
                }
                Class::Return => {
                    b.tick = tick && b.bits == 0;
                    b.bits += 1;
                    b.runs_since_bit = 0;
                    b.pop = true;
                    match depth {
                        0 => e.older = true,
                        _ => {
                            depth -= 1;
                            ip = pushed[depth];
                        }
                    }
                    true
                }
                _ => unreachable!("not taken by an entry"),
            };
            if ends {
                b.next = ip;
                self.cache.memo.steps.push(b);
                b = Step {
                    ip: 0,
                    ninsn: 0,
                    push: 0,
                    pop: false,
                    tick: false,
                    ..b
                };
            }
        }
        e.len = (self.cache.memo.steps.len() - first) as u8;
        e.ticks = self.cache.memo.steps[first..].iter().any(|s| s.tick);
        if !b.last_bit {
            b.next = ip;
        }
        self.cache.memo.steps.push(b);
        e
    }
}
