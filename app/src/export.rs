//! `ptscope export`: the decoded model for tools that read other formats.
//! The first is Chrome's JSON trace event format, which chrome://tracing,
//! the Perfetto UI and speedscope open: one complete event (`"ph":"X"`)
//! per span, one track per thread named by a metadata event, times in µs
//! from the input's first timestamp with ns kept as decimals.
//!
//! The output is streamed, a span at a time, into `OUT.partial`, which is
//! renamed to `OUT` only when it is whole: an export that fails leaves
//! whatever `OUT` was before, and no half-written file.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use ptscope_decoder::model::{Model, TimeUnit};
use ptscope_decoder::store::flag;

/// What `export` writes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ExportFormat {
    /// Chrome's JSON trace events (chrome://tracing, ui.perfetto.dev).
    Chrome,
}

#[derive(serde::Serialize)]
struct ChromeEvent<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    /// µs, with ns as decimals.
    ts: f64,
    dur: f64,
    pid: i32,
    tid: i32,
    args: ChromeArgs<'a>,
}

#[derive(serde::Serialize)]
struct ChromeArgs<'a> {
    depth: usize,
    #[serde(skip_serializing_if = "str::is_empty")]
    module: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'a str>,
    /// The span began before the trace did (its start is the trace's).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    inferred_start: bool,
    /// Its times were spread between timing packets, not measured.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    estimated: bool,
}

#[derive(serde::Serialize)]
struct ChromeThreadName<'a> {
    name: &'static str,
    ph: &'static str,
    pid: i32,
    tid: i32,
    args: ThreadNameArgs<'a>,
}

#[derive(serde::Serialize)]
struct ThreadNameArgs<'a> {
    name: &'a str,
}

/// `ptscope export FILE --format F -o OUT`: the spans of `m` (decoded
/// from `input`) that end at or after `from` and start at or before `to`
/// (ns from the first timestamp). Returns how many spans it wrote.
pub fn export(
    m: &Model,
    input: &Path,
    (from, to): (Option<u64>, Option<u64>),
    format: ExportFormat,
    output: &Path,
    mut progress: impl FnMut(u64),
) -> Result<u64> {
    if m.threads.is_empty() {
        bail!("{}: no thread has any trace to export", input.display());
    }
    let partial = PathBuf::from(format!("{}.partial", output.display()));
    let written = (|| -> Result<u64> {
        let file = std::fs::File::create(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let n = match format {
            ExportFormat::Chrome => chrome(m, (from, to), &mut out, &mut progress)?,
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

fn chrome(
    m: &Model,
    (from, to): (Option<u64>, Option<u64>),
    out: &mut impl Write,
    progress: &mut impl FnMut(u64),
) -> Result<u64> {
    let base = m.time_range().map_or(0, |r| r.0);
    let lo = base.saturating_add(from.unwrap_or(0));
    let hi = to.map_or(u64::MAX, |t| base.saturating_add(t));
    // Chrome's times are µs; a trace without timing counts instructions,
    // which go out as if each were a ns (the metadata says so).
    let us = |ns: u64| ns as f64 / 1000.0;
    write!(out, "{{\"traceEvents\":[")?;
    let mut first = true;
    let mut sep = |out: &mut dyn Write| -> std::io::Result<()> {
        if !std::mem::take(&mut first) {
            out.write_all(b",\n")?;
        }
        Ok(())
    };
    let mut n = 0u64;
    for t in &m.threads {
        let s = &t.spans;
        sep(out)?;
        serde_json::to_writer(
            &mut *out,
            &ChromeThreadName {
                name: "thread_name",
                ph: "M",
                pid: s.pid,
                tid: s.tid,
                args: ThreadNameArgs { name: &s.comm },
            },
        )?;
        for (d, lane) in s.lanes() {
            // Lanes are in start order: past `to`, nothing more is in.
            for (i, sp) in lane.iter().enumerate() {
                if sp.start > hi {
                    break;
                }
                let end = s.end(d, i);
                if end < lo {
                    continue;
                }
                let f = m.funcs.get(sp.func());
                sep(out)?;
                serde_json::to_writer(
                    &mut *out,
                    &ChromeEvent {
                        name: &f.name,
                        cat: f.kind.as_str(),
                        ph: "X",
                        ts: us(sp.start - base),
                        dur: us(end - sp.start),
                        pid: s.pid,
                        tid: s.tid,
                        args: ChromeArgs {
                            depth: d,
                            module: &f.module,
                            source: f.source.as_deref(),
                            inferred_start: sp.has(flag::INFERRED_START),
                            estimated: sp.is_estimated(),
                        },
                    },
                )?;
                n += 1;
                if n.is_multiple_of(1 << 20) {
                    progress(n);
                }
            }
        }
    }
    let unit = match m.unit {
        TimeUnit::Ns => "ns",
        TimeUnit::Insns => "instructions retired (the trace has no timing)",
    };
    write!(
        out,
        "],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"producer\":\"ptscope\",\"time counts\":\"{unit}\"}}}}"
    )?;
    progress(n);
    Ok(n)
}
