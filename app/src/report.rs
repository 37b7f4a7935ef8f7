//! `ptscope decode` and `ptscope stats`: the decoded model as text or JSON.
//!
//! Times printed are nanoseconds since the input's first timestamp, so they
//! line up with the viewer's relative time axis.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use ptscope_capture::emulated::settings::cpu as emulated_cpu;
use ptscope_decoder::block::DecoderConfig;
use ptscope_decoder::coarse::chunks::Parallel;
use ptscope_decoder::decode::{self, DecodeOptions, Engine};
use ptscope_decoder::event::{FuncTable, SpanKind};
use ptscope_decoder::fine::{window_lines, LineSource, Segment};
use ptscope_decoder::model::Model;
use ptscope_decoder::perf_script;
use ptscope_decoder::store::{flag, function_stats, FuncStats};
use ptscope_formats::snapshot::Snapshot;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// An indented call tree per thread.
    Text,
    /// One JSON object per span per line.
    Json,
}

/// How deep `decode` goes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, Default)]
pub enum Level {
    /// Function calls (the coarse pass).
    #[default]
    Calls,
    /// Source lines, with inlined functions (the fine pass).
    Lines,
    /// Every instruction, with its disassembly and line.
    Insns,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum SortKey {
    Calls,
    Total,
    #[value(name = "self")]
    SelfTime,
    Min,
    Avg,
    Max,
    Name,
}

/// A raw image for `--raw FILE:ADDR`.
pub fn parse_raw(s: &str) -> Result<(PathBuf, u64), String> {
    let (file, addr) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("`{s}` is not FILE:ADDR"))?;
    let addr = addr.trim();
    let parsed = match addr.strip_prefix("0x").or_else(|| addr.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => addr.parse(),
    };
    let addr = parsed.map_err(|_| format!("`{addr}` in `{s}` is not an address"))?;
    Ok((PathBuf::from(file), addr))
}

/// What kind of input a file is, by its first bytes.
fn is_text(path: &Path) -> Result<bool> {
    let mut head = [0u8; 512];
    let n = {
        use std::io::Read;
        let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
        f.read(&mut head)
            .with_context(|| format!("{}: cannot read", path.display()))?
    };
    let head = &head[..n];
    if head.starts_with(b"PERFILE2") || n >= 262 && &head[257..262] == b"ustar" {
        return Ok(false);
    }
    Ok(!head.is_empty() && std::str::from_utf8(head).is_ok_and(|s| !s.contains('\0')))
}

/// Decodes any input `decode` and `stats` accept.
pub fn load(
    file: &Path,
    raw: &[(PathBuf, u64)],
    threads: Option<Vec<i32>>,
    engine: Engine,
    parallel: Parallel,
) -> Result<Model> {
    load_with(file, raw, threads, (engine, parallel), None)
}

/// [`load`], reporting to `progress` (the GUI's background loads).
pub fn load_with(
    file: &Path,
    raw: &[(PathBuf, u64)],
    threads: Option<Vec<i32>>,
    (engine, parallel): (Engine, Parallel),
    progress: Option<std::sync::Arc<ptscope_decoder::progress::DecodeProgress>>,
) -> Result<Model> {
    if file.is_dir() {
        bail!("{}: is a directory, not a snapshot", file.display());
    }
    if !raw.is_empty() {
        let pt = std::fs::read(file).with_context(|| format!("{}", file.display()))?;
        // Raw dumps carry no CPU; assume the emulated model's, whose
        // errata set is empty, and TSC-only timing.
        let cfg = DecoderConfig {
            family: emulated_cpu::FAMILY as u16,
            model: emulated_cpu::MODEL as u8,
            stepping: emulated_cpu::STEPPING as u8,
            ..DecoderConfig::default()
        };
        return Ok(decode::decode_raw(file, &pt, raw, &cfg, engine)?);
    }
    if is_text(file)? {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("{}: not UTF-8 text", file.display()))?;
        let script = perf_script::import(&text, file)?;
        let mut m = decode::from_script(script);
        if let Some(t) = threads {
            m.threads.retain(|th| t.contains(&th.spans.tid));
        }
        return Ok(m);
    }
    let snap = Snapshot::open(file)?;
    Ok(decode::decode_snapshot(
        &snap,
        &DecodeOptions {
            threads,
            progress,
            engine,
            parallel,
        },
    )?)
}

fn json_str(out: &mut impl Write, s: &str) -> std::io::Result<()> {
    out.write_all(b"\"")?;
    for c in s.chars() {
        match c {
            '"' => out.write_all(b"\\\"")?,
            '\\' => out.write_all(b"\\\\")?,
            '\n' => out.write_all(b"\\n")?,
            '\t' => out.write_all(b"\\t")?,
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
            c => write!(out, "{c}")?,
        }
    }
    out.write_all(b"\"")
}

