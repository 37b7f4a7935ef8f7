//! Translation: each translation block QEMU makes becomes a [`Block`],
//! what the PT unit needs to retire it when it runs. Inside a block every
//! instruction but the last falls through (QEMU ends a block at every
//! change of flow), so a block is its start, its length and its last
//! instruction, classified once here by the emulated backend's own
//! classifier.
//!
//! What to look for in the blocks (the trigger's and `--range`'s
//! addresses, found as the program maps its code) comes in a
//! [`Wanted`] from the caller, which reads it from the plugin's shared
//! state: the threads that run blocks use this module, so this module
//! names no module of theirs.

use std::sync::atomic::{AtomicU64, Ordering};

use ptscope_capture::insn::{classify, Insn, InsnClass};

use crate::api::Tb;

/// The block starts at the trigger's function.
pub const AT_TRIGGER: u8 = 1;
/// The block starts at `--range`'s START.
pub const AT_RANGE_START: u8 = 2;
/// The block starts at `--range`'s STOP.
pub const AT_RANGE_STOP: u8 = 4;

/// One translation block, as the PT unit retires it.
#[derive(Debug)]
pub struct Block {
    pub vaddr: u64,
    /// Its instructions.
    pub n: u32,
    /// The address of its last instruction.
    pub last_ip: u64,
    /// Its last instruction, by the packets it makes.
    pub last: Insn,
    /// [`AT_TRIGGER`], [`AT_RANGE_START`], [`AT_RANGE_STOP`].
    pub flags: u8,
}

impl Block {
    /// Whether the block's last instruction can have gone on to `next`
    /// without the kernel stepping in (a signal, a fault).
    pub fn may_go_to(&self, next: u64) -> bool {
        let fallthrough = self.last.next_ip(self.last_ip);
        match self.last.class {
            InsnClass::Other | InsnClass::PtWrite { .. } | InsnClass::KernelEntry => {
                next == fallthrough || (self.last.repeats && next == self.last_ip)
            }
            InsnClass::CondBranch { target } => next == target || next == fallthrough,
            InsnClass::DirectJump { target } | InsnClass::DirectCall { target } => next == target,
            InsnClass::IndirectJump
            | InsnClass::IndirectCall
            | InsnClass::Return
            | InsnClass::FarTransfer => true,
        }
    }

    /// Whether running `next` after this block is another iteration of
    /// its last instruction, a REP string instruction, which QEMU runs as
    /// a block of its own per iteration and PT counts once.
    pub fn repeats_into(&self, next: &Block) -> bool {
        self.last.repeats && next.vaddr == self.last_ip && next.last_ip == self.last_ip
    }
}

/// What translation looks for and attaches, lent by the plugin's shared
/// state (`process::Plugin::wanted`). The addresses are read at each
/// translation, as the mappings can have moved them since the last.
pub struct Wanted<'a> {
    /// Where the trigger's function starts (0 while unknown): blocks
    /// there get [`AT_TRIGGER`].
    pub trigger_address: &'a AtomicU64,
    /// `--range`'s START and STOP, likewise ([`AT_RANGE_START`],
    /// [`AT_RANGE_STOP`]).
    pub range_start: &'a AtomicU64,
    pub range_stop: &'a AtomicU64,
    /// Report every instruction as it runs, for the IP log.
    pub ip_log: bool,
    /// Report the stack accesses of the calls and returns that end
    /// blocks, for the slow-call trigger.
    pub watch_stack: bool,
}

