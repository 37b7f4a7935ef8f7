//! This module reads the `intel_pt` PMU as the kernel describes it in sysfs:
//! its event type, where each config term lives (`format/*`) and what this
//! CPU can do (`caps/*`). Nothing here hard-codes a bit position: a config is
//! built from the format files, so a kernel that moved a term still gets the
//! right bits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::PtSetupError;

/// Where the kernel lists the PMUs.
pub(crate) const SYSFS_PMUS: &str = "/sys/bus/event_source/devices";

/// Which `perf_event_attr` word a term lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigWord {
    Config,
    Config1,
    Config2,
}

/// One `format/<term>` file: the bits of a config word the term occupies,
/// least significant range first (`config:14-17`, `config:0-3,8`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    pub word: ConfigWord,
    /// Inclusive bit ranges.
    pub ranges: Vec<(u32, u32)>,
}

impl Format {
    pub fn parse(text: &str) -> Option<Format> {
        let (word, bits) = text.trim().split_once(':')?;
        let word = match word {
            "config" => ConfigWord::Config,
            "config1" => ConfigWord::Config1,
            "config2" => ConfigWord::Config2,
            _ => return None,
        };
        let mut ranges = Vec::new();
        for part in bits.split(',') {
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (lo.trim().parse().ok()?, hi.trim().parse().ok()?),
                None => {
                    let b = part.trim().parse().ok()?;
                    (b, b)
                }
            };
            if lo > hi || hi > 63 {
                return None;
            }
            ranges.push((lo, hi));
        }
        (!ranges.is_empty()).then_some(Format { word, ranges })
    }

    /// How many bits the term has.
    pub fn width(&self) -> u32 {
        self.ranges.iter().map(|(lo, hi)| hi - lo + 1).sum()
    }

    /// The largest value the term can hold.
    pub fn max(&self) -> u64 {
        match self.width() {
            64.. => u64::MAX,
            w => (1u64 << w) - 1,
        }
    }

    /// `value` spread over the term's bits, or None when it does not fit.
    pub fn encode(&self, value: u64) -> Option<u64> {
        if value > self.max() {
            return None;
        }
        let mut out = 0u64;
        let mut rest = value;
        for &(lo, hi) in &self.ranges {
            let w = hi - lo + 1;
            let mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
            out |= (rest & mask) << lo;
            rest = if w == 64 { 0 } else { rest >> w };
        }
        Some(out)
    }

    /// The bits of the term within its word (perf stores these masks in
    /// AUXTRACE_INFO).
    pub fn mask(&self) -> u64 {
        self.encode(self.max()).unwrap_or(0)
    }
}

/// What this CPU's Intel PT can do, from `caps/*` (CPUID leaf 0x14 as the
/// kernel reports it). Bitmaps keep the kernel's encoding: bit N set means
/// value N is allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// Cycle-accurate mode (CYC packets), configurable PSB frequency.
    pub psb_cyc: bool,
    pub mtc: bool,
    pub mtc_periods: u32,
    pub cycle_thresholds: u32,
    pub psb_periods: u32,
    pub ip_filtering: bool,
    pub num_address_ranges: u32,
    pub ptwrite: bool,
    pub power_event_trace: bool,
    pub event_trace: bool,
    pub tnt_disable: bool,
    /// Every cap file, as read.
    pub raw: BTreeMap<String, u32>,
}

impl Caps {
    fn from_raw(raw: BTreeMap<String, u32>) -> Caps {
        let get = |k: &str| raw.get(k).copied().unwrap_or(0);
        Caps {
            psb_cyc: get("psb_cyc") != 0,
            mtc: get("mtc") != 0,
            mtc_periods: get("mtc_periods"),
            cycle_thresholds: get("cycle_thresholds"),
            psb_periods: get("psb_periods"),
            ip_filtering: get("ip_filtering") != 0,
            num_address_ranges: get("num_address_ranges"),
            ptwrite: get("ptwrite") != 0,
            power_event_trace: get("power_event_trace") != 0,
            event_trace: get("event_trace") != 0,
            tnt_disable: get("tnt_disable") != 0,
            raw,
        }
    }
}

/// The `intel_pt` PMU of this machine (or of a fixture tree).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pmu {
    pub dir: PathBuf,
    /// `perf_event_attr.type` for PT events.
    pub kind: u32,
    pub formats: BTreeMap<String, Format>,
    pub caps: Caps,
    /// `max_nonturbo_ratio`: the TSC frequency in 100 MHz units, which the
    /// decoder needs to turn CYC counts into time.
    pub max_nonturbo_ratio: Option<u32>,
}

