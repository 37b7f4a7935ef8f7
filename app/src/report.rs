//! `ptscope decode` and `ptscope stats`: the decoded model as text or JSON
//! (one serde_json object a line), at the level of calls, source lines or
//! instructions, and per-function statistics.
//!
//! Times printed are nanoseconds since the input's first timestamp, so they
//! line up with the viewer's relative time axis.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use ptscope_decoder::Decoded;
use ptscope_model::window_lines;
use ptscope_model::FuncId;
use ptscope_model::FuncTable;
use ptscope_model::Segment;
use ptscope_model::SpanKind;
use ptscope_model::{flag, function_stats, FuncStats};
use ptscope_model::{Model, TimeUnit};

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
    /// What the trace says besides the flow: PTWRITE values, the core's
    /// frequency (CBR) and power states, per thread and per CPU.
    Marks,
    /// Which thread ran on each CPU when (a per-CPU trace's CPU lanes):
    /// a slice per stay of a thread on a CPU.
    Cpus,
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

/// A span as `decode --format json` prints it, one object a line.
#[derive(serde::Serialize)]
struct JsonSpan<'a> {
    tid: i32,
    depth: usize,
    start_ns: u64,
    end_ns: u64,
    /// What `start_ns` and `end_ns` count: `ns`, or `insns` (instructions
    /// retired) for a trace without timing.
    unit: &'static str,
    name: &'a str,
    kind: &'a str,
    estimated: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    inferred_start: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    mid_entry: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<u64>,
}

/// A source line span (`decode --level lines --format json`).
#[derive(serde::Serialize)]
struct JsonLine<'a> {
    tid: i32,
    depth: u32,
    start_ns: u64,
    end_ns: u64,
    /// What `start_ns` and `end_ns` count: `ns`, or `insns` (instructions
    /// retired) for a trace without timing.
    unit: &'static str,
    file: &'a str,
    line: u32,
    function: &'a str,
    inlined: bool,
    insns: u32,
}

/// An instruction (`decode --level insns --format json`).
#[derive(serde::Serialize)]
struct JsonInsn<'a> {
    tid: i32,
    depth: u32,
    start_ns: u64,
    end_ns: u64,
    /// What `start_ns` and `end_ns` count: `ns`, or `insns` (instructions
    /// retired) for a trace without timing.
    unit: &'static str,
    ip: u64,
    asm: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
    exact: bool,
}

/// What text output says first when times count instructions.
pub const UNTIMED_NOTE: &str =
    "# the trace has no timing (tsc=0, or no timing packets): times count instructions retired, not ns";