/// Makes the block of `tb`, marked by what `wanted` looks for, and asks
/// QEMU to report each execution of it.
pub fn translate(tb: &Tb, wanted: &Wanted<'_>) {
    let mut n = tb.n_insns();
    if n == 0 {
        return;
    }
    let vaddr = tb.vaddr();
    let mut last_ip = tb.insn_vaddr(n - 1);
    let mut last = decode(tb, n - 1, last_ip);
    if last.len as usize != tb.insn_size(n - 1) && n > 1 {
        // QEMU 7.2 starts translating an instruction that crosses into the
        // next page, then ends the block before it, but leaves it in the
        // plugin's list with the bytes it had read: the block runs without
        // it, and the next one starts there.
        n -= 1;
        last_ip = tb.insn_vaddr(n - 1);
        last = decode(tb, n - 1, last_ip);
    }
    let at = |addr: &AtomicU64, flag: u8| {
        let a = addr.load(Ordering::Relaxed);
        if a != 0 && a == vaddr {
            flag
        } else {
            0
        }
    };
    let flags = at(wanted.trigger_address, AT_TRIGGER)
        | at(wanted.range_start, AT_RANGE_START)
        | at(wanted.range_stop, AT_RANGE_STOP);
    // Blocks live as long as QEMU may run them: QEMU gives no callback
    // when it drops a translation, and a block is a few dozen bytes.
    let block: &'static Block = Box::leak(Box::new(Block {
        vaddr,
        n: n as u32,
        last_ip,
        last,
        flags,
    }));
    tb.on_exec(block);
    if wanted.ip_log {
        for i in 0..n {
            tb.on_insn(i);
        }
    }
    if wanted.watch_stack
        && matches!(
            last.class,
            InsnClass::DirectCall { .. } | InsnClass::IndirectCall | InsnClass::Return
        )
    {
        tb.on_memory(n - 1);
    }
}

/// Instruction `i` of `tb`, at `ip`, classified. QEMU translated it, so it
/// decodes; should iced-x86 disagree, it is taken as falling through,
/// which the successor check then reports.
fn decode(tb: &Tb, i: usize, ip: u64) -> Insn {
    let bytes = code_at(tb, i, ip);
    classify(ip, &bytes).unwrap_or(Insn {
        len: tb.insn_size(i) as u8,
        class: InsnClass::Other,
        repeats: false,
    })
}

/// The bytes of instruction `i` of `tb`, at `ip`: read from guest memory
/// (in user mode a guest address is a host one), as QEMU's own copy holds
/// only what its translator read, which for an instruction it gave up on
/// is not all of it. Where the memory cannot be read, QEMU's copy.
fn code_at(tb: &Tb, i: usize, ip: u64) -> Vec<u8> {
    const MAX_INSN: u64 = 15;
    let mut buf = [0u8; MAX_INSN as usize];
    let to_page_end = (4096 - ip % 4096).min(MAX_INSN) as usize;
    if crate::api::read_guest(ip, &mut buf) {
        return buf.to_vec();
    }
    if crate::api::read_guest(ip, &mut buf[..to_page_end]) {
        // The instruction ends on this page; the next one is not mapped.
        return buf[..to_page_end].to_vec();
    }
    tb.insn_bytes(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(class: InsnClass, repeats: bool) -> Block {
        Block {
            vaddr: 0x1000,
            n: 3,
            last_ip: 0x1008,
            last: Insn {
                len: 2,
                class,
                repeats,
            },
            flags: 0,
        }
    }

    #[test]
    fn successors_follow_the_last_instruction() {
        let fall = block(InsnClass::Other, false);
        assert!(fall.may_go_to(0x100a));
        assert!(!fall.may_go_to(0x2000));
        let cond = block(InsnClass::CondBranch { target: 0x2000 }, false);
        assert!(cond.may_go_to(0x2000) && cond.may_go_to(0x100a));
        assert!(!cond.may_go_to(0x3000));
        let call = block(InsnClass::DirectCall { target: 0x2000 }, false);
        assert!(call.may_go_to(0x2000) && !call.may_go_to(0x100a));
        assert!(block(InsnClass::Return, false).may_go_to(0x1234));
        let rep = block(InsnClass::Other, true);
        assert!(rep.may_go_to(0x1008));
        let again = Block {
            vaddr: 0x1008,
            n: 1,
            last_ip: 0x1008,
            last: rep.last,
            flags: 0,
        };
        assert!(rep.repeats_into(&again));
        assert!(!fall.repeats_into(&again));
    }
}
