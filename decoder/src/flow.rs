//! Our own PT flow decoder: trace packets plus the process's code in, the
//! same [`BlockItem`]s as libipt's block decoder out, at several times its
//! speed.
//!
//! Why not just libipt: the coarse pass must be no slower than libipt's
//! block decoder walking the trace alone, and it does more than walk.
//! The speed comes from what the coarse pass does not need: it follows
//! *runs* (the instructions from an address up to the next branch),
//! decoded once with iced-x86 and cached by address, so a loop costs one
//! table lookup per branch; and it reads packets with our bounds-checked
//! parser ([`crate::packet`]).
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
//! ([`crate::errata`]).

use iced_x86::{
    Decoder, DecoderError, DecoderOptions, FlowControl, Instruction, Mnemonic, Register,
};

use crate::block::{Block, BlockEnd, BlockItem, DecoderConfig, PtError};
use crate::errata::Errata;
use crate::memory::Memory;
use crate::packet::{self, IpKind, Packet, PacketError};
use crate::timing::Time;

/// How an instruction moves control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Other,
    Call,
    IndirectCall,
    Return,
    Jump,
    IndirectJump,
    CondJump,
    /// syscall, sysenter, int, far call.
    FarCall,
    /// sysret, iret, far ret.
    FarReturn,
    FarJump,
    /// `mov cr3, reg`: no branch, but a TIP.PGD without an IP binds to it
    /// (tracing filtered by CR3 stops at the address-space switch).
    MovCr3,
}

impl Class {
    pub fn of(insn: &Instruction) -> Class {
        match insn.flow_control() {
            FlowControl::Next => {
                if insn.mnemonic() == Mnemonic::Mov && insn.op0_register() == Register::CR3 {
                    Class::MovCr3
                } else {
                    Class::Other
                }
            }
            FlowControl::XbeginXabortXend | FlowControl::Exception => Class::Other,
            FlowControl::UnconditionalBranch => {
                if insn.is_jmp_far() {
                    Class::FarJump
                } else {
                    Class::Jump
                }
            }
            FlowControl::IndirectBranch => {
                if insn.is_jmp_far_indirect() {
                    Class::FarJump
                } else {
                    Class::IndirectJump
                }
            }
            FlowControl::ConditionalBranch => Class::CondJump,
            FlowControl::Return => {
                if insn.mnemonic() == Mnemonic::Ret {
                    Class::Return
                } else {
                    Class::FarReturn
                }
            }
            FlowControl::Call => {
                if insn.is_call_near() {
                    Class::Call
                } else {
                    Class::FarCall
                }
            }
            FlowControl::IndirectCall => {
                if insn.is_call_near_indirect() {
                    Class::IndirectCall
                } else {
                    Class::FarCall
                }
            }
            FlowControl::Interrupt => Class::FarCall,
        }
    }

    /// The instruction consumes trace: a TNT bit or a TIP.
    fn needs_trace(self) -> bool {
        !matches!(
            self,
            Class::Other | Class::Call | Class::Jump | Class::MovCr3
        )
    }

    fn block_end(self) -> BlockEnd {
        match self {
            Class::Other | Class::MovCr3 => BlockEnd::Other,
            Class::Call | Class::IndirectCall => BlockEnd::Call,
            Class::Return => BlockEnd::Return,
            Class::Jump | Class::IndirectJump => BlockEnd::Jump,
            Class::CondJump => BlockEnd::CondJump,
            Class::FarCall => BlockEnd::FarCall,
            Class::FarReturn => BlockEnd::FarReturn,
            Class::FarJump => BlockEnd::FarJump,
        }
    }
}

/// The instructions from an address up to and including the first branch
/// (or up to where decoding stops).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    ninsn: u32,
    /// The last instruction's address.
    last: u64,
    /// The address after it.
    next: u64,
    /// A direct branch's target.
    target: u64,
    class: Class,
}

/// Runs of one image, by start address: open addressing, linear probing.
struct RunCache {
    keys: Vec<u64>,
    runs: Vec<Run>,
    len: usize,
    /// The mode its runs were decoded in: the same bytes are other
    /// instructions in 32- or 16-bit mode.
    bitness: u32,
}

const EMPTY: u64 = u64::MAX;
/// Runs stop after this many instructions, so a cache entry stays cheap to
/// re-walk when an event binds inside it.
const MAX_RUN: u32 = 4096;

impl RunCache {
    fn new() -> RunCache {
        RunCache {
            keys: vec![EMPTY; 1024],
            runs: vec![NO_RUN; 1024],
            len: 0,
            bitness: 64,
        }
    }

    /// Starts over for code run in `bitness`-bit mode (a MODE.Exec away:
    /// compatibility code, or a damaged trace).
    #[cold]
    fn switch_mode(&mut self, bitness: u32) {
        self.keys.fill(EMPTY);
        self.len = 0;
        self.bitness = bitness;
    }

