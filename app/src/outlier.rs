//! `ptscope stats --function F --histogram` and `ptscope compare`: the
//! outlier hunt on the command line, as text or JSON. The figures come
//! from the model's call queries ([`ptscope_model::compare_calls`]), which the window's
//! Details panel shows too.
//!
//! Times printed are in the model's unit (ns, or instructions for a trace
//! without timing), and a call's start is counted from the input's first
//! timestamp, as `decode` prints it. Calls are numbered from 1 in time
//! order, as `--call N` takes them.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Result};
use clap::ValueEnum;

use ptscope_decoder::LineSource;
use ptscope_model::Distribution;
use ptscope_model::FuncId;
use ptscope_model::{calls_of, funcs_named, Call, Pick};
use ptscope_model::{compare_calls, Comparison, PathFigures, Side};
use ptscope_model::{Difference, LineComparison, LineRow};
use ptscope_model::{Model, TimeUnit};

use crate::report::UNTIMED_NOTE;

/// How `stats --histogram` and `compare` print.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, Default)]
pub enum Output {
    /// Aligned columns, for reading.
    #[default]
    Text,
    /// One JSON object.
    Json,
}

/// How deep `compare` goes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, Default)]
pub enum CompareLevel {
    /// The calls' trees aligned by call path (the spans as decoded).
    #[default]
    Calls,
    /// Both calls re-decoded to source lines by the fine pass.
    Lines,
}

/// A call as `--call` and `--against` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Slowest,
    Median,
    /// The call that fired the snapshot's slow-call trigger.
    Trigger,
    /// The N-th call in time order, from 1.
    Nth(usize),
}

impl Choice {
    fn pick(self) -> Pick {
        match self {
            Choice::Slowest | Choice::Trigger => Pick::Slowest,
            Choice::Median => Pick::Median,
            Choice::Nth(n) => Pick::Nth(n.saturating_sub(1)),
        }
    }
}

/// `slowest`, `median` or a call number (from 1).
pub fn parse_choice(s: &str) -> Result<Choice, String> {
    match s {
        "slowest" => Ok(Choice::Slowest),
        "median" => Ok(Choice::Median),
        "trigger" => Ok(Choice::Trigger),
        n => match n.parse::<usize>() {
            Ok(0) => Err("calls are numbered from 1".into()),
            Ok(n) => Ok(Choice::Nth(n)),
            Err(_) => Err(format!(
                "`{s}` is not slowest, median, trigger or a call number"
            )),
        },
    }
}

/// The ids of the function named `name`, or an error that names the file
/// and offers the names that come closest.
pub fn function_ids(m: &Model, file: &Path, name: &str) -> Result<Vec<FuncId>> {
    let ids = funcs_named(&m.funcs, name);
    if !ids.is_empty() {
        return Ok(ids);
    }
    let mut names: Vec<&str> = m
        .funcs
        .iter()
        .filter(|(id, _)| m.funcs.is_call(*id))
        .map(|(_, f)| f.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    // Names the query abbreviates (the pickers' fuzzy match), then names
    // a typo away from it.
    let mut near: Vec<&str> = ptscope_viewer::fuzzy_filter(&names, name, |n| n.to_string())
        .into_iter()
        .take(5)
        .map(|i| names[i])
        .collect();
    let mut close: Vec<(f64, &str)> = names
        .iter()
        .map(|n| (strsim::jaro_winkler(name, n), *n))
        .filter(|&(sim, n)| sim >= 0.8 && !near.contains(&n))
        .collect();
    close.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    near.extend(close.into_iter().map(|(_, n)| n));
    near.truncate(5);
    if near.is_empty() {
        bail!("{}: no function named `{name}` ran", file.display());
    }
    bail!(
        "{}: no function named `{name}` ran; the closest: {}",
        file.display(),
        near.join(", ")
    )
}

/// Every call of `name`, or an error naming the file when it has none. A
/// pseudo-span (`[kernel]`, `[untraced]`, …) is no call: it has none to
/// count, histogram or compare.
fn calls_named(m: &Model, file: &Path, name: &str) -> Result<Vec<Call>> {
    let ids = function_ids(m, file, name)?;
    let ids: Vec<FuncId> = ids.into_iter().filter(|&id| m.funcs.is_call(id)).collect();
    if ids.is_empty() {
        bail!(
            "{}: `{name}` is a pseudo-span (time spent outside the traced calls), not a function: it has no calls to count or compare; `stats` shows its time",
            file.display()
        );
    }
    let calls = calls_of(m, &ids);
    if calls.is_empty() {
        bail!("{}: `{name}` has no call in the trace", file.display());
    }
    Ok(calls)
}

#[derive(serde::Serialize)]
struct JsonHistogram<'a> {
    function: &'a str,
    unit: &'static str,
    #[serde(flatten)]
    distribution: &'a Distribution,
}

