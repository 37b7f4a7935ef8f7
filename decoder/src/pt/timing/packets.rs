//! The time a trace position stands for, from its timing packets: TSC sets
//! it, MTC (with TMA and the CTC ratio) advances it in crystal-clock steps,
//! CYC (with CBR and the nominal frequency) in core cycles between them.
//! The rules follow the SDM (and libipt's `pt_time`), so both decoders give
//! the same times.

use crate::pt::block::DecoderConfig;

/// MTC carries 8 bits of the CTC; TMA 16.
const MTC_BITS: u32 = 8;
const TMA_CTC_BITS: u32 = 16;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Time {
    have_tsc: bool,
    have_tma: bool,
    have_mtc: bool,
    tsc: u64,
    /// The time at the last TSC or MTC; CYC counts from it.
    base: u64,
    /// Cycles (in TSC ticks) since `base`.
    fc: u64,
    /// The CTC at the last MTC or TMA.
    ctc: u32,
    cbr: u8,
    /// TSC ticks per core cycle (32.32), learned from the cycles counted
    /// between two TSCs: for CYC when CBR or the nominal ratio is unknown.
    per_cycle: u64,
    cycles_since_tsc: u64,
    last_tsc: Option<u64>,
}

impl Time {
    /// The current estimate, once a TSC has been seen.
    pub(crate) fn tsc(&self) -> Option<u64> {
        self.have_tsc.then_some(self.tsc)
    }

    pub(crate) fn on_tsc(&mut self, tsc: u64) {
        let mut per_cycle = self.per_cycle;
        if let Some(prev) = self.last_tsc {
            if tsc > prev && self.cycles_since_tsc > 0 {
                per_cycle =
                    (((tsc - prev) as u128) << 32).div_ceil(self.cycles_since_tsc as u128) as u64;
            }
        }
        *self = Time {
            have_tsc: true,
            tsc,
            base: tsc,
            cbr: self.cbr,
            per_cycle,
            last_tsc: Some(tsc),
            ..Time::default()
        };
    }

    /// A PSB: its PSB+ restates the time (TSC, TMA, CBR), so what came
    /// before is dropped, and a damaged PSB+ without them leaves the time
    /// unknown, as for a decoder that syncs there (the parallel pass's
    /// chunks start so). The rate learned between TSCs stays: no PSB+
    /// restates it.
    pub(crate) fn on_psb(&mut self) {
        *self = Time {
            per_cycle: self.per_cycle,
            cycles_since_tsc: self.cycles_since_tsc,
            last_tsc: self.last_tsc,
            ..Time::default()
        };
    }

    pub(crate) fn on_cbr(&mut self, cbr: u8) {
        if cbr != 0 {
            self.cbr = cbr;
        }
    }

    pub(crate) fn on_tma(&mut self, ctc: u16, fc: u16, cfg: &DecoderConfig) {
        // Only the first TMA after a TSC means anything.
        if !self.have_tsc || self.have_tma || self.have_mtc {
            return;
        }
        let hi = cfg.mtc_freq as u32 + MTC_BITS;
        let mask = if hi >= 32 { u32::MAX } else { (1u32 << hi) - 1 };
        self.have_tma = true;
        self.base = self.base.wrapping_sub(fc as u64);
        self.fc = self.fc.wrapping_add(fc as u64);
        if hi <= TMA_CTC_BITS {
            self.have_mtc = true;
        }
        self.ctc = ctc as u32 & mask;
    }

    pub(crate) fn on_mtc(&mut self, payload: u8, cfg: &DecoderConfig) {
        // An MTC between TSC and TMA would look like a CTC overflow.
        if self.have_tsc && !self.have_tma {
            return;
        }
        let freq = cfg.mtc_freq as u32;
        if freq + MTC_BITS > 31 {
            return;
        }
        let ctc = (payload as u32) << freq;
        let mut last = self.ctc;
        let had_mtc = self.have_mtc;
        self.have_mtc = true;
        self.fc = 0;
        self.ctc = ctc;
        if !had_mtc {
            if !self.have_tma {
                return;
            }
            // TMA gave the low 16 CTC bits; take the high ones from this
            // MTC, one period back if its low bits already wrapped.
            let tma_mask = (1u32 << TMA_CTC_BITS) - 1;
            let lo = ctc & tma_mask;
            let mut hi = ctc & !tma_mask;
            if lo < last {
                hi = hi.wrapping_sub(1 << TMA_CTC_BITS) & (0xff << freq);
            }
            last |= hi;
        }
        let Some(delta) = ctc_delta(ctc, last, freq) else {
            return;
        };
        let (eax, ebx) = (cfg.cpuid_0x15_eax as u64, cfg.cpuid_0x15_ebx as u64);
        if eax == 0 || ebx == 0 {
            return;
        }
        self.base = self.base.wrapping_add(delta as u64 * ebx / eax);
        self.tsc = self.base;
    }