    #[inline]
    fn slot(&self, ip: u64) -> usize {
        (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (self.keys.len() - 1)
    }

    #[inline]
    fn get(&self, ip: u64) -> Option<Run> {
        let mask = self.keys.len() - 1;
        let mut i = self.slot(ip);
        loop {
            let k = self.keys[i];
            if k == ip {
                return Some(self.runs[i]);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    fn insert(&mut self, ip: u64, run: Run) {
        if (self.len + 1) * 2 > self.keys.len() {
            let size = self.keys.len() * 2;
            let keys = std::mem::replace(&mut self.keys, vec![EMPTY; size]);
            let runs = std::mem::replace(&mut self.runs, vec![NO_RUN; size]);
            self.len = 0;
            for (k, r) in keys.into_iter().zip(runs) {
                if k != EMPTY {
                    self.insert(k, r);
                }
            }
        }
        let mask = self.keys.len() - 1;
        let mut i = self.slot(ip);
        while self.keys[i] != EMPTY && self.keys[i] != ip {
            i = (i + 1) & mask;
        }
        if self.keys[i] == EMPTY {
            self.len += 1;
        }
        self.keys[i] = ip;
        self.runs[i] = run;
    }
}

const NO_RUN: Run = Run {
    ninsn: 0,
    last: 0,
    next: 0,
    target: 0,
    class: Class::Other,
};

/// APX's JMPABS: the REX2 prefix with a zero payload (`D5 00`), opcode
/// `A1` and a 64-bit absolute target. iced-x86 does not decode it yet, so
/// we recognize it by hand; libipt takes it as an indirect jump whose TIP
/// gives the target (its immediate is not trusted), and so do we.
fn is_jmpabs(bytes: &[u8], bitness: u32) -> bool {
    bitness == 64 && bytes.len() >= JMPABS_LEN as usize && bytes[..3] == [0xd5, 0x00, 0xa1]
}

const JMPABS_LEN: u64 = 11;

/// One instruction as a run of its own.
fn one(insn: &Instruction) -> Run {
    let class = Class::of(insn);
    let target = if matches!(class, Class::Call | Class::Jump | Class::CondJump) {
        insn.near_branch_target()
    } else {
        0
    };
    Run {
        ninsn: 1,
        last: insn.ip(),
        next: insn.next_ip(),
        target,
        class,
    }
}

/// Decodes one instruction at `ip`, as a run of one. An instruction that
/// runs past the end of its section into the next one (two raw images
/// mapped back to back) is read across both, as libipt does.
fn decode_one(mem: &Memory, ip: u64, bitness: u32) -> Result<Run, PtError> {
    let bytes = mem.bytes_at(ip).ok_or(PtError::NOMAP)?;
    let mut dec = Decoder::with_ip(bitness, bytes, ip, DecoderOptions::NONE);
    let insn = dec.decode();
    if !insn.is_invalid() {
        return Ok(one(&insn));
    }
    if is_jmpabs(bytes, bitness) {
        return Ok(jmpabs(ip));
    }
    if dec.last_error() != DecoderError::NoMoreBytes {
        return Err(PtError::BAD_INSN);
    }
    // Cut off at the end of the section: the rest may be in the next.
    let mut buf = [0u8; 15];
    let n = mem.read(ip, &mut buf);
    if n > bytes.len() {
        let mut dec = Decoder::with_ip(bitness, &buf[..n], ip, DecoderOptions::NONE);
        let insn = dec.decode();
        if !insn.is_invalid() {
            return Ok(one(&insn));
        }
        if is_jmpabs(&buf[..n], bitness) {
            return Ok(jmpabs(ip));
        }
        if dec.last_error() != DecoderError::NoMoreBytes {
            return Err(PtError::BAD_INSN);
        }
    }
    // The rest is not there.
    Err(PtError::NOMAP)
}

/// Where the instruction at `ip` ends, read as the walk reads it: across
/// two images mapped back to back, and APX's JMPABS too, which iced-x86
/// does not know. `None` if it cannot be read.
pub(crate) fn next_ip(mem: &Memory, ip: u64, bitness: u32) -> Option<u64> {
    decode_one(mem, ip, bitness).ok().map(|r| r.next)
}

/// Intel-syntax text of the instruction at `ip`, read as [`next_ip`]
/// reads it.
pub(crate) fn disassemble(mem: &Memory, ip: u64, bitness: u32) -> Option<String> {
    let mut buf = [0u8; 15];
    let n = mem.read(ip, &mut buf);
    let bytes = &buf[..n];
    let insn = Decoder::with_ip(bitness, bytes, ip, DecoderOptions::NONE).decode();
    if !insn.is_invalid() {
        let mut out = String::new();
        iced_x86::Formatter::format(&mut iced_x86::IntelFormatter::new(), &insn, &mut out);
        return Some(out);
    }
    is_jmpabs(bytes, bitness).then(|| {
        let target = u64::from_le_bytes(bytes[3..11].try_into().expect("eight bytes"));
        format!("jmpabs {target:016X}h")
    })
}

fn jmpabs(ip: u64) -> Run {
    Run {
        ninsn: 1,
        last: ip,
        next: ip + JMPABS_LEN,
        target: 0,
        class: Class::IndirectJump,
    }
}

/// Decodes the run at `ip`.
fn decode_run(mem: &Memory, ip: u64, bitness: u32) -> Result<Run, PtError> {
    let bytes = mem.bytes_at(ip).ok_or(PtError::NOMAP)?;
    let mut dec = Decoder::with_ip(bitness, bytes, ip, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut run = Run { next: ip, ..NO_RUN };
    while dec.can_decode() && run.ninsn < MAX_RUN {
        dec.decode_out(&mut insn);
        if insn.is_invalid() {
            break;
        }
        run.ninsn += 1;
        run.last = insn.ip();
        run.next = insn.next_ip();
        let class = Class::of(&insn);
        if class != Class::Other {
            run.class = class;
            if matches!(class, Class::Call | Class::Jump | Class::CondJump) {
                run.target = insn.near_branch_target();
            }
            return Ok(run);
        }
    }
    if run.ninsn == 0 {
        // An instruction iced-x86 does not know, one cut off by the end of
        // its section, or an error, which comes from that instruction.
        return decode_one(mem, ip, bitness);
    }
    Ok(run)
}

/// A decoded trace event, waiting for the instruction it binds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Tnt {
        bits: u64,
        count: u8,
    },
    Tip(Option<u64>),
    Pge(u64),
    Pgd(Option<u64>),
    AsyncBranch {
        from: u64,
        to: u64,
    },
    AsyncDisabled {
        at: u64,
    },
    Overflow(Option<u64>),
    /// PSB+: the IP its FUP gave, if tracing is on.
    Psb(Option<u64>),
    /// The trace ends after a FUP bound to a status event (a TSX begin or
    /// commit, a PTWRITE, a MODE.Exec, …): the flow goes on to its IP,
    /// where libipt binds the event, and stops there; past it if `after`
    /// (a PTWRITE's FUP names the PTWRITE, which ran).
    Bound {
        ip: u64,
        after: bool,
    },
    /// The trace ends after `pips` PIPs read while tracing was on: each
    /// binds to the next MOV CR3 the flow runs, so the flow goes on
    /// through that many, as libipt's does, and stops after the last (or
    /// where the code runs out).
    Cr3 {
        pips: u32,
    },
    Eos,
}

/// A direct call pushes its return address, unless it calls the next
/// instruction: `call $+5` reads the IP in position-independent code and
/// never returns, and the hardware does not push it for return compression
/// (nor does libipt).
#[inline]
fn push_call(dec: &mut FlowDecoder<'_>, next: u64, target: u64) {
    if target != next {
        dec.push_ret(next);
    }
}

/// Why a walk stopped before the end.
enum Halt {
    /// The caller asked to stop.
    Stop,
    /// The trace ended.
    End,
    Fail {
        offset: u64,
        error: PtError,
        ip: Option<u64>,
        /// The packets are sound, only the flow is lost (code that cannot
        /// be read, or trace that disagrees with it): the walk may resume
        /// at the next packet that says where the flow is.
        resumable: bool,
    },
}

/// The block being built.
#[derive(Clone, Copy, Default)]
struct Acc {
    ip: u64,
    ninsn: u32,
    last: u64,
    end: Option<Class>,
    /// The mode its instructions were decoded in.
    bitness: u8,
}

/// Consecutive runs without trace before we call it an endless loop: real
/// code needs a TNT or TIP long before (a loop without one never ends).
/// Each such stretch ends in a resync at the next PSB, so a damaged trace
/// can cost this much per PSB (16 bytes): small enough that a crafted
/// file of thousands of PSBs still decodes in seconds.
const MAX_IDLE_RUNS: u32 = 1 << 16;

/// Instructions single-stepped towards an asynchronous event's address:
/// counted one by one, so the limit is higher than for runs (a long
/// stretch of straight-line code may precede an interrupt).
const MAX_STEP_INSNS: u32 = 1 << 20;

/// Instructions stepped towards a PSB's address. A sound trace gets there
/// within a stretch of code without branches that need trace, which is
/// short; a damaged one may never, and may hold a PSB every 16 bytes.
const MAX_PSB_STEP_INSNS: u32 = 1 << 13;

// Event Trace's CFE types and EVD types (libipt's `pt_cfe_type`,
// `pt_evd_type`), and what an EVD expects of the CFE after it.
const CFE_INTR: u8 = 0x01;
const CFE_RSM: u8 = 0x04;
const CFE_SIPI: u8 = 0x05;
const CFE_VMEXIT: u8 = 0x08;
const CFE_VMEXIT_INTR: u8 = 0x09;
const EVD_CR2: u8 = 0;
const EVD_VMXQ: u8 = 1;
const EVD_VMXR: u8 = 2;
const CFE_DUE_INTR: u8 = 1;
const CFE_DUE_VMXQ: u8 = 2;
const CFE_DUE_VMXR: u8 = 4;

/// Packet-reading state that a look-ahead may have to undo.
#[derive(Clone, Copy)]
struct Reader {
    pos: usize,
    last_ip: u64,
    time: Time,
    /// The next FUP belongs to the packet before it (TSX, PTW, EXSTOP, CFE,
    /// TRIG).
    fup_bound: bool,
    /// Whether the packets read so far leave tracing on (PacketEn, as the
    /// packets say it, ahead of the flow): a MODE.TSX binds the FUP after
    /// it only while tracing is on.
    tracing: bool,
    /// A MODE.TSX abort was read: the next FUP is the abort's.
    tsx_abort: bool,
    /// The last asynchronous event read is a TSX abort.
    async_abort: bool,
    /// Event Trace: what the EVDs read so far expect of the CFE they
    /// precede (`CFE_DUE_*` bits).
    cfe_due: u8,
    /// A MODE.Exec outside PSB+ waits for the packet it binds to: the next
    /// TIP, TIP.PGE or TIP.PGD, or a FUP (with Event Trace, an IF change's
    /// MODE.Exec comes with one), which is then no event of its own.
    mode_bound: bool,
    /// The IP of the last FUP read that belongs to the packet before it,
    /// since the last event: where the flow is bound to go if the trace
    /// ends here, and whether the instruction there ran (PTWRITE).
    bound_ip: Option<(u64, bool)>,
    /// The FUP bound next is a PTWRITE's.
    ptw_bound: bool,
    /// PIPs read outside PSB+ with tracing on since the last event: the
    /// MOV CR3s they bind to ran ([`Ev::Cr3`]).
    pips: u32,
    /// The flow is lost after an error: a bound FUP is an event of its own
    /// ([`Ev::Bound`]), where the flow resumes.
    resuming: bool,
    bitness: u32,
}

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
}

impl<'a> FlowDecoder<'a> {
    pub fn new(trace: &'a [u8], cfg: &DecoderConfig) -> FlowDecoder<'a> {
        FlowDecoder {
            trace,
            cfg: *cfg,
            errata: Errata::of(cfg),
            images: Vec::new(),
            caches: Vec::new(),
            cur: None,
            cache: RunCache::new(),
            rd: Reader {
                pos: 0,
                last_ip: 0,
                time: Time::default(),
                fup_bound: false,
                mode_bound: false,
                tracing: false,
                tsx_abort: false,
                async_abort: false,
                cfe_due: 0,
                bound_ip: None,
                ptw_bound: false,
                pips: 0,
                resuming: false,
                bitness: 64,
            },
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

    /// Walks the whole buffer, like [`crate::ffi::BlockDecoder::walk`].
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

    /// After a flow error (the packets are sound: code that cannot be read,
    /// say, a binary or the kernel missing): resumes where the trace next
    /// says where the flow is, as perf's decoder does, rather than at the
    /// next PSB, which may be far. A TIP gives the flow's IP (tracing is on
    /// there: [`BlockItem::Enabled`]); a FUP and the TIP after it, an
    /// asynchronous branch (or disable) from the FUP's IP; a FUP bound to a
    /// status event (a PTWRITE, a MODE.Exec) gives the IP where it binds;
    /// TIP.PGE and OVF resume as they always do; a TIP.PGD says tracing is off. TNT bits
    /// mean nothing without the flow and are skipped. This is what libipt
    /// 2.2's resync (`ptxed --resync-on-error`) does too. The trace's last
    /// IP is sound, so a TIP whose IP is compressed against it is as good
    /// as a full one. Whole walks
    /// and chunks resume alike, since what happens depends only on the
    /// packets since the last PSB. False at a PSB: the walk syncs there.
    fn resume<F: FnMut(&mut Self, BlockItem) -> bool>(&mut self, f: &mut F) -> Result<bool, Halt> {
        // The hardware's calls since the lost flow are unknown.
        self.ret_len = 0;
        self.acc = Acc::default();
        self.tick = None;
        self.idle = 0;
        // A bound FUP read with the current event came after the flow was
        // lost: the flow is there first.
        if let Some((ip, _)) = self.rd.bound_ip.take() {
            return self.resume_at(ip, f);
        }
        self.rd.resuming = true;
        let resumed = self.resume_at_next(f);
        self.rd.resuming = false;
        resumed
    }

    /// The flow is found again at `ip`, tracing on: said so.
    fn resume_at<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        ip: u64,
        f: &mut F,
    ) -> Result<bool, Halt> {
        self.enabled = true;
        self.ip = ip;
        let item = BlockItem::Enabled {
            ip,
            status_update: false,
            tsc: self.ev_time(),
        };
        self.emit(f, item)?;
        Ok(true)
    }

    fn resume_at_next<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<bool, Halt> {
        loop {
            let tsc = self.ev_time();
            match self.ev {
                Ev::Psb(_) => return Ok(false),
                Ev::Eos | Ev::Cr3 { .. } => return Err(Halt::End),
                // The event binds here: the walk takes it next.
                Ev::Bound { ip, .. } => return self.resume_at(ip, f),
                Ev::Tip(Some(ip)) => {
                    self.resume_at(ip, f)?;
                    self.consume()?;
                    return Ok(true);
                }
                // The flow is at the FUP's IP: the event reports next.
                Ev::AsyncBranch { from: at, .. } | Ev::AsyncDisabled { at } => {
                    return self.resume_at(at, f)
                }
                Ev::Pge(_) | Ev::Overflow(_) => {
                    self.enabled = false;
                    return Ok(true);
                }
                // Tracing goes off: said, as libipt says it, and the walk
                // goes on with tracing off.
                Ev::Pgd(ip) => {
                    self.enabled = false;
                    let item = BlockItem::Disabled {
                        ip,
                        tsc,
                        status_update: false,
                    };
                    self.emit(f, item)?;
                    self.consume()?;
                    return Ok(true);
                }
                Ev::Tnt { .. } | Ev::Tip(None) => {
                    self.enabled = false;
                    self.consume()?;
                }
            }
        }
    }

    fn reset(&mut self, at: usize) {
        self.rd = Reader {
            pos: at,
            last_ip: 0,
            time: Time::default(),
            fup_bound: false,
            mode_bound: false,
            tracing: false,
            tsx_abort: false,
            async_abort: false,
            cfe_due: 0,
            bound_ip: None,
            ptw_bound: false,
            pips: 0,
            resuming: false,
            bitness: 64,
        };
        self.consumed = at;
        self.psb_at = at;
        self.ev = Ev::Eos;
        self.ev_tsc = None;
        self.told_tsc = None;
        self.enabled = false;
        self.ip = 0;
        self.ret_len = 0;
        self.acc = Acc::default();
        self.tick = None;
        self.idle = 0;
    }

    fn fail(&self, error: PtError, ip: Option<u64>) -> Halt {
        Halt::Fail {
            offset: self.rd.pos as u64,
            error,
            ip,
            resumable: false,
        }
    }

    /// A failure of the flow, not of the packets: it is where the trace
    /// was consumed, not where the reader has read ahead to. The event
    /// read ahead may be a PSB+, which the walk resyncs at, as a chunk
    /// that ends there and one that starts there do.
    fn fail_flow(&self, error: PtError, ip: Option<u64>) -> Halt {
        Halt::Fail {
            offset: self.consumed as u64,
            error,
            ip,
            resumable: true,
        }
    }

    // ---- packets to events ----

    fn fetch_first(&mut self) -> Result<(), Halt> {
        self.ev = self.fetch()?;
        self.ev_tsc = self.rd.time.tsc();
        self.ev_abort = matches!(self.ev, Ev::AsyncBranch { .. } | Ev::AsyncDisabled { .. })
            && self.rd.async_abort;
        match self.ev {
            Ev::Pge(_) => self.rd.tracing = true,
            Ev::Pgd(_) | Ev::AsyncDisabled { .. } => self.rd.tracing = false,
            Ev::Psb(ip) | Ev::Overflow(ip) => self.rd.tracing = ip.is_some(),
            _ => {}
        }
        Ok(())
    }

    /// The current event is used up: the next one becomes current.
    fn consume(&mut self) -> Result<(), Halt> {
        self.told_tsc = self.ev_tsc;
        self.consumed = self.rd.pos;
        self.idle = 0;
        self.fetch_first()
    }

    fn read_ip(&mut self, ipb: u8, payload: u64) -> Option<u64> {
        let ip = packet::expand_ip(self.rd.last_ip, ipb, payload)?;
        self.rd.last_ip = ip;
        Some(ip)
    }

    /// Reads the next packet; `None` at the end of the trace.
    fn packet(&mut self) -> Result<Option<Packet>, Halt> {
        let Some(rest) = self.trace.get(self.rd.pos..).filter(|r| !r.is_empty()) else {
            return Ok(None);
        };
        match packet::parse_with(rest, &self.errata) {
            Ok((p, n)) => {
                self.rd.pos += n;
                Ok(Some(p))
            }
            // A packet cut off by the end of the buffer ends the trace.
            Err(PacketError::Truncated) => Ok(None),
            // SKD007 and SKZ84 corrupt bytes libipt skips.
            Err(PacketError::Erratum { skip, .. }) => {
                self.rd.pos += skip;
                self.packet()
            }
            Err(PacketError::Unknown(_)) => Err(self.fail(PtError::BAD_OPC, None)),
        }
    }

    /// Applies a packet that carries state but no event; false if it is
    /// not one of those.
    fn status(&mut self, p: &Packet) -> bool {
        let cfg = self.cfg;
        let t = &mut self.rd.time;
        match *p {
            Packet::Pad
            | Packet::PsbEnd
            | Packet::Pip { .. }
            | Packet::Vmcs(_)
            | Packet::Mnt(_)
            | Packet::Mwait { .. }
            | Packet::Pwre { .. }
            | Packet::Pwrx { .. }
            | Packet::Stop => {}
            Packet::Tsc(v) => t.on_tsc(v),
            Packet::Mtc(v) => t.on_mtc(v, &cfg),
            Packet::Tma { ctc, fc } => t.on_tma(ctc, fc, &cfg),
            Packet::Cyc(v) => t.on_cyc(v, &cfg),
            Packet::Cbr(v) => t.on_cbr(v),
            Packet::ModeExec { csl, csd, .. } => {
                self.rd.mode_bound = true;
                self.rd.bitness = if csl {
                    64
                } else if csd {
                    32
                } else {
                    16
                };
            }
            // A begin or commit binds the FUP after it (a TSX event at that
            // IP, no branch); an abort's FUP starts an asynchronous branch
            // to the abort handler, or a disable, like an interrupt's.
            // While tracing is off, MODE.TSX stands alone.
            Packet::ModeTsx { abort, .. } => {
                self.rd.fup_bound |= !abort && self.rd.tracing;
                self.rd.tsx_abort = abort && self.rd.tracing;
            }
            Packet::Exstop { ip } => self.rd.fup_bound |= ip,
            Packet::Ptw { ipb, .. } => {
                self.rd.fup_bound |= ipb != 0;
                self.rd.ptw_bound = ipb != 0;
            }
            Packet::Trig { ip, .. } => self.rd.fup_bound |= ip,
            _ => return false,
        }
        true
    }

    /// Event Trace's CFE and the EVDs before it, checked for the orders
    /// libipt accepts: a page fault's CR2 only for an interrupt, a VM
    /// exit's qualification and reason once each and only for a VM exit,
    /// and no EVD for any other CFE. A CFE with its IP bit binds the FUP
    /// after it.
    fn event_trace(&mut self, p: &Packet) -> Result<(), Halt> {
        let due = self.rd.cfe_due;
        match *p {
            Packet::Evd { kind, .. } => {
                self.rd.cfe_due = match kind {
                    EVD_CR2 if due == 0 => CFE_DUE_INTR,
                    EVD_VMXQ | EVD_VMXR => {
                        let bit = if kind == EVD_VMXQ {
                            CFE_DUE_VMXQ
                        } else {
                            CFE_DUE_VMXR
                        };
                        if due & !(CFE_DUE_VMXQ | CFE_DUE_VMXR) != 0 || due & bit != 0 {
                            return Err(self.fail(PtError::BAD_CONTEXT, None));
                        }
                        due | bit
                    }
                    // Unknown EVDs add what a decoder may ignore.
                    EVD_CR2 => return Err(self.fail(PtError::BAD_CONTEXT, None)),
                    _ => due,
                };
            }
            Packet::Cfe { ip, kind, .. } => {
                self.rd.cfe_due = 0;
                let fits = match kind {
                    CFE_INTR => due & !CFE_DUE_INTR == 0,
                    CFE_VMEXIT | CFE_VMEXIT_INTR => due & CFE_DUE_INTR == 0,
                    _ => due == 0,
                };
                if !fits {
                    return Err(self.fail(PtError::BAD_CONTEXT, None));
                }
                // RSM and SIPI have no IP to give.
                if ip && matches!(kind, CFE_RSM | CFE_SIPI) {
                    return Err(self.fail(PtError::BAD_PACKET, None));
                }
                self.rd.fup_bound |= ip;
            }
            _ => unreachable!("event_trace takes CFE and EVD"),
        }
        Ok(())
    }

    /// Reads packets up to the next event.
    fn fetch(&mut self) -> Result<Ev, Halt> {
        self.rd.bound_ip = None;
        self.rd.pips = 0;
        loop {
            // The common packets first, without the general parser: short
            // TNT and CYC make up most of a trace.
            if let Some(&b0) = self.trace.get(self.rd.pos) {
                if b0 & 1 == 0 && b0 > 2 {
                    self.rd.pos += 1;
                    let payload = (b0 >> 1) as u64;
                    let count = 63 - payload.leading_zeros() as u8;
                    return Ok(Ev::Tnt {
                        bits: payload & ((1 << count) - 1),
                        count,
                    });
                }
                if b0 & 0x07 == 0x03 {
                    // A one-byte CYC.
                    self.rd.pos += 1;
                    let cfg = self.cfg;
                    self.rd.time.on_cyc((b0 >> 3) as u64, &cfg);
                    continue;
                }
            }
            let Some(p) = self.packet()? else {
                return Ok(match self.rd.bound_ip.take() {
                    Some((ip, after)) => Ev::Bound { ip, after },
                    None if self.rd.pips > 0 => Ev::Cr3 {
                        pips: std::mem::take(&mut self.rd.pips),
                    },
                    None => Ev::Eos,
                });
            };
            if let (Packet::Pip { .. }, true) = (&p, self.rd.tracing) {
                self.rd.pips += 1;
                continue;
            }
            if self.status(&p) {
                continue;
            }
            match p {
                Packet::Tnt { bits, count, .. } => {
                    if count > 0 {
                        return Ok(Ev::Tnt { bits, count });
                    }
                }
                Packet::Tip { kind, ipb, payload } => {
                    let ip = self.read_ip(ipb, payload);
                    let mode_bound = std::mem::take(&mut self.rd.mode_bound);
                    match kind {
                        IpKind::Tip => return Ok(Ev::Tip(ip)),
                        IpKind::TipPge => {
                            return ip.map(Ev::Pge).ok_or(self.fail(PtError::NOIP, None));
                        }
                        IpKind::TipPgd => return Ok(Ev::Pgd(ip)),
                        IpKind::Fup => {
                            if std::mem::take(&mut self.rd.fup_bound) | mode_bound {
                                let after = std::mem::take(&mut self.rd.ptw_bound);
                                if self.rd.tracing {
                                    self.rd.bound_ip = ip.map(|ip| (ip, after));
                                    if let (true, Some(ip)) = (self.rd.resuming, ip) {
                                        return Ok(Ev::Bound { ip, after });
                                    }
                                }
                                continue;
                            }
                            let from = ip.ok_or(self.fail(PtError::NOIP, None))?;
                            self.rd.async_abort = std::mem::take(&mut self.rd.tsx_abort);
                            return self.async_event(from);
                        }
                    }
                }
                Packet::Cfe { .. } | Packet::Evd { .. } => self.event_trace(&p)?,
                Packet::Ovf => return self.overflow(),
                Packet::Psb => return self.psb(),
                _ => return Err(self.fail(PtError::BAD_OPC, None)),
            }
        }
    }

    /// After a FUP at `from`: the TIP or TIP.PGD that completes it.
    fn async_event(&mut self, from: u64) -> Result<Ev, Halt> {
        loop {
            let Some(p) = self.packet()? else {
                return Ok(Ev::Eos);
            };
            if self.status(&p) {
                continue;
            }
            match p {
                Packet::Tip {
                    kind: IpKind::Tip,
                    ipb,
                    payload,
                } => {
                    self.rd.mode_bound = false;
                    let to = self
                        .read_ip(ipb, payload)
                        .ok_or(self.fail(PtError::NOIP, None))?;
                    return Ok(Ev::AsyncBranch { from, to });
                }
                Packet::Tip {
                    kind: IpKind::TipPgd,
                    ipb,
                    payload,
                } => {
                    self.rd.mode_bound = false;
                    self.read_ip(ipb, payload);
                    return Ok(Ev::AsyncDisabled { at: from });
                }
                Packet::Ovf => return self.overflow(),
                // The FUP's TIP never came (a damaged trace, or a FUP while
                // tracing was off): a PSB starts afresh, as a chunk cut
                // there does, so the FUP is dropped rather than failing the
                // PSB+ after it.
                Packet::Psb => return self.psb(),
                Packet::Cfe { .. } | Packet::Evd { .. } => self.event_trace(&p)?,
                _ => return Err(self.fail(PtError::BAD_CONTEXT, None)),
            }
        }
    }

    /// After OVF: tracing resumes at a FUP's address, or at a later enable.
    fn overflow(&mut self) -> Result<Ev, Halt> {
        loop {
            let before = self.rd;
            let Some(p) = self.packet()? else {
                return Ok(Ev::Overflow(None));
            };
            match p {
                Packet::Tip {
                    kind: IpKind::Fup,
                    ipb,
                    payload,
                } => {
                    self.rd.mode_bound = false;
                    // APL12: a FUP although tracing is off after all.
                    if self.errata.apl12 && self.ovf_fup_is_spurious() {
                        return Ok(Ev::Overflow(None));
                    }
                    return Ok(Ev::Overflow(self.read_ip(ipb, payload)));
                }
                // APL11: a TIP.PGD after the OVF: tracing is off.
                Packet::Tip {
                    kind: IpKind::TipPgd,
                    ..
                } if self.errata.apl11 => return Ok(Ev::Overflow(None)),
                // Maintenance packets may come between OVF and its FUP.
                Packet::Mnt(_)
                | Packet::Tsc(_)
                | Packet::Mtc(_)
                | Packet::Tma { .. }
                | Packet::Cyc(_)
                | Packet::Cbr(_)
                | Packet::Pad
                | Packet::ModeExec { .. } => {
                    self.status(&p);
                }
                _ => {
                    // Not ours: leave it for the next fetch.
                    self.rd = before;
                    if self.errata.skd010 {
                        return self.skd010();
                    }
                    return Ok(Ev::Overflow(None));
                }
            }
        }
    }

    /// SKD010: the FUP after an OVF may be missing although tracing is on.
    /// What comes later tells: a TIP or a FUP (after a MODE.TSX, say), or a
    /// PSB+ with a FUP, gives the IP to resume at; a TIP.PGD says tracing
    /// went off (it is used up); a TIP.PGE, a TNT and the like that the
    /// erratum does not explain leave the overflow with tracing off, as
    /// without the erratum.
    fn skd010(&mut self) -> Result<Ev, Halt> {
        let before = self.rd;
        let mut tsx = false;
        let off = |dec: &mut Self| {
            dec.rd = before;
            Ok(Ev::Overflow(None))
        };
        loop {
            let Some(p) = self.packet()? else {
                return off(self);
            };
            match p {
                Packet::Tip {
                    kind: IpKind::TipPgd,
                    ipb,
                    payload,
                } => {
                    self.read_ip(ipb, payload);
                    self.rd.mode_bound = false;
                    return Ok(Ev::Overflow(None));
                }
                Packet::Tip {
                    kind: IpKind::Tip | IpKind::Fup,
                    ipb,
                    payload,
                } => {
                    self.rd.mode_bound = false;
                    self.rd.fup_bound = false;
                    let ip = self.read_ip(ipb, payload);
                    return if ip.is_some() {
                        Ok(Ev::Overflow(ip))
                    } else {
                        off(self)
                    };
                }
                Packet::ModeTsx { .. } if !tsx => tsx = true,
                Packet::Psb => {
                    // Resume at the FUP of this PSB+, which is read next.
                    let psb = self.rd.pos - packet::PSB_BYTES.len();
                    let fup =
                        self.peek()
                            .take_while(|p| *p != Packet::PsbEnd)
                            .find_map(|p| match p {
                                Packet::Tip {
                                    kind: IpKind::Fup,
                                    ipb: ipb @ (3 | 6),
                                    payload,
                                } => packet::expand_ip(0, ipb, payload),
                                _ => None,
                            });
                    return match fup {
                        Some(ip) => {
                            self.rd.pos = psb;
                            Ok(Ev::Overflow(Some(ip)))
                        }
                        None => off(self),
                    };
                }
                Packet::PsbEnd => return Err(self.fail(PtError::BAD_CONTEXT, None)),
                Packet::Pip { .. }
                | Packet::Vmcs(_)
                | Packet::ModeExec { .. }
                | Packet::Pad
                | Packet::Mnt(_)
                | Packet::Pwre { .. }
                | Packet::Pwrx { .. }
                | Packet::Evd { .. }
                | Packet::Tsc(_)
                | Packet::Mtc(_)
                | Packet::Tma { .. }
                | Packet::Cyc(_)
                | Packet::Cbr(_) => {
                    self.status(&p);
                }
                _ => return off(self),
            }
        }
    }

    /// The packets from the reader on, without reading them: `None` at
    /// the end or at a packet that does not parse.
    fn peek(&self) -> impl Iterator<Item = Packet> + '_ {
        let mut pos = self.rd.pos;
        std::iter::from_fn(move || {
            let (p, n) = packet::parse(self.trace.get(pos..)?).ok()?;
            pos += n;
            Some(p)
        })
    }

    /// BDM70: whether a TIP.PGE comes next, but for status packets.
    fn pge_follows(&self) -> bool {
        for p in self.peek() {
            match p {
                Packet::Tip {
                    kind: IpKind::TipPge,
                    ..
                } => return true,
                Packet::Pad
                | Packet::Tsc(_)
                | Packet::Cbr(_)
                | Packet::PsbEnd
                | Packet::Pip { .. }
                | Packet::ModeExec { .. }
                | Packet::ModeTsx { .. }
                | Packet::Vmcs(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_)
                | Packet::Mnt(_) => {}
                _ => return false,
            }
        }
        false
    }

    /// APL12: whether the FUP just read after an OVF is spurious: tracing
    /// is off, as a TIP.PGE, a STOP or a PSB+ without FUP says before any
    /// packet that needs it on.
    fn ovf_fup_is_spurious(&self) -> bool {
        let mut it = self.peek();
        while let Some(p) = it.next() {
            match p {
                Packet::Tnt { .. }
                | Packet::PsbEnd
                | Packet::Ovf
                | Packet::Tip {
                    kind: IpKind::Tip | IpKind::TipPgd,
                    ..
                } => return false,
                Packet::Stop
                | Packet::Tip {
                    kind: IpKind::TipPge,
                    ..
                } => return true,
                Packet::Psb => {
                    // Spurious if that PSB+ holds no FUP.
                    for p in it.by_ref() {
                        match p {
                            Packet::Tip {
                                kind: IpKind::Fup, ..
                            } => return false,
                            Packet::PsbEnd => return true,
                            _ => {}
                        }
                    }
                    return false;
                }
                _ => {}
            }
        }
        false
    }

    /// PSB+: status packets up to PSBEND.
    fn psb(&mut self) -> Result<Ev, Halt> {
        let mut ip = None;
        let mut restart = true;
        loop {
            if std::mem::take(&mut restart) {
                self.psb_at = self.rd.pos.saturating_sub(packet::PSB_BYTES.len());
                self.rd.last_ip = 0;
                self.rd.fup_bound = false;
                self.rd.mode_bound = false;
                self.rd.cfe_due = 0;
                // What PSB+ restates starts over, as where a decoder syncs.
                self.rd.time.on_psb();
                self.rd.bitness = 64;
                ip = None;
            }
            let Some(p) = self.packet()? else {
                return Ok(Ev::Eos);
            };
            match p {
                Packet::PsbEnd => {
                    // PSB+'s MODE.Exec is status: it binds nothing after.
                    self.rd.mode_bound = false;
                    // BDM70: a FUP in PSB+ that a TIP.PGE follows.
                    if ip.is_some() && self.errata.bdm70 && self.pge_follows() {
                        ip = None;
                    }
                    return Ok(Ev::Psb(ip));
                }
                // A PSB+ cut short by another PSB (damaged): the new one
                // starts afresh, as a decoder that syncs there does.
                Packet::Psb => restart = true,
                Packet::Tip {
                    kind: IpKind::Fup,
                    ipb,
                    payload,
                } => ip = self.read_ip(ipb, payload),
                // An overflow inside PSB+ with tracing on: the status it
                // gave so far first, as libipt reports it, then the OVF
                // (read again: it is two bytes).
                Packet::Ovf if ip.is_some() => {
                    self.rd.pos -= 2;
                    self.rd.mode_bound = false;
                    return Ok(Ev::Psb(ip));
                }
                Packet::Ovf => return self.overflow(),
                // MODE.TSX in PSB+ is status (tracing is on inside a
                // transaction): it binds no FUP, neither PSB+'s own nor the
                // next one, which starts an event of its own.
                Packet::ModeTsx { .. } => {}
                p if self.status(&p) => {}
                _ => return Err(self.fail(PtError::BAD_CONTEXT, None)),
            }
        }
    }

    // ---- the flow ----

    fn emit<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
        item: BlockItem,
    ) -> Result<(), Halt> {
        if f(self, item) {
            Ok(())
        } else {
            Err(Halt::Stop)
        }
    }

    /// Reports the block built so far, then a pending tick.
    fn end_block<F: FnMut(&mut Self, BlockItem) -> bool>(&mut self, f: &mut F) -> Result<(), Halt> {
        let a = std::mem::take(&mut self.acc);
        if a.ninsn > 0 {
            let end = a.end.unwrap_or(Class::Other);
            self.after_branch = !matches!(end, Class::Other | Class::MovCr3);
            self.emit(
                f,
                BlockItem::Block(Block {
                    ip: a.ip,
                    end_ip: a.last,
                    ninsn: a.ninsn,
                    end: end.block_end(),
                    bitness: a.bitness,
                }),
            )?;
        }
        if let Some((ip, tsc)) = self.tick.take() {
            self.emit(f, BlockItem::Tick { ip: Some(ip), tsc })?;
        }
        Ok(())
    }

    fn add(&mut self, start: u64, ninsn: u32, last: u64, class: Class) {
        if self.acc.ninsn == 0 {
            self.acc.ip = start;
            self.acc.bitness = self.rd.bitness as u8;
        }
        self.acc.ninsn += ninsn;
        self.acc.last = last;
        self.acc.end = Some(class);
    }

    /// Drops the last instruction added (it needed trace that never came).
    fn unadd(&mut self) {
        self.acc.ninsn -= 1;
        self.acc.end = None;
    }

    fn push_ret(&mut self, ip: u64) {
        self.ret[self.ret_top] = ip;
        self.ret_top = (self.ret_top + 1) % self.ret.len();
        self.ret_len = (self.ret_len + 1).min(self.ret.len());
    }

    /// At a PSB, when the flow gets there: the hardware compresses only
    /// returns from calls made since the last PSB (as perf's decoder also
    /// assumes), so a walk that arrives here decodes on as one that syncs
    /// here (on a damaged trace, unless direct calls lie between the flow
    /// and the PSB's FUP address). Not when the reader reads the PSB: that
    /// happens as the TNT before it runs out, and its last bit may be a
    /// return still to be popped.
    fn forget_calls(&mut self) {
        self.ret_len = 0;
    }

    fn pop_ret(&mut self) -> Option<u64> {
        if self.ret_len == 0 {
            return None;
        }
        self.ret_len -= 1;
        self.ret_top = (self.ret_top + self.ret.len() - 1) % self.ret.len();
        Some(self.ret[self.ret_top])
    }

    #[inline]
    fn run_at(&mut self, ip: u64) -> Result<Run, Halt> {
        if self.cache.bitness != self.rd.bitness {
            self.cache.switch_mode(self.rd.bitness);
        }
        if let Some(r) = self.cache.get(ip) {
            return Ok(r);
        }
        self.decode_run_at(ip)
    }

    #[cold]
    fn decode_run_at(&mut self, ip: u64) -> Result<Run, Halt> {
        let Some(cur) = self.cur else {
            return Err(self.fail_flow(PtError::NOMAP, Some(ip)));
        };
        match decode_run(self.images[cur], ip, self.rd.bitness) {
            Ok(r) => {
                self.cache.insert(ip, r);
                Ok(r)
            }
            Err(e) => Err(self.fail_flow(e, Some(ip))),
        }
    }

    fn ev_time(&self) -> Option<u64> {
        self.ev_tsc
    }

    fn run<F: FnMut(&mut Self, BlockItem) -> bool>(&mut self, f: &mut F) -> Result<(), Halt> {
        loop {
            if !self.enabled {
                self.step_disabled(f)?;
                continue;
            }
            match self.ev {
                Ev::AsyncBranch { from, .. } => self.proceed_to(from, f)?,
                Ev::AsyncDisabled { at } => self.proceed_to(at, f)?,
                Ev::Pgd(Some(ip)) => self.proceed_to(ip, f)?,
                Ev::Bound { ip, .. } => self.proceed_to(ip, f)?,
                Ev::Cr3 { pips } => return self.proceed_through_cr3(pips, f),
                Ev::Psb(ip) => {
                    if let Some(ip) = ip {
                        self.proceed_to_psb(ip, f)?;
                    }
                    self.end_block(f)?;
                    self.forget_calls();
                    if let Some(ip) = ip {
                        let tsc = self.ev_time();
                        self.emit(
                            f,
                            BlockItem::Enabled {
                                ip,
                                status_update: true,
                                tsc,
                            },
                        )?;
                    } else {
                        // Tracing is off after all (a disable we missed).
                        self.enabled = false;
                        let tsc = self.ev_time();
                        self.emit(
                            f,
                            BlockItem::Disabled {
                                ip: None,
                                tsc,
                                status_update: true,
                            },
                        )?;
                    }
                    self.consume()?;
                }
                Ev::Overflow(ip) => self.overflow_event(ip, f)?,
                Ev::Pge(ip) => {
                    self.end_block(f)?;
                    let tsc = self.ev_time();
                    self.emit(
                        f,
                        BlockItem::Enabled {
                            ip,
                            status_update: false,
                            tsc,
                        },
                    )?;
                    self.ip = ip;
                    self.consume()?;
                }
                Ev::Tnt { .. } | Ev::Tip(_) | Ev::Pgd(None) => self.proceed(f)?,
                // The trace is used up: the walk stops here, as libipt's
                // decoders do (they report the end of the trace as soon as
                // the last packet is consumed), not at the next instruction
                // that needs trace, which may lie past code that is not
                // there (the flow went on, but the trace did not say where).
                Ev::Eos => return Err(Halt::End),
            }
        }
    }

    fn overflow_event<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        ip: Option<u64>,
        f: &mut F,
    ) -> Result<(), Halt> {
        self.end_block(f)?;
        // The hardware's return stack is gone with the lost trace.
        self.ret_len = 0;
        let tsc = self.ev_time();
        self.emit(f, BlockItem::Overflow { ip, tsc })?;
        self.enabled = ip.is_some();
        self.ip = ip.unwrap_or(0);
        self.consume()
    }

    fn step_disabled<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<(), Halt> {
        let tsc = self.ev_time();
        match self.ev {
            Ev::Pge(ip) => {
                self.emit(
                    f,
                    BlockItem::Enabled {
                        ip,
                        status_update: false,
                        tsc,
                    },
                )?;
                self.enabled = true;
                self.ip = ip;
                self.consume()
            }
            Ev::Psb(Some(ip)) => {
                self.forget_calls();
                self.enabled = true;
                self.ip = ip;
                self.emit(
                    f,
                    BlockItem::Enabled {
                        ip,
                        status_update: true,
                        tsc,
                    },
                )?;
                self.consume()
            }
            Ev::Psb(None) => {
                self.forget_calls();
                self.emit(
                    f,
                    BlockItem::Disabled {
                        ip: None,
                        tsc,
                        status_update: true,
                    },
                )?;
                self.consume()
            }
            Ev::Overflow(ip) => self.overflow_event(ip, f),
            // A TIP.PGD while tracing is already off: reported, as libipt
            // reports it, but it changes nothing the flow believed.
            Ev::Pgd(ip) => {
                self.emit(
                    f,
                    BlockItem::Disabled {
                        ip,
                        tsc,
                        status_update: false,
                    },
                )?;
                self.consume()
            }
            Ev::AsyncDisabled { at } => {
                self.emit(f, BlockItem::AsyncDisabled { at, tsc })?;
                self.consume()
            }
            // With tracing off, there is no flow to take there.
            Ev::Eos | Ev::Bound { .. } | Ev::Cr3 { .. } => Err(Halt::End),
            Ev::Tnt { .. } | Ev::Tip(_) | Ev::AsyncBranch { .. } => {
                Err(self.fail_flow(PtError::BAD_CONTEXT, None))
            }
        }
    }

    /// Takes the next TNT bit. A tick is due when this TNT came after a
    /// timing packet (its first bit), or when the TNT that follows it did
    /// (its last bit): either way it binds to this branch, as in libipt.
    fn take_bit(&mut self) -> Result<bool, Halt> {
        let Ev::Tnt { bits, count } = self.ev else {
            unreachable!("checked by the caller")
        };
        let bit = (bits >> (count - 1)) & 1 != 0;
        let ticked = self.tick_if_new();
        if count == 1 {
            self.consume()?;
            if !ticked && matches!(self.ev, Ev::Tnt { .. }) {
                self.tick_if_new();
            }
        } else {
            self.ev = Ev::Tnt {
                bits,
                count: count - 1,
            };
            self.idle = 0;
        }
        Ok(bit)
    }

    /// A tick at the last instruction if the current event's time is news.
    fn tick_if_new(&mut self) -> bool {
        match self.ev_tsc {
            Some(tsc) if self.ev_tsc != self.told_tsc => {
                self.tick = Some((self.acc.last, tsc));
                self.told_tsc = self.ev_tsc;
                true
            }
            _ => false,
        }
    }

    /// Takes a TIP's target; also a TIP that hides behind a TNT with bits
    /// left (deferred TIP).
    fn take_tip(&mut self) -> Result<Option<u64>, Halt> {
        match self.ev {
            Ev::Tip(Some(to)) => {
                self.tick_if_new();
                self.consume()?;
                Ok(Some(to))
            }
            Ev::Tip(None) => Err(self.fail_flow(PtError::BAD_PACKET, None)),
            Ev::Tnt { .. } => {
                let saved = self.rd;
                match self.fetch() {
                    Ok(Ev::Tip(Some(to))) => {
                        self.idle = 0;
                        Ok(Some(to))
                    }
                    _ => {
                        self.rd = saved;
                        Ok(None)
                    }
                }
            }
            _ => Ok(None),
        }
    }

    /// A disable without IP binds to the instruction just added, which
    /// needed trace.
    fn bind_disable<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        f: &mut F,
    ) -> Result<(), Halt> {
        self.bind_disable_at(None, f)
    }

