//! This module says what hardware an emulated capture claims to be, and
//! which PT event it claims to have recorded with. A timing (`--timing`:
//! a preset or config terms) is resolved against the emulated CPU's PMU by
//! the one parser the intel-pt backend uses ([`Timing::resolve`]); the
//! emulated backend writes packets for the config that gives, and its
//! snapshots record that config, so decoders (ours, libipt, perf) read the
//! trace as they would a real one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use ptscope_formats::{pt_params::term, pt_params::PtParams};

use super::hardware::PtSettings;
use crate::intel_pt::pmu::{Caps, ConfigWord, Format, Pmu};
use crate::intel_pt::{PtConfig, PtSetupError, Timing};
use crate::recording::PtSetup;

/// The CPU an emulated capture claims to be: a Skylake server part
/// (family 6, model 85, stepping 4) whose TSC and core clock both run at a
/// nominal 1 GHz (max non-turbo ratio 10 × 100 MHz), with a 25 MHz crystal.
pub mod cpu {
    pub const FAMILY: u32 = 6;
    pub const MODEL: u32 = 85;
    pub const STEPPING: u32 = 4;
    pub const MAX_NONTURBO_RATIO: u8 = 10;
    pub const TSC_HZ: u64 = 1_000_000_000;
    /// CPUID.15H: TSC = crystal × EBX / EAX.
    pub const CPUID15_EAX: u32 = 1;
    pub const CPUID15_EBX: u32 = 40;
    pub const PMU_TYPE: u32 = 8;
    /// IP filter ranges (bits 2:0 of CPUID.(EAX=14H,ECX=1):EAX), as Skylake has.
    pub const NUM_ADDRESS_RANGES: usize = 2;
    pub const DESCRIPTION: &str = "Intel(R) Xeon(R) (ptscope emulated, 1.00 GHz)";
    /// CPUID.14H as the kernel reports it in `caps/`: a Skylake's
    /// cycle-accurate mode, MTC and configurable PSB frequency.
    pub const MTC_PERIODS: u32 = 0x249;
    pub const CYCLE_THRESHOLDS: u32 = 0x3fff;
    pub const PSB_PERIODS: u32 = 0x3f;

    /// perf's `cpuid` header string for this CPU.
    pub fn cpuid_string() -> String {
        format!("GenuineIntel,{FAMILY},{MODEL},{STEPPING}")
    }
}

/// The timing an emulated capture uses when none is asked for: cycle
/// accurate, no MTC, a PSB every 4 KiB. A small ring (8 KiB) still holds
/// a PSB to decode from, and every branch gets a cycle-exact time.
pub const DEFAULT_TIMING: &str = "cyc=1,mtc=0,psb_period=1";

