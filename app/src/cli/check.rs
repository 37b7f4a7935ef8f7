//! `ptscope check`: what this machine and user can capture, from Intel PT
//! and QEMU to the permissions each kind of tracing needs, probed for real.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;

use ptscope_capture::intel_pt::Timing;

pub(super) fn check() -> Result<ExitCode> {
    use ptscope_capture::intel_pt::Pmu;
    use ptscope_capture::perf_event::{permissions, Privileges, Scope};
    let mut out = std::io::stdout().lock();
    match Pmu::discover() {
        Ok(pmu) => {
            writeln!(
                out,
                "Intel PT:      yes (PMU type {}, {})",
                pmu.kind,
                pmu.dir.display()
            )?;
            let caps: Vec<String> = pmu
                .caps
                .raw
                .iter()
                .map(|(k, v)| format!("{k}={v:x}"))
                .collect();
            writeln!(out, "  caps:        {}", caps.join(" "))?;
            for t in [Timing::Low, Timing::Normal, Timing::High] {
                match t.resolve(&pmu) {
                    Ok(cfg) => writeln!(out, "  timing {t:<6} {}", cfg.event_string(false))?,
                    Err(e) => writeln!(out, "  timing {t:<6} not on this CPU: {e}")?,
                }
            }
        }
        Err(e) => writeln!(out, "Intel PT:      no: {e}")?,
    }
    match ptscope_capture::qemu::probe::usable_qemu() {
        Ok((qemu, version)) => writeln!(
            out,
            "QEMU:          yes ({}, version {version}): `record` traces commands under it, with ptscope's plugin, where there is no Intel PT; `attach` single-steps (QEMU cannot attach)",
            qemu.display()
        )?,
        Err(e) => writeln!(
            out,
            "QEMU:          no: {e}; without Intel PT, `record` single-steps (thousands of times slower)"
        )?,
    }
    let bp = ptscope_capture::perf_event::breakpoint::Breakpoint::available();
    writeln!(
        out,
        "breakpoints:   {}",
        if bp {
            "yes (symbol triggers use a hardware breakpoint)"
        } else {
            "no (symbol triggers compare addresses; emulated backend only)"
        }
    )?;
    let p = Privileges::read();
    writeln!(
        out,
        "paranoid:      kernel.perf_event_paranoid = {}",
        p.paranoid
    )?;
    writeln!(
        out,
        "capabilities:  CAP_PERFMON {}, CAP_IPC_LOCK {}",
        if p.perfmon() { "yes" } else { "no" },
        if p.ipc_lock() { "yes" } else { "no" }
    )?;
    writeln!(
        out,
        "locked memory: {} KiB per CPU × {} CPUs + RLIMIT_MEMLOCK {}",
        p.mlock_kb,
        p.cpus,
        if p.memlock_limit == u64::MAX {
            "unlimited".to_string()
        } else {
            format!("{} KiB", p.memlock_limit / 1024)
        }
    )?;
    for (scope, name) in [
        (Scope::PerThread, "per-thread"),
        (Scope::Kernel, "kernel"),
        (Scope::PerCpu, "per-CPU"),
    ] {
        match permissions::probe(scope) {
            Ok(()) => writeln!(out, "{name:<14} allowed (probed)")?,
            Err(e) => writeln!(
                out,
                "{name:<14} denied (probed: {e}): {}",
                p.explain_open(e, scope)
            )?,
        }
    }
    Ok(ExitCode::SUCCESS)
}