    /// Whether the pending TIP.PGD without an IP binds to a direct branch
    /// to `target`: under SKL014 a direct call or jump that leaves the IP
    /// filter's ranges writes its TIP.PGD without the IP, so where the
    /// filter is known the branch out of it is where tracing stopped (as
    /// libipt and perf bind it).
    fn skl014_binds(&self, target: u64) -> bool {
        matches!(self.ev, Ev::Pgd(None))
            && self.errata.skl014
            && self.cfg.filter.is_configured()
            && !self.cfg.filter.traces(target)
    }

    /// Binds the pending disable here; `to` is where the flow went, when
    /// the branch that left the filter says (SKL014).
    fn bind_disable_at<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        to: Option<u64>,
        f: &mut F,
    ) -> Result<(), Halt> {
        self.end_block(f)?;
        let tsc = self.ev_time();
        self.emit(
            f,
            BlockItem::Disabled {
                ip: to,
                tsc,
                status_update: false,
            },
        )?;
        self.enabled = false;
        self.ip = 0;
        self.consume()
    }

    /// Follows runs to the end of a block: a taken branch, or a tick.
    fn proceed<F: FnMut(&mut Self, BlockItem) -> bool>(&mut self, f: &mut F) -> Result<(), Halt> {
        loop {
            let start = self.ip;
            let r = self.run_at(start)?;
            self.add(start, r.ninsn, r.last, r.class);
            self.idle += 1;
            if self.idle > MAX_IDLE_RUNS {
                return Err(self.fail_flow(PtError::BAD_QUERY, None));
            }
            match r.class {
                Class::Other => self.ip = r.next,
                Class::MovCr3 => {
                    if matches!(self.ev, Ev::Pgd(None)) {
                        return self.bind_disable(f);
                    }
                    self.ip = r.next;
                }
                Class::Call => {
                    push_call(self, r.next, r.target);
                    self.ip = r.target;
                    if self.skl014_binds(r.target) {
                        return self.bind_disable_at(Some(r.target), f);
                    }
                    return self.end_block(f);
                }
                Class::Jump => {
                    self.ip = r.target;
                    if self.skl014_binds(r.target) {
                        return self.bind_disable_at(Some(r.target), f);
                    }
                    return self.end_block(f);
                }
                Class::CondJump => match self.ev {
                    Ev::Tnt { .. } => {
                        if self.take_bit()? {
                            self.ip = r.target;
                            return self.end_block(f);
                        }
                        self.ip = r.next;
                        // Another kind of event reports at this boundary.
                        let more = matches!(self.ev, Ev::Tnt { .. } | Ev::Tip(_) | Ev::Pgd(None));
                        if self.tick.is_some() || !more {
                            return self.end_block(f);
                        }
                    }
                    Ev::Pgd(None) => return self.bind_disable(f),
                    Ev::Eos => {
                        self.unadd();
                        return Err(Halt::End);
                    }
                    _ => return Err(self.fail_flow(PtError::BAD_QUERY, None)),
                },
                Class::Return => match self.ev {
                    Ev::Tnt { .. } => {
                        if !self.take_bit()? {
                            return Err(self.fail_flow(PtError::BAD_RETCOMP, None));
                        }
                        match self.pop_ret() {
                            Some(to) => self.ip = to,
                            None => return Err(self.fail_flow(PtError::BAD_RETCOMP, None)),
                        }
                        return self.end_block(f);
                    }
                    Ev::Tip(_) => {
                        let to = self.take_tip()?.expect("a TIP is current");
                        self.ip = to;
                        return self.end_block(f);
                    }
                    Ev::Pgd(None) => return self.bind_disable(f),
                    Ev::Eos => {
                        self.unadd();
                        return Err(Halt::End);
                    }
                    _ => return Err(self.fail_flow(PtError::BAD_QUERY, None)),
                },
                Class::IndirectCall
                | Class::IndirectJump
                | Class::FarCall
                | Class::FarReturn
                | Class::FarJump => {
                    if let Some(to) = self.take_tip()? {
                        if r.class == Class::IndirectCall {
                            self.push_ret(r.next);
                        }
                        self.ip = to;
                        return self.end_block(f);
                    }
                    match self.ev {
                        Ev::Pgd(None) => return self.bind_disable(f),
                        Ev::Eos => {
                            self.unadd();
                            return Err(Halt::End);
                        }
                        _ => return Err(self.fail_flow(PtError::BAD_QUERY, None)),
                    }
                }
            }
        }
    }

    /// Moves the flow past a single-stepped instruction that needs no
    /// trace: a direct call or jump ends its block.
    /// The trace ended after `pips` PIPs ([`Ev::Cr3`]): the flow runs on
    /// through as many MOV CR3s, where libipt binds them (a block ends at
    /// each), and stops after the last, at an instruction that needs trace
    /// the trace no longer has, or where the code is not there (an error,
    /// as libipt's).
    fn proceed_through_cr3<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        mut pips: u32,
        f: &mut F,
    ) -> Result<(), Halt> {
        let mut steps: u32 = 0;
        while pips > 0 {
            steps += 1;
            if steps > MAX_STEP_INSNS {
                return Err(self.fail_flow(PtError::BAD_QUERY, None));
            }
            let insn = self.insn_here()?;
            if insn.class.needs_trace() {
                break;
            }
            self.add(insn.last, 1, insn.last, insn.class);
            self.step_past(&insn, f)?;
            if insn.class == Class::MovCr3 {
                pips -= 1;
                self.end_block(f)?;
            }
        }
        Err(Halt::End)
    }

    fn step_past<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        insn: &Run,
        f: &mut F,
    ) -> Result<(), Halt> {
        match insn.class {
            Class::Call => {
                push_call(self, insn.next, insn.target);
                self.ip = insn.target;
                self.end_block(f)
            }
            Class::Jump => {
                self.ip = insn.target;
                self.end_block(f)
            }
            _ => {
                self.ip = insn.next;
                Ok(())
            }
        }
    }

    /// Tracing is on at a PSB whose FUP says the flow is at `target`: the
    /// instructions from where the flow is to there need no packets and
    /// ran before the PSB, so they are this side of it (a walk that stops
    /// at the PSB, as a fine pass's segment or a chunk does, keeps them,
    /// and one that syncs there starts after them). Where the code does
    /// not get there without trace (a damaged trace), the flow moves to
    /// the PSB's address, as perf does and as a walk syncing there would.
    fn proceed_to_psb<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        target: u64,
        f: &mut F,
    ) -> Result<(), Halt> {
        let mut steps = 0;
        while self.ip != target && steps < MAX_PSB_STEP_INSNS {
            steps += 1;
            let Some(cur) = self.cur else { break };
            let Ok(insn) = decode_one(self.images[cur], self.ip, self.rd.bitness) else {
                break;
            };
            if insn.class.needs_trace() {
                break;
            }
            self.add(insn.last, 1, insn.last, insn.class);
            self.step_past(&insn, f)?;
        }
        self.ip = target;
        Ok(())
    }

    /// Whether the code from the flow's IP gets to `to` without a branch,
    /// within as many instructions as libipt looks at.
    fn contiguous(&self, to: u64) -> bool {
        let Some(cur) = self.cur else { return false };
        let mut ip = self.ip;
        for _ in 0..0x100 {
            if ip == to {
                return true;
            }
            match decode_one(self.images[cur], ip, self.rd.bitness) {
                Ok(r) if matches!(r.class, Class::Other | Class::MovCr3) => ip = r.next,
                _ => return false,
            }
        }
        false
    }

    /// The VMLAUNCH or VMRESUME at `at`, if that is what is there.
    fn vm_entry_at(&self, at: u64) -> Option<Run> {
        let mem = self.images[self.cur?];
        let bytes = mem.bytes_at(at)?;
        let insn = Decoder::with_ip(self.rd.bitness, bytes, at, DecoderOptions::NONE).decode();
        matches!(insn.mnemonic(), Mnemonic::Vmlaunch | Mnemonic::Vmresume).then(|| one(&insn))
    }

    /// Single-steps to `target`, where the current event binds (its
    /// instruction does not run), then reports the event.
    /// The instruction at the flow's IP, or the flow's failure to read it.
    fn insn_here(&self) -> Result<Run, Halt> {
        let Some(cur) = self.cur else {
            return Err(self.fail_flow(PtError::NOMAP, Some(self.ip)));
        };
        decode_one(self.images[cur], self.ip, self.rd.bitness)
            .map_err(|e| self.fail_flow(e, Some(self.ip)))
    }

    fn proceed_to<F: FnMut(&mut Self, BlockItem) -> bool>(
        &mut self,
        target: u64,
        f: &mut F,
    ) -> Result<(), Halt> {
        // BDM64: a TSX abort right after a branch that needed trace may
        // have corrupted that branch's trace; where the code cannot get to
        // the abort from where the branch led, the branch led there.
        if self.ev_abort
            && self.errata.bdm64
            && self.after_branch
            && self.acc.ninsn == 0
            && !self.contiguous(target)
        {
            self.ip = target;
        }
        let mut steps: u32 = 0;
        while self.ip != target {
            steps += 1;
            if steps > MAX_STEP_INSNS {
                return Err(self.fail_flow(PtError::BAD_QUERY, None));
            }
            let insn = self.insn_here()?;
            self.add(insn.last, 1, insn.last, insn.class);
            if insn.class.needs_trace() {
                // A disable with an IP also binds to a branch that needed
                // trace before reaching it.
                if let Ev::Pgd(Some(ip)) = self.ev {
                    self.end_block(f)?;
                    let tsc = self.ev_time();
                    self.emit(
                        f,
                        BlockItem::Disabled {
                            ip: Some(ip),
                            tsc,
                            status_update: false,
                        },
                    )?;
                    self.enabled = false;
                    self.ip = 0;
                    return self.consume();
                }
                return Err(self.fail_flow(PtError::BAD_QUERY, None));
            }
            self.step_past(&insn, f)?;
        }
        if let Ev::Bound { after: true, .. } = self.ev {
            // A PTWRITE's FUP names the PTWRITE: it ran.
            let insn = self.insn_here()?;
            self.add(insn.last, 1, insn.last, insn.class);
            self.ip = insn.next;
        }
        self.end_block(f)?;
        let tsc = self.ev_time();
        match self.ev {
            Ev::AsyncBranch { from, to } => {
                self.emit(f, BlockItem::AsyncBranch { from, to, tsc })?;
                self.ip = to;
            }
            Ev::AsyncDisabled { at } => {
                if self.errata.skd022 {
                    if let Some(insn) = self.vm_entry_at(at) {
                        // SKD022: the VM entry ran and disabled tracing.
                        self.add(at, 1, at, insn.class);
                        self.end_block(f)?;
                        let item = BlockItem::Disabled {
                            ip: None,
                            tsc,
                            status_update: false,
                        };
                        self.emit(f, item)?;
                        self.enabled = false;
                        return self.consume();
                    }
                }
                self.emit(f, BlockItem::AsyncDisabled { at, tsc })?;
                self.enabled = false;
            }
            Ev::Pgd(ip) => {
                self.emit(
                    f,
                    BlockItem::Disabled {
                        ip,
                        tsc,
                        status_update: false,
                    },
                )?;
                self.enabled = false;
            }
            // The status event itself is no item of ours.
            Ev::Bound { .. } => {}
            _ => unreachable!("proceed_to is for events bound to an address"),
        }
        self.consume()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A little program at 0x1000:
    ///   0x1000: call 0x1010
    ///   0x1005: jmp  0x1005+2+n (to 0x1020)
    ///   0x1010: test eax,eax ; jz 0x1018 ; ret
    fn program() -> Memory {
        let mut code = vec![0x90u8; 0x40];
        // call rel32 to 0x1010
        code[0..5].copy_from_slice(&[0xe8, 0x0b, 0, 0, 0]);
        // jmp rel8 to 0x1020
        code[5..7].copy_from_slice(&[0xeb, 0x19]);
        // 0x1010: test eax,eax; jz +1; nop; ret
        code[0x10..0x15].copy_from_slice(&[0x85, 0xc0, 0x74, 0x01, 0x90]);
        code[0x15] = 0xc3;
        // 0x1020: syscall
        code[0x20..0x22].copy_from_slice(&[0x0f, 0x05]);
        let mut m = Memory::default();
        m.map(0x1000, code.len() as u64, Arc::new(code), 0);
        m
    }

    fn psb() -> Vec<u8> {
        packet::PSB_BYTES.to_vec()
    }

    /// PSB+ with tracing on at `ip` (a FUP with the full 64-bit IP).
    fn psb_at(ip: u16) -> Vec<u8> {
        let mut t = psb();
        let [lo, hi] = ip.to_le_bytes();
        t.extend([0xdd, lo, hi, 0, 0, 0, 0, 0, 0]);
        t.extend([0x02, 0x23]);
        t
    }

    fn items(trace: &[u8], mem: &Memory) -> Vec<String> {
        let mut dec = FlowDecoder::new(trace, &DecoderConfig::default());
        dec.set_image(mem).unwrap();
        let mut out = Vec::new();
        dec.walk(|_, item| {
            out.push(match item {
                BlockItem::Block(b) => {
                    format!("block {:#x}..{:#x} {} {:?}", b.ip, b.end_ip, b.ninsn, b.end)
                }
                other => format!("{other:?}"),
            });
            true
        });
        out
    }

    #[test]
    fn follows_calls_conditional_branches_compressed_returns_and_a_syscall() {
        let mem = program();
        let mut t = psb_at(0x1000);
        // TNT: jz not taken (0), ret compressed (1): bits "01" + stop bit.
        t.push(0b0000_1010);
        // TIP.PGD, IP suppressed: binds to the syscall.
        t.push(0x01);
        let got = items(&t, &mem);
        assert_eq!(
            got,
            [
                "Sync { offset: 0 }",
                "Enabled { ip: 4096, status_update: true, tsc: None }",
                "block 0x1000..0x1000 1 Call",
                "block 0x1010..0x1015 4 Return",
                "block 0x1005..0x1005 1 Jump",
                "block 0x1020..0x1020 1 FarCall",
                "Disabled { ip: None, tsc: None, status_update: false }",
            ]
        );
    }

    #[test]
    fn instructions_before_a_psbs_address_are_reported_before_its_status() {
        let mem = program();
        // Tracing on at 0x1010; the next PSB+ says the flow is at 0x1012:
        // the `test` between ran before it (a fine pass's segment that
        // ends at that PSB keeps it; the next starts at 0x1012). Then the
        // jz is taken.
        let mut t = psb_at(0x1010);
        t.extend(psb_at(0x1012));
        t.push(0b0000_0110);
        let got = items(&t, &mem);
        assert_eq!(
            got[..5],
            [
                "Sync { offset: 0 }",
                "Enabled { ip: 4112, status_update: true, tsc: None }",
                "block 0x1010..0x1010 1 Other",
                "Enabled { ip: 4114, status_update: true, tsc: None }",
                "block 0x1012..0x1012 1 CondJump",
            ],
            "{got:#?}"
        );
    }

    /// A PSB+ cut short by another PSB (no hardware writes one): the walk
    /// goes on from the second as a decoder that syncs there does, keeping
    /// nothing the first restated (its TSC, its 32-bit mode), so that the
    /// parallel pass, whose chunk starts there, gives the same.
    #[test]
    fn a_psb_inside_psb_plus_starts_afresh() {
        let mem = program();
        let mut tail = psb_at(0x1000);
        // TNT "01", then TIP.PGD with the IP suppressed.
        tail.extend([0b0000_1010, 0x01]);
        let mut t = psb();
        // TSC, MODE.Exec 32-bit; no FUP, no PSBEND.
        t.extend([0x19, 1, 2, 3, 4, 5, 0, 0, 0x99, 0x02]);
        t.extend(&tail);
        let got = items(&t, &mem);
        let want = items(&tail, &mem);
        assert_eq!(got[1..], want[1..]);
        assert!(want[1].contains("tsc: None"), "{want:#?}");
        assert!(want.iter().any(|i| i.contains("4 Return")), "{want:#?}");
    }

    #[test]
    fn a_fup_left_unbound_by_a_psb_is_dropped() {
        let mem = program();
        let mut tail = psb_at(0x1000);
        // TNT "01", then TIP.PGD with the IP suppressed.
        tail.extend([0b0000_1010, 0x01]);
        // Tracing stops, then a FUP (IP 0x1000) whose TIP never comes.
        let mut t = tail.clone();
        t.extend([0x3d, 0x00, 0x10]);
        t.extend(&tail);
        let got = items(&t, &mem);
        let want = items(&tail, &mem);
        let from = got
            .iter()
            .rposition(|i| i.starts_with("Enabled"))
            .expect("the second PSB+");
        assert!(got.iter().all(|i| !i.starts_with("Error")), "{got:#?}");
        assert_eq!(got[from..], want[1..]);
    }

    #[test]
    fn a_flow_error_found_on_a_psb_read_ahead_resyncs_at_that_psb() {
        let mem = program();
        // Tracing on in the callee, whose call came before: its ret cannot
        // be compressed, yet TNT "01" says so (a damaged trace). Reading
        // that last bit reads the PSB+ after it.
        let mut t = psb_at(0x1010);
        t.push(0b0000_1010);
        let psb = t.len();
        let mut tail = psb_at(0x1000);
        tail.extend([0b0000_1010, 0x01]);
        t.extend(&tail);
        let got = items(&t, &mem);
        // The error is the ret's, this side of the PSB, and the walk syncs
        // there, as a chunk ending there and one starting there do.
        let err = got
            .iter()
            .position(|i| i.starts_with("Error"))
            .expect("the bad ret");
        assert!(got[err].contains(&format!("offset: {psb},")), "{got:#?}");
        let want = items(&tail, &mem);
        assert_eq!(got[err + 1], format!("Sync {{ offset: {psb} }}"));
        assert_eq!(got[err + 2..], want[1..], "{got:#?}");
    }

    #[test]
    fn code_is_decoded_in_the_mode_it_runs_in_whatever_ran_there_before() {
        // 0x2000: 48 ff c0 c3 is `inc rax; ret` in 64-bit mode but
        // `dec eax; inc eax; ret` in 32-bit mode.
        let mut m = Memory::default();
        m.map(0x2000, 4, Arc::new(vec![0x48, 0xff, 0xc0, 0xc3]), 0);
        let psb_in = |mode: u8| {
            let mut t = psb();
            t.extend([0x99, mode, 0xdd, 0x00, 0x20, 0, 0, 0, 0, 0, 0, 0x02, 0x23]);
            // TIP.PGD, IP suppressed: binds to the ret.
            t.push(0x01);
            t
        };
        let mut t = psb_in(0x02);
        t.extend(psb_in(0x01));
        let blocks: Vec<String> = items(&t, &m)
            .into_iter()
            .filter(|i| i.starts_with("block"))
            .collect();
        assert_eq!(
            blocks,
            [
                "block 0x2000..0x2003 3 Return",
                "block 0x2000..0x2003 2 Return"
            ]
        );
    }

    #[test]
    fn a_psb_forgets_the_calls_before_it() {
        let mem = program();
        // The call at 0x1000, the callee's jz not taken (0), then a PSB+
        // at its ret: the ret cannot be compressed against a call from
        // before the PSB, so a compressed-ret bit (1) is an error.
        let mut t = psb_at(0x1000);
        t.push(0b0000_0100);
        t.extend(psb_at(0x1015));
        t.push(0b0000_0110);
        let got = items(&t, &mem);
        let after = got
            .iter()
            .position(|i| i.starts_with("Enabled { ip: 4117"))
            .expect("the second PSB+");
        assert!(
            got[after..].iter().all(|i| !i.starts_with("block 0x1005")),
            "{got:#?}"
        );
        assert!(
            got[after..].iter().any(|i| i.starts_with("Error")),
            "{got:#?}"
        );
    }

    #[test]
    fn a_return_compressed_just_before_a_psb_still_pops_its_call() {
        let mem = program();
        // jz not taken (0), ret compressed (1): the TNT's last bit, so the
        // reader meets the PSB+ that follows before the ret is popped.
        let mut t = psb_at(0x1000);
        t.push(0b0000_1010);
        t.extend(psb_at(0x1005));
        t.push(0x01);
        let got = items(&t, &mem);
        assert!(got.iter().all(|i| !i.starts_with("Error")), "{got:#?}");
        let ret = got
            .iter()
            .position(|i| i == "block 0x1010..0x1015 4 Return")
            .expect("the ret");
        assert!(got[ret + 1].starts_with("Enabled { ip: 4101"), "{got:#?}");
    }

    #[test]
    fn a_taken_branch_ends_the_block_and_a_missing_bit_is_an_error() {
        let mem = program();
        let mut t = psb_at(0x1010);
        // jz taken: "1" + stop bit; then a TIP where the ret wants a bit
        // is fine (uncompressed); then the trace ends, and so does the
        // walk (the jmp after the ret needs no trace, but libipt stops too).
        t.push(0b0000_0110);
        // TIP 0x1005 (16-bit update of last IP 0x1010).
        t.extend([0x2d, 0x05, 0x10]);
        let got = items(&t, &mem);
        assert_eq!(
            got,
            [
                "Sync { offset: 0 }",
                "Enabled { ip: 4112, status_update: true, tsc: None }",
                "block 0x1010..0x1012 2 CondJump",
                "block 0x1015..0x1015 1 Return",
            ]
        );
    }

    #[test]
    fn an_asynchronous_branch_binds_to_the_fup_address() {
        let mem = program();
        let mut t = psb_at(0x1010);
        // FUP 0x1012 (the jz), TIP 0x1020: an interrupt before the jz.
        t.extend([0x3d, 0x12, 0x10]);
        t.extend([0x2d, 0x20, 0x10]);
        let got = items(&t, &mem);
        assert_eq!(
            got,
            [
                "Sync { offset: 0 }",
                "Enabled { ip: 4112, status_update: true, tsc: None }",
                "block 0x1010..0x1010 1 Other",
                "AsyncBranch { from: 4114, to: 4128, tsc: None }",
            ]
        );
    }

    #[test]
    fn unmapped_code_is_a_nomap_error_and_the_walk_resyncs_at_the_next_psb() {
        let mem = program();
        let mut t = psb_at(0x9000);
        t.push(0b0000_0110);
        let second = t.len();
        t.extend(psb());
        t.extend([0x02, 0x23]);
        let got = items(&t, &mem);
        assert_eq!(got[0], "Sync { offset: 0 }");
        assert!(got[2].starts_with("Error"), "{got:?}");
        assert!(got[2].contains("ip: Some(36864)"), "{got:?}");
        assert_eq!(got[3], format!("Sync {{ offset: {second} }}"));
    }

    #[test]
    fn a_timing_packet_before_a_tnt_gives_a_tick_after_its_first_branch() {
        let mem = program();
        let mut t = psb();
        t.extend([0x19, 100, 0, 0, 0, 0, 0, 0]); // TSC 100
        t.extend([0xdd, 0x10, 0x10, 0, 0, 0, 0, 0, 0]);
        t.extend([0x02, 0x23]);
        t.extend([0x19, 200, 0, 0, 0, 0, 0, 0]); // TSC 200
        t.push(0b0000_1010); // jz not taken, ret compressed (empty stack!)
        let got = items(&t, &mem);
        assert_eq!(
            got[1],
            "Enabled { ip: 4112, status_update: true, tsc: Some(100) }"
        );
        assert_eq!(got[2], "block 0x1010..0x1012 2 CondJump");
        assert_eq!(got[3], "Tick { ip: Some(4114), tsc: 200 }");
        // The return has nothing to pop: the trace and the code disagree.
        assert!(got[5].starts_with("Error"), "{got:?}");
    }

    /// Every block and event of `trace`, in a form both decoders share:
    /// libipt reports indirect jumps and far transfers alike.
    fn normalized(item: BlockItem) -> String {
        match item {
            BlockItem::Block(b) => {
                let end = match b.end {
                    BlockEnd::Indirect
                    | BlockEnd::Jump
                    | BlockEnd::FarCall
                    | BlockEnd::FarJump
                    | BlockEnd::FarReturn => "branch".to_string(),
                    e => format!("{e:?}"),
                };
                format!("block {:#x}..{:#x} {} {end}", b.ip, b.end_ip, b.ninsn)
            }
            BlockItem::Error { ip, .. } => format!("error at {ip:x?}"),
            // libipt reports where decoding starts, after PSB+.
            BlockItem::Sync { .. } => "sync".into(),
            // libipt's tick address is the branch or the one after it.
            BlockItem::Tick { tsc, .. } => format!("tick {tsc}"),
            other => format!("{other:?}"),
        }
    }

    /// Joins a block that ends at a conditional branch (or at no branch)
    /// with the block right after it: libipt's block cache ends blocks at
    /// every conditional branch, taken or not, and wherever a cache entry
    /// ends; we only where the decoding needs to. The coarse pass treats
    /// both alike (a conditional branch never leaves the function).
    pub(super) fn joined(items: Vec<BlockItem>) -> Vec<String> {
        let mut out: Vec<BlockItem> = Vec::new();
        for item in items {
            if let (Some(BlockItem::Block(prev)), BlockItem::Block(b)) = (out.last_mut(), &item) {
                if matches!(prev.end, BlockEnd::CondJump | BlockEnd::Other) {
                    prev.ninsn += b.ninsn;
                    prev.end_ip = b.end_ip;
                    prev.end = b.end;
                    continue;
                }
            }
            out.push(item);
        }
        out.into_iter().map(normalized).collect()
    }

    /// Runs both decoders over every stream of a snapshot and returns the
    /// first difference, if any, and how many items agreed.
    pub(crate) fn compare_with_libipt(snap_path: &std::path::Path) -> (usize, Option<String>) {
        use crate::block::decoder_config;
        use crate::ffi::{BlockDecoder, Image, SectionCache};
        use crate::image::sections;
        use crate::memory::FileCache;
        let snap = ptscope_formats::snapshot::Snapshot::open(snap_path).unwrap();
        let trace = snap.trace().unwrap();
        let cfg = decoder_config(&trace);
        let mut agreed = 0;
        for s in &trace.streams {
            let pid = s.tid.and_then(|t| trace.thread(t)).map(|t| t.pid);
            let (secs, _) = sections(&snap, &trace, pid);
            let mut cache = SectionCache::new().unwrap();
            let isids: Vec<i32> = secs
                .iter()
                .map(|sec| {
                    cache
                        .add_file(&sec.file, sec.offset, sec.size, sec.vaddr)
                        .unwrap()
                })
                .collect();
            let mut image = Image::new(&cache).unwrap();
            for isid in isids {
                image.add(isid).unwrap();
            }
            let mem = Memory::new(&secs, &mut FileCache::default()).unwrap();
            let mut theirs = Vec::new();
            let mut dec = BlockDecoder::new(&s.data, &cfg).unwrap();
            dec.set_image(&image).unwrap();
            dec.walk(|_, item| {
                theirs.push(item);
                true
            });
            let theirs = joined(theirs);
            let mut ours = Vec::new();
            let mut dec = FlowDecoder::new(&s.data, &cfg);
            dec.resync_at_psb_only();
            dec.set_image(&mem).unwrap();
            dec.walk(|_, item| {
                ours.push(item);
                true
            });
            let ours = joined(ours);
            for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
                if a != b {
                    let from = i.saturating_sub(3);
                    return (
                        agreed,
                        Some(format!(
                            "stream {}: item {i} differs\nlibipt: {:#?}\nours:   {:#?}",
                            s.idx,
                            &theirs[from..(i + 3).min(theirs.len())],
                            &ours[from..(i + 3).min(ours.len())]
                        )),
                    );
                }
                agreed += 1;
            }
            if theirs.len() != ours.len() {
                return (
                    agreed,
                    Some(format!(
                        "stream {}: libipt has {} items, ours {}; tails {:?} / {:?}",
                        s.idx,
                        theirs.len(),
                        ours.len(),
                        theirs.get(agreed..),
                        ours.get(agreed..)
                    )),
                );
            }
        }
        (agreed, None)
    }

    #[test]
    fn agrees_with_libipt_on_the_demo_item_for_item() {
        let demo =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo.ptscope");
        let (agreed, diff) = compare_with_libipt(&demo);
        assert!(diff.is_none(), "{}", diff.unwrap());
        assert!(agreed > 1000, "{agreed}");
    }

    /// `PTSCOPE_COMPARE_FILE=snapshot cargo test -p ptscope-decoder
    /// compare_file -- --ignored` compares both decoders on any snapshot.
    #[test]
    #[ignore]
    fn compare_file() {
        let path = std::env::var_os("PTSCOPE_COMPARE_FILE").expect("PTSCOPE_COMPARE_FILE");
        let (agreed, diff) = compare_with_libipt(std::path::Path::new(&path));
        assert!(diff.is_none(), "after {agreed} items: {}", diff.unwrap());
        println!("{agreed} items agree");
    }

    #[test]
    fn garbage_never_panics() {
        let mem = program();
        let mut rng = fastrand::Rng::with_seed(0x1234_5678);
        for _ in 0..200 {
            let mut t = psb();
            for _ in 0..64 {
                t.push(rng.u8(..));
            }
            let _ = items(&t, &mem);
        }
    }
}

