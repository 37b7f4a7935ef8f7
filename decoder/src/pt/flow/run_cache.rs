//! How an instruction moves control ([`Class`]), and the runs the walk
//! follows: the instructions from an address up to the next branch,
//! decoded once with iced-x86 and cached by address, so that a loop costs
//! one table lookup per branch. Single instructions are decoded here too,
//! read as the walk reads them (across two images mapped back to back,
//! and APX's JMPABS, which iced-x86 does not know), for the stepping that
//! binds events and for the fine pass.

use iced_x86::{
    Decoder, DecoderError, DecoderOptions, FlowControl, Instruction, Mnemonic, Register,
};

use super::memo::Memo;
use crate::pt::block::{BlockEnd, PtError};
use crate::pt::memory::Memory;

/// How an instruction moves control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
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
    pub(super) fn of(insn: &Instruction) -> Class {
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
    pub(super) fn needs_trace(self) -> bool {
        !matches!(
            self,
            Class::Other | Class::Call | Class::Jump | Class::MovCr3
        )
    }

    pub(super) fn block_end(self) -> BlockEnd {
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
pub(super) struct Run {
    pub(super) ninsn: u32,
    /// The last instruction's address.
    pub(super) last: u64,
    /// The address after it.
    pub(super) next: u64,
    /// A direct branch's target.
    pub(super) target: u64,
    pub(super) class: Class,
}

/// Runs of one image, by start address: open addressing, linear probing.
pub(super) struct RunCache {
    /// Each run with its address in one slot, so that a lookup reads one
    /// place: a third of a cache line, where a key and a [`Run`] side by
    /// side in two tables took two lines and 40 bytes.
    slots: Vec<Slot>,
    len: usize,
    /// The mode its runs were decoded in: the same bytes are other
    /// instructions in 32- or 16-bit mode.
    pub(super) bitness: u32,
    /// What the walk did across these runs, dropped with them.
    pub(super) memo: Memo,
}

/// A cached [`Run`] and its start address, packed: the last instruction
/// as an offset from the start (a run is at most [`MAX_RUN`] instructions
/// of at most 15 bytes), and the address after it as that instruction's
/// length. A run that does not pack so is not cached.
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: u64,
    target: u64,
    last_off: u32,
    ninsn: u16,
    len: u8,
    class: Class,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 24);

impl Slot {
    const EMPTY: Slot = Slot {
        key: EMPTY,
        target: 0,
        last_off: 0,
        ninsn: 0,
        len: 0,
        class: Class::Other,
    };

    /// `run` at `ip`, if it packs exactly.
    fn pack(ip: u64, run: Run) -> Option<Slot> {
        let slot = Slot {
            key: ip,
            target: run.target,
            last_off: u32::try_from(run.last.wrapping_sub(ip)).ok()?,
            ninsn: u16::try_from(run.ninsn).ok()?,
            len: u8::try_from(run.next.wrapping_sub(run.last)).ok()?,
            class: run.class,
        };
        (slot.run() == run).then_some(slot)
    }

    #[inline]
    fn run(&self) -> Run {
        let last = self.key.wrapping_add(u64::from(self.last_off));
        Run {
            ninsn: u32::from(self.ninsn),
            last,
            next: last.wrapping_add(u64::from(self.len)),
            target: self.target,
            class: self.class,
        }
    }
}

const EMPTY: u64 = u64::MAX;
/// Runs stop after this many instructions, so a cache entry stays cheap to
/// re-walk when an event binds inside it.
const MAX_RUN: u32 = 4096;

impl RunCache {
    pub(super) fn new() -> RunCache {
        RunCache {
            slots: vec![Slot::EMPTY; 1024],
            len: 0,
            bitness: 64,
            memo: Memo::default(),
        }
    }

    /// Starts over for code run in `bitness`-bit mode (a MODE.Exec away:
    /// compatibility code, or a damaged trace).
    #[cold]
    pub(super) fn switch_mode(&mut self, bitness: u32) {
        self.slots.fill(Slot::EMPTY);
        self.len = 0;
        self.bitness = bitness;
        self.memo.clear();
    }

    #[inline]
    fn slot(&self, ip: u64) -> usize {
        (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (self.slots.len() - 1)
    }

    /// The run cached at `ip`. The last address is never cached: it is
    /// the mark of an empty slot, whose run is stale.
    #[inline]
    pub(super) fn get(&self, ip: u64) -> Option<Run> {
        if ip == EMPTY {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.slot(ip);
        loop {
            let s = &self.slots[i];
            if s.key == ip {
                return Some(s.run());
            }
            if s.key == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    pub(super) fn insert(&mut self, ip: u64, run: Run) {
        if ip == EMPTY {
            return;
        }
        // Every run the walk decodes packs; one that did not would only be
        // decoded again when next met.
        let Some(slot) = Slot::pack(ip, run) else {
            return;
        };
        if (self.len + 1) * 2 > self.slots.len() {
            let size = self.slots.len() * 2;
            let old = std::mem::replace(&mut self.slots, vec![Slot::EMPTY; size]);
            self.len = 0;
            for s in old {
                if s.key != EMPTY {
                    self.put(s);
                }
            }
        }
        self.put(slot);
    }

    fn put(&mut self, slot: Slot) {
        let mask = self.slots.len() - 1;
        let mut i = self.slot(slot.key);
        while self.slots[i].key != EMPTY && self.slots[i].key != slot.key {
            i = (i + 1) & mask;
        }
        if self.slots[i].key == EMPTY {
            self.len += 1;
        }
        self.slots[i] = slot;
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
pub(super) fn one(insn: &Instruction) -> Run {
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
pub(super) fn decode_one(mem: &Memory, ip: u64, bitness: u32) -> Result<Run, PtError> {
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
pub(super) fn decode_run(mem: &Memory, ip: u64, bitness: u32) -> Result<Run, PtError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The last address marks an empty slot. After the cache starts over
    /// (a mode switch), a lookup there must find nothing, not the run that
    /// slot held before, and a walk that gets there must read the code, as
    /// a fresh cache's does (a damaged trace's IP can be anything).
    #[test]
    fn the_last_address_is_never_a_cached_run() {
        let mut cache = RunCache::new();
        let run_at = |ip: u64| Run {
            ninsn: 7,
            last: ip + 12,
            next: ip + 14,
            target: 0x2000,
            class: Class::CondJump,
        };
        for ip in 0..4096 {
            let ip = 0x1000 + 16 * ip;
            cache.insert(ip, run_at(ip));
            assert_eq!(cache.get(ip), Some(run_at(ip)));
        }
        assert_eq!(cache.len, 4096);
        cache.switch_mode(64);
        let run = run_at(0x1000);
        assert_eq!(cache.get(EMPTY), None);
        cache.insert(EMPTY, run);
        assert_eq!(cache.get(EMPTY), None);
        cache.insert(0x1000, run);
        assert_eq!(cache.get(0x1000), Some(run));
    }

    /// A slot gives back the very run put in it: runs as the walk decodes
    /// them, up to the longest, one wrapping past the top of the address
    /// space, and JMPABS. A run that would not pack is not cached at all,
    /// never cached as another.
    #[test]
    fn runs_come_back_as_cached() {
        let mut cache = RunCache::new();
        let runs = [
            (
                0x40_1000,
                one_run(7, 0x40_1010, 2, 0x40_0ff0, Class::CondJump),
            ),
            (
                0x40_2000,
                one_run(MAX_RUN, 0x40_2000 + 15 * 4095, 15, 0, Class::Other),
            ),
            (u64::MAX - 4, one_run(2, u64::MAX - 1, 5, 0, Class::Return)),
            (0x7fff_0000, jmpabs(0x7fff_0000)),
            (
                0xffff_ffff_8100_0000,
                one_run(
                    1,
                    0xffff_ffff_8100_0000,
                    5,
                    0xffff_ffff_8000_0000,
                    Class::Call,
                ),
            ),
        ];
        for &(ip, run) in &runs {
            cache.insert(ip, run);
        }
        for &(ip, run) in &runs {
            assert_eq!(cache.get(ip), Some(run), "{ip:#x}");
        }
        // Its last instruction 4 GiB away, or 300 bytes long: not a run the
        // walk makes, and not one a slot can hold.
        cache.insert(0x9000, one_run(3, 0x9000 + (1 << 32), 2, 0, Class::Jump));
        cache.insert(0xa000, one_run(3, 0xa004, 300, 0, Class::Jump));
        cache.insert(0xb000, one_run(70_000, 0xb004, 3, 0, Class::Jump));
        assert_eq!(cache.get(0x9000), None);
        assert_eq!(cache.get(0xa000), None);
        assert_eq!(cache.get(0xb000), None);
    }

    fn one_run(ninsn: u32, last: u64, len: u64, target: u64, class: Class) -> Run {
        Run {
            ninsn,
            last,
            next: last.wrapping_add(len),
            target,
            class,
        }
    }
}
