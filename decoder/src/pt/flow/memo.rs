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
//! - it stays inside one TNT packet and never takes the packet's last bit:
//!   that bit consumes the packet, and what follows (a timing packet, a
//!   PSB, an event) is the walk's to read;
//! - a tick can only bind to the first bit of a packet whose time is news
//!   (the key says whether it is), so the ticks inside an entry are known;
//! - a compressed return inside it pops only what a call inside it pushed,
//!   so its target is known; a return into older frames ends the entry
//!   before it, as does every branch that needs a TIP;
//! - the return stack, the idle count and the block under construction
//!   are updated as the walk would update them, so the walk takes over
//!   where an entry ends as if it had walked there itself.
//!
//! Entries live with the image's runs ([`super::run_cache::RunCache`]), so
//! they are dropped exactly when runs are: a new mode drops both, and
//! another image (another process, after a context switch or an exec)
//! has its own. The table is direct-mapped and its steps bounded: when
//! they fill up, everything is dropped and recorded anew.
//!
//! The plain walk stays the reference ([`super::FlowDecoder::without_memo`],
//! `--no-memo`): the tests and a fuzz target hold the two to the same
//! items.

use super::run_cache::{decode_run, Class, Run};
use super::walk::{Acc, Halt, MAX_IDLE_RUNS};
use super::{binding::Ev, FlowDecoder};
use crate::pt::block::{Block, BlockItem};

/// Slots of the direct-mapped table (a power of two).
const SLOTS: usize = 1 << 14;
/// Steps kept in all before the memo starts over (48 bytes each).
const MAX_STEPS: usize = 1 << 16;
/// Runs one entry follows at most: bounds the return addresses it can
/// push, and keeps a replay short enough to undo nothing.
const MAX_ENTRY_RUNS: u32 = 64;

/// Where the walk is, as far as the memo tells places apart.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key {
    ip: u64,
    /// The bits an entry may take, oldest first from bit `avail - 1`.
    bits: u64,
    avail: u8,
    /// The first bit taken ticks: the packet's time is news.
    tick: bool,
}

const NO_KEY: Key = Key {
    ip: u64::MAX,
    bits: 0,
    avail: 0,
    tick: false,
};

/// One block an entry reports.
#[derive(Clone, Copy)]
struct Step {
    ip: u64,
    last: u64,
    /// The return address its call pushes (0: none).
    push: u64,
    /// Where the flow goes after it.
    next: u64,
    ninsn: u32,
    class: Class,
    /// A tick binds to its last instruction.
    tick: bool,
    /// Its return pops the address a call of the same entry pushed.
    pop: bool,
    /// TNT bits taken, runs followed, and runs since the last bit, from
    /// the entry's start to its end: the walk's state after it, should
    /// the replay stop there.
    bits: u8,
    runs: u8,
    runs_since_bit: u8,
}

/// What the walk did from a key: `len` steps from `first`, then the block
/// still under construction (`acc_*`, none if `acc_ninsn` is 0) and where
/// the flow goes next.
#[derive(Clone, Copy)]
struct Entry {
    key: Key,
    first: u32,
    len: u32,
    next_ip: u64,
    acc_ip: u64,
    acc_last: u64,
    acc_ninsn: u32,
    acc_class: Class,
    /// TNT bits taken.
    bits: u8,
    /// Runs followed in all, and since the last bit taken.
    runs: u32,
    runs_since_bit: u32,
}