/// `ptscope stats FILE --function F --histogram`.
pub fn histogram(
    m: &Model,
    file: &Path,
    name: &str,
    format: Output,
    out: &mut impl Write,
) -> Result<()> {
    let calls = calls_named(m, file, name)?;
    let d = Distribution::of(calls.iter().map(|c| c.duration));
    let u = m.unit.as_str();
    if format == Output::Json {
        serde_json::to_writer(
            &mut *out,
            &JsonHistogram {
                function: name,
                unit: u,
                distribution: &d,
            },
        )?;
        writeln!(out)?;
        return Ok(());
    }
    if m.unit == TimeUnit::Insns {
        writeln!(out, "{UNTIMED_NOTE}")?;
    }
    writeln!(out, "{name}: {} calls, durations in {u}", d.calls)?;
    writeln!(
        out,
        "min {}  median {}  p90 {}  p99 {}  max {}",
        d.min, d.p50, d.p90, d.p99, d.max
    )?;
    writeln!(out)?;
    writeln!(out, "{:>14} {:>14} {:>8}", "from", "below", "calls")?;
    let most = d.buckets.iter().map(|b| b.count).max().unwrap_or(1).max(1);
    for b in &d.buckets {
        // Any call at all gets a mark: a rare mode must not vanish.
        let bar = (b.count * 40).div_ceil(most) as usize;
        let marks: Vec<&str> = [
            (d.p50, "median"),
            (d.p90, "p90"),
            (d.p99, "p99"),
            (d.max, "max"),
        ]
        .into_iter()
        .filter(|&(v, _)| v >= b.from && (v < b.to || (b.to == u64::MAX && v == u64::MAX)))
        .map(|(_, l)| l)
        .collect();
        let bar_text = "#".repeat(bar);
        let line = format!("{:>14} {:>14} {:>8}  {bar_text:<40}", b.from, b.to, b.count);
        if marks.is_empty() {
            writeln!(out, "{}", line.trim_end())?;
        } else {
            writeln!(out, "{line}  < {}", marks.join(", "))?;
        }
    }
    Ok(())
}

/// A side of a comparison as the output names it.
struct Named {
    call: Call,
    number: usize,
    how: &'static str,
}

impl Named {
    fn label(&self) -> String {
        format!("call {}", self.number)
    }
}

/// The call of `calls` that fired the snapshot `file`'s slow-call
/// trigger: on its thread, the one whose times are nearest the trigger's.
fn trigger_call(m: &Model, file: &Path, calls: &[Call]) -> Result<usize> {
    let meta = ptscope_formats::snapshot::Snapshot::read_metadata(file)
        .ok()
        .flatten();
    let Some(t) = meta.and_then(|m| m.trigger_call) else {
        bail!(
            "{}: no slow-call trigger fired this snapshot (it was not captured with --slower-than)",
            file.display()
        );
    };
    ptscope_model::nearest(m, calls, t.tid, t.start, t.end).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: the trigger's call ({} on thread {}) is not among the decoded calls",
            file.display(),
            t.function,
            t.tid
        )
    })
}