/// Hand-encoded traces over a little code image, decoded by both our flow
/// decoder and libipt's block decoder, for the cases Intel's own
/// conformance traces cover: TSX, the end of the trace, errata and such.
#[cfg(test)]
mod conformance {
    use super::tests::joined;
    use super::*;
    use crate::ffi::{BlockDecoder, Image, SectionCache};
    use std::sync::Arc;

    /// A trace built packet by packet.
    #[derive(Default)]
    pub(super) struct T(pub Vec<u8>);

    impl T {
        fn raw(mut self, b: &[u8]) -> T {
            self.0.extend_from_slice(b);
            self
        }
        fn ip(self, op: u8, ip: u64) -> T {
            self.raw(&[op]).raw(&ip.to_le_bytes())
        }
        pub fn psb(self) -> T {
            self.raw(&packet::PSB_BYTES)
        }
        pub fn psbend(self) -> T {
            self.raw(&[0x02, 0x23])
        }
        pub fn fup(self, ip: u64) -> T {
            self.ip(0xdd, ip)
        }
        pub fn tip(self, ip: u64) -> T {
            self.ip(0xcd, ip)
        }
        pub fn pge(self, ip: u64) -> T {
            self.ip(0xd1, ip)
        }
        pub fn pgd(self, ip: u64) -> T {
            self.ip(0xc1, ip)
        }
        pub fn pgd_noip(self) -> T {
            self.raw(&[0x01])
        }
        pub fn exec64(self) -> T {
            self.raw(&[0x99, 0x01])
        }
        pub fn exec32(self) -> T {
            self.raw(&[0x99, 0x02])
        }
        pub fn tsx(self, intx: bool, abort: bool) -> T {
            self.raw(&[0x99, 0x20 | intx as u8 | (abort as u8) << 1])
        }
        pub fn ovf(self) -> T {
            self.raw(&[0x02, 0xf3])
        }
        /// A short TNT: `t` taken, `n` not, oldest first.
        pub fn tnt(self, bits: &str) -> T {
            let mut b = 1u8;
            for c in bits.chars() {
                b = b << 1 | (c == 't') as u8;
            }
            self.raw(&[b << 1])
        }
        /// PSB+ with tracing on at `ip` in 64-bit mode.
        pub fn psb_at(self, ip: u64) -> T {
            self.psb().fup(ip).exec64().psbend()
        }
    }

