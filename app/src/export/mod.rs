//! `ptscope export` (and File > Export… in the window): the decoded model
//! for tools that read other formats, each checked in the tests by a
//! reader we did not write:
//!
//! - `perfetto`: Perfetto's TrackEvent protobuf (ui.perfetto.dev,
//!   trace_processor), one track per thread, nanosecond times, names and
//!   modules interned, sources as source locations;
//! - `fxt`: the Fuchsia trace format, which magic-trace writes and its
//!   users' Perfetto fork reads;
//! - `chrome`: Chrome's JSON trace events (chrome://tracing, Perfetto,
//!   speedscope).
//!
//! Every format gets the same slices from one walk (a `Sink` each): per thread,
//! its calls in tree order (each after its parent, before its later
//! siblings), and with `--level lines` the source lines under them, from
//! the fine pass over the window's PSB segments, a thread at a time. Times
//! are ns from the input's first timestamp.
//!
//! The output is streamed, a slice at a time, into `OUT.partial`, which is
//! renamed to `OUT` only when it is whole: an export that fails leaves
//! whatever `OUT` was before, and no half-written file, and nothing the
//! size of the output is ever held in memory.

mod chrome;
mod fxt;
mod perfetto;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use ptscope_decoder::LineSource;
use ptscope_model::flag;
use ptscope_model::window_lines;
use ptscope_model::{Model, TimeUnit};

/// What `export` writes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ExportFormat {
    /// Perfetto's TrackEvent protobuf (ui.perfetto.dev, trace_processor).
    Perfetto,
    /// The Fuchsia trace format (FXT), as magic-trace writes it.
    Fxt,
    /// Chrome's JSON trace events (chrome://tracing, ui.perfetto.dev).
    Chrome,
}

impl ExportFormat {
    /// The file extension its files usually have.
    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Perfetto => "pftrace",
            ExportFormat::Fxt => "fxt",
            ExportFormat::Chrome => "json",
        }
    }

    /// The format a file named `path` is in by its extension: `.json`
    /// Chrome's, `.fxt` FXT, anything else Perfetto.
    pub fn for_path(path: &Path) -> ExportFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => ExportFormat::Chrome,
            Some("fxt") => ExportFormat::Fxt,
            _ => ExportFormat::Perfetto,
        }
    }

    /// Its name, as a menu gives it.
    pub fn title(self) -> &'static str {
        match self {
            ExportFormat::Perfetto => "Perfetto trace",
            ExportFormat::Fxt => "Fuchsia trace (FXT)",
            ExportFormat::Chrome => "Chrome JSON trace",
        }
    }
}

/// How deep `export` goes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, Default)]
pub enum ExportLevel {
    /// Function calls.
    #[default]
    Calls,
    /// Calls, and under them the source lines that ran (the fine pass,
    /// with inlined functions as their own lines).
    Lines,
}

/// What to export of a model.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Only slices that end at or after this (ns from the first
    /// timestamp).
    pub from: Option<u64>,
    /// Only slices that start at or before this.
    pub to: Option<u64>,
    /// Only these threads (all when `None`).
    pub threads: Option<Vec<i32>>,
    pub level: ExportLevel,
}

/// One slice as every format writes it.
pub struct Slice<'a> {
    pub pid: i32,
    pub tid: i32,
    /// ns from the input's first timestamp.
    pub start: u64,
    pub end: u64,
    /// Its nesting depth on its track: a call's in the call tree, a
    /// line's as the timeline draws it (its function's depth, and one
    /// more for each inlined frame).
    pub depth: u32,
    pub name: &'a str,
    /// What it is: `call` (or another span kind), `line`, `inlined`.
    pub category: &'a str,
    pub module: &'a str,
    /// `file:line`, when known.
    pub source: Option<&'a str>,
    pub estimated: bool,
    pub inferred_start: bool,
    /// A source line (on the thread's lines track), not a call.
    pub line: bool,
}

/// What a format does with the walk: a thread (before its slices), each
/// slice (per thread in tree order), and the end.
trait Sink {
    fn thread(&mut self, pid: i32, tid: i32, comm: &str) -> Result<()>;
    fn slice(&mut self, s: &Slice) -> Result<()>;
    /// The last call: what the format writes after everything.
    fn finish(&mut self, unit: TimeUnit) -> Result<()>;
}