/// A closed pipe (`ptscope decode … | head`) is not an error.
pub fn quiet_pipe(r: Result<()>) -> Result<()> {
    match r {
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        r => r,
    }
}

pub fn decode(
    m: &Model,
    from: Option<u64>,
    to: Option<u64>,
    format: Format,
    out: &mut impl Write,
) -> Result<()> {
    let base = m.time_range().map_or(0, |r| r.0);
    let lo = base.saturating_add(from.unwrap_or(0));
    let hi = to.map_or(u64::MAX, |t| base.saturating_add(t));
    if m.threads.is_empty() {
        bail!("no thread has any trace to decode");
    }
    for t in &m.threads {
        if format == Format::Text {
            writeln!(
                out,
                "thread {} ({}) pid {}: {} spans, depth {}",
                t.spans.tid,
                if t.spans.comm.is_empty() {
                    "?"
                } else {
                    &t.spans.comm
                },
                t.spans.pid,
                t.spans.span_count(),
                t.spans.depth()
            )?;
        }
        for (d, i) in t.spans.tree_order() {
            let start = t.spans.lane(d)[i].start;
            let end = t.spans.end(d, i);
            if end < lo || start > hi {
                continue;
            }
            let s = t.spans.lane(d)[i];
            let f = m.funcs.get(s.func());
            match format {
                Format::Json => {
                    write!(
                        out,
                        "{{\"tid\":{},\"depth\":{},\"start_ns\":{},\"end_ns\":{},\"name\":",
                        t.spans.tid,
                        d,
                        start - base,
                        end - base
                    )?;
                    json_str(out, &f.name)?;
                    write!(
                        out,
                        ",\"kind\":\"{}\",\"estimated\":{}",
                        f.kind.as_str(),
                        s.is_estimated()
                    )?;
                    if s.has(flag::INFERRED_START) {
                        write!(out, ",\"inferred_start\":true")?;
                    }
                    if s.has(flag::MID_ENTRY) {
                        write!(out, ",\"mid_entry\":true")?;
                    }
                    if f.entry != 0 {
                        write!(out, ",\"entry\":{}", f.entry)?;
                    }
                    writeln!(out, "}}")?;
                }
                Format::Text => {
                    let mut marks = String::new();
                    if s.has(flag::INFERRED_START) {
                        marks.push_str(" [inferred start]");
                    }
                    if s.has(flag::MID_ENTRY) {
                        marks.push_str(" [entered mid-function]");
                    }
                    if s.has(flag::OPEN_END) {
                        marks.push_str(" [still running]");
                    }
                    if s.has(flag::START_ESTIMATED | flag::END_ESTIMATED) {
                        marks.push_str(" ~");
                    }
                    writeln!(
                        out,
                        "{:>12} {:>10}  {:indent$}{}{}",
                        start - base,
                        end - start,
                        "",
                        f.name,
                        marks,
                        indent = d * 2
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// `decode --level lines|insns`: the fine pass over the PSB segments that
/// cover `[from, to]` (ns since the first timestamp).
pub fn decode_fine(
    m: &Model,
    file: &Path,
    from: Option<u64>,
    to: Option<u64>,
    level: Level,
    format: Format,
    out: &mut impl Write,
) -> Result<()> {
    let Some(src) = m.lines.as_ref() else {
        bail!(
            "{}: line detail needs an instruction trace (a snapshot or perf.data); \
             this input has only branches",
            file.display()
        );
    };
    if m.threads.is_empty() {
        bail!("no thread has any trace to decode");
    }
    let base = m.time_range().map_or(0, |r| r.0);
    let lo = base.saturating_add(from.unwrap_or(0));
    let hi = to.map_or(u64::MAX, |t| base.saturating_add(t));
    if hi < lo {
        bail!("--to is before --from");
    }
    for t in &m.threads {
        let mut segs = Vec::new();
        for i in LineSource::segments_in(t, lo, hi) {
            let seg = src
                .decode_segment(t, i, None)
                .with_context(|| format!("{}: thread {}", file.display(), t.spans.tid))?;
            if seg.cut {
                eprintln!(
                    "ptscope: warning: {}: thread {}: segment {i} holds more than {} instructions; only the first are shown",
                    file.display(),
                    t.spans.tid,
                    ptscope_decoder::fine::MAX_SEGMENT_INSNS
                );
            }
            segs.push(seg);
        }
        let tid = t.spans.tid;
        if format == Format::Text {
            writeln!(out, "thread {tid} ({}) pid {}", t.spans.comm, t.spans.pid)?;
        }
        if level == Level::Lines {
            let refs: Vec<&Segment> = segs.iter().collect();
            for l in window_lines(&refs, lo, hi) {
                let (start, end) = (l.start - base.min(l.start), l.end - base.min(l.end));
                match format {
                    Format::Json => {
                        write!(
                            out,
                            "{{\"tid\":{tid},\"depth\":{},\"start_ns\":{start},\"end_ns\":{end},\"file\":",
                            l.depth
                        )?;
                        json_str(out, &l.frame.file)?;
                        write!(out, ",\"line\":{},\"function\":", l.frame.line)?;
                        json_str(out, &l.frame.function)?;
                        writeln!(out, ",\"inlined\":{},\"insns\":{}}}", l.inlined, l.insns)?;
                    }
                    Format::Text => writeln!(
                        out,
                        "{start:>12} {:>10}  {:indent$}{}:{} {}{}",
                        end - start,
                        "",
                        l.frame.file,
                        l.frame.line,
                        l.frame.function,
                        if l.inlined { " [inlined]" } else { "" },
                        indent = l.depth as usize * 2
                    )?,
                }
            }
            continue;
        }
        for seg in &segs {
            for i in seg.insns_in(lo, hi.saturating_add(1)) {
                let asm = src
                    .disassemble(seg.pid, i.ip)
                    .unwrap_or_else(|| "(bad)".into());
                let frame = seg.chains.get(i.chain as usize).and_then(|c| c.last());
                let start = i.start - base.min(i.start);
                match format {
                    Format::Json => {
                        write!(
                            out,
                            "{{\"tid\":{tid},\"depth\":{},\"start_ns\":{start},\"end_ns\":{},\"ip\":{},\"asm\":",
                            i.depth,
                            i.end - base.min(i.end),
                            i.ip
                        )?;
                        json_str(out, &asm)?;
                        if let Some(f) = frame {
                            write!(out, ",\"file\":")?;
                            json_str(out, &f.file)?;
                            write!(out, ",\"line\":{}", f.line)?;
                        }
                        writeln!(out, ",\"exact\":{}}}", i.exact)?;
                    }
                    Format::Text => {
                        let at = frame.map(|f| format!("  {}:{}", f.file, f.line));
                        writeln!(
                            out,
                            "{start:>12}{} {:#014x}  {asm}{}",
                            if i.exact { ' ' } else { '~' },
                            i.ip,
                            at.unwrap_or_default()
                        )?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn kind_is_call(funcs: &FuncTable, id: u32) -> bool {
    funcs.kind(id) == SpanKind::Call
}

pub fn stats(m: &Model, sort: SortKey, limit: Option<usize>, out: &mut impl Write) -> Result<()> {
    let all = function_stats(m.threads.iter().map(|t| &t.spans), 0, u64::MAX);
    let mut rows: Vec<(u32, FuncStats)> = all.into_iter().collect();
    let key = |s: &FuncStats| match sort {
        SortKey::Calls => s.calls,
        SortKey::Total => s.total_ns,
        SortKey::SelfTime => s.self_ns,
        SortKey::Min => s.min_ns,
        SortKey::Avg => s.avg_ns(),
        SortKey::Max => s.max_ns,
        SortKey::Name => 0,
    };
    if sort == SortKey::Name {
        rows.sort_by(|a, b| m.funcs.name(a.0).cmp(m.funcs.name(b.0)));
    } else {
        rows.sort_by(|a, b| {
            key(&b.1)
                .cmp(&key(&a.1))
                .then_with(|| m.funcs.name(a.0).cmp(m.funcs.name(b.0)))
        });
    }
    writeln!(
        out,
        "{:>10} {:>14} {:>14} {:>12} {:>12} {:>12}  function",
        "calls", "total ns", "self ns", "min ns", "avg ns", "max ns"
    )?;
    for (id, s) in rows.iter().take(limit.unwrap_or(usize::MAX)) {
        let f = m.funcs.get(*id);
        let name = if kind_is_call(&m.funcs, *id) && !f.module.is_empty() {
            format!(
                "{}  ({})",
                f.name,
                f.module.rsplit('/').next().unwrap_or("")
            )
        } else {
            f.name.clone()
        };
        writeln!(
            out,
            "{:>10} {:>14} {:>14} {:>12} {:>12} {:>12}  {}",
            s.calls,
            s.total_ns,
            s.self_ns,
            s.min_ns,
            s.avg_ns(),
            s.max_ns,
            name
        )?;
    }
    Ok(())
}
