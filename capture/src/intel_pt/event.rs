//! This module builds the PT event's `perf_event_attr` as
//! `perf record -e intel_pt/.../` would open it, so that the trace and its
//! records are the ones perf would have recorded, and perf's decoder reads
//! them with the same assumptions.

use super::pmu::Pmu;
use super::timing::PtConfig;
use ptscope_formats::{
    perf_data::aux_action, perf_data::flag, perf_data::sample, perf_data::PerfEventAttr,
};

/// How the PT event is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EventOptions {
    /// Trace the kernel too (needs privilege).
    pub kernel: bool,
    /// CPU-wide events (sample ids then carry the CPU).
    pub per_cpu: bool,
    /// Start disabled and let the kernel enable at the target's exec.
    pub enable_on_exec: bool,
    /// Start paused (`--range`): tracing runs only once a breakpoint in
    /// its group resumes it.
    pub start_paused: bool,
}

/// The sample-id layout of PT records (ITRACE_START, AUX, LOST).
pub(crate) const SAMPLE_TYPE: u64 =
    sample::IP | sample::TID | sample::TIME | sample::CPU | sample::IDENTIFIER;

pub(crate) fn pt_attr(pmu: &Pmu, cfg: &PtConfig, opts: EventOptions) -> PerfEventAttr {
    PerfEventAttr {
        kind: pmu.kind,
        config: cfg.config,
        config1: cfg.config1,
        config2: cfg.config2,
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        // PERF_FORMAT_ID, as perf asks for.
        read_format: 4,
        // Always opened disabled: enabled once its AUX area is mapped (an
        // enabled PT event without one fails to start), or by the kernel
        // at exec.
        flags: flag::EXCLUDE_HV
            | flag::SAMPLE_ID_ALL
            | flag::DISABLED
            | if opts.kernel { 0 } else { flag::EXCLUDE_KERNEL }
            | if opts.enable_on_exec {
                flag::ENABLE_ON_EXEC
            } else {
                0
            },
        aux_action: if opts.start_paused {
            aux_action::START_PAUSED
        } else {
            0
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::intel_pt::Timing;

    fn fixture(cpu: &str) -> Pmu {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(cpu)
            .join("intel_pt");
        Pmu::read(&dir).unwrap()
    }

    fn attr(cpu: &str, timing: &str, opts: EventOptions) -> PerfEventAttr {
        let pmu = fixture(cpu);
        let cfg = timing.parse::<Timing>().unwrap().resolve(&pmu).unwrap();
        pt_attr(&pmu, &cfg, opts)
    }

    const ATTACH: EventOptions = EventOptions {
        kernel: false,
        per_cpu: false,
        enable_on_exec: false,
        start_paused: false,
    };

    /// The attr perf would open for these terms, written out by hand from
    /// the fixture's format files.
    fn expected(config: u64, extra_flags: u64) -> PerfEventAttr {
        PerfEventAttr {
            kind: 8,
            config,
            sample_period: 1,
            sample_type: sample::IP | sample::TID | sample::TIME | sample::CPU | sample::IDENTIFIER,
            read_format: 4,
            flags: flag::EXCLUDE_HV | flag::SAMPLE_ID_ALL | flag::DISABLED | extra_flags,
            ..Default::default()
        }
    }

    // Bits from format/: pt 0, cyc 1, mtc 9, tsc 10, noretcomp 11,
    // branch 13, mtc_period 14-17, cyc_thresh 19-22, psb_period 24-27.
    const PT: u64 = 1;
    const CYC: u64 = 1 << 1;
    const MTC: u64 = 1 << 9;
    const TSC: u64 = 1 << 10;
    const NORETCOMP: u64 = 1 << 11;
    const BRANCH: u64 = 1 << 13;

    #[test]
    fn ptwrite_and_power_events_are_on_where_the_caps_offer_them() {
        let term = |pmu: &Pmu, name: &str| pmu.format(name).unwrap().encode(1).unwrap();
        // Ice Lake's fixture has the terms but not the caps: off.
        let mut pmu = fixture("icelake");
        let low = || "low".parse::<Timing>().unwrap();
        let (ptw, fup, pwr) = (
            term(&pmu, "ptw"),
            term(&pmu, "fup_on_ptw"),
            term(&pmu, "pwr_evt"),
        );
        assert_eq!(low().resolve(&pmu).unwrap().config & (ptw | fup | pwr), 0);
        // A CPU that offers them: on, and a timing may turn them off.
        pmu.caps.ptwrite = true;
        pmu.caps.power_event_trace = true;
        let cfg = low().resolve(&pmu).unwrap();
        assert_eq!(cfg.config & (ptw | fup | pwr), ptw | fup | pwr);
        let off = "ptw=0,pwr_evt=0"
            .parse::<Timing>()
            .unwrap()
            .resolve(&pmu)
            .unwrap();
        assert_eq!(off.config & (ptw | pwr), 0);
    }

    #[test]
    fn skylake_presets_give_perfs_attrs() {
        // low = perf's defaults: mtc_period 3 and psb_period 3 are the
        // bits of caps 249 and 3f closest to 3.
        let low = PT | BRANCH | TSC | MTC | (3 << 14) | (3 << 24);
        assert_eq!(low, 0x0300_e601);
        assert_eq!(
            attr("skylake", "low", ATTACH),
            expected(low, flag::EXCLUDE_KERNEL)
        );
        let normal = PT | BRANCH | TSC | MTC | (3 << 24) | CYC | (1 << 19);
        assert_eq!(
            attr("skylake", "normal", ATTACH),
            expected(normal, flag::EXCLUDE_KERNEL)
        );
        // record: enabled by the kernel at exec.
        let record = EventOptions {
            enable_on_exec: true,
            ..ATTACH
        };
        assert_eq!(
            attr("skylake", "high", record),
            expected(
                normal | NORETCOMP,
                flag::EXCLUDE_KERNEL | flag::ENABLE_ON_EXEC
            )
        );
        // --range: the event opens paused.
        let range = EventOptions {
            start_paused: true,
            ..ATTACH
        };
        let paused = attr("skylake", "low", range);
        assert_eq!(paused.aux_action, aux_action::START_PAUSED);
        assert_eq!(
            PerfEventAttr {
                aux_action: 0,
                ..paused
            },
            expected(low, flag::EXCLUDE_KERNEL)
        );
        // --kernel drops exclude_kernel.
        let kernel = EventOptions {
            kernel: true,
            ..ATTACH
        };
        assert_eq!(attr("skylake", "low", kernel), expected(low, 0));
    }

    #[test]
    fn icelake_caps_limit_cycle_thresholds() {
        // Ice Lake allows cyc_thresh 0-12 (1fff), Skylake 0-13 (3fff).
        let pmu = fixture("icelake");
        let t: Timing = "cyc=1,cyc_thresh=13".parse().unwrap();
        let err = t.resolve(&pmu).unwrap_err().to_string();
        assert!(err.contains("cyc_thresh=13"), "{err}");
        assert!(err.contains("caps/cycle_thresholds = 1fff"), "{err}");
        let cfg = t.resolve(&fixture("skylake")).unwrap();
        assert_eq!(cfg.config & (0xf << 19), 13 << 19);
        assert_eq!(
            cfg.event_string(false),
            "intel_pt/tsc=1,mtc=1,mtc_period=3,psb_period=3,pt=1,branch=1,cyc=1,cyc_thresh=13/u"
        );
        // The presets fit Ice Lake.
        for preset in ["low", "normal", "high"] {
            assert!(preset.parse::<Timing>().unwrap().resolve(&pmu).is_ok());
        }
    }

    #[test]
    fn broadwell_has_no_cycle_accurate_mode() {
        let pmu = fixture("broadwell");
        // perf's defaults without MTC or PSB period caps.
        let low = Timing::Low.resolve(&pmu).unwrap();
        assert_eq!(low.config, PT | BRANCH | TSC);
        let err = Timing::Normal.resolve(&pmu).unwrap_err().to_string();
        assert!(err.contains("timing `normal`"), "{err}");
        assert!(err.contains("caps/psb_cyc = 0"), "{err}");
        assert!(Timing::High.resolve(&pmu).is_err());
    }

    #[test]
    fn bits_come_from_the_format_files() {
        // A kernel that put every term elsewhere still gets the right bits.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("intel_pt");
        copy_tree(&fixture("skylake").dir, &dir);
        let moves = [
            ("pt", "config:40"),
            ("branch", "config:41"),
            ("tsc", "config:42"),
            ("mtc", "config:43"),
            ("cyc", "config1:0"),
            ("mtc_period", "config:48-51"),
            ("psb_period", "config:52-55"),
            ("cyc_thresh", "config:56-59"),
        ];
        for (term, bits) in moves {
            std::fs::write(dir.join("format").join(term), format!("{bits}\n")).unwrap();
        }
        std::fs::write(dir.join("type"), "11\n").unwrap();
        let pmu = Pmu::read(&dir).unwrap();
        assert_eq!(pmu.kind, 11);
        let cfg = Timing::Normal.resolve(&pmu).unwrap();
        let want = (1 << 40) | (1 << 41) | (1 << 42) | (1 << 43) | (3 << 52) | (1 << 56);
        assert_eq!(cfg.config, want);
        assert_eq!(cfg.config1, 1);
        let a = pt_attr(&pmu, &cfg, ATTACH);
        assert_eq!((a.kind, a.config, a.config1), (11, want, 1));
        assert_eq!(pmu.mask("tsc"), 1 << 42);
        assert_eq!(pmu.mask("mtc_period"), 0xf << 48);
    }

    #[test]
    fn broken_sysfs_files_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("intel_pt");
        copy_tree(&fixture("skylake").dir, &dir);
        std::fs::write(dir.join("caps/mtc_periods"), "zz\n").unwrap();
        let err = Pmu::read(&dir).unwrap_err().to_string();
        assert!(
            err.contains("caps/mtc_periods") && err.contains("zz"),
            "{err}"
        );
        copy_tree(&fixture("skylake").dir, &dir);
        std::fs::write(dir.join("format/mtc_period"), "config:banana\n").unwrap();
        let err = Pmu::read(&dir).unwrap_err().to_string();
        assert!(err.contains("format/mtc_period"), "{err}");
        copy_tree(&fixture("skylake").dir, &dir);
        std::fs::remove_file(dir.join("format/branch")).unwrap();
        let err = Pmu::read(&dir).unwrap_err().to_string();
        assert!(err.contains("no `branch` term"), "{err}");
    }

    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let dest = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy_tree(&e.path(), &dest);
            } else {
                std::fs::copy(e.path(), dest).unwrap();
            }
        }
    }
}