/// `value` as one line of JSON.
fn json_line(out: &mut (impl Write + ?Sized), value: &impl serde::Serialize) -> Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
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
    if format == Format::Text && m.unit == TimeUnit::Insns {
        writeln!(out, "{UNTIMED_NOTE}")?;
    }
    for t in &m.threads {
        if format == Format::Text {
            writeln!(
                out,
                "{}: {} spans, depth {}",
                thread_title(&t.spans),
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
                    let span = JsonSpan {
                        tid: t.spans.tid,
                        depth: d,
                        start_ns: start - base,
                        end_ns: end - base,
                        unit: m.unit.as_str(),
                        name: &f.name,
                        kind: f.kind.as_str(),
                        estimated: s.is_estimated(),
                        inferred_start: s.has(flag::INFERRED_START),
                        mid_entry: s.has(flag::MID_ENTRY),
                        entry: (f.entry != 0).then_some(f.entry),
                    };
                    json_line(out, &span)?;
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

/// `decode --level marks`: every thread's marks (PTWRITE values, CBR
/// changes, power events) in time order, then every CPU's, each with its
/// time (ns since the first timestamp) and, where the trace binds one,
/// its instruction's address.
pub fn decode_marks(
    m: &Model,
    from: Option<u64>,
    to: Option<u64>,
    format: Format,
    out: &mut impl Write,
) -> Result<()> {
    use ptscope_model::{Mark, MarkKind};
    let (base, lo, hi) = marks_window(m, from, to);
    let mhz = m.cbr_mhz;
    let one = |out: &mut dyn Write, tid: Option<i32>, cpu: Option<u32>, k: &Mark| -> Result<()> {
        let time = relative(k.time, base);
        match format {
            Format::Text => {
                let ip = k.ip.map(|ip| format!(" at {ip:#x}")).unwrap_or_default();
                writeln!(out, "{time:>12}  {}{ip}", k.describe(mhz))?;
            }
            Format::Json => {
                let mut v = serde_json::json!({
                    "time_ns": time,
                    "unit": m.unit.as_str(),
                    "text": k.describe(mhz),
                });
                let o = v.as_object_mut().expect("an object");
                if let Some(tid) = tid {
                    o.insert("tid".into(), tid.into());
                }
                if let Some(cpu) = cpu {
                    o.insert("cpu".into(), cpu.into());
                }
                if let Some(ip) = k.ip {
                    o.insert("ip".into(), ip.into());
                }
                let fields: Vec<(&str, u64)> = match k.kind {
                    MarkKind::PtWrite { payload, bytes } => {
                        vec![("payload", payload), ("bytes", bytes as u64)]
                    }
                    MarkKind::Cbr { ratio } => vec![("ratio", ratio as u64)],
                    MarkKind::Mwait { hints, ext } => {
                        vec![("hints", hints as u64), ("extensions", ext as u64)]
                    }
                    MarkKind::Pwre { hw, cstate, sub } => vec![
                        ("hw", hw as u64),
                        ("cstate", cstate as u64),
                        ("sub_cstate", sub as u64),
                    ],
                    MarkKind::Exstop => vec![],
                    MarkKind::Pwrx {
                        deepest,
                        last,
                        wake,
                    } => vec![
                        ("deepest_cstate", deepest as u64),
                        ("last_cstate", last as u64),
                        ("wake_reason", wake as u64),
                    ],
                };
                o.insert("mark".into(), mark_name(&k.kind).into());
                for (name, value) in fields {
                    o.insert(name.into(), value.into());
                }
                if let MarkKind::Cbr { ratio } = k.kind {
                    if mhz > 0.0 {
                        // Whole MHz, as perf prints them.
                        o.insert("mhz".into(), ((ratio as f64 * mhz).round() as u64).into());
                    }
                }
                json_line(out, &v)?;
            }
        }
        Ok(())
    };
    for t in &m.threads {
        if format == Format::Text {
            writeln!(out, "{}", thread_title(&t.spans))?;
        }
        for k in t.marks.between(lo, hi) {
            one(out, Some(t.spans.tid), None, k)?;
        }
    }
    for c in &m.cpus {
        if format == Format::Text {
            writeln!(out, "cpu {}", c.cpu)?;
        }
        for k in c.marks.between(lo, hi) {
            one(out, None, Some(c.cpu), k)?;
        }
    }
    Ok(())
}

/// `decode --level cpus`: every CPU's slices, in time order, with times
/// in ns since the first timestamp.
pub fn decode_cpus(
    m: &Model,
    file: &Path,
    from: Option<u64>,
    to: Option<u64>,
    format: Format,
    out: &mut impl Write,
) -> Result<()> {
    if m.cpus.is_empty() {
        bail!(
            "{}: the trace is per thread, not per CPU: it has no CPU lanes",
            file.display()
        );
    }
    let (base, lo, hi) = marks_window(m, from, to);
    let comms: std::collections::HashMap<i32, &str> = m
        .threads
        .iter()
        .map(|t| (t.spans.tid, t.spans.comm.as_str()))
        .collect();
    for c in &m.cpus {
        if format == Format::Text {
            writeln!(out, "cpu {}", c.cpu)?;
        }
        for s in c.slices_between(lo, hi) {
            let comm = comms.get(&s.tid).copied().unwrap_or("");
            let (start, end) = (relative(s.start, base), relative(s.end, base));
            match format {
                Format::Text => writeln!(
                    out,
                    "{start:>12} {:>10}  {} {comm} (pid {})",
                    s.end.saturating_sub(s.start),
                    s.tid,
                    s.pid
                )?,
                Format::Json => json_line(
                    out,
                    &serde_json::json!({
                        "cpu": c.cpu,
                        "tid": s.tid,
                        "pid": s.pid,
                        "comm": comm,
                        "start_ns": start,
                        "end_ns": end,
                        "unit": m.unit.as_str(),
                    }),
                )?,
            }
        }
    }
    Ok(())
}

/// Times for marks and CPU lanes, which may come before the first span
/// (a CBR in the first PSB+, a thread switched in before it ran): the
/// base (the first span's start) and the window `[lo, hi]` in perf time,
/// everything when `from` is not given.
fn marks_window(m: &Model, from: Option<u64>, to: Option<u64>) -> (u64, u64, u64) {
    let base = m.time_range().map_or(0, |r| r.0);
    let lo = from.map_or(0, |f| base.saturating_add(f));
    let hi = to.map_or(u64::MAX, |t| base.saturating_add(t));
    (base, lo, hi)
}

/// `t` from `base`, negative before it.
fn relative(t: u64, base: u64) -> i64 {
    (t as i128 - base as i128) as i64
}

/// A mark's kind as JSON names it.
pub fn mark_name(k: &ptscope_model::MarkKind) -> &'static str {
    use ptscope_model::MarkKind;
    match k {
        MarkKind::PtWrite { .. } => "ptwrite",
        MarkKind::Cbr { .. } => "cbr",
        MarkKind::Mwait { .. } => "mwait",
        MarkKind::Pwre { .. } => "pwre",
        MarkKind::Exstop => "exstop",
        MarkKind::Pwrx { .. } => "pwrx",
    }
}

/// `decode --level lines|insns`: the fine pass over the PSB segments that
/// cover `[from, to]` (ns since the first timestamp).
pub fn decode_fine(
    m: &Decoded,
    file: &Path,
    from: Option<u64>,
    to: Option<u64>,
    level: Level,
    format: Format,
    out: &mut impl Write,
) -> Result<()> {
    let Some(src) = m.lines.as_deref() else {
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
    if format == Format::Text && m.unit == TimeUnit::Insns {
        writeln!(out, "{UNTIMED_NOTE}")?;
    }
    for t in &m.threads {
        let mut segs = Vec::new();
        // The buffer each segment is in.
        let mut queues = Vec::new();
        for i in t.segments_in(lo, hi) {
            queues.push(t.checkpoints[i].queue);
            let seg = src
                .decode_segment(t, i, None)
                .with_context(|| file.display().to_string())?;
            if seg.cut {
                eprintln!(
                    "ptscope: warning: {}: thread {}: segment {i} holds more than {} instructions; only the first are shown",
                    file.display(),
                    t.spans.tid,
                    ptscope_model::MAX_SEGMENT_INSNS
                );
            }
            segs.push(seg);
        }
        let tid = t.spans.tid;
        if format == Format::Text {
            writeln!(out, "{}", thread_title(&t.spans))?;
        }
        // A thread with nothing to list says why, rather than nothing.
        if segs
            .iter()
            .all(|s| s.insns_in(lo, hi.saturating_add(1)).is_empty())
        {
            let why = segs
                .iter()
                .flat_map(|s| s.errors.first())
                .map(|(_, e)| e.clone())
                .next()
                .or_else(|| {
                    segs.is_empty()
                        .then(|| "its trace has no PSB segment in this range".into())
                })
                .or_else(|| t.diagnosis(&m.funcs))
                .unwrap_or_else(|| "no instruction of it ran in this range".into());
            // In a range of the trace, a quiet thread is no news; over the
            // whole trace, or after errors, it is.
            let whole = from.is_none() && to.is_none();
            if whole || segs.iter().any(|s| !s.errors.is_empty()) {
                eprintln!(
                    "ptscope: warning: {}: thread {tid}: no instruction could be listed: {why}",
                    file.display()
                );
            }
            if format == Format::Text {
                writeln!(out, "# no instruction could be listed: {why}")?;
            }
            continue;
        }
        if level == Level::Lines {
            let refs: Vec<&Segment> = segs.iter().collect();
            for l in window_lines(&refs, lo, hi) {
                let (start, end) = (l.start - base.min(l.start), l.end - base.min(l.end));
                match format {
                    Format::Json => json_line(
                        out,
                        &JsonLine {
                            tid,
                            depth: l.depth,
                            start_ns: start,
                            end_ns: end,
                            unit: m.unit.as_str(),
                            file: &l.frame.file,
                            line: l.frame.line,
                            function: &l.frame.function,
                            inlined: l.inlined,
                            insns: l.insns,
                        },
                    )?,
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
        for (seg, i) in in_time_order(&segs, &queues, lo, hi) {
            {
                let asm = src
                    .disassemble(seg.pid, i.ip, i.bitness)
                    .unwrap_or_else(|| "(bad)".into());
                let frame = seg.chains.get(i.chain as usize).and_then(|c| c.last());
                let start = i.start - base.min(i.start);
                match format {
                    Format::Json => json_line(
                        out,
                        &JsonInsn {
                            tid,
                            depth: i.depth,
                            start_ns: start,
                            end_ns: i.end - base.min(i.end),
                            unit: m.unit.as_str(),
                            ip: i.ip,
                            asm: &asm,
                            file: frame.map(|f| &*f.file),
                            line: frame.map(|f| f.line),
                            exact: i.exact,
                        },
                    )?,
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

/// "thread TID (COMM) pid PID", without the parentheses when the trace
/// recorded no name for it.
fn thread_title(t: &ptscope_model::ThreadSpans) -> String {
    match t.comm.is_empty() {
        true => format!("thread {} pid {}", t.tid, t.pid),
        false => format!("thread {} ({}) pid {}", t.tid, t.comm, t.pid),
    }
}

fn kind_is_call(funcs: &FuncTable, id: u32) -> bool {
    funcs.kind(id) == SpanKind::Call
}

/// `ptscope stats`: per function, calls and times. Pseudo-spans
/// (`[untraced]`, `[decode error: …]`, …) keep their rows for the time
/// they cover, but they are not calls: their calls and avg columns say
/// `-`, and they sort as 0 by those columns.
/// With `only`, the rows of those function ids alone.
pub fn stats(
    m: &Model,
    sort: SortKey,
    limit: Option<usize>,
    only: Option<&[FuncId]>,
    out: &mut impl Write,
) -> Result<()> {
    let all = function_stats(m.threads.iter().map(|t| &t.spans), 0, u64::MAX);
    let mut rows: Vec<(u32, FuncStats, bool)> = all
        .into_iter()
        .filter(|(id, _)| only.is_none_or(|o| o.contains(id)))
        .map(|(id, s)| (id, s, m.funcs.is_call(id)))
        .collect();
    let key = |s: &FuncStats, call: bool| match sort {
        SortKey::Calls if call => s.calls,
        SortKey::Avg if call => s.avg_ns(),
        SortKey::Calls | SortKey::Avg => 0,
        SortKey::Total => s.total_ns,
        SortKey::SelfTime => s.self_ns,
        SortKey::Min => s.min_ns,
        SortKey::Max => s.max_ns,
        SortKey::Name => 0,
    };
    // Functions of one name in several modules (`__cxa_finalize@plt`)
    // are told apart by id, so that the table is the same every run: the
    // statistics come out of a hash map.
    if sort == SortKey::Name {
        rows.sort_by(|a, b| m.funcs.name(a.0).cmp(m.funcs.name(b.0)).then(a.0.cmp(&b.0)));
    } else {
        rows.sort_by(|a, b| {
            key(&b.1, b.2)
                .cmp(&key(&a.1, a.2))
                .then_with(|| m.funcs.name(a.0).cmp(m.funcs.name(b.0)))
                .then(a.0.cmp(&b.0))
        });
    }
    if m.unit == TimeUnit::Insns {
        writeln!(out, "{UNTIMED_NOTE}")?;
    }
    let u = m.unit.as_str();
    writeln!(
        out,
        "{:>10} {:>14} {:>14} {:>12} {:>12} {:>12}  function",
        "calls",
        format!("total {u}"),
        format!("self {u}"),
        format!("min {u}"),
        format!("avg {u}"),
        format!("max {u}")
    )?;
    for (id, s, call) in rows.iter().take(limit.unwrap_or(usize::MAX)) {
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
        let (calls, avg) = if *call {
            (s.calls.to_string(), s.avg_ns().to_string())
        } else {
            ("-".to_string(), "-".to_string())
        };
        writeln!(
            out,
            "{:>10} {:>14} {:>14} {:>12} {:>12} {:>12}  {}",
            calls, s.total_ns, s.self_ns, s.min_ns, avg, s.max_ns, name
        )?;
    }
    Ok(())
}

/// The instructions of a thread's segments in time order. The segments
/// of one buffer follow each other; a thread of a per-CPU trace also has
/// segments in other CPUs' buffers, whose runs interleave with them in
/// time (a context switch apart), so buffers are merged by time.
fn in_time_order<'s>(
    segs: &'s [Segment],
    queues: &[u32],
    lo: u64,
    hi: u64,
) -> Vec<(&'s Segment, &'s ptscope_model::Insn)> {
    let mut per_queue: Vec<(u32, Vec<(&Segment, &ptscope_model::Insn)>)> = Vec::new();
    for (seg, &q) in segs.iter().zip(queues) {
        let at = match per_queue.iter().position(|(k, _)| *k == q) {
            Some(at) => at,
            None => {
                per_queue.push((q, Vec::new()));
                per_queue.len() - 1
            }
        };
        let list = &mut per_queue[at].1;
        list.extend(
            seg.insns_in(lo, hi.saturating_add(1))
                .iter()
                .map(|i| (seg, i)),
        );
    }
    let mut next = vec![0usize; per_queue.len()];
    let mut out = Vec::with_capacity(per_queue.iter().map(|(_, l)| l.len()).sum());
    let mut on = 0;
    loop {
        // The earliest next instruction; on a tie, the buffer it is on.
        let best = (0..per_queue.len())
            .filter_map(|k| per_queue[k].1.get(next[k]).map(|i| (i.1.start, k != on, k)))
            .min();
        let Some((_, _, k)) = best else { break };
        out.push(per_queue[k].1[next[k]]);
        next[k] += 1;
        on = k;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_model::UNTRACED;

    use ptscope_model::ThreadSpans;

    /// main calls f twice, with untraced time and a decode error between.
    fn model() -> Model {
        let mut funcs = FuncTable::default();
        let main = funcs.intern("main", "/bin/prog", 0x1000, SpanKind::Call);
        let f = funcs.intern("f", "/bin/prog", 0x1100, SpanKind::Call);
        let err = funcs.decode_error("Overflow packet");
        let mut t = ThreadSpans::new(7, 7, "prog".into());
        t.push(0, 0, 100, main, 0);
        t.push(0, 100, 400, err, 0);
        t.push(1, 10, 20, f, 0);
        t.push(1, 20, 30, UNTRACED, 0);
        t.push(1, 30, 40, UNTRACED, 0);
        t.push(1, 40, 50, UNTRACED, 0);
        t.push(1, 50, 70, f, 0);
        Model::of(funcs, [t])
    }

    #[test]
    fn stats_does_not_count_pseudo_spans_as_calls() {
        let mut out = Vec::new();
        stats(&model(), SortKey::Calls, None, None, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        // By calls: f (2), main (1), then the pseudo-spans, which are
        // no calls whatever their number.
        assert_eq!(rows[0][0], "2", "{text}");
        assert_eq!(rows[0][6], "f", "{text}");
        assert_eq!(rows[1][6], "main", "{text}");
        let untraced = rows.iter().find(|r| r[6] == "[untraced]").unwrap();
        assert_eq!(
            (untraced[0], untraced[1], untraced[4]),
            ("-", "30", "-"),
            "{text}"
        );
        let err = rows.iter().find(|r| r[6] == "[decode").unwrap();
        assert_eq!((err[0], err[1]), ("-", "300"), "{text}");
        // One function's row alone.
        let m = model();
        let mut out = Vec::new();
        let f = ptscope_model::funcs_named(&m.funcs, "f");
        stats(&m, SortKey::Total, None, Some(&f), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.lines().nth(1).unwrap().ends_with(" f  (prog)"),
            "{text}"
        );
    }

    #[test]
    fn functions_of_one_name_in_several_modules_keep_one_order() {
        // Eight `__cxa_finalize@plt`s, one per library, alike in every
        // figure: only their ids order them, whatever the hash map gave.
        let mut funcs = FuncTable::default();
        let libs: Vec<String> = (0..8).map(|i| format!("/lib/lib{i}.so")).collect();
        let ids: Vec<u32> = libs
            .iter()
            .map(|l| funcs.intern("__cxa_finalize@plt", l, 0x1000, SpanKind::Call))
            .collect();
        let mut t = ThreadSpans::new(7, 7, "prog".into());
        for (k, &id) in ids.iter().enumerate() {
            t.push(0, k as u64 * 10, k as u64 * 10 + 5, id, 0);
        }
        let m = Model::of(funcs, [t]);
        for sort in [SortKey::Calls, SortKey::Name] {
            let mut out = Vec::new();
            stats(&m, sort, None, None, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            let modules: Vec<&str> = text
                .lines()
                .skip(1)
                .map(|l| l.rsplit(' ').next().unwrap())
                .collect();
            let wanted: Vec<String> = (0..8).map(|i| format!("(lib{i}.so)")).collect();
            assert_eq!(modules, wanted, "{text}");
        }
    }
}
