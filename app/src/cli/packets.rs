//! `ptscope packets`: a ptdump-like listing of one trace's packets, from a
//! snapshot or perf.data (a thread's or a CPU's buffer) or a raw PT dump,
//! with the packet-level errata of the CPU it was written on worked around.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use ptscope_formats::{pt::read as packet, pt::read::Packets};

/// `packets --cpu`: a per-CPU trace's buffer, or the CPU whose errata the
/// listing works around.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PacketsCpu {
    Buffer(u32),
    Model(ptscope_decoder::Cpu),
}

pub(super) fn parse_packets_cpu(s: &str) -> Result<PacketsCpu, String> {
    if s.contains('/') {
        s.parse().map(PacketsCpu::Model)
    } else {
        s.parse()
            .map(PacketsCpu::Buffer)
            .map_err(|e| format!("{s}: neither a CPU number nor FAMILY/MODEL[/STEPPING]: {e}"))
    }
}

/// The packet-level errata to work around: those of `cpu` when given as
/// a model, else those of the CPU `cfg` names.
fn packet_errata(
    cfg: ptscope_decoder::DecoderConfig,
    cpu: Option<PacketsCpu>,
) -> ptscope_decoder::Errata {
    let cfg = match cpu {
        Some(PacketsCpu::Model(c)) => cfg.with_cpu(c),
        _ => cfg,
    };
    ptscope_decoder::errata_of(&cfg)
}

pub(super) fn packets(
    path: &Path,
    thread: Option<i32>,
    cpu_arg: Option<PacketsCpu>,
    limit: Option<usize>,
) -> Result<ExitCode> {
    let snap = ptscope_decoder::open_snapshot(path)?;
    let trace = snap.trace()?;
    let cpu = match cpu_arg {
        Some(PacketsCpu::Buffer(n)) => Some(n),
        _ => None,
    };
    let errata = packet_errata(ptscope_decoder::decoder_config(&trace), cpu_arg);
    let stream = match (thread, cpu) {
        (_, Some(cpu)) => trace
            .streams
            .iter()
            .find(|s| s.cpu == Some(cpu))
            .with_context(|| {
                let cpus: Vec<String> = trace
                    .streams
                    .iter()
                    .filter_map(|s| s.cpu.map(|c| c.to_string()))
                    .collect();
                format!(
                    "{}: no trace buffer for CPU {cpu} (the file has {})",
                    path.display(),
                    if cpus.is_empty() {
                        "per-thread buffers only".to_string()
                    } else {
                        format!("CPUs {}", cpus.join(", "))
                    }
                )
            })?,
        (Some(tid), None) => trace
            .streams
            .iter()
            .find(|s| s.tid == Some(tid))
            .with_context(|| {
                let per_cpu = trace.streams.iter().any(|s| s.tid.is_none());
                format!(
                    "{}: no trace for thread {tid}{}",
                    path.display(),
                    if per_cpu {
                        " of its own (the trace is per CPU: use --cpu N)"
                    } else {
                        ""
                    }
                )
            })?,
        (None, None) => trace
            .streams
            .first()
            .with_context(|| format!("{}: the file holds no PT data", path.display()))?,
    };
    list_packets(path, &stream.data, limit, errata)
}

/// `ptscope packets` of a raw PT dump: one trace, no threads.
pub(super) fn raw_packets(
    path: &Path,
    thread: Option<i32>,
    cpu: Option<PacketsCpu>,
    limit: Option<usize>,
) -> Result<ExitCode> {
    if thread.is_some() {
        bail!(
            "{}: a raw PT dump holds one trace and no threads; leave out --thread",
            path.display()
        );
    }
    if let Some(PacketsCpu::Buffer(n)) = cpu {
        bail!(
            "{}: a raw PT dump holds one trace, no CPU buffers; --cpu {n} would pick one (give --cpu FAMILY/MODEL[/STEPPING] for the CPU's errata)",
            path.display()
        );
    }
    let data = ptscope_decoder::read_raw(path)?;
    let errata = packet_errata(Default::default(), cpu);
    list_packets(path, &data, limit, errata)
}

/// Lists the packets of one trace, like ptdump, from its first PSB.
fn list_packets(
    path: &Path,
    data: &[u8],
    limit: Option<usize>,
    errata: ptscope_decoder::Errata,
) -> Result<ExitCode> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let first = packet::find_psb(data);
    if first.is_none() {
        bail!(
            "{}: the trace of this thread has no PSB to synchronize on",
            path.display()
        );
    }
    if let Some(skip) = first.filter(|&p| p > 0) {
        writeln!(
            out,
            "{:016x}  [{skip} bytes before the first PSB skipped]",
            0
        )?;
    }
    for (n, (off, pkt)) in Packets::with_errata(data, errata).enumerate() {
        if limit.is_some_and(|l| n >= l) {
            break;
        }
        match pkt {
            Ok(p) => writeln!(out, "{off:016x}  {p}")?,
            Err(e @ packet::PacketError::Erratum { .. }) => writeln!(out, "{off:016x}  [{e}]")?,
            Err(e) => writeln!(out, "{off:016x}  error: {e}; resyncing at the next PSB")?,
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
