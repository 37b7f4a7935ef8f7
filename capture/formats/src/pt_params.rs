//! The Intel PT parameters perf stores for decoders in AUXTRACE_INFO
//! (`priv[]` of an intel_pt AUXTRACE_INFO record), and the config bits of
//! the `intel_pt` PMU's terms that they refer to.

use crate::perf_data::{AuxtraceInfo, FormatError};

/// PERF_AUXTRACE_INTEL_PT.
pub const AUXTRACE_KIND: u32 = 1;

/// Config bit positions of the `intel_pt` PMU terms as the kernel defines
/// them (they mirror IA32_RTIT_CTL). The intel-pt backend reads the real
/// ones from sysfs; the emulated backend uses these.
pub mod term {
    pub const PT: u64 = 1 << 0;
    pub const CYC: u64 = 1 << 1;
    /// Power event trace (MWAIT, PWRE, PWRX, EXSTOP packets).
    pub const PWR_EVT: u64 = 1 << 4;
    /// A FUP with the instruction's IP after each PTW packet.
    pub const FUP_ON_PTW: u64 = 1 << 5;
    pub const MTC: u64 = 1 << 9;
    pub const TSC: u64 = 1 << 10;
    pub const NORETCOMP: u64 = 1 << 11;
    /// PTWRITE: a PTW packet for each PTWRITE instruction.
    pub const PTW: u64 = 1 << 12;
    pub const BRANCH: u64 = 1 << 13;
    pub const MTC_PERIOD_SHIFT: u32 = 14;
    pub const MTC_PERIOD_MASK: u64 = 0xf << MTC_PERIOD_SHIFT;
    pub const CYC_THRESH_SHIFT: u32 = 19;
    pub const PSB_PERIOD_SHIFT: u32 = 24;
    pub const PSB_PERIOD_MASK: u64 = 0xf << PSB_PERIOD_SHIFT;
}

/// The intel_pt AUXTRACE_INFO parameters, in perf's `priv[]` order.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PtParams {
    pub pmu_type: u64,
    pub time_shift: u64,
    pub time_mult: u64,
    pub time_zero: u64,
    pub cap_user_time_zero: bool,
    /// Config masks of the terms, as perf stores them.
    pub tsc_bit: u64,
    pub noretcomp_bit: u64,
    /// 0 none, 1 sched_switch tracepoint, 2 SWITCH records, 3 CPU-wide SWITCH.
    pub have_sched_switch: u64,
    pub snapshot_mode: bool,
    pub per_cpu_mmaps: bool,
    pub mtc_bit: u64,
    pub mtc_freq_bits: u64,
    pub tsc_ctc_ratio_n: u64,
    pub tsc_ctc_ratio_d: u64,
    pub cyc_bit: u64,
    pub max_nonturbo_ratio: u64,
    pub filter: String,
    /// Whether the PMU can do Event Trace (perf 6.1+ records this).
    pub cap_event_trace: bool,
}

const WORDS: usize = 17;

