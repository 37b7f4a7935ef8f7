//! This module classifies the instructions a tracee executes by how Intel PT
//! reports them: which changes of flow (CoFI) produce packets, and which
//! packets. The emulated hardware needs nothing else from an instruction, so
//! iced-x86 decodes just enough to tell the classes apart.

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, OpKind, Register};

/// What PT needs to know about one instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsnClass {
    /// Falls through; no packet.
    Other,
    /// Jcc, LOOP, JRCXZ: one TNT bit.
    CondBranch { target: u64 },
    /// JMP rel: no packet.
    DirectJump { target: u64 },
    /// CALL rel: no packet; pushes the return address for RET compression
    /// unless it is a zero-length call (`call next`), which the hardware does
    /// not treat as a call.
    DirectCall { target: u64 },
    /// JMP r/m: TIP.
    IndirectJump,
    /// CALL r/m: TIP; pushes the return address.
    IndirectCall,
    /// Near RET: a TNT bit when compressed, else TIP.
    Return,
    /// SYSCALL, SYSENTER, INT n: a synchronous trip into the kernel.
    KernelEntry,
    /// Far transfers that stay in user space, and anything else that needs a
    /// TIP for its target (far JMP/CALL/RET, IRET).
    FarTransfer,
    /// PTWRITE: a PTW packet with its operand, `bytes` (4 or 8) wide. The
    /// tracer reads `payload` before the step ([`ptwrite_operand`]); the
    /// classification alone leaves it 0.
    PtWrite { payload: u64, bytes: u8 },
}

#[derive(Clone, Copy, Debug)]
pub struct Insn {
    pub len: u8,
    pub class: InsnClass,
    /// Carries a REP/REPNE prefix: a single step may retire one iteration only.
    pub repeats: bool,
}

impl Insn {
    pub fn next_ip(&self, ip: u64) -> u64 {
        ip.wrapping_add(self.len as u64)
    }

    /// Whether the instruction at `ip` can branch to itself (`jmp .`).
    pub fn targets(&self, ip: u64) -> bool {
        match self.class {
            InsnClass::CondBranch { target }
            | InsnClass::DirectJump { target }
            | InsnClass::DirectCall { target } => target == ip,
            InsnClass::IndirectJump
            | InsnClass::IndirectCall
            | InsnClass::Return
            | InsnClass::FarTransfer => true,
            InsnClass::Other | InsnClass::KernelEntry | InsnClass::PtWrite { .. } => false,
        }
    }
}

/// Decodes one 64-bit instruction at `ip` from `bytes` (up to 15 bytes).
/// Returns `None` for bytes that are not a valid instruction.
pub fn classify(ip: u64, bytes: &[u8]) -> Option<Insn> {
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    decoder.decode_out(&mut insn);
    if insn.is_invalid() {
        return None;
    }
    if matches!(
        insn.code(),
        Code::Syscall | Code::Sysenter | Code::Int_imm8 | Code::Int3 | Code::Into | Code::Int1
    ) {
        return Some(Insn {
            len: insn.len() as u8,
            class: InsnClass::KernelEntry,
            repeats: false,
        });
    }
    if matches!(insn.code(), Code::Ptwrite_rm32 | Code::Ptwrite_rm64) {
        return Some(Insn {
            len: insn.len() as u8,
            class: InsnClass::PtWrite {
                payload: 0,
                bytes: if insn.code() == Code::Ptwrite_rm64 {
                    8
                } else {
                    4
                },
            },
            repeats: false,
        });
    }
    let class = match insn.flow_control() {
        FlowControl::Next | FlowControl::XbeginXabortXend | FlowControl::Exception => {
            InsnClass::Other
        }
        FlowControl::ConditionalBranch => InsnClass::CondBranch {
            target: insn.near_branch_target(),
        },
        FlowControl::UnconditionalBranch => {
            if is_near_branch(&insn) {
                InsnClass::DirectJump {
                    target: insn.near_branch_target(),
                }
            } else {
                InsnClass::FarTransfer
            }
        }
        FlowControl::Call => {
            if is_near_branch(&insn) {
                InsnClass::DirectCall {
                    target: insn.near_branch_target(),
                }
            } else {
                InsnClass::FarTransfer
            }
        }
        FlowControl::IndirectBranch => {
            if is_far(&insn) {
                InsnClass::FarTransfer
            } else {
                InsnClass::IndirectJump
            }
        }
        FlowControl::IndirectCall => {
            if is_far(&insn) {
                InsnClass::FarTransfer
            } else {
                InsnClass::IndirectCall
            }
        }
        FlowControl::Return => match insn.code() {
            Code::Retnq | Code::Retnq_imm16 | Code::Retnw | Code::Retnw_imm16 => InsnClass::Return,
            _ => InsnClass::FarTransfer,
        },
        FlowControl::Interrupt => InsnClass::FarTransfer,
    };
    Some(Insn {
        len: insn.len() as u8,
        class,
        repeats: insn.has_rep_prefix() || insn.has_repne_prefix(),
    })
}