    /// Our items and libipt's for `trace` over `code` (address, bytes),
    /// both joined as the agreement tests compare them.
    pub(super) fn both(
        trace: &T,
        code: &[(u64, &[u8])],
        cfg: &DecoderConfig,
    ) -> (Vec<String>, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let mut mem = Memory::default();
        let mut cache = SectionCache::new().unwrap();
        let mut isids = Vec::new();
        for (i, (vaddr, bytes)) in code.iter().enumerate() {
            let path = dir.path().join(format!("code{i}"));
            std::fs::write(&path, bytes).unwrap();
            isids.push(
                cache
                    .add_file(&path, 0, bytes.len() as u64, *vaddr)
                    .unwrap(),
            );
            mem.map(*vaddr, bytes.len() as u64, Arc::new(bytes.to_vec()), 0);
        }
        let mut image = Image::new(&cache).unwrap();
        for isid in isids {
            image.add(isid).unwrap();
        }
        let mut theirs = Vec::new();
        let mut dec = BlockDecoder::new(&trace.0, cfg).unwrap();
        dec.set_image(&image).unwrap();
        dec.walk(|_, item| {
            theirs.push(item);
            true
        });
        let mut ours = Vec::new();
        let mut dec = FlowDecoder::new(&trace.0, cfg);
        dec.resync_at_psb_only();
        dec.set_image(&mem).unwrap();
        dec.walk(|_, item| {
            ours.push(item);
            true
        });
        (joined(ours), joined(theirs))
    }

