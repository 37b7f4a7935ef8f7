//! This module says what hardware an emulated capture claims to be, and
//! which PT event it claims to have recorded with. The emulated backend
//! writes packets for these settings, and its snapshots record them, so
//! decoders (ours, libipt, perf) read the trace as they would a real one.

use ptscope_formats::pt_params::{term, PtParams};

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
