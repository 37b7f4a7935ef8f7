//! The block walk's vocabulary, shared by both engines: what our flow
//! decoder ([`crate::pt::flow`]) and libipt's block decoder ([`crate::pt::ffi`])
//! report, in trace order ([`BlockItem`]: blocks of instructions, tracing
//! turning on and off, errors), how they are configured
//! ([`DecoderConfig`]), and libipt's error codes ([`PtError`]), which our
//! decoder reports too so that both read the same.

use ptscope_formats::snapshot::Trace;

use crate::pt::ip_filter::IpFilter;

/// A libipt error code with its message. The codes and their messages
/// are libipt's (`enum pt_error_code`, `pt_errstr`), ported here so that
/// our own decoder, which reports them too, needs no C library to say
/// what went wrong; a test in [`crate::pt::ffi`] holds every one to libipt's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtError(pub i32);

/// libipt's error codes in order (code `i` is `-i`), with their messages.
const MESSAGES: [&str; 28] = [
    "OK",
    "internal error",
    "invalid argument",
    "decoder out of sync",
    "unknown opcode",
    "unknown packet",
    "unexpected packet context",
    "reached end of trace stream",
    "trace stream does not match query",
    "out of memory",
    "bad configuration",
    "no ip",
    "ip has been suppressed",
    "no memory mapped at this address",
    "unknown instruction",
    "no timing information",
    "no core:bus ratio",
    "bad image",
    "locking error",
    "not supported",
    "compressed return without call",
    "bad compressed return",
    "bad status update",
    "expected tracing enabled event",
    "event ignored",
    "overflow",
    "bad file",
    "unknown cpu",
];

impl PtError {
    pub const BAD_OPC: PtError = PtError(-4);
    pub const BAD_PACKET: PtError = PtError(-5);
    pub const BAD_CONTEXT: PtError = PtError(-6);
    pub const EOS: PtError = PtError(-7);
    pub const BAD_QUERY: PtError = PtError(-8);
    pub const NOIP: PtError = PtError(-11);
    pub const NOMAP: PtError = PtError(-13);
    pub const BAD_INSN: PtError = PtError(-14);
    pub const BAD_RETCOMP: PtError = PtError(-21);
    /// Codes past the last libipt has: its message for any code it does
    /// not know.
    const UNKNOWN: &str = "internal error.";

    pub fn is_eos(self) -> bool {
        self == PtError::EOS
    }

    /// libipt's message, without the code.
    pub fn message(self) -> String {
        usize::try_from(self.0.unsigned_abs())
            .ok()
            .and_then(|i| MESSAGES.get(i))
            .copied()
            .unwrap_or(PtError::UNKNOWN)
            .to_string()
    }
}

impl std::fmt::Display for PtError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message(), self.0)
    }
}

/// CPU and timing parameters for the decoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderConfig {
    pub family: u16,
    pub model: u8,
    pub stepping: u8,
    pub cpuid_0x15_eax: u32,
    pub cpuid_0x15_ebx: u32,
    pub mtc_freq: u8,
    pub nom_freq: u8,
    /// The IP filter the trace was written under (for SKL014).
    pub filter: IpFilter,
    /// Our flow decoder walks every run instead of replaying what its
    /// memo recorded: the reference the memo is tested against
    /// (`--no-memo`). libipt's decoder ignores it.
    pub no_memo: bool,
}

/// A CPU by family, model and stepping, as CPUID gives them: what decides
/// the errata a decoder works around ([`crate::errata_of`]). Written
/// `FAMILY/MODEL[/STEPPING]`, each decimal or `0x` hex, as ptxed's `--cpu`
/// takes it (e.g. `6/0x8e/9`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Cpu {
    pub family: u16,
    pub model: u8,
    pub stepping: u8,
}

impl std::str::FromStr for Cpu {
    type Err = String;

    fn from_str(s: &str) -> Result<Cpu, String> {
        fn num<T: TryFrom<u64>>(part: &str, what: &str) -> Result<T, String> {
            let v = match part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => part.parse::<u64>(),
            };
            v.ok()
                .and_then(|v| T::try_from(v).ok())
                .ok_or_else(|| format!("`{part}` is not a CPU {what}"))
        }
        let parts: Vec<&str> = s.trim().split('/').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(format!(
                "`{s}` is not FAMILY/MODEL[/STEPPING] (e.g. 6/0x8e/9)"
            ));
        }
        Ok(Cpu {
            family: num(parts[0], "family")?,
            model: num(parts[1], "model")?,
            stepping: parts.get(2).map_or(Ok(0), |p| num(p, "stepping"))?,
        })
    }
}

impl std::fmt::Display for Cpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{:#x}/{}", self.family, self.model, self.stepping)
    }
}

impl DecoderConfig {
    /// The same configuration for `cpu` (the user's `--cpu`, over what the
    /// input says).
    pub fn with_cpu(self, cpu: Cpu) -> DecoderConfig {
        DecoderConfig {
            family: cpu.family,
            model: cpu.model,
            stepping: cpu.stepping,
            ..self
        }
    }

    /// The same configuration with the user's `--ip-filter`, over what the
    /// input records.
    pub fn with_filter(self, filter: IpFilter) -> DecoderConfig {
        DecoderConfig { filter, ..self }
    }
}

