//! The coarse pass at scale (issue 7): a 256 MiB genuine snapshot grown
//! from the benchmarks' capture of bench_loop (`ptscope grow`), decoded end
//! to end. Prints one table; asserts nothing.
//!
//! - generation: growing the 30 s capture to `$PTSCOPE_SCALE_MB` MiB (256);
//! - PSB indexing: `psb_offsets` over the whole trace, GB/s;
//! - the coarse pass end to end (`decode_snapshot`: parse, symbols, walk,
//!   timing, stacks) on one core: MB/s of PT, M instructions/s, M spans/s;
//! - bytes per span of the store, and the model's spans.
//!
//! The peers (perf script, libipt) run in `--bench coarse` on a grown file
//! of 16 MiB: `PTSCOPE_BENCH_FILE=...`; see BENCHMARKS.md.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use ptscope_capture::snapshot::Snapshot;
use ptscope_decoder::model::{decode_snapshot, DecodeOptions};
use ptscope_decoder::packet::psb_offsets;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| !a.starts_with('-')) {
        return;
    }
    let mb: u64 = std::env::var("PTSCOPE_SCALE_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let src = support::bench_snapshot();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-scale");
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join(format!("grown-{mb}M.ptscope"));
    let t = Instant::now();
    let grown = ptscope::scale::grow(&src, &big, mb << 20).unwrap();
    let gen = t.elapsed();
    println!(
        "input: {} ({} MiB of PT: a {}-byte period repeated {} times)",
        big.display(),
        grown.aux_bytes >> 20,
        grown.period.to - grown.period.from,
        grown.copies
    );

    let snap = Snapshot::open(&big).unwrap();
    let trace = snap.trace().unwrap();
    let data: Vec<&[u8]> = trace.streams.iter().map(|s| s.data.as_ref()).collect();
    let bytes: usize = data.iter().map(|d| d.len()).sum();
    let mut psb = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let n: usize = data.iter().map(|d| psb_offsets(d).len()).sum();
        psb.push((t.elapsed(), n));
    }
    psb.sort();
    let (psb_time, psbs) = psb[psb.len() / 2];
    drop(trace);

    let rounds = 3;
    let mut runs = Vec::new();
    let mut last = None;
    for _ in 0..rounds {
        let t = Instant::now();
        let model = decode_snapshot(&snap, &DecodeOptions::default()).unwrap();
        runs.push(t.elapsed());
        last = Some(model);
    }
    runs.sort();
    let decode = runs[runs.len() / 2];
    let model = last.unwrap();
    let spans = model.span_count() as f64;
    let insns: u64 = model.threads.iter().map(|t| t.walk.instructions).sum();
    let errors: usize = model.threads.iter().map(|t| t.walk.errors.len()).sum();
    let store: usize = model.threads.iter().map(|t| t.spans.memory_bytes()).sum();
    let secs = |d: Duration| d.as_secs_f64();
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| generating {} MiB | {:.2} s |", bytes >> 20, secs(gen));
    println!(
        "| PSB indexing ({psbs} PSBs) | {:.2} GB/s |",
        bytes as f64 / secs(psb_time) / 1e9
    );
    println!(
        "| coarse pass, end to end, one core (median of {rounds}) | {:.2} s |",
        secs(decode)
    );
    println!("| … PT | {:.1} MB/s |", bytes as f64 / secs(decode) / 1e6);
    println!(
        "| … instructions | {:.1} M/s ({:.0} M in all) |",
        insns as f64 / secs(decode) / 1e6,
        insns as f64 / 1e6
    );
    println!(
        "| … spans | {:.1} M/s ({:.1} M in all) |",
        spans / secs(decode) / 1e6,
        spans / 1e6
    );
    println!(
        "| store | {:.1} B per span |",
        store as f64 / spans.max(1.0)
    );
    println!("| decode errors | {errors} |");
}
