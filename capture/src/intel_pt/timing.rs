//! This module turns a timing preset into PT config terms, checked against
//! what the CPU can do. A preset says how much timing the trace carries,
//! which trades the trace's size for how finely it times calls:
//!
//! - `low`: perf's own defaults (TSC, MTC every 2^3 crystal ticks, a PSB
//!   every 2^(psb_period+11) bytes), the smallest trace.
//! - `normal`: adds cycle-accurate mode with threshold 1 and an MTC every
//!   crystal tick, so calls a few ns apart get their own times.
//! - `high`: normal plus `noretcomp`, a TIP for every return, so returns
//!   are timed too (a bigger trace).
//! - custom: `term=value,...` on top of perf's defaults.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::pmu::{Caps, ConfigWord, Pmu};
use super::PtSetupError;

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Timing {
    Low,
    #[default]
    Normal,
    High,
    /// Terms over perf's defaults, e.g. `cyc=1,cyc_thresh=2,mtc_period=0`.
    Custom(Vec<(String, u64)>),
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Timing::Low => write!(f, "low"),
            Timing::Normal => write!(f, "normal"),
            Timing::High => write!(f, "high"),
            Timing::Custom(terms) => write!(f, "{}", format_terms(terms)),
        }
    }
}

impl FromStr for Timing {
    type Err = String;

    fn from_str(s: &str) -> Result<Timing, String> {
        match s.trim() {
            "low" => Ok(Timing::Low),
            "normal" => Ok(Timing::Normal),
            "high" => Ok(Timing::High),
            "" => Err("empty timing: use low, normal, high or term=value,...".into()),
            other => {
                let mut terms = Vec::new();
                for part in other.split(',') {
                    let part = part.trim();
                    let (name, value) = match part.split_once('=') {
                        Some((n, v)) => {
                            let v = v.trim();
                            let value = match v.strip_prefix("0x") {
                                Some(hex) => u64::from_str_radix(hex, 16),
                                None => v.parse(),
                            }
                            .map_err(|_| format!("`{v}` in `{part}` is not a number"))?;
                            (n.trim(), value)
                        }
                        None => (part, 1),
                    };
                    if name.is_empty()
                        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        return Err(format!(
                            "`{part}` is not a config term: use low, normal, high or term=value,..."
                        ));
                    }
                    terms.push((name.to_string(), value));
                }
                Ok(Timing::Custom(terms))
            }
        }
    }
}

fn format_terms(terms: &[(String, u64)]) -> String {
    terms
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The set bit of `bits` closest to `target` from below, or else the
/// lowest one above it (perf picks default periods this way).
pub(crate) fn pick_bit(bits: u32, target: u32) -> Option<u32> {
    let below = (0..=target.min(31)).rev().find(|&b| bits & (1 << b) != 0);
    below.or_else(|| (target + 1..32).find(|&b| bits & (1 << b) != 0))
}

/// perf's default terms for this PMU, in perf's order.
pub(crate) fn perf_defaults(pmu: &Pmu) -> Vec<(String, u64)> {
    let caps = &pmu.caps;
    let has = |k: &str| caps.raw.contains_key(k);
    let mut terms = vec![("tsc".to_string(), 1)];
    // A missing cap file reads as "supported", as perf assumes.
    let mtc = !has("mtc") || caps.mtc;
    let mut mtc_period = None;
    if mtc && caps.mtc_periods != 0 {
        mtc_period = pick_bit(caps.mtc_periods, 3);
        if let Some(p) = mtc_period {
            terms.push(("mtc".into(), 1));
            terms.push(("mtc_period".into(), p as u64));
        }
    }
    let psb_cyc = !has("psb_cyc") || caps.psb_cyc;
    if psb_cyc && mtc_period.is_some() {
        if let Some(p) = pick_bit(caps.psb_periods, 3) {
            terms.push(("psb_period".into(), p as u64));
        }
    }
    if pmu.formats.contains_key("pt") && pmu.formats.contains_key("branch") {
        terms.push(("pt".into(), 1));
        terms.push(("branch".into(), 1));
    }
    terms
}

/// What ptscope turns on beyond perf's defaults wherever the CPU offers
/// it: PTWRITE (each PTW bound to its instruction by a FUP) and power
/// events. They cost nothing where the program never executes PTWRITE or
/// the core never sleeps, and show what the program and the core did. A
/// timing may still turn them off (`ptw=0`, `pwr_evt=0`).
pub(crate) fn offered_packets(pmu: &Pmu) -> Vec<(String, u64)> {
    let caps = &pmu.caps;
    let has = |term: &str| pmu.formats.contains_key(term);
    let mut terms = Vec::new();
    if caps.ptwrite && has("ptw") && has("fup_on_ptw") {
        terms.push(("ptw".to_string(), 1));
        terms.push(("fup_on_ptw".to_string(), 1));
    }
    if caps.power_event_trace && has("pwr_evt") {
        terms.push(("pwr_evt".to_string(), 1));
    }
    terms
}

/// A resolved PT config: the terms and their encoding for this PMU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtConfig {
    pub terms: Vec<(String, u64)>,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
}

impl PtConfig {
    /// perf's event syntax, e.g. `intel_pt/tsc=1,...,cyc=1/u`.
    pub fn event_string(&self, kernel: bool) -> String {
        format!(
            "intel_pt/{}/{}",
            format_terms(&self.terms),
            if kernel { "" } else { "u" }
        )
    }