fn choose(
    (m, file): (&Model, &Path),
    calls: &[Call],
    c: Choice,
    not: Option<usize>,
    name: &str,
) -> Result<(usize, Named)> {
    let picked = match c {
        Choice::Trigger => Some(trigger_call(m, file, calls)?),
        _ => c.pick().of(calls, not),
    };
    let Some(i) = picked else {
        bail!(
            "{}: `{name}` has {} calls: there is no call {}",
            file.display(),
            calls.len(),
            match c {
                Choice::Nth(n) => n,
                _ => 0,
            }
        );
    };
    let how = match c {
        Choice::Slowest => "slowest",
        Choice::Median => "median",
        Choice::Trigger => "trigger",
        Choice::Nth(_) => "chosen",
    };
    Ok((
        i,
        Named {
            call: calls[i],
            number: i + 1,
            how,
        },
    ))
}

#[derive(serde::Serialize)]
struct JsonCall {
    call: usize,
    pick: &'static str,
    thread: i32,
    start: u64,
    duration: u64,
}

#[derive(serde::Serialize)]
struct JsonNode {
    path: Vec<String>,
    share: f64,
    diff: i128,
    self_diff: i128,
    a: PathFigures,
    b: PathFigures,
    only_in: Option<&'static str>,
}

#[derive(serde::Serialize)]
struct JsonHeat {
    runs: u64,
    insns: u64,
    time: u64,
}

#[derive(serde::Serialize)]
struct JsonLineRow {
    file: String,
    line: u32,
    function: String,
    a: JsonHeat,
    b: JsonHeat,
    diff: i128,
    only_in: Option<&'static str>,
    runs_differ: bool,
}

#[derive(serde::Serialize)]
struct JsonCompare {
    function: String,
    unit: &'static str,
    level: &'static str,
    a: JsonCall,
    b: JsonCall,
    diff: i128,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<Vec<JsonNode>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lines: Option<Vec<JsonLineRow>>,
    warnings: Vec<String>,
}

/// What `ptscope compare` is asked.
pub struct CompareArgs<'a> {
    pub function: &'a str,
    pub call: Choice,
    pub against: Choice,
    pub level: CompareLevel,
    pub format: Output,
}

