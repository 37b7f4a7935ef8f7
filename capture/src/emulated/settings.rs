//! This module says what hardware an emulated capture claims to be, and
//! which PT event it claims to have recorded with. The emulated backend
//! writes packets for these settings, and its snapshots record them, so
//! decoders (ours, libipt, perf) read the trace as they would a real one.

use ptscope_formats::pt_params::{term, PtParams};

use super::hardware::PtSettings;
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

    /// perf's `cpuid` header string for this CPU.
    pub fn cpuid_string() -> String {
        format!("GenuineIntel,{FAMILY},{MODEL},{STEPPING}")
    }
}

/// The config of the emulated PT event: pt, branch, tsc, cyc, psb_period=1
/// (4 KiB), mtc off, return compression on.
pub fn emulated_config() -> u64 {
    term::PT
        | term::BRANCH
        | term::TSC
        | term::CYC
        | (3 << term::MTC_PERIOD_SHIFT)
        | (1 << term::PSB_PERIOD_SHIFT)
}

pub const EMULATED_CONFIG_STR: &str = "intel_pt/cyc=1,tsc=1,mtc=0,psb_period=1/u";

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

/// The emulated PT unit set up as [`emulated_config`] says: a PSB every
/// 2^(psb_period + 11) bytes, return compression unless `noretcomp`, CYC
/// packets if `cyc`, and the CPU's own CBR; its ring holds `ring_size`
/// bytes. The packets the unit writes and the event the snapshot records
/// come from the one config, so they cannot disagree.
pub fn pt_settings(ring_size: usize) -> PtSettings {
    let config = emulated_config();
    let psb_period = (config & term::PSB_PERIOD_MASK) >> term::PSB_PERIOD_SHIFT;
    PtSettings {
        psb_period: 1 << (psb_period + 11),
        ret_compression: config & term::NORETCOMP == 0,
        cyc: config & term::CYC != 0,
        cbr: cpu::MAX_NONTURBO_RATIO,
        ring_size,
    }
}

/// The PT event an emulated capture claims, as its snapshot records it.
pub fn pt_setup() -> PtSetup {
    PtSetup {
        pmu_type: cpu::PMU_TYPE,
        config: emulated_config(),
        event: EMULATED_CONFIG_STR.into(),
        params: emulated_params(),
        cpuid: cpu::cpuid_string(),
        cpu_desc: cpu::DESCRIPTION.into(),
        kernel: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_writes_what_the_event_claims() {
        let s = pt_settings(1 << 16);
        // psb_period=1 in the event string: 4 KiB.
        assert!(EMULATED_CONFIG_STR.contains("psb_period=1"));
        assert_eq!(s.psb_period, 4096);
        assert!(EMULATED_CONFIG_STR.contains("cyc=1") && s.cyc);
        assert!(!EMULATED_CONFIG_STR.contains("noretcomp") && s.ret_compression);
        assert_eq!(s.cbr, cpu::MAX_NONTURBO_RATIO);
        assert_eq!(
            u64::from(cpu::MAX_NONTURBO_RATIO),
            emulated_params().max_nonturbo_ratio
        );
        assert_eq!(pt_setup().config, emulated_config());
    }
}
