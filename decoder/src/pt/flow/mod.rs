//! Our own PT flow decoder: trace packets plus the process's code in, the
//! same [`BlockItem`]s as libipt's block decoder out, at several times its
//! speed.
//!
//! Why not just libipt: the coarse pass must be no slower than libipt's
//! block decoder walking the trace alone, and it does more than walk.
//! The speed comes from what the coarse pass does not need: it follows
//! *runs* (the instructions from an address up to the next branch),
//! decoded once with iced-x86 and cached by address, so a loop costs one
//! table lookup per branch; it replays what it did before from the same
//! address with the same TNT bits ahead (`memo`); and it reads packets
//! with our bounds-checked parser ([`crate::pt::packet`]).
//!
//! The rules are the SDM's, as libipt implements them, so both decoders
//! report the same blocks and events (checked by the tests against libipt
//! on every test capture):
//! - TNT bits decide conditional branches and compressed returns (popped
//!   from a 64-entry return stack); TIP gives indirect targets;
//! - a FUP starts an asynchronous event: the next TIP makes it a branch,
//!   TIP.PGD a disable, bound to the FUP's address;
//! - a TIP.PGD without FUP binds to the next instruction that would need
//!   trace (a syscall, in user-only tracing), or to its address;
//! - PSB+ carries status (time, the current IP when tracing is on); OVF
//!   resumes at the FUP after it;
//! - a tick marks the first branch whose packet came after a timing
//!   packet, so times bind to exact instructions.
//!
//! Anything the trace and the code disagree on is a decode error. After one
//! of the flow (code that cannot be read, trace that disagrees with it) the
//! walk resumes at the next packet that says where the flow is (a TIP, a
//! FUP, TIP.PGE, OVF), as perf's decoder does; after a bad packet, and
//! where a PSB comes first, at the next PSB, like libipt (which resyncs
//! only there: [`FlowDecoder::resync_at_psb_only`] does the same for the
//! tests that compare the two). Next after the trace consumed, not after
//! what the reader read ahead: a PSB+ read ahead for the failing
//! instruction is where the walk resumes, as a chunk cut there starts
//! (libipt syncs from where its reader is, which may be past it).
//!
//! The walk stops where the trace ends, as libipt's does, not at the next
//! instruction that would need trace. Intel's conformance traces (libipt's
//! pttc tests) are the model for the finer rules: MODE.TSX in PSB+ is
//! status and binds no FUP; outside it a begin or commit binds the FUP
//! after it, and an abort's FUP and TIP are an asynchronous branch; a
//! MODE.Exec binds the next TIP or FUP; CFE and TRIG with their IP bit bind
//! the FUP after them, and EVDs must precede the CFE they belong to; a
//! TIP.PGD without IP binds to a MOV CR3 too; `call $+5` pushes no return
//! address; the CPU's errata are applied as libipt applies them
//! ([`crate::pt::errata`]).
//!
//! The parts, one file each:
//! - `run_cache`: how an instruction moves control ([`Class`]), and the
//!   runs the walk follows, decoded once with iced-x86 and cached by
//!   address;
//! - `binding`: the packets read into events, and the single-stepping
//!   that takes the flow to where an event binds (a FUP's address, a
//!   TIP.PGD's instruction, a PSB's IP, a PIP's MOV CR3);
//! - `walk`: the walk itself, the state machine that follows runs from
//!   event to event, builds the blocks and resumes after an error;
//! - `memo`: what the walk did from an address with the same TNT bits
//!   ahead, recorded once and replayed after, so that a repeat costs one
//!   lookup per TNT packet instead of one per run;
//! - here: [`FlowDecoder`], its state and its public API;
//! - `tests` and `conformance` (tests only): hand-encoded traces checked
//!   against the blocks they must give and against libipt's decoders.

mod binding;
mod memo;
mod run_cache;
mod walk;

pub use memo::MemoFigures;

pub(crate) use run_cache::{disassemble, next_ip};