const NO_ENTRY: Entry = Entry {
    key: NO_KEY,
    first: 0,
    len: 0,
    next_ip: 0,
    acc_ip: 0,
    acc_last: 0,
    acc_ninsn: 0,
    acc_class: Class::Other,
    bits: 0,
    runs: 0,
    runs_since_bit: 0,
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
    fn slot(key: &Key) -> usize {
        let h = key.ip.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ key.bits.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            ^ ((key.avail as u64) << 1 | key.tick as u64);
        (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & (SLOTS - 1)
    }
}

/// Where the walk stands, for an entry being recorded.
struct Building {
    acc_ip: u64,
    acc_last: u64,
    acc_ninsn: u32,
    acc_class: Class,
}

impl FlowDecoder<'_> {
    /// Before the walk follows runs from here: replays what the memo
    /// recorded for where the flow is and the TNT bits ahead, recording it
    /// first if it is new. The walk then goes on from where the entry
    /// ends, at a run the entry could not take.
    #[inline]
    pub(super) fn replay<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<(), Halt> {
        let (bits, count) = match self.ev {
            Ev::Tnt { bits, count } => (bits, count),
            Ev::Tip(Some(_)) => (0, 1),
            _ => return Ok(()),
        };
        if self.acc.ninsn != 0 || self.tick.is_some() || self.cache.bitness != self.rd.bitness {
            return Ok(());
        }
        let avail = count - 1;
        let key = Key {
            ip: self.ip,
            bits: (bits & ((1u64 << count) - 1)) >> 1,
            avail,
            tick: avail > 0 && self.ev_tsc.is_some() && self.ev_tsc != self.told_tsc,
        };
        self.memo_figures.lookups += 1;
        let slot = Memo::slot(&key);
        if self.cache.memo.slots.is_empty() {
            self.cache.memo.slots = vec![NO_ENTRY; SLOTS];
        }
        let mut e = self.cache.memo.slots[slot];
        if e.key == key {
            self.memo_figures.hits += 1;
        } else {
            e = self.record(key);
            self.cache.memo.slots[slot] = e;
            self.memo_figures.peak_bytes =
                self.memo_figures.peak_bytes.max(self.cache.memo.bytes());
        }
        if self.idle + e.runs > MAX_IDLE_RUNS {
            // The walk fails somewhere inside: it finds where.
            return Ok(());
        }
        self.memo_figures.blocks += e.len as u64;
        let bitness = self.rd.bitness as u8;
        let (image, idle) = (self.cur, self.idle);
        for i in e.first..e.first + e.len {
            let s = self.cache.memo.steps[i as usize];
            if s.push != 0 {
                self.push_ret(s.push);
            }
            if s.pop {
                self.pop_ret();
            }
            self.after_branch = !matches!(s.class, Class::Other | Class::MovCr3);
            self.emit(
                f,
                BlockItem::Block(Block {
                    ip: s.ip,
                    end_ip: s.last,
                    ninsn: s.ninsn,
                    end: s.class.block_end(),
                    bitness,
                }),
            )?;
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
                self.replayed(
                    bits,
                    count,
                    s.bits,
                    idle,
                    s.runs as u32,
                    s.runs_since_bit as u32,
                );
                self.ip = s.next;
                return Ok(());
            }
        }
        self.replayed(bits, count, e.bits, idle, e.runs, e.runs_since_bit);
        self.ip = e.next_ip;
        if e.acc_ninsn > 0 {
            self.acc = Acc {
                ip: e.acc_ip,
                ninsn: e.acc_ninsn,
                last: e.acc_last,
                end: Some(e.acc_class),
                bitness,
            };
        }
        Ok(())
    }

    /// The walk's state after a replay that took `taken` of the TNT bits
    /// and followed `runs` runs, `since_bit` of them since its last bit;
    /// the walk was `idle` runs without trace before it.
    fn replayed(&mut self, bits: u64, count: u8, taken: u8, idle: u32, runs: u32, since_bit: u32) {
        if taken > 0 {
            self.ev = Ev::Tnt {
                bits,
                count: count - taken,
            };
            self.idle = since_bit;
        } else {
            self.idle = idle + runs;
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

    /// Follows runs from `key` as the walk would, into a new entry.
    #[cold]
    fn record(&mut self, key: Key) -> Entry {
        if self.cache.memo.steps.len() + MAX_ENTRY_RUNS as usize > MAX_STEPS {
            self.cache.memo.clear();
            self.cache.memo.slots = vec![NO_ENTRY; SLOTS];
            self.memo_figures.flushes += 1;
        }
        let first = self.cache.memo.steps.len() as u32;
        let mut e = Entry {
            key,
            first,
            ..NO_ENTRY
        };
        let mut b = Building {
            acc_ip: 0,
            acc_last: 0,
            acc_ninsn: 0,
            acc_class: Class::Other,
        };
        // The return addresses pushed by this entry's calls.
        let mut pushed = [0u64; MAX_ENTRY_RUNS as usize];
        let mut depth = 0;
        let mut ip = key.ip;
        let next_bit = |taken: u8| (key.bits >> (key.avail - 1 - taken)) & 1 != 0;
        while e.runs < MAX_ENTRY_RUNS {
            let Some(r) = self.memo_run(ip) else { break };
            let takes = match r.class {
                Class::Other | Class::MovCr3 | Class::Call | Class::Jump => true,
                Class::CondJump => e.bits < key.avail,
                // A return the walk fails on, or one into older frames.
                Class::Return => e.bits < key.avail && depth > 0 && next_bit(e.bits),
                _ => false,
            };
            if !takes {
                break;
            }
            e.runs += 1;
            e.runs_since_bit += 1;
            if b.acc_ninsn == 0 {
                b.acc_ip = ip;
            }
            b.acc_ninsn += r.ninsn;
            b.acc_last = r.last;
            b.acc_class = r.class;
            let mut step = Step {
                ip: b.acc_ip,
                last: r.last,
                push: 0,
                next: 0,
                ninsn: b.acc_ninsn,
                class: r.class,
                tick: false,
                pop: false,
                bits: 0,
                runs: 0,
                runs_since_bit: 0,
            };
            let ends = match r.class {
                Class::Other | Class::MovCr3 => {
                    ip = r.next;
                    false
                }
                Class::Call => {
                    if r.target != r.next {
                        step.push = r.next;
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
                    let taken = next_bit(e.bits);
                    step.tick = key.tick && e.bits == 0;
                    e.bits += 1;
                    e.runs_since_bit = 0;
                    ip = if taken { r.target } else { r.next };
                    taken || step.tick
                }
                Class::Return => {
                    step.tick = key.tick && e.bits == 0;
                    e.bits += 1;
                    e.runs_since_bit = 0;
                    depth -= 1;
                    step.pop = true;
                    ip = pushed[depth];
                    true
                }
                _ => unreachable!("not taken by an entry"),
            };
            if ends {
                step.next = ip;
                step.bits = e.bits;
                step.runs = e.runs as u8;
                step.runs_since_bit = e.runs_since_bit as u8;
                self.cache.memo.steps.push(step);
                b.acc_ninsn = 0;
            }
        }
        e.len = self.cache.memo.steps.len() as u32 - first;
        e.next_ip = ip;
        e.acc_ip = b.acc_ip;
        e.acc_last = b.acc_last;
        e.acc_ninsn = b.acc_ninsn;
        e.acc_class = b.acc_class;
        e
    }
}