/// `ptscope compare FILE --function F`: one call against another, at call
/// or line level.
pub fn compare(
    m: &Model,
    lines: Option<&LineSource>,
    file: &Path,
    args: &CompareArgs,
    out: &mut impl Write,
) -> Result<()> {
    let name = args.function;
    let calls = calls_named(m, file, name)?;
    let (ia, a) = choose((m, file), &calls, args.call, None, name)?;
    let (_, b) = choose((m, file), &calls, args.against, Some(ia), name)?;
    let base = m.time_range().map_or(0, |r| r.0);
    let tid = |c: &Call| m.threads[c.span.thread as usize].spans.tid;
    let json_call = |n: &Named| JsonCall {
        call: n.number,
        pick: n.how,
        thread: tid(&n.call),
        start: n.call.start - base,
        duration: n.call.duration,
    };
    let u = m.unit.as_str();
    let diff = a.call.duration as i128 - b.call.duration as i128;
    let lines = match args.level {
        CompareLevel::Calls => None,
        CompareLevel::Lines => {
            let Some(src) = lines else {
                bail!(
                    "{}: line detail needs an instruction trace (a snapshot or perf.data); \
                     this input has only branches",
                    file.display()
                );
            };
            Some(line_comparison(src, m, file, &a.call, &b.call)?)
        }
    };
    let tree = compare_calls(m, &a.call, &b.call);
    if args.format == Output::Json {
        let path = |p: &[FuncId]| p.iter().map(|&f| m.funcs.name(f).to_string()).collect();
        let only = |s: Option<Side>| match s {
            Some(Side::A) => Some("a"),
            Some(Side::B) => Some("b"),
            None => None,
        };
        let warnings = lines.as_ref().map_or(Vec::new(), |l| l.warnings.clone());
        let j = JsonCompare {
            function: name.to_string(),
            unit: u,
            level: if lines.is_some() { "lines" } else { "calls" },
            a: json_call(&a),
            b: json_call(&b),
            diff,
            nodes: lines.is_none().then(|| {
                tree.nodes
                    .iter()
                    .map(|n| JsonNode {
                        path: path(&n.path),
                        share: tree.share(n),
                        diff: n.diff(),
                        self_diff: n.self_diff(),
                        a: n.a,
                        b: n.b,
                        only_in: only(n.only_in()),
                    })
                    .collect()
            }),
            lines: lines.map(|l| {
                l.rows
                    .iter()
                    .map(|r| JsonLineRow {
                        file: r.file.to_string(),
                        line: r.line,
                        function: r.function.to_string(),
                        a: JsonHeat {
                            runs: r.a.count,
                            insns: r.a.insns,
                            time: r.a.time_ns,
                        },
                        b: JsonHeat {
                            runs: r.b.count,
                            insns: r.b.insns,
                            time: r.b.time_ns,
                        },
                        diff: r.time_diff(),
                        only_in: if r.only_in_a() {
                            Some("a")
                        } else if r.only_in_b() {
                            Some("b")
                        } else {
                            None
                        },
                        runs_differ: r.runs_differ(),
                    })
                    .collect()
            }),
            warnings,
        };
        serde_json::to_writer(&mut *out, &j)?;
        writeln!(out)?;
        return Ok(());
    }
    if m.unit == TimeUnit::Insns {
        writeln!(out, "{UNTIMED_NOTE}")?;
    }
    let describe = |n: &Named| {
        format!(
            "{} of {} ({}, {} {u}, thread {} at {})",
            n.label(),
            calls.len(),
            n.how,
            n.call.duration,
            tid(&n.call),
            n.call.start - base
        )
    };
    writeln!(
        out,
        "{name}: {} against {}: {diff:+} {u}",
        describe(&a),
        describe(&b)
    )?;
    match lines {
        None => write_tree(m, &tree, (&a, &b), u, out),
        Some(l) => write_lines(&l, (&a, &b), u, out),
    }
}

fn line_comparison(
    src: &LineSource,
    m: &Model,
    file: &Path,
    a: &Call,
    b: &Call,
) -> Result<LineComparison> {
    src.compare_lines(m, a, b)
        .map_err(|e| anyhow::anyhow!("{}: re-decoding the calls: {e}", file.display()))
}

fn write_tree(
    m: &Model,
    c: &Comparison,
    (a, b): (&Named, &Named),
    u: &str,
    out: &mut impl Write,
) -> Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "by call path: count × inclusive time in each call, and how much of the difference each path explains"
    )?;
    writeln!(
        out,
        "{:>7}  {:>22}  {:>22}  {:>12}  path",
        "share",
        a.label(),
        b.label(),
        format!("diff {u}")
    )?;
    let side = |f: &PathFigures| {
        if f.count == 0 {
            "-".to_string()
        } else {
            format!("{} × {}", f.count, f.total)
        }
    };
    for n in &c.nodes {
        let path: Vec<&str> = n.path.iter().map(|&f| m.funcs.name(f)).collect();
        let only = match n.only_in() {
            Some(Side::A) => format!("   (only in {})", a.label()),
            Some(Side::B) => format!("   (only in {})", b.label()),
            None => String::new(),
        };
        writeln!(
            out,
            "{:>6.1}%  {:>22}  {:>22}  {:>+12}  {}{only}",
            c.share(n) * 100.0,
            side(&n.a),
            side(&n.b),
            n.diff(),
            path.join(" > ")
        )?;
    }
    Ok(())
}