use crate::pt::block::{BlockItem, DecoderConfig, PtError};
use crate::pt::errata::Errata;
use crate::pt::memory::Memory;
use crate::pt::packet;

use binding::{Ev, Reader};
use run_cache::RunCache;
use walk::{Acc, Halt};

/// Our flow decoder over one PT buffer. Images are switched with
/// [`FlowDecoder::set_image`] (a per-CPU trace changes process).
pub struct FlowDecoder<'a> {
    trace: &'a [u8],
    cfg: DecoderConfig,
    errata: Errata,
    images: Vec<&'a Memory>,
    /// The runs of images not current (the current one's are in `cache`).
    caches: Vec<RunCache>,
    cur: Option<usize>,
    cache: RunCache,
    rd: Reader,
    /// The end of the last consumed event's packets.
    consumed: usize,
    ev: Ev,
    ev_tsc: Option<u64>,
    /// The time of the last consumed event.
    told_tsc: Option<u64>,
    enabled: bool,
    ip: u64,
    ret: [u64; 64],
    ret_top: usize,
    ret_len: usize,
    acc: Acc,
    /// A tick due after this block: the instruction it binds to, the time.
    tick: Option<(u64, u64)>,
    idle: u32,
    /// Where the last PSB read starts.
    psb_at: usize,
    /// The current event is a TSX abort's asynchronous branch or disable.
    ev_abort: bool,
    /// The last block reported ended at a branch (BDM64 asks).
    after_branch: bool,
    /// After a flow error, resume at the next IP the trace gives (as perf
    /// does), not at the next PSB (as libipt does).
    resume_at_ip: bool,
    /// Replay what the memo recorded ([`memo`]), or walk every run.
    memo: bool,
    /// Report a replayed memo entry whole ([`BlockItem::Entry`]).
    entries: bool,
    memo_figures: MemoFigures,
}