/// The `intel_pt` PMU of the emulated CPU, as the kernel would describe a
/// Skylake's in sysfs: the config terms the emulated unit implements, in
/// the kernel's bit positions, and the CPU's caps. Terms it does not
/// implement (power events, event trace, TNT disable) are absent, so
/// asking for them is a clear error. PTWRITE it implements on any CPU: the
/// tracer steps past the instruction where the CPU lacks it.
pub fn emulated_pmu() -> Pmu {
    let bits = |lo: u32, hi: u32| Format {
        word: ConfigWord::Config,
        ranges: vec![(lo, hi)],
    };
    let bit = |mask: u64| bits(mask.trailing_zeros(), mask.trailing_zeros());
    let formats: BTreeMap<String, Format> = [
        ("pt", bit(term::PT)),
        ("cyc", bit(term::CYC)),
        ("mtc", bit(term::MTC)),
        ("tsc", bit(term::TSC)),
        ("noretcomp", bit(term::NORETCOMP)),
        ("branch", bit(term::BRANCH)),
        ("ptw", bit(term::PTW)),
        ("fup_on_ptw", bit(term::FUP_ON_PTW)),
        (
            "mtc_period",
            bits(term::MTC_PERIOD_SHIFT, term::MTC_PERIOD_SHIFT + 3),
        ),
        (
            "cyc_thresh",
            bits(term::CYC_THRESH_SHIFT, term::CYC_THRESH_SHIFT + 3),
        ),
        (
            "psb_period",
            bits(term::PSB_PERIOD_SHIFT, term::PSB_PERIOD_SHIFT + 3),
        ),
    ]
    .into_iter()
    .map(|(n, f)| (n.to_string(), f))
    .collect();
    let raw: BTreeMap<String, u32> = [
        ("psb_cyc", 1),
        ("mtc", 1),
        ("mtc_periods", cpu::MTC_PERIODS),
        ("cycle_thresholds", cpu::CYCLE_THRESHOLDS),
        ("psb_periods", cpu::PSB_PERIODS),
        ("ptwrite", 1),
        ("power_event_trace", 0),
        ("event_trace", 0),
        ("tnt_disable", 0),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    Pmu {
        dir: PathBuf::from("(the emulated CPU's intel_pt PMU)"),
        kind: cpu::PMU_TYPE,
        formats,
        caps: Caps {
            psb_cyc: true,
            mtc: true,
            mtc_periods: cpu::MTC_PERIODS,
            cycle_thresholds: cpu::CYCLE_THRESHOLDS,
            psb_periods: cpu::PSB_PERIODS,
            ptwrite: true,
            raw,
            ..Caps::default()
        },
        max_nonturbo_ratio: Some(cpu::MAX_NONTURBO_RATIO as u32),
    }
}

/// `timing` (or [`DEFAULT_TIMING`]) resolved for the emulated CPU, as perf
/// would for a real one: perf's default terms with the timing's on top.
/// Two rules of the emulated backend apply: the unit traces branches (`pt`
/// and `branch` stay on), and `tsc=0` turns MTC off too unless `mtc=1` is
/// asked for, so that `tsc=0` means a trace without timing (MTC alone
/// cannot be placed in time).
pub fn emulated_config(timing: Option<&Timing>) -> Result<PtConfig, PtSetupError> {
    let default = DEFAULT_TIMING.parse().expect("the default timing parses");
    let timing = timing.unwrap_or(&default);
    let timing = match timing {
        Timing::Custom(terms)
            if terms.iter().any(|(n, v)| n == "tsc" && *v == 0)
                && !terms.iter().any(|(n, _)| n == "mtc") =>
        {
            let mut terms = terms.clone();
            terms.push(("mtc".into(), 0));
            Timing::Custom(terms)
        }
        other => other.clone(),
    };
    let cfg = timing.resolve(&emulated_pmu())?;
    for needed in ["pt", "branch"] {
        if cfg.value(needed) != Some(1) {
            return Err(PtSetupError::Timing {
                timing: timing.to_string(),
                problem: format!(
                    "the emulated backend traces branches only: {needed}=0 is not supported"
                ),
            });
        }
    }
    Ok(cfg)
}

/// The virtual clock's time conversion: TSC ticks are nanoseconds.
pub fn emulated_params() -> PtParams {
    PtParams {
        pmu_type: cpu::PMU_TYPE as u64,
        time_shift: 31,
        time_mult: 1 << 31,
        time_zero: 0,
        cap_user_time_zero: true,
        tsc_bit: term::TSC,
        noretcomp_bit: term::NORETCOMP,
        have_sched_switch: 0,
        snapshot_mode: true,
        per_cpu_mmaps: false,
        mtc_bit: term::MTC,
        mtc_freq_bits: term::MTC_PERIOD_MASK,
        tsc_ctc_ratio_n: cpu::CPUID15_EBX as u64,
        tsc_ctc_ratio_d: cpu::CPUID15_EAX as u64,
        cyc_bit: term::CYC,
        max_nonturbo_ratio: cpu::MAX_NONTURBO_RATIO as u64,
        filter: String::new(),
        cap_event_trace: false,
    }
}

/// The emulated PT unit set up as `cfg` says: a PSB every
/// 2^(psb_period + 11) bytes, return compression unless `noretcomp`, TSC
/// (with TMA when MTC is on), MTC every 2^mtc_period crystal ticks, CYC
/// packets at most every 2^(cyc_thresh - 1) cycles, and the CPU's own CBR;
/// its ring holds `ring_size` bytes, and it overflows at `overflows` (see
/// [`PtSettings::overflows`]). The packets the unit writes and the event
/// the snapshot records ([`pt_setup`]) come from the one config, so they
/// cannot disagree.
pub fn pt_settings(cfg: &PtConfig, ring_size: usize, overflows: Arc<[u64]>) -> PtSettings {
    let config = cfg.config;
    let field = |shift: u32| ((config >> shift) & 0xf) as u8;
    PtSettings {
        psb_period: 1 << (field(term::PSB_PERIOD_SHIFT) as u64 + 11),
        ret_compression: config & term::NORETCOMP == 0,
        cyc: config & term::CYC != 0,
        cyc_thresh: field(term::CYC_THRESH_SHIFT),
        tsc: config & term::TSC != 0,
        mtc_period: (config & term::MTC != 0).then(|| field(term::MTC_PERIOD_SHIFT)),
        tsc_per_ctc: (cpu::CPUID15_EBX / cpu::CPUID15_EAX) as u64,
        cbr: cpu::MAX_NONTURBO_RATIO,
        ptw: config & term::PTW != 0,
        fup_on_ptw: config & term::FUP_ON_PTW != 0,
        ring_size,
        overflows,
        skl014: false,
        sticky_stop: false,
    }
}

/// The PT event an emulated capture with `cfg` claims, as its snapshot
/// records it.
pub fn pt_setup(cfg: &PtConfig) -> PtSetup {
    PtSetup {
        pmu_type: cpu::PMU_TYPE,
        config: cfg.config,
        event: cfg.event_string(false),
        params: emulated_params(),
        cpuid: cpu::cpuid_string(),
        cpu_desc: cpu::DESCRIPTION.into(),
        kernel: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(timing: &str) -> (PtConfig, PtSettings) {
        let cfg = emulated_config(Some(&timing.parse().unwrap())).unwrap();
        let s = pt_settings(&cfg, 1 << 16, Arc::from([]));
        (cfg, s)
    }

    #[test]
    fn the_default_is_todays_cycle_accurate_config() {
        let cfg = emulated_config(None).unwrap();
        assert_eq!(
            cfg.config,
            term::PT
                | term::BRANCH
                | term::TSC
                | term::CYC
                | term::PTW
                | term::FUP_ON_PTW
                | (3 << term::MTC_PERIOD_SHIFT)
                | (1 << term::PSB_PERIOD_SHIFT)
        );
        let s = pt_settings(&cfg, 1 << 16, Arc::from([]));
        assert_eq!(s.psb_period, 4096);
        assert!(s.cyc && s.tsc && s.ret_compression);
        // PTWRITE is on, as where a real CPU offers it.
        assert!(s.ptw && s.fup_on_ptw);
        assert!(!settings("ptw=0").1.ptw);
        assert_eq!((s.mtc_period, s.cyc_thresh), (None, 0));
        assert_eq!(s.cbr, cpu::MAX_NONTURBO_RATIO);
        let setup = pt_setup(&cfg);
        assert_eq!(setup.config, cfg.config);
        assert!(setup.event.contains("psb_period=1"), "{}", setup.event);
        assert!(setup.event.contains("cyc=1") && setup.event.contains("mtc=0"));
    }

    #[test]
    fn the_unit_writes_what_each_timing_asks_for() {
        // low: perf's defaults, MTC every 2^3 crystal ticks, PSB every 16K.
        let (cfg, s) = settings("low");
        assert_eq!(cfg.value("mtc"), Some(1));
        assert_eq!((s.mtc_period, s.cyc, s.tsc), (Some(3), false, true));
        assert_eq!(s.psb_period, 16384);
        assert_eq!(s.tsc_per_ctc, 40);
        let (_, s) = settings("normal");
        assert_eq!((s.mtc_period, s.cyc, s.cyc_thresh), (Some(0), true, 1));
        assert!(s.ret_compression);
        let (_, s) = settings("high");
        assert!(!s.ret_compression && s.cyc);
        let (_, s) = settings("cyc=1,cyc_thresh=4,mtc_period=6,psb_period=0,noretcomp=1");
        assert_eq!(
            (s.mtc_period, s.cyc_thresh, s.psb_period),
            (Some(6), 4, 2048)
        );
        assert!(!s.ret_compression);
        // tsc=0: no timing at all, MTC included.
        let (cfg, s) = settings("tsc=0");
        assert_eq!(cfg.config & (term::TSC | term::MTC | term::CYC), 0);
        assert_eq!((s.tsc, s.mtc_period, s.cyc), (false, None, false));
        assert_eq!(pt_setup(&cfg).config, cfg.config);
    }

    #[test]
    fn what_the_emulated_cpu_cannot_do_is_refused() {
        for (timing, says) in [
            ("mtc_period=2", "mtc_period=2 is not supported"),
            ("pwr_evt=1", "pwr_evt needs power event trace"),
            ("notnt=1", "notnt needs TNT disable"),
            ("branch=0", "traces branches only"),
            ("cyc_thresh=15", "cyc_thresh=15 is not supported"),
        ] {
            let err = emulated_config(Some(&timing.parse().unwrap()))
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{timing}: {err}");
        }
    }
}
