//! The CPU errata that affect decoding: which CPU has which is the PT
//! format's table ([`Errata`], in `ptscope_formats::pt::errata`, libipt's
//! ported; a test in [`crate::pt::ffi`] holds every CPU to libipt's), and
//! [`of`] picks a trace's from the CPU it names, so that both decoders work
//! around the same ones. Our flow decoder
//! ([`crate::pt::flow`]) works around them as libipt's decoders do:
//! - BDM70: a PSB+ may say tracing is on (a FUP) when a TIP.PGE follows it:
//!   tracing is off there, and begins at the TIP.PGE;
//! - SKD007: an overflow may overwrite a 2-byte CYC's second byte with
//!   OVF's first: `CYC 02 F3` is read as the OVF it is;
//! - SKZ84: with VMX TSC scaling a TMA may have its reserved bits set: it
//!   is skipped (8 bytes), not an error;
//! - APL11: an OVF may be followed by a TIP.PGD: the overflow resolved
//!   with tracing off, and the TIP.PGD is dropped;
//! - APL12: an OVF may be followed by a FUP even though tracing is off
//!   after it: when a TIP.PGE, a STOP or a PSB+ without FUP comes before
//!   any packet that needs tracing on, the FUP is dropped;
//! - SKD022: an asynchronous disable at VMLAUNCH or VMRESUME is taken as
//!   the synchronous disable it is (the instruction runs);
//! - SKD010: an OVF's FUP may be missing although tracing is on: a later
//!   TIP, FUP (after MODE.TSX) or PSB+ FUP gives the IP to resume at, a
//!   TIP.PGD says tracing went off;
//! - BDM64: a TSX abort right after a branch that needed trace may have
//!   corrupted that branch's trace: where the code cannot get from the
//!   branch's target to the abort without another branch, the branch led
//!   to the abort.
//! - SKL014: a direct call or jump out of the IP filter's ranges may write
//!   its TIP.PGD without the IP: where the filter is known
//!   ([`crate::pt::ip_filter`]: recorded, or `--ip-filter`), the first direct
//!   branch whose target the filter does not trace takes the disable, as
//!   libipt's instruction decoder and perf bind it. (libipt's block
//!   decoder, asked to end blocks at calls as ptscope's libipt engine asks
//!   it, binds it at the first direct call instead.)
//!
//! SKL168 (a CYC dropped just before a PSB) needs nothing: libipt works
//! around it where it calibrates CYC against MTC, while ptscope converts
//! CYC to time with CBR and the nominal ratio, and the PSB's TSC restates
//! the time after it. (Without CBR, the rate learned between two TSCs
//! misses the dropped packet's cycles: at most 4,095 over a PSB period.)

use crate::pt::block::DecoderConfig;

pub use ptscope_formats::pt::errata::Errata;

/// The errata of the CPU `cfg` names; none when it names none (family
/// 0: a raw dump decoded without `--cpu`).
pub fn of(cfg: &DecoderConfig) -> Errata {
    if cfg.family == 0 {
        return Errata::default();
    }
    Errata::known(cfg.family, cfg.model)
        .or_else(|| Errata::newer(cfg.family, cfg.model))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::block::Cpu;

    fn on(cpu: &str) -> Errata {
        of(&DecoderConfig::default().with_cpu(cpu.parse::<Cpu>().unwrap()))
    }

    #[test]
    fn each_cpu_has_libipts_errata() {
        // Broadwell: BDM70 and BDM64; Kaby Lake: the Skylake ones; Goldmont:
        // APL11 and APL12; an unknown CPU, and none named: none.
        let bdw = on("6/0x3d");
        assert!(bdw.bdm70 && bdw.bdm64 && !bdw.skd007);
        let kbl = on("6/0x8e/9");
        assert!(kbl.bdm70 && kbl.skd007 && kbl.skd022 && kbl.skd010 && kbl.skl014);
        let apl = on("6/0x5c");
        assert!(apl.apl11 && apl.apl12 && !apl.bdm70);
        assert_eq!(apl.names(), ["APL11", "APL12"]);
        assert_eq!(on("6/0x01"), Errata::default());
        assert_eq!(of(&DecoderConfig::default()), Errata::default());
        // Newer than libipt 2.1.2: from the later specification updates.
        for cpu in ["6/0xd5", "0x12/1", "0x12/3"] {
            assert_eq!(on(cpu).names(), ["BDM70", "SKD022", "APL11"], "{cpu}");
        }
        assert_eq!(on("0x13/1").names(), ["BDM70", "SKD022", "SKZ84"]);
        assert_eq!(on("0x12/2"), Errata::default());
    }
}