    /// Both decoders agree on `trace`; ours is returned.
    fn agreed(trace: &T, code: &[(u64, &[u8])], cfg: &DecoderConfig) -> Vec<String> {
        let (ours, theirs) = both(trace, code, cfg);
        assert_eq!(ours, theirs, "ours (left) and libipt's (right)");
        ours
    }

    /// 0x1000: eight nops and a hlt; 0x2000: nop, nop, hlt (a handler).
    fn nops() -> [(u64, &'static [u8]); 2] {
        const CODE: [u8; 9] = [0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xf4];
        [(0x1000, &CODE), (0x2000, &[0x90, 0x90, 0xf4])]
    }

    fn count(items: &[String], prefix: &str) -> usize {
        items.iter().filter(|i| i.starts_with(prefix)).count()
    }

    #[test]
    fn mode_tsx_in_psb_plus_binds_no_fup() {
        // PSB+ says tracing is on inside a transaction; then two
        // interrupts, each a FUP and a TIP, and a disable.
        let t = T::default()
            .psb()
            .fup(0x1000)
            .exec64()
            .tsx(true, false)
            .psbend()
            .fup(0x1002)
            .tip(0x2000)
            .fup(0x2001)
            .tip(0x1004)
            .fup(0x1005)
            .pgd_noip();
        let got = agreed(&t, &nops(), &DecoderConfig::default());
        assert_eq!(count(&got, "AsyncBranch"), 2, "{got:#?}");
        assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4101, tsc: None }");
    }