fn write_lines(
    l: &LineComparison,
    (a, b): (&Named, &Named),
    u: &str,
    out: &mut impl Write,
) -> Result<()> {
    for w in &l.warnings {
        writeln!(out, "# warning: {w}")?;
    }
    let place = |r: &LineRow| {
        let file = r.file.rsplit('/').next().unwrap_or(&r.file);
        format!("{file}:{} {}", r.line, r.function)
    };
    let title = |d: Difference| match d {
        Difference::OnlyInA => format!("lines that ran only in {}", a.label()),
        Difference::OnlyInB => format!("lines that ran only in {}", b.label()),
        Difference::RunsDiffer => {
            "lines that ran a different number of times (loop trips)".to_string()
        }
    };
    for d in Difference::ALL {
        writeln!(out)?;
        writeln!(out, "{}:", title(d))?;
        let mut any = false;
        for r in l.rows.iter().filter(|r| d.holds(r)) {
            any = true;
            writeln!(
                out,
                "  {:<40} runs {:>6} against {:>6}  time {:>10} against {:>10} {u}",
                place(r),
                r.a.count,
                r.b.count,
                r.a.time_ns,
                r.b.time_ns
            )?;
        }
        if !any {
            writeln!(out, "  (none)")?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "every line, by the difference in its time: runs, instructions and time ({u}) in each call"
    )?;
    writeln!(
        out,
        "{:<40} {:>24} {:>24} {:>10}",
        "line",
        a.label(),
        b.label(),
        "diff"
    )?;
    for r in &l.rows {
        let side = |h: &ptscope_model::LineHeat| {
            if h.insns == 0 {
                "-".to_string()
            } else {
                format!("{} / {} / {}", h.count, h.insns, h.time_ns)
            }
        };
        writeln!(
            out,
            "{:<40} {:>24} {:>24} {:>+10}",
            place(r),
            side(&r.a),
            side(&r.b),
            r.time_diff()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_as_users_type_them() {
        assert_eq!(parse_choice("slowest"), Ok(Choice::Slowest));
        assert_eq!(parse_choice("median"), Ok(Choice::Median));
        assert_eq!(parse_choice("trigger"), Ok(Choice::Trigger));
        assert_eq!(parse_choice("3"), Ok(Choice::Nth(3)));
        assert!(parse_choice("0").is_err());
        assert!(parse_choice("fast").is_err());
        assert_eq!(Choice::Nth(3).pick(), Pick::Nth(2));
    }

    /// A pseudo-span is no call: neither its histogram nor a comparison
    /// of its "calls" exists, and the error says why.
    #[test]
    fn pseudo_spans_have_no_calls_to_histogram_or_compare() {
        use ptscope_model::FuncTable;
        use ptscope_model::SpanKind;
        use ptscope_model::UNTRACED;

        use ptscope_model::ThreadSpans;
        let mut funcs = FuncTable::default();
        let f = funcs.intern("f", "/bin/prog", 0x1100, SpanKind::Call);
        let mut t = ThreadSpans::new(7, 7, "prog".into());
        t.push(0, 10, 20, f, 0);
        t.push(0, 20, 30, UNTRACED, 0);
        t.push(0, 30, 50, f, 0);
        t.push(0, 50, 90, UNTRACED, 0);
        let m = Model::of(funcs, [t]);
        let file = Path::new("t.ptscope");
        let mut out = Vec::new();
        histogram(&m, file, "f", Output::Text, &mut out).unwrap();
        assert!(String::from_utf8_lossy(&out).contains("f: 2 calls"));
        let name = m.funcs.name(UNTRACED).to_string();
        let err = histogram(&m, file, &name, Output::Text, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("is a pseudo-span"), "{err}");
        let args = CompareArgs {
            function: &name,
            call: Choice::Slowest,
            against: Choice::Median,
            level: CompareLevel::Calls,
            format: Output::Text,
        };
        let err = compare(&m, None, file, &args, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("is a pseudo-span"), "{err}");
    }
}