/// The class of a block's last instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockEnd {
    Call,
    Return,
    Jump,
    CondJump,
    /// syscall, sysenter, far call, int.
    FarCall,
    /// sysret, iret, far ret.
    FarReturn,
    FarJump,
    /// An indirect jump or a far transfer: libipt's block cache does not
    /// tell which (`ptic_indirect`).
    Indirect,
    /// Not a branch: the block ended for another reason.
    Other,
}

/// A run of instructions as the block decoder reports it.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub ip: u64,
    pub end_ip: u64,
    pub ninsn: u32,
    pub end: BlockEnd,
    /// The execution mode its code ran in (MODE.Exec): 16, 32 or 64-bit.
    pub bitness: u8,
}

/// A memo entry the flow decoder replays, reported whole to a walk that
/// asked for entries ([`crate::pt::flow::FlowDecoder::report_entries`]):
/// its first block, and whether a tick follows that block. Its other
/// blocks (and the tick that may follow one of them) are the same every
/// time an entry of this `id` is reported: the walk reads them with
/// [`entry_blocks`](crate::pt::flow::FlowDecoder::entry_blocks) while it
/// takes the entry, or knows them from the last time.
#[derive(Clone, Copy, Debug)]
pub struct MemoEntry {
    /// Unique in the process: no two entries ever recorded share one.
    pub id: u64,
    pub first: Block,
    pub first_ticks: bool,
    /// The time of the entry's tick, if it has one.
    pub tsc: Option<u64>,
    /// Where its steps are in the decoder's memo, while it is reported.
    pub(crate) steps: (u32, u8),
}

/// What the block walk reports, in trace order. `tsc` is the event's
/// timestamp when libipt attached one.
#[derive(Clone, Copy, Debug)]
pub enum BlockItem {
    /// Decoding (re)started at a PSB at this trace offset.
    Sync {
        offset: u64,
    },
    Block(Block),
    /// Blocks a memo entry replays, all at once (only to a walk that asked
    /// for them).
    Entry(MemoEntry),
    /// Tracing enabled at `ip`; a status update repeats the known state.
    Enabled {
        ip: u64,
        status_update: bool,
        tsc: Option<u64>,
    },
    /// Tracing disabled after the last block (synchronously).
    Disabled {
        ip: Option<u64>,
        tsc: Option<u64>,
        /// PSB+ says tracing is off: state, not a transition.
        status_update: bool,
    },
    /// Tracing disabled asynchronously at `at` (an interrupt or fault).
    AsyncDisabled {
        at: u64,
        tsc: Option<u64>,
    },
    /// An asynchronous branch with both ends traced.
    AsyncBranch {
        from: u64,
        to: u64,
        tsc: Option<u64>,
    },
    /// The hardware lost trace; decoding resumes at `ip`.
    Overflow {
        ip: Option<u64>,
        tsc: Option<u64>,
    },
    /// Time is known exactly at the end of the last block.
    Tick {
        ip: Option<u64>,
        tsc: u64,
    },
    /// A decode error at `offset`; the walk resyncs at the next PSB. `ip`
    /// is where the decoder was.
    Error {
        offset: u64,
        error: PtError,
        ip: Option<u64>,
    },
}

/// The libipt configuration a trace calls for: its CPU (for errata) and the
/// timing ratios from AUXTRACE_INFO.
pub fn decoder_config(trace: &Trace) -> DecoderConfig {
    let (family, model, stepping) = trace.cpu().unwrap_or((0, 0, 0));
    let p = &trace.params;
    DecoderConfig {
        family: family as u16,
        model: model as u8,
        stepping: stepping as u8,
        // A value too wide for its field is damaged: unknown, not its low
        // bits.
        cpuid_0x15_eax: u32::try_from(p.tsc_ctc_ratio_d).unwrap_or(0),
        cpuid_0x15_ebx: u32::try_from(p.tsc_ctc_ratio_n).unwrap_or(0),
        mtc_freq: u8::try_from(p.mtc_period(trace.pt_attr.config)).unwrap_or(0),
        nom_freq: u8::try_from(p.max_nonturbo_ratio).unwrap_or(0),
        // A filter that cannot be placed is as none: SKL014 is then not
        // worked around, as libipt does without a filter configuration.
        filter: IpFilter::recorded(trace).unwrap_or_default(),
        no_memo: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_reads_as_family_model_and_stepping() {
        let c: Cpu = "6/0x8e/9".parse().unwrap();
        assert_eq!((c.family, c.model, c.stepping), (6, 0x8e, 9));
        assert_eq!("6/142".parse::<Cpu>().unwrap().model, 142);
        assert_eq!(c.to_string(), "6/0x8e/9");
        for bad in ["6", "6/0x8e/9/1", "6/0x1ff", "x/1", ""] {
            assert!(bad.parse::<Cpu>().is_err(), "{bad}");
        }
        let cfg = DecoderConfig::default().with_cpu(c);
        assert_eq!((cfg.family, cfg.model, cfg.stepping), (6, 0x8e, 9));
    }

    #[test]
    fn a_ratio_too_wide_for_its_field_is_unknown_not_its_low_bits() {
        let snap = crate::testing::demo_snapshot();
        let mut trace = snap.trace().unwrap();
        assert_ne!(decoder_config(&trace).nom_freq, 0);
        // Its low byte is a plausible ratio.
        trace.params.max_nonturbo_ratio = 0x1_0000_0020;
        trace.params.tsc_ctc_ratio_n = 1 << 40 | 2;
        let cfg = decoder_config(&trace);
        assert_eq!((cfg.nom_freq, cfg.cpuid_0x15_ebx), (0, 0));
    }
}