/// The operand of the PTWRITE at `ip` (`bytes`), read as the CPU would:
/// a register's value by `reg` (a full 64-bit register, FS and GS giving
/// their bases, other segments 0), or `bytes` of memory at its effective
/// address by `mem`. `None` if it is not a PTWRITE or a read fails.
pub fn ptwrite_operand(
    ip: u64,
    bytes: &[u8],
    reg: impl Fn(Register) -> Option<u64>,
    mem: impl Fn(u64, usize) -> Option<u64>,
) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let insn = decoder.decode();
    let width = match insn.code() {
        Code::Ptwrite_rm32 => 4,
        Code::Ptwrite_rm64 => 8,
        _ => return None,
    };
    let mask = if width == 4 { 0xffff_ffff } else { u64::MAX };
    match insn.op0_kind() {
        OpKind::Register => Some(reg(insn.op0_register().full_register())? & mask),
        OpKind::Memory => {
            let addr = insn.virtual_address(0, 0, |r, _, _| match r {
                Register::ES | Register::CS | Register::SS | Register::DS => Some(0),
                r => reg(r.full_register()),
            })?;
            Some(mem(addr, width)? & mask)
        }
        _ => None,
    }
}

fn is_near_branch(insn: &Instruction) -> bool {
    matches!(
        insn.op0_kind(),
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
    )
}

fn is_far(insn: &Instruction) -> bool {
    matches!(
        insn.code(),
        Code::Jmp_m1616
            | Code::Jmp_m1632
            | Code::Jmp_m1664
            | Code::Call_m1616
            | Code::Call_m1632
            | Code::Call_m1664
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptwrite_reads_its_register_or_memory_operand() {
        let regs = |r: Register| match r {
            Register::RAX => Some(0x1_2345_6789),
            Register::RBX => Some(0x5000),
            Register::FS => Some(0x7000),
            _ => Some(0),
        };
        let mem = |addr: u64, n: usize| (addr == 0x5010 && n == 8).then_some(0xfeed_beef_0000_0001);
        let fs = |addr: u64, n: usize| (addr == 0x7008 && n == 4).then_some(0xabcd);
        // ptwrite %rax (f3 48 0f ae e0)
        let rax = [0xf3, 0x48, 0x0f, 0xae, 0xe0];
        assert_eq!(
            classify(0x1000, &rax).unwrap().class,
            InsnClass::PtWrite {
                payload: 0,
                bytes: 8
            }
        );
        assert_eq!(
            ptwrite_operand(0x1000, &rax, regs, mem),
            Some(0x1_2345_6789)
        );
        // ptwrite %eax (f3 0f ae e0): the low 32 bits.
        assert_eq!(
            ptwrite_operand(0x1000, &[0xf3, 0x0f, 0xae, 0xe0], regs, mem),
            Some(0x2345_6789)
        );
        // ptwriteq 0x10(%rbx) (f3 48 0f ae 63 10)
        assert_eq!(
            ptwrite_operand(0x1000, &[0xf3, 0x48, 0x0f, 0xae, 0x63, 0x10], regs, mem),
            Some(0xfeed_beef_0000_0001)
        );
        // ptwritel %fs:8 (64 f3 0f ae 24 25 08 00 00 00)
        assert_eq!(
            ptwrite_operand(
                0x1000,
                &[0x64, 0xf3, 0x0f, 0xae, 0x24, 0x25, 8, 0, 0, 0],
                regs,
                fs
            ),
            Some(0xabcd)
        );
        assert_eq!(ptwrite_operand(0x1000, &[0x90], regs, mem), None);
    }

    #[test]
    fn classifies_common_cofi() {
        let ip = 0x1000;
        // jne +5
        assert_eq!(
            classify(ip, &[0x75, 0x05]).unwrap().class,
            InsnClass::CondBranch { target: 0x1007 }
        );
        // call rel32 0
        assert_eq!(
            classify(ip, &[0xe8, 0, 0, 0, 0]).unwrap().class,
            InsnClass::DirectCall { target: 0x1005 }
        );
        // call *%rax
        assert_eq!(
            classify(ip, &[0xff, 0xd0]).unwrap().class,
            InsnClass::IndirectCall
        );
        // jmp *%rax
        assert_eq!(
            classify(ip, &[0xff, 0xe0]).unwrap().class,
            InsnClass::IndirectJump
        );
        // ret, rep ret
        assert_eq!(classify(ip, &[0xc3]).unwrap().class, InsnClass::Return);
        assert_eq!(
            classify(ip, &[0xf3, 0xc3]).unwrap().class,
            InsnClass::Return
        );
        // syscall
        assert_eq!(
            classify(ip, &[0x0f, 0x05]).unwrap().class,
            InsnClass::KernelEntry
        );
        // rep movsb
        let movs = classify(ip, &[0xf3, 0xa4]).unwrap();
        assert_eq!(movs.class, InsnClass::Other);
        assert!(movs.repeats);
        // endbr64
        assert_eq!(
            classify(ip, &[0xf3, 0x0f, 0x1e, 0xfa]).unwrap().class,
            InsnClass::Other
        );
        // bnd jmp rel32
        assert!(matches!(
            classify(ip, &[0xf2, 0xe9, 0, 0, 0, 0]).unwrap().class,
            InsnClass::DirectJump { .. }
        ));
        // truncated bytes
        assert!(classify(ip, &[0xe8, 0]).is_none());
    }
}
