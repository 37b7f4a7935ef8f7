//! `ptscope info`: the description of a snapshot (its capture, CPU, PT
//! configuration, threads and binaries) or of a raw PT dump.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use ptscope::name_dirs::NameDirs;
use ptscope_formats::pt::read as packet;

use super::args::KernelOpts;

pub(super) fn info(path: &Path, names: &NameDirs, kernel_opts: &KernelOpts) -> Result<ExitCode> {
    let snap = ptscope_decoder::open_snapshot(path)?;
    let trace = snap.trace()?;
    let lookup = ptscope_decoder::Lookup::new(
        Some(&snap),
        Some(std::sync::Arc::new(names.search(None, true))),
    );
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", path.display())?;
    if let Some(m) = &snap.metadata {
        writeln!(
            out,
            "  capture: {} backend, trigger {}, stopped by {}",
            m.backend, m.trigger, m.stop
        )?;
        if !m.command.is_empty() {
            writeln!(out, "  command: {} (pid {})", m.command.join(" "), m.pid)?;
        }
        writeln!(out, "  clock:   {}", m.clock)?;
        if let Some(cpu) = &m.guest_cpu {
            writeln!(
                out,
                "  ran on:  {cpu} (QEMU's CPU model: glibc picked its routines for it)"
            )?;
        }
        for w in &m.warnings {
            writeln!(out, "  warning: {w}")?;
        }
        if m.backend == "qemu" && m.trigger.starts_with("symbol") {
            writeln!(
                out,
                "  trigger registers: none (QEMU 7.2's plugin API reads no registers)"
            )?;
        }
        if !m.trigger_registers.is_empty() {
            let regs: Vec<String> = m
                .trigger_registers
                .iter()
                .map(|(r, v)| format!("{r}={v:#x}"))
                .collect();
            writeln!(out, "  trigger registers: {}", regs.join(" "))?;
        }
        if let Some(c) = &m.trigger_call {
            writeln!(
                out,
                "  trigger call: {} on thread {}, {} ns (perf time {} .. {}); `ptscope compare --call trigger` explains it",
                c.function, c.tid, c.duration, c.start, c.end
            )?;
        }
    } else {
        writeln!(out, "  a plain perf.data file")?;
    }
    let f = &trace.features;
    writeln!(
        out,
        "  cpu:     {} ({})",
        f.cpuid.as_deref().unwrap_or("unknown"),
        f.cpudesc.as_deref().unwrap_or("?")
    )?;
    let errata = ptscope_decoder::errata_of(&ptscope_decoder::decoder_config(&trace));
    if errata != ptscope_decoder::Errata::default() {
        writeln!(
            out,
            "  errata:  {} (worked around as libipt does)",
            errata.names().join(", ")
        )?;
    }
    if let Some(h) = &f.hostname {
        writeln!(
            out,
            "  host:    {h}, {} {}",
            f.osrelease.as_deref().unwrap_or(""),
            f.arch.as_deref().unwrap_or("")
        )?;
    }
    let p = &trace.params;
    let cfg = trace.pt_attr.config;
    writeln!(
        out,
        "  pt:      pmu type {}, config {:#x}: tsc={} cyc={} mtc={} (period {}) retcomp={} psb_period={}",
        p.pmu_type,
        cfg,
        (cfg & p.tsc_bit != 0) as u8,
        (cfg & p.cyc_bit != 0) as u8,
        (cfg & p.mtc_bit != 0) as u8,
        p.mtc_period(cfg),
        trace.ret_compression() as u8,
        (cfg >> 24) & 0xf,
    )?;
    writeln!(
        out,
        "           time_shift {} time_mult {} time_zero {}, TSC:CTC {}/{}, max non-turbo ratio {}, {}{}",
        p.time_shift,
        p.time_mult,
        p.time_zero,
        p.tsc_ctc_ratio_n,
        p.tsc_ctc_ratio_d,
        p.max_nonturbo_ratio,
        if p.snapshot_mode { "snapshot mode" } else { "full trace" },
        if p.per_cpu_mmaps { ", per-cpu" } else { ", per-thread" },
    )?;
    if !p.filter.is_empty() {
        writeln!(out, "           IP filter: {}", p.filter)?;
        match ptscope_decoder::IpFilter::recorded(&trace) {
            Ok(f) if f.is_configured() => writeln!(out, "           placed at: {f}")?,
            Ok(_) => writeln!(
                out,
                "           placed at: nowhere (its files are not mapped)"
            )?,
            Err(e) => writeln!(out, "           {e}")?,
        }
    }
    if ptscope_decoder::time_unit(&trace) == ptscope_model::TimeUnit::Insns {
        writeln!(
            out,
            "  timing:  none (tsc=0): decoded times count instructions retired, not ns"
        )?;
    }
    if let Some((lo, hi)) = trace.time_range {
        writeln!(
            out,
            "  time:    {lo} .. {hi} ns (perf time), {}",
            ptscope_viewer::format_duration(hi - lo)
        )?;
    }
    if trace.lost_records > 0 || trace.truncated_aux > 0 {
        writeln!(
            out,
            "  lost:    {} records, {} truncated AUX buffers",
            trace.lost_records, trace.truncated_aux
        )?;
    }
    let per_cpu: Vec<_> = trace.streams.iter().filter(|s| s.tid.is_none()).collect();
    if !per_cpu.is_empty() {
        // One buffer per CPU, holding whichever threads ran there.
        writeln!(out, "  buffers:")?;
        for s in &per_cpu {
            let psbs = packet::psb_offsets(&s.data).len();
            let cpu = s
                .cpu
                .map_or(format!("queue {}", s.idx), |c| format!("cpu {c}"));
            let owner = s
                .recorded_tid
                .map_or(String::new(), |t| format!(", recorded for pid/tid {t}"));
            writeln!(
                out,
                "    {cpu:<29} {:>10} bytes of PT, {psbs} PSBs{owner}",
                s.data.len()
            )?;
        }
    }
    writeln!(out, "  threads:")?;
    // Threads of per-CPU buffers, once each, with the CPUs they ran on.
    let mut ran_on: std::collections::BTreeMap<i32, std::collections::BTreeSet<u32>> =
        Default::default();
    for sw in trace.switches.iter().filter(|sw| sw.tid > 0) {
        ran_on.entry(sw.tid).or_default().insert(sw.cpu);
    }
    for (tid, cpus) in ran_on.iter().filter(|_| !per_cpu.is_empty()) {
        let comm = trace.thread(*tid).map(|t| t.comm.as_str()).unwrap_or("");
        let cpus: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
        writeln!(out, "    tid {tid:<8} {comm:<16} on cpu {}", cpus.join(","))?;
    }
    for s in trace.streams.iter().filter(|s| s.tid.is_some()) {
        let psbs = packet::psb_offsets(&s.data).len();
        let who = match (s.tid, s.cpu) {
            (Some(tid), _) => {
                let comm = trace.thread(tid).map(|t| t.comm.as_str()).unwrap_or("");
                format!("tid {tid:<8} {comm:<16}")
            }
            (None, Some(cpu)) => format!("cpu {cpu:<25}"),
            (None, None) => format!("queue {:<23}", s.idx),
        };
        writeln!(
            out,
            "    {who} {:>10} bytes of PT, {psbs} PSBs",
            s.data.len()
        )?;
    }
    writeln!(out, "  binaries:")?;
    let mut seen = std::collections::BTreeSet::new();
    let mut notes = Vec::new();
    for m in trace.mmaps.iter().filter(|m| !m.kernel) {
        if !seen.insert((m.path.clone(), m.build_id.clone())) {
            continue;
        }
        let found = ptscope_decoder::find_binary(
            &snap,
            &lookup,
            m.build_id.as_deref(),
            &m.path,
            &mut notes,
        );
        let id = build_id_text(m);
        let in_snapshot = |p: &Path| snap.buildid_dir().is_some_and(|d| p.starts_with(d));
        let binary = match &found {
            Some(p) if in_snapshot(p) => "(in snapshot".to_string(),
            Some(p) => format!("-> {}", p.display()),
            None => String::new(),
        };
        // What a snapshot carries beside the binary: its debug file.
        let debug = m
            .build_id
            .as_deref()
            .zip(snap.buildid_dir())
            .filter(|(id, dir)| ptscope_formats::buildid::cached_debug_file(dir, id).is_some())
            .map(|(id, _)| {
                let hex = ptscope_formats::buildid::to_hex(id);
                match snap
                    .metadata
                    .as_ref()
                    .and_then(|md| md.debug_files.get(&hex))
                {
                    Some(origin) => format!("debug file from {origin}"),
                    None => "debug file".to_string(),
                }
            });
        let carried = match (found.as_deref().is_some_and(in_snapshot), debug) {
            (true, Some(d)) => format!(" + {d})"),
            (true, None) => ")".to_string(),
            (false, Some(d)) => format!(" (in snapshot: {d})"),
            (false, None) if snap.buildid_dir().is_some() => " (not in snapshot)".to_string(),
            (false, None) => String::new(),
        };
        writeln!(
            out,
            "    {:<10} {:#014x} {} [{}] {binary}{carried}",
            if found.is_some() { "found" } else { "MISSING" },
            m.start,
            m.path,
            id,
        )?;
    }
    notes.dedup();
    for n in &notes {
        writeln!(out, "    warning: {n}")?;
    }
    let (_, missing) = ptscope_decoder::sections_with(&snap, &trace, None, &lookup);
    ptscope::missing::write_remedies(&mut out, &missing, &names.debug_dirs)?;
    // The kernel and its modules, as perf's kernel MMAP records map them:
    // their code is named `[kernel]` in the spans, never decoded.
    let kernel: Vec<_> = trace.mmaps.iter().filter(|m| m.kernel).collect();
    let (symbols, why) = ptscope_decoder::kernel_symbols_for(
        &snap,
        &trace,
        kernel_opts.kallsyms.as_deref(),
        kernel_opts.vmlinux.as_deref(),
    );
    let source = match (&kernel_opts.vmlinux, &kernel_opts.kallsyms) {
        (Some(v), _) => v.display().to_string(),
        (None, Some(k)) => k.display().to_string(),
        (None, None) => "the snapshot's kallsyms".to_string(),
    };
    match (&symbols, &why) {
        (Some(k), _) => writeln!(
            out,
            "  kernel symbols: {} functions from {source}{}",
            k.len(),
            if snap.modules.is_some() && kernel_opts.vmlinux.is_none() {
                ", modules bounded by the snapshot's /proc/modules"
            } else {
                ""
            }
        )?,
        (None, Some(why)) => writeln!(out, "  kernel symbols: none: {why}")?,
        (None, None) => {}
    }
    if !kernel.is_empty() {
        writeln!(
            out,
            "  kernel (not decoded, {}):",
            if symbols.is_some() {
                "named from its symbols"
            } else {
                "shown as [kernel]"
            }
        )?;
        let mut seen = std::collections::BTreeSet::new();
        for m in kernel {
            if !seen.insert((m.start, m.path.clone())) {
                continue;
            }
            let id = build_id_text(m);
            writeln!(
                out,
                "    {:#018x}-{:#018x} {} [{}]",
                m.start,
                m.start.saturating_add(m.len),
                m.display_name(),
                id
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A mapping's build id as `info` prints it.
fn build_id_text(m: &ptscope_formats::snapshot::MmapEvent) -> String {
    m.build_id
        .as_deref()
        .map(ptscope_formats::buildid::to_hex)
        .unwrap_or_else(|| "no build id".into())
}

/// `ptscope info` of a raw PT dump: its size and PSBs, and the binaries
/// given to decode it with.
pub(super) fn raw_info(path: &Path, raw: &[(PathBuf, u64)]) -> Result<ExitCode> {
    let data = ptscope_decoder::read_raw(path)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", path.display())?;
    writeln!(
        out,
        "  a raw Intel PT dump: {} bytes of PT, {} PSBs; no sideband, no timing parameters",
        data.len(),
        packet::psb_offsets(&data).len()
    )?;
    if raw.is_empty() {
        writeln!(
            out,
            "  binaries: none given; decode it with --raw IMAGE:ADDR for each binary it ran"
        )?;
    } else {
        writeln!(out, "  binaries (--raw):")?;
        for (image, addr) in raw {
            let (state, size) = match std::fs::metadata(image) {
                Ok(m) => ("found", format!("({} bytes)", m.len())),
                Err(e) => ("MISSING", format!("({e})")),
            };
            writeln!(
                out,
                "    {state:<10} {addr:#014x} {} {size}",
                image.display()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