    pub fn value(&self, term: &str) -> Option<u64> {
        self.terms
            .iter()
            .rev()
            .find(|(n, _)| n == term)
            .map(|(_, v)| *v)
    }
}

impl Timing {
    /// The terms this preset adds to perf's defaults.
    fn extra(&self) -> Vec<(String, u64)> {
        let t = |n: &str, v| (n.to_string(), v);
        match self {
            Timing::Low => Vec::new(),
            Timing::Normal => vec![t("cyc", 1), t("cyc_thresh", 1), t("mtc_period", 0)],
            Timing::High => vec![
                t("cyc", 1),
                t("cyc_thresh", 1),
                t("mtc_period", 0),
                t("noretcomp", 1),
            ],
            Timing::Custom(terms) => terms.clone(),
        }
    }

    /// This preset's config for `pmu`, checked against its caps.
    pub fn resolve(&self, pmu: &Pmu) -> Result<PtConfig, PtSetupError> {
        let mut merged: BTreeMap<String, u64> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for (name, value) in perf_defaults(pmu)
            .into_iter()
            .chain(offered_packets(pmu))
            .chain(self.extra())
        {
            if merged.insert(name.clone(), value).is_none() {
                order.push(name);
            }
        }
        let terms: Vec<(String, u64)> = order
            .into_iter()
            .map(|n| {
                let v = merged[&n];
                (n, v)
            })
            .collect();
        let mut words = [0u64; 3];
        for (name, value) in &terms {
            check_cap(&pmu.caps, name, *value).map_err(|problem| PtSetupError::Timing {
                timing: self.to_string(),
                problem,
            })?;
            let format = pmu.format(name).map_err(|_| PtSetupError::Timing {
                timing: self.to_string(),
                problem: format!(
                    "this kernel's intel_pt PMU has no `{name}` term ({}/format has no {name})",
                    pmu.dir.display()
                ),
            })?;
            let bits = format.encode(*value).ok_or_else(|| PtSetupError::Timing {
                timing: self.to_string(),
                problem: format!("{name}={value} does not fit in {} bits", format.width()),
            })?;
            let word = match format.word {
                ConfigWord::Config => 0,
                ConfigWord::Config1 => 1,
                ConfigWord::Config2 => 2,
            };
            words[word] |= bits;
        }
        Ok(PtConfig {
            terms,
            config: words[0],
            config1: words[1],
            config2: words[2],
        })
    }
}

/// Whether the CPU allows `name=value`; the reason when not.
fn check_cap(caps: &Caps, name: &str, value: u64) -> Result<(), String> {
    let bitmap = |bits: u32, cap: &str| {
        if value < 32 && bits & (1 << value) != 0 {
            Ok(())
        } else {
            let allowed: Vec<String> = (0..32)
                .filter(|b| bits & (1 << b) != 0)
                .map(|b| b.to_string())
                .collect();
            Err(format!(
                "{name}={value} is not supported by this CPU (caps/{cap} = {bits:x}: allowed {})",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            ))
        }
    };
    let flag = |ok: bool, cap: &str, what: &str| {
        if value == 0 || ok {
            Ok(())
        } else {
            Err(format!(
                "{name} needs {what}, which this CPU lacks (caps/{cap} = 0)"
            ))
        }
    };
    match name {
        "cyc" => flag(caps.psb_cyc, "psb_cyc", "cycle-accurate mode"),
        "cyc_thresh" if value > 0 => {
            flag(caps.psb_cyc, "psb_cyc", "cycle-accurate mode")?;
            bitmap(caps.cycle_thresholds, "cycle_thresholds")
        }
        "mtc" => flag(caps.mtc, "mtc", "MTC packets"),
        "mtc_period" => {
            if caps.mtc {
                bitmap(caps.mtc_periods, "mtc_periods")
            } else {
                Ok(())
            }
        }
        "psb_period" => {
            if caps.psb_cyc {
                bitmap(caps.psb_periods, "psb_periods")
            } else if value == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{name}={value} needs a configurable PSB frequency, which this CPU lacks (caps/psb_cyc = 0)"
                ))
            }
        }
        "ptw" | "fup_on_ptw" => flag(caps.ptwrite, "ptwrite", "PTWRITE"),
        "pwr_evt" => flag(
            caps.power_event_trace,
            "power_event_trace",
            "power event trace",
        ),
        "event" => flag(caps.event_trace, "event_trace", "event trace"),
        "notnt" => flag(caps.tnt_disable, "tnt_disable", "TNT disable"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_bit_prefers_closest_below() {
        assert_eq!(pick_bit(0x249, 3), Some(3));
        assert_eq!(pick_bit(0x3f, 3), Some(3));
        assert_eq!(pick_bit(0b101, 3), Some(2));
        assert_eq!(pick_bit(0b1_0000, 3), Some(4));
        assert_eq!(pick_bit(0, 3), None);
    }

    #[test]
    fn parses_presets_and_terms() {
        assert_eq!("low".parse::<Timing>(), Ok(Timing::Low));
        assert_eq!("high".parse::<Timing>(), Ok(Timing::High));
        assert_eq!(
            "cyc,mtc_period=0x2".parse::<Timing>(),
            Ok(Timing::Custom(vec![
                ("cyc".into(), 1),
                ("mtc_period".into(), 2)
            ]))
        );
        assert!("cyc=x".parse::<Timing>().is_err());
        assert!("a b".parse::<Timing>().is_err());
        assert!("".parse::<Timing>().is_err());
    }
}