fn read_trimmed(path: &Path) -> Result<String, PtSetupError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|error| PtSetupError::Read {
            path: path.to_path_buf(),
            error,
        })
}

impl Pmu {
    /// The machine's PMU, under `SYSFS_PMUS`.
    pub fn discover() -> Result<Pmu, PtSetupError> {
        Pmu::read(&Path::new(SYSFS_PMUS).join("intel_pt"))
    }

    /// Reads a PMU directory laid out as `/sys/bus/event_source/devices/intel_pt`.
    pub fn read(dir: &Path) -> Result<Pmu, PtSetupError> {
        if !dir.is_dir() {
            return Err(PtSetupError::NoPmu {
                dir: dir.to_path_buf(),
                cpu: cpu_vendor(),
            });
        }
        let type_path = dir.join("type");
        let kind_text = read_trimmed(&type_path)?;
        let kind = kind_text.parse().map_err(|_| PtSetupError::BadSysfs {
            path: type_path.clone(),
            problem: format!("`{kind_text}` is not a PMU type number"),
        })?;
        let mut formats = BTreeMap::new();
        let format_dir = dir.join("format");
        let entries = std::fs::read_dir(&format_dir).map_err(|error| PtSetupError::Read {
            path: format_dir.clone(),
            error,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            let text = read_trimmed(&path)?;
            let format = Format::parse(&text).ok_or_else(|| PtSetupError::BadSysfs {
                path: path.clone(),
                problem: format!("`{text}` is not a config field such as `config:14-17`"),
            })?;
            formats.insert(entry.file_name().to_string_lossy().into_owned(), format);
        }
        let mut raw = BTreeMap::new();
        let caps_dir = dir.join("caps");
        if let Ok(entries) = std::fs::read_dir(&caps_dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                let text = read_trimmed(&path)?;
                // The kernel prints every cap in hex.
                let value = u32::from_str_radix(&text, 16).map_err(|_| PtSetupError::BadSysfs {
                    path: path.clone(),
                    problem: format!("`{text}` is not a hex capability value"),
                })?;
                raw.insert(entry.file_name().to_string_lossy().into_owned(), value);
            }
        }
        let max_nonturbo_ratio = read_trimmed(&dir.join("max_nonturbo_ratio"))
            .ok()
            .and_then(|s| s.parse().ok());
        let pmu = Pmu {
            dir: dir.to_path_buf(),
            kind,
            formats,
            caps: Caps::from_raw(raw),
            max_nonturbo_ratio,
        };
        for term in ["pt", "branch", "tsc"] {
            pmu.format(term)?;
        }
        Ok(pmu)
    }

    pub fn format(&self, term: &str) -> Result<&Format, PtSetupError> {
        self.formats.get(term).ok_or_else(|| PtSetupError::NoTerm {
            dir: self.dir.clone(),
            term: term.to_string(),
        })
    }

    /// The mask of `term` in `config`, or 0 when the kernel lacks it.
    pub fn mask(&self, term: &str) -> u64 {
        self.formats.get(term).map_or(0, Format::mask)
    }
}

/// The CPU vendor string from /proc/cpuinfo, to explain a missing PMU.
fn cpu_vendor() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "this CPU".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_and_encode() {
        let f = Format::parse("config:14-17\n").unwrap();
        assert_eq!(f.word, ConfigWord::Config);
        assert_eq!(f.width(), 4);
        assert_eq!(f.encode(3), Some(3 << 14));
        assert_eq!(f.encode(16), None);
        assert_eq!(f.mask(), 0xf << 14);
        let split = Format::parse("config1:0-1,8").unwrap();
        assert_eq!(split.word, ConfigWord::Config1);
        assert_eq!(split.encode(0b111), Some(0b11 | 1 << 8));
        assert_eq!(Format::parse("config:0").unwrap().encode(1), Some(1));
        for bad in ["", "config", "config:", "config:5-2", "config:64", "cfg:1"] {
            assert_eq!(Format::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn missing_pmu_is_explained() {
        let err = Pmu::read(Path::new("/nonexistent/intel_pt")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/intel_pt"), "{msg}");
        assert!(msg.contains("emulated"), "{msg}");
    }
}
