//! The CPU errata that affect decoding, and which CPU has which: libipt's
//! table (`pt_cpu_errata`), ported here so that our decoder needs no C
//! library to know them (a test in [`crate::pt::ffi`] holds every CPU to
//! libipt's), and for CPUs newer than the bundled libipt knows, the errata
//! Intel's specification updates give them (as libipt's later releases
//! list them), so that both decoders work around the same ones. Our flow decoder
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

/// The errata of one CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errata {
    pub bdm70: bool,
    pub bdm64: bool,
    pub skd007: bool,
    pub skd022: bool,
    pub skd010: bool,
    pub skl014: bool,
    pub apl11: bool,
    pub apl12: bool,
    pub skl168: bool,
    pub skz84: bool,
}

impl Errata {
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

    /// libipt's table: the errata of the Intel CPUs it knows, by family
    /// and model (no erratum here depends on the stepping).
    pub(crate) fn known(family: u16, model: u8) -> Option<Errata> {
        let mut e = Errata::default();
        match (family, model) {
            // Broadwell.
            (0x6, 0x3d | 0x47 | 0x4f | 0x56) => {
                e.bdm70 = true;
                e.bdm64 = true;
            }
            // Skylake and Kaby Lake clients.
            (0x6, 0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6) => {
                e.bdm70 = true;
                e.skd007 = true;
                e.skd022 = true;
                e.skd010 = true;
                e.skl014 = true;
                e.skl168 = true;
            }
            // Skylake, Cascade Lake and Ice Lake servers.
            (0x6, 0x55 | 0x6a | 0x6c) => {
                e.bdm70 = true;
                e.skl014 = true;
                e.skd022 = true;
                e.skz84 = true;
            }
            // Sapphire, Emerald and Granite Rapids.
            (0x6, 0x8f | 0xcf | 0xad | 0xae) => {
                e.bdm70 = true;
                e.skd022 = true;
                e.skz84 = true;
            }
            // Cannon Lake, Ice Lake and Tiger Lake clients.
            (0x6, 0x66 | 0x7d | 0x7e | 0x8c | 0x8d | 0xa7 | 0xa8) => {
                e.bdm70 = true;
                e.skl014 = true;
                e.skd022 = true;
            }
            // Alder Lake, Raptor Lake, Meteor Lake, Arrow Lake and kin.
            (
                0x6,
                0x97 | 0x9a | 0xba | 0xb7 | 0xbf | 0xc5 | 0xc6 | 0xb5 | 0xaa | 0xac | 0xbd | 0xcc,
            ) => {
                e.bdm70 = true;
                e.skd022 = true;
                e.apl11 = true;
            }
            // Goldmont.
            (0x6, 0x5c | 0x5f) => {
                e.apl12 = true;
                e.apl11 = true;
            }
            // Goldmont Plus, Tremont and the other Atom cores.
            (0x6, 0x7a | 0x86 | 0x96 | 0x9c | 0xb6 | 0xaf | 0xdd) => {
                e.apl11 = true;
            }
            (0x13, 0x01) => {
                e.bdm70 = true;
                e.skd022 = true;
                e.skz84 = true;
            }
            _ => return None,
        }
        Some(e)
    }

    /// CPUs that the bundled libipt does not know: Lunar Lake (6/0xd5)
    /// and family 0x12 (models 1 and 3) have BDM70, SKD022 and APL11.
    fn newer(family: u16, model: u8) -> Option<Errata> {
        match (family, model) {
            (0x6, 0xd5) | (0x12, 0x01 | 0x03) => Some(Errata {
                bdm70: true,
                skd022: true,
                apl11: true,
                ..Errata::default()
            }),
            _ => None,
        }
    }

    /// The names of the errata this CPU has, as Intel's specification
    /// updates name them.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.bdm70, "BDM70"),
            (self.bdm64, "BDM64"),
            (self.skd007, "SKD007"),
            (self.skd022, "SKD022"),
            (self.skd010, "SKD010"),
            (self.skl014, "SKL014"),
            (self.apl11, "APL11"),
            (self.apl12, "APL12"),
            (self.skl168, "SKL168"),
            (self.skz84, "SKZ84"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::block::Cpu;

    fn on(cpu: &str) -> Errata {
        Errata::of(&DecoderConfig::default().with_cpu(cpu.parse::<Cpu>().unwrap()))
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
        assert_eq!(Errata::of(&DecoderConfig::default()), Errata::default());
        // Newer than libipt 2.1.2: from the later specification updates.
        for cpu in ["6/0xd5", "0x12/1", "0x12/3"] {
            assert_eq!(on(cpu).names(), ["BDM70", "SKD022", "APL11"], "{cpu}");
        }
        assert_eq!(on("0x13/1").names(), ["BDM70", "SKD022", "SKZ84"]);
        assert_eq!(on("0x12/2"), Errata::default());
    }
}