/// `ptscope export FILE --format F -o OUT`: the slices of `m` (decoded
/// from `input`) that `sel` selects. Returns how many slices it wrote;
/// `progress` hears the count as it grows.
pub fn export(
    m: &Model,
    lines: Option<&LineSource>,
    input: &Path,
    sel: &Selection,
    format: ExportFormat,
    output: &Path,
    mut progress: impl FnMut(u64),
) -> Result<u64> {
    if m.threads.is_empty() {
        bail!("{}: no thread has any trace to export", input.display());
    }
    if let Some(wanted) = &sel.threads {
        if let Some(t) = wanted
            .iter()
            .find(|t| !m.threads.iter().any(|x| x.spans.tid == **t))
        {
            bail!("{}: no thread {t} in the trace", input.display());
        }
    }
    if sel.level == ExportLevel::Lines && lines.is_none() {
        bail!(
            "{}: line detail needs an instruction trace (a snapshot or perf.data); \
             this input has only branches",
            input.display()
        );
    }
    let partial = PathBuf::from(format!("{}.partial", output.display()));
    let written = (|| -> Result<u64> {
        let file = std::fs::File::create(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let n = match format {
            ExportFormat::Chrome => walk(
                m,
                lines,
                input,
                sel,
                &mut chrome::Chrome::new(&mut out)?,
                &mut progress,
            )?,
            ExportFormat::Perfetto => walk(
                m,
                lines,
                input,
                sel,
                &mut perfetto::Perfetto::new(&mut out),
                &mut progress,
            )?,
            ExportFormat::Fxt => walk(
                m,
                lines,
                input,
                sel,
                &mut fxt::Fxt::new(&mut out)?,
                &mut progress,
            )?,
        };
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("cannot write {}", partial.display()))?;
        file.sync_all()
            .with_context(|| format!("cannot write {}", partial.display()))?;
        Ok(n)
    })();
    match written {
        Ok(n) => {
            std::fs::rename(&partial, output)
                .with_context(|| format!("cannot write {}", output.display()))?;
            Ok(n)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// The one walk every format gets: per selected thread, its calls in tree
/// order, then (with lines) its lines segment by segment.
fn walk(
    m: &Model,
    lines_of: Option<&LineSource>,
    input: &Path,
    sel: &Selection,
    sink: &mut dyn Sink,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let base = m.time_range().map_or(0, |r| r.0);
    let lo = base.saturating_add(sel.from.unwrap_or(0));
    let hi = sel.to.map_or(u64::MAX, |t| base.saturating_add(t));
    let mut count = Counter { n: 0, progress };
    for t in &m.threads {
        let s = &t.spans;
        if sel.threads.as_ref().is_some_and(|w| !w.contains(&s.tid)) {
            continue;
        }
        sink.thread(s.pid, s.tid, &s.comm)?;
        for (d, i) in s.tree_order() {
            let sp = s.lane(d)[i];
            let end = s.end(d, i);
            if end < lo || sp.start > hi {
                continue;
            }
            let f = m.funcs.get(sp.func());
            sink.slice(&Slice {
                pid: s.pid,
                tid: s.tid,
                start: sp.start - base,
                end: end - base,
                depth: d as u32,
                name: &f.name,
                category: f.kind.as_str(),
                module: &f.module,
                source: f.source.as_deref(),
                estimated: sp.is_estimated(),
                inferred_start: sp.has(flag::INFERRED_START),
                line: false,
            })?;
            count.tick();
        }
        if sel.level == ExportLevel::Lines {
            let src = lines_of.expect("checked above");
            lines(t, src, input, (lo, hi, base), sink, &mut count)?;
        }
    }
    sink.finish(m.unit)?;
    (count.progress)(count.n);
    Ok(count.n)
}

/// Slices written so far, told to `progress` every 2^20.
struct Counter<'p> {
    n: u64,
    progress: &'p mut dyn FnMut(u64),
}

impl Counter<'_> {
    fn tick(&mut self) {
        self.n += 1;
        if self.n.is_multiple_of(1 << 20) {
            (self.progress)(self.n);
        }
    }
}

/// Thread `t`'s source lines in `[lo, hi]`, nested by their depth among
/// the lines: the PSB segments that cover the window are decoded together
/// (one thread at a time), so that a line that runs across a PSB is one
/// slice, as `decode --level lines` prints it.
fn lines(
    t: &ptscope_model::ThreadModel,
    src: &LineSource,
    input: &Path,
    (lo, hi, base): (u64, u64, u64),
    sink: &mut dyn Sink,
    count: &mut Counter,
) -> Result<()> {
    let mut segs = Vec::new();
    for i in t.segments_in(lo, hi) {
        segs.push(
            src.decode_segment(t, i, None)
                .with_context(|| input.display().to_string())?,
        );
    }
    let refs: Vec<&ptscope_model::Segment> = segs.iter().collect();
    for l in &window_lines(&refs, lo, hi) {
        let source = format!("{}:{}", l.frame.file, l.frame.line);
        let name = format!("{} {}", source, l.frame.function);
        sink.slice(&Slice {
            pid: t.spans.pid,
            tid: t.spans.tid,
            start: l.start.saturating_sub(base),
            end: l.end.saturating_sub(base),
            depth: l.depth,
            name: &name,
            category: if l.inlined { "inlined" } else { "line" },
            module: "",
            source: Some(&source),
            estimated: false,
            inferred_start: false,
            line: true,
        })?;
        count.tick();
    }
    Ok(())
}

/// Writes `bytes` to `out`, an I/O error as anyhow's.
fn put(out: &mut dyn Write, bytes: &[u8]) -> Result<()> {
    out.write_all(bytes)?;
    Ok(())
}
