//! Chrome's JSON trace event format: one complete event (`"ph":"X"`) per
//! slice, one track per thread named by a metadata event, times in µs
//! with ns kept as decimals. Lines are complete events too, inside their
//! calls by time.

use std::io::Write;

use anyhow::Result;
use ptscope_model::TimeUnit;

use super::{put, Sink, Slice};

#[derive(serde::Serialize)]
struct Event<'a> {
    name: &'a str,
    cat: &'a str,
    ph: &'static str,
    /// µs, with ns as decimals.
    ts: f64,
    dur: f64,
    pid: i32,
    tid: i32,
    args: Args<'a>,
}

#[derive(serde::Serialize)]
struct Args<'a> {
    depth: u32,
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
struct ThreadName<'a> {
    name: &'static str,
    ph: &'static str,
    pid: i32,
    tid: i32,
    args: NameArg<'a>,
}

#[derive(serde::Serialize)]
struct NameArg<'a> {
    name: &'a str,
}

pub struct Chrome<'w> {
    out: &'w mut dyn Write,
    first: bool,
}

impl<'w> Chrome<'w> {
    pub fn new(out: &'w mut dyn Write) -> Result<Chrome<'w>> {
        put(out, b"{\"traceEvents\":[")?;
        Ok(Chrome { out, first: true })
    }

    fn sep(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.first) {
            put(self.out, b",\n")?;
        }
        Ok(())
    }
}

impl Sink for Chrome<'_> {
    fn thread(&mut self, pid: i32, tid: i32, comm: &str) -> Result<()> {
        self.sep()?;
        serde_json::to_writer(
            &mut *self.out,
            &ThreadName {
                name: "thread_name",
                ph: "M",
                pid,
                tid,
                args: NameArg { name: comm },
            },
        )?;
        Ok(())
    }

    fn slice(&mut self, s: &Slice) -> Result<()> {
        // Chrome's times are µs; a trace without timing counts
        // instructions, which go out as if each were a ns (the metadata
        // says so).
        let us = |ns: u64| ns as f64 / 1000.0;
        self.sep()?;
        serde_json::to_writer(
            &mut *self.out,
            &Event {
                name: s.name,
                cat: s.category,
                ph: "X",
                ts: us(s.start),
                dur: us(s.end - s.start),
                pid: s.pid,
                tid: s.tid,
                args: Args {
                    depth: s.depth,
                    module: s.module,
                    source: s.source,
                    inferred_start: s.inferred_start,
                    estimated: s.estimated,
                },
            },
        )?;
        Ok(())
    }

    fn finish(&mut self, unit: TimeUnit) -> Result<()> {
        let unit = match unit {
            TimeUnit::Ns => "ns",
            TimeUnit::Insns => "instructions retired (the trace has no timing)",
        };
        write!(
            self.out,
            "],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"producer\":\"ptscope\",\"time counts\":\"{unit}\"}}}}"
        )?;
        Ok(())
    }
}