    pub(crate) fn on_cyc(&mut self, cycles: u64, cfg: &DecoderConfig) {
        self.cycles_since_tsc = self.cycles_since_tsc.saturating_add(cycles);
        // Core cycles to TSC ticks: the TSC runs at the nominal ratio, the
        // core at CBR; without those, at the rate seen between TSCs.
        if !self.have_tsc {
            return;
        }
        let ticks = if self.cbr != 0 && cfg.nom_freq != 0 {
            super::mul_div(cycles, cfg.nom_freq as u64, self.cbr as u64)
        } else if self.per_cycle != 0 {
            ((cycles as u128 * self.per_cycle as u128) >> 32) as u64
        } else {
            return;
        };
        self.fc = self.fc.saturating_add(ticks);
        self.tsc = self.base.wrapping_add(self.fc);
    }
}

/// CTC ticks from `last` to `ctc`, allowing one wrap of the MTC's bits.
fn ctc_delta(ctc: u32, last: u32, freq: u32) -> Option<u32> {
    if ctc >= last {
        return Some(ctc - last);
    }
    let wrapped = ctc + (1u32 << (freq + MTC_BITS));
    (wrapped >= last).then(|| wrapped - last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> DecoderConfig {
        DecoderConfig {
            // 2 TSC ticks per crystal tick, an MTC every 2^3 crystal ticks.
            cpuid_0x15_eax: 1,
            cpuid_0x15_ebx: 2,
            mtc_freq: 3,
            nom_freq: 20,
            ..DecoderConfig::default()
        }
    }

    #[test]
    fn mtc_advances_by_crystal_ticks_after_tsc_and_tma() {
        let c = cfg();
        let mut t = Time::default();
        assert_eq!(t.tsc(), None);
        t.on_tsc(1000);
        // An MTC before TMA is ignored.
        t.on_mtc(5, &c);
        assert_eq!(t.tsc(), Some(1000));
        // CTC 0x28 = MTC payload 5, 0 ticks since it; fc 0.
        t.on_tma(0x28, 0, &c);
        t.on_mtc(6, &c);
        // One MTC period: 8 crystal ticks, 16 TSC ticks.
        assert_eq!(t.tsc(), Some(1016));
        t.on_mtc(8, &c);
        assert_eq!(t.tsc(), Some(1048));
    }

    #[test]
    fn mtc_payload_wraps_once() {
        let c = cfg();
        let mut t = Time::default();
        t.on_tsc(0);
        t.on_tma(0xff << 3, 0, &c);
        t.on_mtc(0xff, &c);
        t.on_mtc(0x01, &c);
        // 0xff -> 0x101: two periods of 8 crystal ticks, 32 TSC ticks.
        assert_eq!(t.tsc(), Some(32));
    }

    #[test]
    fn without_a_bus_ratio_cyc_runs_at_the_rate_seen_between_tscs() {
        let c = DecoderConfig::default();
        let mut t = Time::default();
        t.on_tsc(1000);
        t.on_cyc(50, &c);
        // Nothing to convert cycles with yet.
        assert_eq!(t.tsc(), Some(1000));
        t.on_cyc(50, &c);
        // 100 cycles took 300 ticks.
        t.on_tsc(1300);
        t.on_cyc(10, &c);
        assert_eq!(t.tsc(), Some(1330));
    }

    #[test]
    fn cyc_counts_core_cycles_at_the_bus_ratio() {
        let c = cfg();
        let mut t = Time::default();
        t.on_tsc(100);
        // Without CBR, cycles cannot be converted.
        t.on_cyc(10, &c);
        assert_eq!(t.tsc(), Some(100));
        t.on_cbr(40);
        // The core at twice the nominal ratio: 2 cycles per tick.
        t.on_cyc(10, &c);
        assert_eq!(t.tsc(), Some(105));
        t.on_cyc(10, &c);
        assert_eq!(t.tsc(), Some(110));
        // TSC resets the count.
        t.on_tsc(200);
        t.on_cyc(4, &c);
        assert_eq!(t.tsc(), Some(202));
    }
}