impl PtParams {
    pub fn to_info(&self) -> AuxtraceInfo {
        let mut words = vec![
            self.pmu_type,
            self.time_shift,
            self.time_mult,
            self.time_zero,
            self.cap_user_time_zero as u64,
            self.tsc_bit,
            self.noretcomp_bit,
            self.have_sched_switch,
            self.snapshot_mode as u64,
            self.per_cpu_mmaps as u64,
            self.mtc_bit,
            self.mtc_freq_bits,
            self.tsc_ctc_ratio_n,
            self.tsc_ctc_ratio_d,
            self.cyc_bit,
            self.max_nonturbo_ratio,
            self.filter.len() as u64,
        ];
        if !self.filter.is_empty() {
            let mut bytes = self.filter.as_bytes().to_vec();
            bytes.resize((bytes.len() + 1).div_ceil(8) * 8, 0);
            words.extend(
                bytes
                    .chunks(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
            );
        }
        // perf 6.1 and later read one more word: the event-trace capability.
        words.push(self.cap_event_trace as u64);
        AuxtraceInfo {
            kind: AUXTRACE_KIND,
            words,
        }
    }

    /// Reads the parameters; older perf versions wrote fewer words, and the
    /// missing ones read as zero, as perf itself treats them.
    pub fn from_info(info: &AuxtraceInfo) -> Result<PtParams, FormatError> {
        let bad = |problem: String| FormatError::Invalid {
            what: "AUXTRACE_INFO record",
            offset: 0,
            problem,
        };
        if info.kind != AUXTRACE_KIND {
            return Err(bad(format!(
                "auxtrace type {} is not Intel PT (1); only Intel PT traces are supported",
                info.kind
            )));
        }
        if info.words.len() < 9 {
            return Err(bad(format!(
                "{} parameter words, need at least 9",
                info.words.len()
            )));
        }
        let w = |i: usize| info.words.get(i).copied().unwrap_or(0);
        let filter_len = w(16) as usize;
        let filter = if filter_len > 0 {
            let raw: Vec<u8> = info
                .words
                .iter()
                .skip(WORDS)
                .flat_map(|w| w.to_le_bytes())
                .collect();
            if raw.len() < filter_len {
                return Err(bad(format!("filter of {filter_len} bytes does not fit")));
            }
            String::from_utf8_lossy(&raw[..filter_len]).into_owned()
        } else {
            String::new()
        };
        Ok(PtParams {
            pmu_type: w(0),
            time_shift: w(1),
            time_mult: w(2),
            time_zero: w(3),
            cap_user_time_zero: w(4) != 0,
            tsc_bit: w(5),
            noretcomp_bit: w(6),
            have_sched_switch: w(7),
            snapshot_mode: w(8) != 0,
            per_cpu_mmaps: w(9) != 0,
            mtc_bit: w(10),
            mtc_freq_bits: w(11),
            tsc_ctc_ratio_n: w(12),
            tsc_ctc_ratio_d: w(13),
            cyc_bit: w(14),
            max_nonturbo_ratio: w(15),
            cap_event_trace: info
                .words
                .get(
                    WORDS
                        + if filter_len > 0 {
                            (filter_len + 1).div_ceil(8)
                        } else {
                            0
                        },
                )
                .is_some_and(|&v| v != 0),
            filter,
        })
    }

    /// TSC ticks to perf nanoseconds (perf's `tsc_to_perf_time`).
    pub fn tsc_to_ns(&self, tsc: u64) -> u64 {
        self.time_conv().tsc_to_perf_time(tsc)
    }

    /// The conversion [`tsc_to_ns`](Self::tsc_to_ns) makes, for a caller
    /// that converts every event's time.
    pub fn time_conv(&self) -> crate::perf_data::TimeConv {
        crate::perf_data::TimeConv {
            time_shift: self.time_shift,
            time_mult: self.time_mult,
            time_zero: self.time_zero,
            ..Default::default()
        }
    }

    /// The MTC period field of `config`.
    pub fn mtc_period(&self, config: u64) -> u32 {
        if self.mtc_freq_bits == 0 {
            return 0;
        }
        ((config & self.mtc_freq_bits) >> self.mtc_freq_bits.trailing_zeros()) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_round_trip() {
        let p = PtParams {
            pmu_type: 8,
            time_shift: 31,
            time_mult: 1 << 31,
            cap_user_time_zero: true,
            tsc_bit: term::TSC,
            noretcomp_bit: term::NORETCOMP,
            mtc_freq_bits: term::MTC_PERIOD_MASK,
            max_nonturbo_ratio: 10,
            filter: "filter main @ /bin/x".into(),
            ..Default::default()
        };
        let info = p.to_info();
        assert_eq!(PtParams::from_info(&info).unwrap(), p);
        assert_eq!(p.tsc_to_ns(1_000_000), 1_000_000);
        assert_eq!(p.mtc_period(3 << 14), 3);
        let mut short = info.clone();
        short.words.truncate(4);
        assert!(PtParams::from_info(&short).is_err());
    }
}