impl<'a> FlowDecoder<'a> {
    pub fn new(trace: &'a [u8], cfg: &DecoderConfig) -> FlowDecoder<'a> {
        FlowDecoder {
            trace,
            cfg: *cfg,
            errata: crate::pt::errata::of(cfg),
            images: Vec::new(),
            caches: Vec::new(),
            cur: None,
            cache: RunCache::new(),
            rd: Reader::at(0),
            consumed: 0,
            ev: Ev::Eos,
            ev_tsc: None,
            told_tsc: None,
            enabled: false,
            ip: 0,
            ret: [0; 64],
            ret_top: 0,
            ret_len: 0,
            acc: Acc::default(),
            tick: None,
            idle: 0,
            psb_at: 0,
            ev_abort: false,
            after_branch: false,
            resume_at_ip: true,
            memo: !cfg.no_memo,
            entries: false,
            memo_figures: MemoFigures::default(),
        }
    }

    /// A decoder over `trace` that keeps this one's images with the runs
    /// and memo entries it cached for them, and its options: the next
    /// chunk of a queue, walked by the same thread, does not decode the
    /// same code again. The caches hold only what the code does, so the
    /// walk gives what a fresh decoder's would.
    ///
    /// No image is current, as in a fresh decoder: a walk that sets none
    /// fails where a fresh one would, rather than reading the last chunk's.
    pub fn recycle(mut self, trace: &'a [u8]) -> FlowDecoder<'a> {
        let mut caches = std::mem::take(&mut self.caches);
        if let Some(cur) = self.cur {
            caches[cur] = self.cache;
        }
        FlowDecoder {
            images: self.images,
            caches,
            resume_at_ip: self.resume_at_ip,
            memo: self.memo,
            entries: self.entries,
            ..FlowDecoder::new(trace, &self.cfg)
        }
    }

    /// Decodes against `image` from now on; its runs stay cached for when
    /// it comes back.
    pub fn set_image(&mut self, image: &'a Memory) -> Result<(), PtError> {
        let i = match self.images.iter().position(|m| std::ptr::eq(*m, image)) {
            Some(i) => i,
            None => {
                self.images.push(image);
                self.caches.push(RunCache::new());
                self.images.len() - 1
            }
        };
        if self.cur != Some(i) {
            // The current image's runs live in `cache`; the others wait.
            if let Some(old) = self.cur {
                std::mem::swap(&mut self.cache, &mut self.caches[old]);
            }
            std::mem::swap(&mut self.cache, &mut self.caches[i]);
            self.cur = Some(i);
        }
        Ok(())
    }

    /// How far the trace has been consumed: PSBs before this offset are
    /// behind the blocks reported from now on.
    pub fn offset(&self) -> u64 {
        self.consumed as u64
    }

    /// While a PSB+'s status is being reported: just past that PSB, even
    /// if timing packets before it are not consumed yet.
    pub fn status_offset(&self) -> u64 {
        match self.ev {
            Ev::Psb(_) => self.consumed.max(self.psb_at + 1) as u64,
            _ => self.consumed as u64,
        }
    }

    /// The PSB whose PSB+ was read last (where the walk synced, at first).
    pub fn psb_entered(&self) -> Option<u64> {
        Some(self.psb_at as u64)
    }

    /// Walks the whole buffer, like [`crate::pt::ffi::BlockDecoder::walk`].
    pub fn walk(&mut self, mut on_item: impl FnMut(&mut Self, BlockItem) -> bool) {
        let mut from = 0;
        while let Some(p) = self.trace.get(from..).and_then(packet::find_psb) {
            let at = from + p;
            self.reset(at);
            if !on_item(self, BlockItem::Sync { offset: at as u64 }) {
                return;
            }
            let mut halt = self.fetch_first().and_then(|()| self.run(&mut on_item));
            loop {
                match halt {
                    Ok(()) | Err(Halt::Stop) => return,
                    Err(Halt::End) => {
                        let _ = self.end_block(&mut on_item);
                        return;
                    }
                    Err(Halt::Fail {
                        offset,
                        error,
                        ip,
                        resumable,
                    }) => {
                        // What ran before the failure still ran.
                        let ip = if self.acc.ninsn > 0 { None } else { ip };
                        if self.end_block(&mut on_item).is_err() {
                            return;
                        }
                        let item = BlockItem::Error { offset, error, ip };
                        if !on_item(self, item) {
                            return;
                        }
                        if resumable && self.resume_at_ip {
                            match self.resume(&mut on_item) {
                                Ok(true) => {
                                    halt = self.run(&mut on_item);
                                    continue;
                                }
                                // At a PSB: the walk syncs there.
                                Ok(false) => from = self.psb_at.max(at + 1),
                                Err(h) => {
                                    halt = Err(h);
                                    continue;
                                }
                            }
                        } else {
                            // Resync past the failure, and past this PSB at
                            // least.
                            from = (offset as usize).max(at + 1).min(self.trace.len());
                        }
                        break;
                    }
                }
            }
        }
    }

    /// Resyncs only at PSBs after an error, as libipt does (the tests that
    /// compare the two decoders item for item use it); by default the walk
    /// resumes at the next packet that gives the flow's IP, as perf does.
    pub fn resync_at_psb_only(&mut self) {
        self.resume_at_ip = false;
    }

    /// Walks every run, as the reference for the memo's replays (what
    /// `--no-memo` and [`DecoderConfig::no_memo`] ask for).
    pub fn without_memo(&mut self) {
        self.memo = false;
    }

    /// Reports each memo entry it replays as one [`BlockItem::Entry`]
    /// rather than block by block (`on`), for a walk that keeps what it
    /// made of an entry's blocks the first time. Such a walk never
    /// switches images while it takes an entry.
    pub fn report_entries(&mut self, on: bool) {
        self.entries = on;
    }

    /// How the memo fared so far.
    pub fn memo_figures(&self) -> MemoFigures {
        self.memo_figures
    }
}

// Intel's conformance traces, held to libipt as well as to their blocks.
#[cfg(all(test, feature = "libipt"))]
mod conformance;

#[cfg(test)]
mod tests;