    #[test]
    fn a_tsx_abort_is_an_asynchronous_branch_and_a_commit_binds_its_fup() {
        // Begin (FUP bound), abort at 0x1002 to the handler, which is
        // then interrupted into a disable.
        let t = T::default()
            .psb_at(0x1000)
            .tsx(true, false)
            .fup(0x1001)
            .tsx(false, true)
            .fup(0x1002)
            .tip(0x2000)
            .fup(0x2001)
            .pgd_noip();
        let got = agreed(&t, &nops(), &DecoderConfig::default());
        assert!(got.contains(&"AsyncBranch { from: 4098, to: 8192, tsc: None }".into()));
        // Begin and commit bind their FUPs: the one after is the disable.
        let t = T::default()
            .psb_at(0x1000)
            .tsx(true, false)
            .fup(0x1001)
            .tsx(false, false)
            .fup(0x1002)
            .fup(0x1003)
            .pgd_noip();
        let got = agreed(&t, &nops(), &DecoderConfig::default());
        assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4099, tsc: None }");
        // An abort that disables tracing: FUP and TIP.PGD.
        let t = T::default()
            .psb_at(0x1000)
            .tsx(false, true)
            .fup(0x1003)
            .pgd_noip();
        let got = agreed(&t, &nops(), &DecoderConfig::default());
        assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4099, tsc: None }");
    }

    #[test]
    fn the_walk_stops_where_the_trace_ends() {
        // Straight code after the last packet runs off its mapping at
        // 0x1008: the trace says nothing of it, so no error either.
        let code: [(u64, &[u8]); 2] = [(0x1000, &[0x90; 8]), (0x3000, &[0xff, 0xe0, 0x74, 0x00])];
        let cfg = DecoderConfig::default();
        // After an indirect jump.
        let got = agreed(&T::default().psb_at(0x3000).tip(0x1000), &code, &cfg);
        assert_eq!(got.last().unwrap(), "block 0x3000..0x3000 1 branch");
        // After an asynchronous branch.
        let t = T::default().psb_at(0x1000).fup(0x1002).tip(0x1004);
        let got = agreed(&t, &code, &cfg);
        assert!(got.last().unwrap().starts_with("AsyncBranch"), "{got:#?}");
        // After a conditional branch not taken (0x3002: jz +0, then the
        // nops are not there).
        let t = T::default().psb_at(0x3002).tnt("n");
        let got = agreed(&t, &code, &cfg);
        assert_eq!(count(&got, "error"), 0, "{got:#?}");
        assert_eq!(got.last().unwrap(), "block 0x3002..0x3002 1 CondJump");
    }

    /// A trace that ends with a FUP bound to a status event (a TSX begin,
    /// a PTWRITE) leaves the flow bound for that FUP's IP: the walk goes
    /// there, as libipt walks to bind the event, instead of stopping where
    /// the last branch left it; code it cannot read on the way is an
    /// error, as libipt's.
    #[test]
    fn the_walk_goes_on_to_a_status_event_that_ends_the_trace() {
        let code: [(u64, &[u8]); 1] = [(0x1000, &[0x90, 0x90, 0x90, 0x90, 0x90, 0xeb, 0x10])];
        let cfg = DecoderConfig::default();
        let tsx = T::default().psb_at(0x1000).tsx(true, false).fup(0x1004);
        let got = agreed(&tsx, &code, &cfg);
        assert_eq!(
            got.last().unwrap(),
            "block 0x1000..0x1003 4 Other",
            "{got:#?}"
        );
        // PTWRITE (4-byte payload, IP bit) and its FUP.
        let ptw = T::default()
            .psb_at(0x1000)
            .raw(&[0x02, 0x92, 1, 2, 3, 4])
            .fup(0x1002);
        let got = agreed(&ptw, &code, &cfg);
        assert_eq!(
            got.last().unwrap(),
            "block 0x1000..0x1002 3 Other",
            "{got:#?}"
        );
        // Past the jmp at 0x1005 to 0x1017, which is not mapped.
        let far = T::default().psb_at(0x1000).tsx(true, false).fup(0x1020);
        let got = agreed(&far, &code, &cfg);
        assert_eq!(count(&got, "error"), 1, "{got:#?}");
    }

    #[test]
    fn a_call_to_the_next_instruction_is_not_a_call_that_returns() {
        // 32-bit: 0x1000 call 0x1008; 0x1005 jz 0x100e; 0x1007 hlt;
        // 0x1008 call $+5; 0x100d ret; 0x100e nop; 0x100f hlt. The ret
        // is compressed and returns to 0x1005, not to 0x100d.
        let code: &[u8] = &[
            0xe8, 0x03, 0, 0, 0, 0x74, 0x07, 0xf4, 0xe8, 0, 0, 0, 0, 0xc3, 0x90, 0xf4,
        ];
        let t = T::default()
            .psb()
            .fup(0x1000)
            .exec32()
            .psbend()
            .tnt("tt")
            .fup(0x100f)
            .pgd_noip();
        let got = agreed(&t, &[(0x1000, code)], &DecoderConfig::default());
        assert_eq!(count(&got, "error"), 0, "{got:#?}");
        // The jz taken, joined with the nop it jumped to.
        assert!(
            got.contains(&"block 0x1005..0x100e 2 Other".into()),
            "{got:#?}"
        );
    }

    /// An EVD (Event Trace's event data) of `kind`.
    fn evd(t: T, kind: u8) -> T {
        t.raw(&[0x02, 0x53, kind, 0xaa, 0xba, 0x0b, 0xf0, 0, 0, 0, 0])
    }

    /// A CFE (Event Trace's control-flow event) of `kind`.
    fn cfe(t: T, kind: u8, ip: bool, vector: u8) -> T {
        t.raw(&[0x02, 0x13, kind | (ip as u8) << 7, vector])
    }

    #[test]
    fn an_instruction_straddling_two_images_is_read_across_both() {
        // 0x1000: nop; mov eax, imm32 split at 0x1003; jmp rax.
        let a: &[u8] = &[0x90, 0xb8, 1];
        let b: &[u8] = &[2, 3, 4, 0xff, 0xe0];
        let t = T::default().psb_at(0x1000).tip(0x1000);
        let got = agreed(&t, &[(0x1000, a), (0x1003, b)], &DecoderConfig::default());
        assert_eq!(got.last().unwrap(), "block 0x1000..0x1006 3 branch");
    }

    #[test]
    fn maintenance_between_an_overflow_and_its_fup_is_skipped() {
        let mnt = [0x02, 0xc3, 0x88, 0, 0xa0, 0, 0, 0, 0, 0, 0];
        let t = T::default()
            .psb_at(0x1000)
            .ovf()
            .raw(&[0])
            .raw(&mnt)
            .fup(0x1001)
            .fup(0x1002)
            .pgd_noip();
        let got = agreed(&t, &nops(), &DecoderConfig::default());
        assert_eq!(got[2], "Overflow { ip: Some(4097), tsc: None }");
        assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4098, tsc: None }");
    }

    #[test]
    fn a_mode_exec_binds_the_fup_after_it() {
        // Event Trace: MODE.Exec on an IF change comes with a FUP of its
        // own, which is no interrupt.
        let t = T::default()
            .psb()
            .psbend()
            .exec64()
            .pge(0x1000)
            .raw(&[0x99, 0x05])
            .fup(0x1002)
            .exec64()
            .fup(0x1004)
            .fup(0x1005)
            .pgd_noip();
        let got = agreed(&t, &nops(), &DecoderConfig::default());
        assert_eq!(count(&got, "error"), 0, "{got:#?}");
        assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4101, tsc: None }");
    }

    #[test]
    fn event_data_in_an_order_libipt_rejects_is_an_error() {
        // 0x1000 nop; 0x1001 int 42; 0x1003 nop... 0x2000 nop; hlt.
        let code: [(u64, &[u8]); 2] = [
            (0x1000, &[0x90, 0xcd, 0x2a, 0x90, 0x90, 0xf4]),
            (0x2000, &[0x90, 0xf4]),
        ];
        let cfg = DecoderConfig::default();
        let tail = |t: T| t.fup(0x1001).tip(0x2000).fup(0x2001).pgd_noip();
        // A page fault's CR2, then its interrupt: fine.
        let t = tail(cfe(evd(T::default().psb_at(0x1000), 0), 1, true, 14));
        let got = agreed(&t, &code, &cfg);
        assert_eq!(count(&got, "error"), 0, "{got:#?}");
        // A CR2 before an iret, and two CR2s: errors.
        let t = tail(cfe(evd(T::default().psb_at(0x1000), 0), 2, false, 0));
        assert_eq!(count(&agreed(&t, &code, &cfg), "error"), 1);
        let t = T::default().psb_at(0x1000);
        let t = tail(cfe(evd(evd(t, 0), 0), 1, true, 14));
        assert_eq!(count(&agreed(&t, &code, &cfg), "error"), 1);
        // A VM exit's qualification twice.
        let t = T::default().psb_at(0x1000);
        let t = tail(cfe(evd(evd(t, 1), 1), 8, true, 0));
        assert_eq!(count(&agreed(&t, &code, &cfg), "error"), 1);
    }

    #[test]
    fn a_tip_pgd_without_an_ip_binds_to_a_mov_cr3() {
        let code: &[u8] = &[0x0f, 0x22, 0xd8, 0xf4];
        let t = T::default().psb_at(0x1000).pgd_noip();
        let got = agreed(&t, &[(0x1000, code)], &DecoderConfig::default());
        assert_eq!(
            got[2..],
            [
                "block 0x1000..0x1000 1 Other",
                "Disabled { ip: None, tsc: None, status_update: false }"
            ]
        );
    }

    /// Intel's `pip-pip_mov_cr3-fail`: two PIPs, one MOV CR3 to bind
    /// them, then the code runs out. The MOV CR3 ran (libipt binds the
    /// first PIP there), and the search for the second's runs into code
    /// that is not there; with one PIP, the flow stops at its MOV CR3.
    #[test]
    fn a_trace_that_ends_after_pips_keeps_their_mov_cr3() {
        // 0x100000: mov cr3, rax; hlt.
        let code: &[u8] = &[0x0f, 0x22, 0xd8, 0xf4];
        let pip = |t: T, cr3: u64| {
            t.raw(&[0x02, 0x43])
                .raw(&(cr3 >> 5 << 1).to_le_bytes()[..6])
        };
        let want: [&[&str]; 2] = [
            &["block 0x100000..0x100000 1 Other"],
            &["block 0x100000..0x100003 2 Other", "error at None"],
        ];
        for (pips, want) in [1, 2].into_iter().zip(want) {
            let mut t = T::default().psb_at(0x100000);
            for k in 0..pips {
                t = pip(t, 0xa000 + 0x1000 * k);
            }
            let got = agreed(&t, &[(0x100000, code)], &DecoderConfig::default());
            assert_eq!(got[2..], *want, "{pips} PIPs");
        }
    }

    /// Only ours: libipt 2.1.2 knows no TRIG, JMPABS or FRED. Each case's
    /// expected flow is that of Intel's conformance trace of the same name.
    fn ours(trace: &T, code: &[(u64, &[u8])]) -> Vec<String> {
        both(trace, code, &DecoderConfig::default()).0
    }

    #[test]
    fn trig_packets_are_read_and_a_trig_with_ip_binds_its_fup() {
        // 0x1000 jle 0x1003; hlt; 0x1003 call rax; hlt; 0x1006 hlt.
        let code: &[u8] = &[0x7e, 0x01, 0xf4, 0xff, 0xd0, 0xf4, 0xf4];
        let trig = |t: T, flags: u8, trbv: u8| t.raw(&[0xd9, flags, trbv]);
        let t = T::default().psb().exec64().psbend();
        let t = trig(t, 0, 1).pge(0x1000);
        let t = trig(t, 0, 2).tnt("t");
        let t = trig(t, 0x20, 3).tip(0x1006);
        let t = trig(trig(t, 0, 4), 0x20, 5).fup(0x1006).pgd_noip();
        let t = trig(trig(t, 0, 6), 0x20, 7);
        let got = ours(&t, &[(0x1000, code)]);
        assert_eq!(
            got[1..],
            [
                "Disabled { ip: None, tsc: None, status_update: true }",
                "Enabled { ip: 4096, status_update: false, tsc: None }",
                "block 0x1000..0x1003 2 Call",
                "AsyncDisabled { at: 4102, tsc: None }",
            ]
        );
        // TRIG.IP with a valid count of 0: the FUP after it is its anchor,
        // no interrupt.
        let t = T::default().psb_at(0x1000).tnt("t");
        let t = trig(t, 0xc0, 1).raw(&[0, 0]).fup(0x1003).tip(0x1006);
        let got = ours(&t, &[(0x1000, code)]);
        assert_eq!(count(&got, "error"), 0, "{got:#?}");
        assert_eq!(count(&got, "Async"), 0, "{got:#?}");
    }

    #[test]
    fn jmpabs_is_an_indirect_jump_that_takes_a_tip() {
        // 0x1000: jmpabs 0x100d (ignored: the TIP says 0x100b); 0x100b:
        // hlt; 0x100c: nop; 0x100d: hlt.
        let mut code = vec![0xd5u8, 0x00, 0xa1];
        code.extend(0x100du64.to_le_bytes());
        code.extend([0xf4, 0x90, 0xf4]);
        let t = T::default()
            .psb_at(0x1000)
            .tip(0x100c)
            .fup(0x100d)
            .pgd_noip();
        let got = ours(&t, &[(0x1000, &code)]);
        assert_eq!(
            got[2..],
            [
                "block 0x1000..0x1000 1 branch",
                "block 0x100c..0x100c 1 Other",
                "AsyncDisabled { at: 4109, tsc: None }",
            ]
        );
        // A TIP.PGD binds to it.
        let t = T::default().psb_at(0x1000).pgd(0x100d);
        let got = ours(&t, &[(0x1000, &code)]);
        assert_eq!(
            got[2..],
            [
                "block 0x1000..0x1000 1 branch",
                "Disabled { ip: Some(4109), tsc: None, status_update: false }"
            ]
        );
    }

    #[test]
    fn fred_eretu_and_erets_are_far_returns() {
        // 0x1000 nop; int 42; nop; nop; hlt. 0x2000: nop; ERETU (or
        // ERETS); hlt. An interrupt before the int, then the return.
        let code: &[u8] = &[0x90, 0xcd, 0x2a, 0x90, 0x90, 0xf4];
        for eret in [0xf3u8, 0xf2] {
            let handler: &[u8] = &[0x90, eret, 0x0f, 0x01, 0xca, 0xf4];
            let t = T::default()
                .psb_at(0x1000)
                .fup(0x1001)
                .tip(0x2000)
                .tip(0x1003)
                .fup(0x1004)
                .pgd_noip();
            let got = ours(&t, &[(0x1000, code), (0x2000, handler)]);
            assert_eq!(
                got[2..],
                [
                    "block 0x1000..0x1000 1 Other",
                    "AsyncBranch { from: 4097, to: 8192, tsc: None }",
                    "block 0x2000..0x2001 2 branch",
                    "block 0x1003..0x1003 1 Other",
                    "AsyncDisabled { at: 4100, tsc: None }",
                ]
            );
        }
    }

    /// Ours as ptscope runs it: resuming after flow errors as perf does.
    fn resuming(trace: &T, code: &[(u64, &[u8])]) -> Vec<String> {
        let mut mem = Memory::default();
        for (vaddr, bytes) in code {
            mem.map(*vaddr, bytes.len() as u64, Arc::new(bytes.to_vec()), 0);
        }
        let mut dec = FlowDecoder::new(&trace.0, &DecoderConfig::default());
        dec.set_image(&mem).unwrap();
        let mut out = Vec::new();
        dec.walk(|_, item| {
            out.push(item);
            true
        });
        joined(out)
    }

    #[test]
    fn after_unmapped_code_the_walk_resumes_at_the_next_ip_as_perf_does() {
        // 0x3000: jmp rax; 0x3002: jmp rax. The first jumps into code
        // that is not there; its TNTs say nothing without the flow; the
        // TIP after them does: the walk resumes there, not at the PSB.
        let code: [(u64, &[u8]); 2] = [(0x1000, &[0x90; 8]), (0x3000, &[0xff, 0xe0, 0xff, 0xe0])];
        let t = T::default()
            .psb_at(0x3000)
            .tip(0x9000)
            .tnt("tn")
            .tip(0x3002)
            .tip(0x1000)
            .fup(0x1002)
            .pgd_noip();
        let second = t.0.len();
        let t = t.psb_at(0x1000).fup(0x1003).pgd_noip();
        let got = resuming(&t, &code);
        assert_eq!(
            got[2..],
            [
                "block 0x3000..0x3000 1 branch",
                "error at Some(9000)",
                "Enabled { ip: 12290, status_update: false, tsc: None }",
                "block 0x3002..0x3002 1 branch",
                "block 0x1000..0x1001 2 Other",
                "AsyncDisabled { at: 4098, tsc: None }",
                // The PSB, reached in the flow (no resync).
                "Enabled { ip: 4096, status_update: true, tsc: None }",
                "block 0x1000..0x1002 3 Other",
                "AsyncDisabled { at: 4099, tsc: None }",
            ],
            "{got:#?}"
        );
        // libipt, and ours when asked, resync at the PSB.
        let (ours, theirs) = both(&t, &code, &DecoderConfig::default());
        assert_eq!(ours, theirs);
        assert_eq!(ours[4], "sync", "the PSB at {second}: {ours:#?}");
        // A FUP resumes too: at its IP, the branch from there.
        let t = T::default()
            .psb_at(0x3000)
            .tip(0x9000)
            .fup(0x1001)
            .tip(0x1004)
            .fup(0x1006)
            .pgd_noip();
        let got = resuming(&t, &code);
        assert_eq!(
            got[3..],
            [
                "error at Some(9000)",
                "Enabled { ip: 4097, status_update: false, tsc: None }",
                "AsyncBranch { from: 4097, to: 4100, tsc: None }",
                "block 0x1004..0x1005 2 Other",
                "AsyncDisabled { at: 4102, tsc: None }",
            ],
            "{got:#?}"
        );
    }

    /// A FUP bound to a status event gives the flow back after an error
    /// too, at its IP, as libipt 2.2's resync takes it: right after the
    /// failing TIP (a MODE.Exec's FUP), or after TNTs that mean nothing
    /// without the flow (a PTWRITE's, whose instruction then runs).
    #[test]
    fn after_unmapped_code_the_walk_resumes_at_a_bound_fup() {
        // 0x3000: jmp rax (to nowhere); 0x1000: nops.
        let code: [(u64, &[u8]); 2] = [(0x1000, &[0x90; 8]), (0x3000, &[0xff, 0xe0])];
        let exec = T::default()
            .psb_at(0x3000)
            .tip(0x9000)
            .exec64()
            .fup(0x1002)
            .fup(0x1005)
            .pgd_noip();
        let got = resuming(&exec, &code);
        assert_eq!(
            got[3..],
            [
                "error at Some(9000)",
                "Enabled { ip: 4098, status_update: false, tsc: None }",
                "block 0x1002..0x1004 3 Other",
                "AsyncDisabled { at: 4101, tsc: None }",
            ],
            "{got:#?}"
        );
        let ptw = T::default()
            .psb_at(0x3000)
            .tip(0x9000)
            .tnt("tnt")
            .raw(&[0x02, 0x92, 1, 2, 3, 4])
            .fup(0x1003)
            .fup(0x1005)
            .pgd_noip();
        let got = resuming(&ptw, &code);
        assert_eq!(
            got[4..],
            [
                "Enabled { ip: 4099, status_update: false, tsc: None }",
                "block 0x1003..0x1004 2 Other",
                "AsyncDisabled { at: 4101, tsc: None }",
            ],
            "{got:#?}"
        );
    }

    fn on(cpu: &str) -> DecoderConfig {
        DecoderConfig::default().with_cpu(cpu.parse().unwrap())
    }

    /// `trace` decodes as `want` (after its sync) on `cpu`, the same as
    /// libipt; without the erratum, it does not.
    fn erratum(cpu: &str, trace: &T, code: &[(u64, &[u8])], want: &[&str]) {
        let got = agreed(trace, code, &on(cpu));
        assert_eq!(got[1..], *want, "{got:#?}");
        let (without, _) = both(trace, code, &DecoderConfig::default());
        assert_ne!(without[1..], *want, "{without:#?}");
    }

    #[test]
    fn bdm70_a_psb_fup_before_a_tip_pge_is_not_tracing_on() {
        let t = T::default()
            .psb()
            .exec64()
            .fup(0x1000)
            .tsx(true, false)
            .psbend()
            .pge(0x1000)
            .fup(0x1001)
            .pgd_noip();
        let want = [
            "Disabled { ip: None, tsc: None, status_update: true }",
            "Enabled { ip: 4096, status_update: false, tsc: None }",
            "block 0x1000..0x1000 1 Other",
            "AsyncDisabled { at: 4097, tsc: None }",
        ];
        erratum("6/0x3d", &t, &nops(), &want);
    }

    #[test]
    fn skd007_a_cyc_cut_by_an_overflow_is_the_overflow() {
        // CYC(0x3e) whose second byte OVF overwrote: f7 02 f3.
        let t = T::default()
            .psb()
            .exec64()
            .fup(0x1000)
            .raw(&[0xf7, 0x02, 0xf3, 0x00])
            .fup(0x1001)
            .fup(0x1002)
            .pgd_noip();
        let want = [
            "Enabled { ip: 4096, status_update: true, tsc: None }",
            "Overflow { ip: Some(4097), tsc: None }",
            "block 0x1001..0x1001 1 Other",
            "AsyncDisabled { at: 4098, tsc: None }",
        ];
        erratum("6/0x8e", &t, &nops(), &want);
    }

    #[test]
    fn skz84_a_tma_with_reserved_bits_and_its_bogus_byte_are_skipped() {
        let t = T::default()
            .psb_at(0x1000)
            .raw(&[0x02, 0x73, 1, 1, 1, 1, 0, 0])
            .fup(0x1001)
            .pgd_noip();
        let want = [
            "Enabled { ip: 4096, status_update: true, tsc: None }",
            "block 0x1000..0x1000 1 Other",
            "AsyncDisabled { at: 4097, tsc: None }",
        ];
        erratum("6/0x55", &t, &nops(), &want);
    }

    #[test]
    fn apl11_a_tip_pgd_after_an_overflow_is_dropped() {
        let t = T::default()
            .psb_at(0x1000)
            .ovf()
            .pgd(0x1001)
            .exec64()
            .pge(0x1002)
            .fup(0x1003)
            .pgd_noip();
        let want = [
            "Enabled { ip: 4096, status_update: true, tsc: None }",
            "Overflow { ip: None, tsc: None }",
            "Enabled { ip: 4098, status_update: false, tsc: None }",
            "block 0x1002..0x1002 1 Other",
            "AsyncDisabled { at: 4099, tsc: None }",
        ];
        erratum("6/0x5c", &t, &nops(), &want);
    }

    #[test]
    fn apl12_a_fup_after_an_overflow_that_tracing_off_follows_is_dropped() {
        // The FUP, then a TIP.PGE: tracing was off.
        let tail = |t: T| t.fup(0x1001).exec64().pge(0x1002).fup(0x1003).pgd_noip();
        let t = tail(T::default().psb_at(0x1000).ovf());
        let want = [
            "Enabled { ip: 4096, status_update: true, tsc: None }",
            "Overflow { ip: None, tsc: None }",
            "Enabled { ip: 4098, status_update: false, tsc: None }",
            "block 0x1002..0x1002 1 Other",
            "AsyncDisabled { at: 4099, tsc: None }",
        ];
        erratum("6/0x5c", &t, &nops(), &want);
        // The FUP, then a PSB+ without FUP.
        let t = T::default().psb_at(0x1000).ovf().fup(0x1001);
        let t = t.psb().exec64().psbend().pge(0x1002).fup(0x1003).pgd_noip();
        let got = agreed(&t, &nops(), &on("6/0x5c"));
        assert_eq!(got[2], "Overflow { ip: None, tsc: None }", "{got:#?}");
    }

    #[test]
    fn skd022_an_asynchronous_disable_at_vmlaunch_is_synchronous() {
        // 0x1000: vmlaunch; 0x1003: hlt; 0x1004: nop; 0x1005: vmresume.
        let code: &[u8] = &[0x0f, 0x01, 0xc2, 0xf4, 0x90, 0x0f, 0x01, 0xc3, 0xf4];
        let t = T::default()
            .psb_at(0x1000)
            .fup(0x1000)
            .pgd_noip()
            .pge(0x1004)
            .fup(0x1005)
            .pgd_noip();
        let got = agreed(&t, &[(0x1000, code)], &on("6/0x8e"));
        assert_eq!(count(&got, "AsyncDisabled"), 0, "{got:#?}");
        assert_eq!(count(&got, "Disabled"), 2, "{got:#?}");
        let (without, _) = both(&t, &[(0x1000, code)], &DecoderConfig::default());
        assert_eq!(count(&without, "AsyncDisabled"), 2, "{without:#?}");
    }

    #[test]
    fn skd010_an_overflow_whose_fup_was_dropped_resumes_later() {
        let cpu = "6/0x8e";
        // 0x1000 nop; 0x1001 nop; 0x1002 hlt.
        let base = || T::default().psb().exec64().psbend().ovf();
        // Sync at a TIP.
        let t = base().tip(0x1000).fup(0x1001).pgd_noip();
        let want = [
            "Disabled { ip: None, tsc: None, status_update: true }",
            "Overflow { ip: Some(4096), tsc: None }",
            "block 0x1000..0x1000 1 Other",
            "AsyncDisabled { at: 4097, tsc: None }",
        ];
        erratum(cpu, &t, &nops(), &want);
        // Sync at MODE.TSX and its FUP.
        let t = base().tsx(true, false).fup(0x1000).fup(0x1001).pgd_noip();
        erratum(cpu, &t, &nops(), &want);
        // A TIP.PGD: tracing went off.
        let t = base().pgd(0x1001).pge(0x1001).fup(0x1002).pgd_noip();
        let got = agreed(&t, &nops(), &on(cpu));
        assert_eq!(got[2], "Overflow { ip: None, tsc: None }", "{got:#?}");
        assert_eq!(count(&got, "error"), 0, "{got:#?}");
        // A PSB+ with a FUP.
        let t = base().psb_at(0x1000).fup(0x1001).pgd_noip();
        let got = agreed(&t, &nops(), &on(cpu));
        assert_eq!(got[2], "Overflow { ip: Some(4096), tsc: None }", "{got:#?}");
    }

    #[test]
    fn resuming_after_errors_reports_a_disable_and_errors_again_at_unmapped_tips() {
        // Intel's ptxed-resync-nomap-tip_pgd: 0x3000 call rax, to nowhere;
        // TNTs; a TIP to nowhere again; a TNT; TIP.PGD.
        let code: [(u64, &[u8]); 1] = [(0x3000, &[0xff, 0xd0, 0xf4])];
        let t = T::default()
            .psb_at(0x3000)
            .tip(0x9000)
            .tnt("ntt")
            .tnt("ntt")
            .tip(0x9100)
            .tnt("ntt")
            .pgd(0x3002);
        let got = resuming(&t, &code);
        assert_eq!(
            got[2..],
            [
                "block 0x3000..0x3000 1 Call",
                "error at Some(9000)",
                "Enabled { ip: 37120, status_update: false, tsc: None }",
                "error at Some(9100)",
                "Disabled { ip: Some(12290), tsc: None, status_update: false }",
            ],
            "{got:#?}"
        );
    }

    #[test]
    fn a_mode_tsx_while_tracing_is_off_binds_no_fup() {
        // Intel's tip_pgd-tsx: begin before TIP.PGE, a FUP and TIP.PGD;
        // an abort while off, TIP.PGE, a FUP and TIP.PGD.
        let t = T::default()
            .psb()
            .exec64()
            .psbend()
            .tsx(true, false)
            .pge(0x1000)
            .fup(0x1001)
            .pgd_noip()
            .tsx(false, true)
            .pge(0x1003)
            .fup(0x1004)
            .pgd_noip();
        let got = agreed(&t, &nops(), &DecoderConfig::default());
        assert_eq!(count(&got, "AsyncDisabled"), 2, "{got:#?}");
        assert_eq!(count(&got, "error"), 0, "{got:#?}");
    }

    #[test]
    fn bdm64_a_tsx_abort_right_after_a_branch_is_where_the_branch_led() {
        // 0x1000 test [rax], rbx; 0x1003 je 0x1008; 0x1005 nop;
        // 0x1006 je 0x100c; 0x1008 hlt; hlt; 0x100a nop; nop; 0x100c hlt.
        // The first je's bit says not taken, but the abort is at 0x1008.
        let code: &[u8] = &[
            0x48, 0x85, 0x18, 0x74, 0x03, 0x90, 0x74, 0x04, 0xf4, 0xf4, 0x90, 0x90, 0xf4,
        ];
        let t = T::default()
            .psb()
            .exec64()
            .tsx(true, false)
            .fup(0x1000)
            .psbend()
            .tnt("n")
            .tsx(false, true)
            .fup(0x1008)
            .tip(0x100a)
            .fup(0x100b)
            .pgd_noip();
        let want = [
            "Enabled { ip: 4096, status_update: true, tsc: None }",
            "block 0x1000..0x1003 2 CondJump",
            "AsyncBranch { from: 4104, to: 4106, tsc: None }",
            "block 0x100a..0x100a 1 Other",
            "AsyncDisabled { at: 4107, tsc: None }",
        ];
        erratum("6/0x3d", &t, &[(0x1000, code)], &want);
    }

    #[test]
    fn a_trig_with_ip_binds_its_fup_while_tracing_is_off_too() {
        // Intel's trig-fup: 0x1000 jle 0x1003; hlt; 0x1003 call 0x1009;
        // hlt; 0x1009 nop; nop. Each TRIG.IP's FUP is its anchor, never
        // an interrupt, with tracing on or off.
        let code: &[u8] = &[0x7e, 0x01, 0xf4, 0xe8, 0x01, 0, 0, 0, 0xf4, 0x90, 0x90];
        let trig = |t: T| t.raw(&[0xd9, 0xc0, 0x1a, 0, 0]);
        let t = T::default().psb_at(0x1000).tnt("t");
        let t = trig(t).fup(0x1003).pgd(0x1009);
        let t = trig(trig(t).fup(0x1009)).fup(0x100a);
        let got = ours(&t, &[(0x1000, code)]);
        assert_eq!(
            got[2..],
            [
                "block 0x1000..0x1003 2 Call",
                "Disabled { ip: Some(4105), tsc: None, status_update: false }",
            ],
            "{got:#?}"
        );
    }

    /// libipt's instruction decoder's instructions for `trace` over
    /// `code`: the reference for flows libipt's block decoder gets wrong.
    fn libipt_insns(trace: &T, code: &[(u64, &[u8])], cfg: &DecoderConfig) -> Vec<u64> {
        let dir = tempfile::tempdir().unwrap();
        let mut dec = crate::ffi::InsnDecoder::new(&trace.0, cfg).unwrap();
        for (i, (vaddr, bytes)) in code.iter().enumerate() {
            let path = dir.path().join(format!("code{i}"));
            std::fs::write(&path, bytes).unwrap();
            dec.add_file(&path, 0, bytes.len() as u64, *vaddr).unwrap();
        }
        let mut ips = Vec::new();
        dec.walk(|i| ips.push(i.ip));
        ips
    }

    /// Our blocks cover exactly `insns`, in order (instruction by
    /// instruction where a block's ends fall).
    fn blocks_cover(items: &[String], insns: &[u64]) {
        let mut at = 0;
        for item in items.iter().filter(|i| i.starts_with("block ")) {
            let mut words = item.split_whitespace().skip(1);
            let (first, last) = words.next().unwrap().split_once("..").unwrap();
            let hex = |s: &str| u64::from_str_radix(&s[2..], 16).unwrap();
            let n: usize = words.next().unwrap().parse().unwrap();
            assert_eq!(insns.get(at), Some(&hex(first)), "{item} in {insns:x?}");
            assert_eq!(
                insns.get(at + n - 1),
                Some(&hex(last)),
                "{item} in {insns:x?}"
            );
            at += n;
        }
        assert_eq!(at, insns.len(), "{items:#?} against {insns:x?}");
    }

    /// The filter of the SKL014 cases: 0x1000..=0x10ff traced.
    fn skl014_cpu() -> DecoderConfig {
        on("6/0x4e").with_filter("0x1000-0x10ff".parse().unwrap())
    }

    #[test]
    fn skl014_a_jump_out_of_the_filter_takes_the_disable_without_an_ip() {
        // 0x1000 nop; jmp 0x3000 (out of the filter); 0x3000 nop; nop; hlt.
        // A Skylake writes the TIP.PGD of that jump without its IP; the
        // jump is where tracing stopped, and the flow went to 0x3000.
        let code: &[u8] = &[0x90, 0xe9, 0xfa, 0x1f, 0, 0];
        let out: &[u8] = &[0x90, 0x90, 0xf4];
        let image = [(0x1000, code), (0x3000, out)];
        let t = T::default().psb_at(0x1000).pgd_noip();
        let (got, libipt) = both(&t, &image, &skl014_cpu());
        let want = [
            "sync",
            "Enabled { ip: 4096, status_update: true, tsc: None }",
            "block 0x1000..0x1001 2 branch",
            "Disabled { ip: Some(12288), tsc: None, status_update: false }",
        ];
        assert_eq!(got, want, "{got:#?}");
        // libipt binds it at the same jump, without naming the target.
        assert_eq!(libipt[..3], want[..3], "{libipt:#?}");
        assert!(libipt[3].starts_with("Disabled { ip: None"), "{libipt:#?}");
        blocks_cover(&got, &libipt_insns(&t, &image, &skl014_cpu()));
        // Without the erratum (or without a filter) the flow runs on out
        // of the filter to the hlt, where it needs trace.
        for cfg in [
            on("6/0x4e"),
            DecoderConfig::default().with_filter(skl014_cpu().filter),
        ] {
            let (without, _) = both(&t, &image, &cfg);
            assert_ne!(without, want, "{without:#?}");
        }
    }

    #[test]
    fn skl014_a_call_inside_the_filter_does_not_take_the_disable() {
        // 0x1000 call 0x1010 (inside); 0x1005 hlt; 0x1010 nop; call 0x3000
        // (out of the filter): the second call is where tracing stopped.
        // libipt's instruction decoder agrees; its block decoder, asked to
        // end blocks at calls as ptscope's libipt engine asks it, binds
        // the disable at the first direct call (ROBUSTNESS.md).
        let mut code = [0x90u8; 0x20];
        code[..6].copy_from_slice(&[0xe8, 0x0b, 0, 0, 0, 0xf4]);
        code[0x10] = 0x90;
        code[0x11..0x16].copy_from_slice(&[0xe8, 0xea, 0x1f, 0, 0]);
        let out: &[u8] = &[0x90, 0xc3];
        let image = [(0x1000, &code[..]), (0x3000, out)];
        let t = T::default().psb_at(0x1000).pgd_noip();
        let got = ours(&t, &image);
        let got_skl = {
            let mut dec = FlowDecoder::new(&t.0, &skl014_cpu());
            let mut mem = Memory::default();
            for (vaddr, bytes) in image {
                mem.map(vaddr, bytes.len() as u64, Arc::new(bytes.to_vec()), 0);
            }
            dec.set_image(&mem).unwrap();
            let mut items = Vec::new();
            dec.walk(|_, item| {
                items.push(item);
                true
            });
            joined(items)
        };
        assert_eq!(
            got_skl[2..],
            [
                "block 0x1000..0x1000 1 Call",
                "block 0x1010..0x1011 2 Call",
                "Disabled { ip: Some(12288), tsc: None, status_update: false }",
            ],
            "{got_skl:#?}"
        );
        blocks_cover(&got_skl, &libipt_insns(&t, &image, &skl014_cpu()));
        let (_, block_decoder) = both(&t, &image, &skl014_cpu());
        assert_eq!(
            block_decoder[2..],
            [
                "block 0x1000..0x1000 1 Call",
                "Disabled { ip: None, tsc: None, status_update: false }",
            ],
            "{block_decoder:#?}"
        );
        // Without the erratum the flow runs into the callee.
        assert_ne!(got[1..], got_skl[1..], "{got:#?}");
    }
}
