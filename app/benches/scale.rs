//! The benchmark of issue 7, in one run and one table: ptscope at scale and
//! side by side with its peers. Prints figures; asserts nothing.
//!
//! `cargo bench -p ptscope --bench scale`. Inputs are generated under the
//! target directory from the benchmarks' 30 s capture of bench_loop
//! (`ptscope grow`): a 256 MiB snapshot (`$PTSCOPE_SCALE_MB`) and a 16 MiB
//! one for the peers, whose decoders are too slow for 256 MiB.
//!
//! - **PSB indexing** over the large trace, GB/s (median of 5).
//! - **Coarse pass** over the large snapshot, end to end
//!   (`decode_snapshot`: parse, symbols, walk, timing, stacks), on one core
//!   (one walk) and on every core (chunks cut at PSBs); MB/s, M
//!   instructions/s, M spans/s, and the speed-up.
//! - **First spans**: from opening the large snapshot until the background
//!   decode publishes its first partial model with spans (the GUI draws it
//!   on its next frame).
//! - **Re-open**: the large snapshot opened twice through the model cache:
//!   the first open decodes and writes the entry, the second reads it back
//!   (with its fine pass rebuilt); as a share of a full decode.
//! - **Store**: bytes per span.
//! - **Peers on the 16 MiB snapshot**, every variant in turn, medians of
//!   `$PTSCOPE_BENCH_ROUNDS` (3): ours on one core and on every core,
//!   libipt's block decoder walking the trace alone, and
//!   `perf script --itrace=cr` to /dev/null; each as a ratio against ours.
//! - **Frame build**, the CPU side of a 1920×1080 frame of the viewer, with
//!   10M and 100M synthetic spans, fully zoomed out, at 1 ms, 10 µs and
//!   100 ns windows.
//! - **Line-level zoom** for windows of 10k and 100k instructions, cold.

// The other benches are built on their own too, each with the test
// helpers: here they come in once per bench.
#![allow(clippy::duplicate_mod)]

#[path = "../../tests/support/mod.rs"]
mod support;

#[allow(dead_code)]
#[path = "coarse.rs"]
mod peers;

#[allow(dead_code)]
#[path = "lines.rs"]
mod lines;

#[allow(dead_code)]
#[path = "../../viewer/benches/frame.rs"]
mod frame;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ptscope_decoder::coarse::chunks::Parallel;
use ptscope_decoder::decode::{decode_snapshot, DecodeOptions};
use ptscope_decoder::model::Model;
use ptscope_decoder::packet::psb_offsets;
use ptscope_decoder::progress::DecodeProgress;
use ptscope_formats::snapshot::Snapshot;

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

use ptscope_viewer::bench::median;

struct Table(Vec<(String, String, String)>);

impl Table {
    fn row(&mut self, what: impl Into<String>, value: impl Into<String>, target: &str) {
        self.0.push((what.into(), value.into(), target.into()));
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| !a.starts_with('-')) {
        println!("scale: skipped (run it with `cargo bench -p ptscope --bench scale`)");
        return;
    }
    let mb: u64 = std::env::var("PTSCOPE_SCALE_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let rounds: usize = std::env::var("PTSCOPE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let cores = Parallel::default().workers;
    let mut table = Table(Vec::new());

    let src = support::bench_snapshot();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-scale");
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join(format!("grown-{mb}M.ptscope"));
    let t = Instant::now();
    let grown = ptscope::scale::grow(&src, &big, mb << 20).unwrap();
    let gen = t.elapsed();
    let small = dir.join("grown-16M.ptscope");
    ptscope::scale::grow(&src, &small, 16 << 20).unwrap();
    eprintln!(
        "input: {} ({} MiB of PT: a {}-byte period repeated {} times)",
        big.display(),
        grown.aux_bytes >> 20,
        grown.period.to - grown.period.from,
        grown.copies
    );
    table.row(
        format!("generating {} MiB", grown.aux_bytes >> 20),
        format!("{:.2} s", secs(gen)),
        "",
    );

    // PSB indexing.
    let snap = Snapshot::open(&big).unwrap();
    let trace = snap.trace().unwrap();
    let bytes: usize = trace.streams.iter().map(|s| s.data.len()).sum();
    let mut psb = Vec::new();
    let mut psbs = 0;
    for _ in 0..5 {
        let t = Instant::now();
        psbs = trace
            .streams
            .iter()
            .map(|s| psb_offsets(&s.data).len())
            .sum();
        psb.push(t.elapsed());
    }
    table.row(
        format!("PSB indexing ({psbs} PSBs)"),
        format!("{:.2} GB/s", bytes as f64 / secs(median(psb)) / 1e9),
        "",
    );
    drop(trace);

    // The coarse pass at scale, one walk and every core.
    eprintln!("coarse pass, {mb} MiB, one core and {cores} cores…");
    let decode = |parallel: Parallel| {
        let opts = DecodeOptions {
            parallel,
            ..DecodeOptions::default()
        };
        let t = Instant::now();
        let m = decode_snapshot(&snap, &opts).unwrap();
        (t.elapsed(), m)
    };
    let mut one = Vec::new();
    let mut all = Vec::new();
    let mut model = None;
    for _ in 0..rounds.min(3) {
        let (t, m) = decode(Parallel::sequential());
        one.push(t);
        drop(m);
        let (t, m) = decode(Parallel::default());
        all.push(t);
        model = Some(m);
    }
    let (one, all) = (median(one), median(all));
    let model = model.unwrap();
    let spans = model.span_count() as f64;
    let insns: u64 = model.threads.iter().map(|t| t.walk.instructions).sum();
    let errors: usize = model.threads.iter().map(|t| t.walk.errors.len()).sum();
    let store: usize = model.threads.iter().map(|t| t.spans.memory_bytes()).sum();
    let index: usize = model
        .threads
        .iter()
        .flat_map(|t| (0..t.spans.depth()).map(|d| t.spans.blocks(d).len()))
        .sum::<usize>()
        * std::mem::size_of::<ptscope_decoder::store::Block>();
    drop(model);
    for (name, t) in [("one core", one), ("every core", all)] {
        table.row(
            format!("coarse pass, {name}"),
            format!(
                "{:.1} s: {:.1} MB/s, {:.1} M insns/s, {:.2} M spans/s",
                secs(t),
                bytes as f64 / secs(t) / 1e6,
                insns as f64 / secs(t) / 1e6,
                spans / secs(t) / 1e6
            ),
            "",
        );
    }
    let speedup = secs(one) / secs(all);
    table.row(
        format!("parallel speed-up on {cores} cores"),
        format!("{speedup:.2}x"),
        &format!(">= 1.8x: {}", verdict(speedup >= 1.8)),
    );
    table.row(
        "… of it",
        format!(
            "{:.0} M instructions, {:.1} M spans, {errors} decode errors",
            insns as f64 / 1e6,
            spans / 1e6
        ),
        "",
    );

    // First spans: open, then the background decode's first partial model.
    let first = {
        let t = Instant::now();
        let snap = Snapshot::open(&big).unwrap();
        let progress = DecodeProgress::new();
        let p = progress.clone();
        let worker = std::thread::spawn(move || {
            let opts = DecodeOptions {
                progress: Some(p),
                ..DecodeOptions::default()
            };
            decode_snapshot(&snap, &opts).map(|m| m.span_count())
        });
        let first = loop {
            if let Some(m) = progress.take_partial() {
                if m.span_count() > 0 {
                    break Some((t.elapsed(), m.span_count()));
                }
            }
            if worker.is_finished() {
                break None;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        progress.cancel();
        let _ = worker.join();
        first
    };
    match first {
        Some((t, n)) => table.row(
            format!("first spans on screen, {mb} MiB"),
            format!("{:.0} ms ({n} spans)", secs(t) * 1e3),
            &format!("< 1 s: {}", verdict(t < Duration::from_secs(1))),
        ),
        None => table.row(
            "first spans on screen",
            "no partial model",
            "< 1 s: NOT met",
        ),
    }
    // Re-opening a file decoded before: the model cache.
    {
        use ptscope_decoder::cache::ModelCache;
        use ptscope_decoder::open::{open, OpenOptions};
        eprintln!("re-open through the model cache…");
        let cache_dir = dir.join("model-cache");
        let _ = std::fs::remove_dir_all(&cache_dir);
        let cache = ModelCache::new(cache_dir.clone(), u64::MAX);
        let opts = OpenOptions {
            cache: Some(cache.clone()),
            ..OpenOptions::default()
        };
        let t = Instant::now();
        drop(open(&big, &opts).unwrap());
        let first_open = t.elapsed();
        let entry: u64 = std::fs::read_dir(&cache_dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        let t = Instant::now();
        let again = open(&big, &opts).unwrap();
        let reopen = t.elapsed();
        assert_eq!(
            cache.hits(),
            1,
            "the second open was not read from the cache"
        );
        drop(again);
        let share = secs(reopen) / secs(all);
        table.row(
            format!("re-opening {mb} MiB decoded before"),
            format!(
                "{:.2} s, {:.1}% of a full decode (entry {:.0} MB, {:.1} B per span; the first open took {:.1} s with it)",
                secs(reopen),
                share * 100.0,
                entry as f64 / 1e6,
                entry as f64 / spans.max(1.0),
                secs(first_open)
            ),
            &format!("<= 5%: {}", verdict(share <= 0.05)),
        );
        let _ = std::fs::remove_dir_all(&cache_dir);
    }
    let bps = (store - index) as f64 / spans.max(1.0);
    table.row(
        "store",
        format!(
            "{bps:.2} B per span, and {:.2} B of block summaries",
            index as f64 / spans.max(1.0)
        ),
        &format!("<= 16: {}", verdict(bps <= 16.0)),
    );

    // Peers on 16 MiB.
    eprintln!("peers on 16 MiB, {rounds} rounds…");
    let p = peers::measure_peers(&small, rounds, true).expect("every variant");
    let mb16 = p.pt_bytes as f64 / 1e6;
    for (name, t) in &p.times {
        eprintln!("  {name:<40} {:.3} s", secs(*t));
    }
    let row = |t: &mut Table, name: &str, d: Duration, ours: Duration, target: &str| {
        t.row(
            format!("16 MiB: {name}"),
            format!(
                "{:.2} s, {:.1} MB/s, {:.2}x our time",
                secs(d),
                mb16 / secs(d),
                secs(d) / secs(ours)
            ),
            target,
        );
    };
    let all16 = p.full_all.unwrap();
    row(&mut table, "ptscope, one core", p.full, p.full, "");
    row(&mut table, "ptscope, every core", all16, p.full, "");
    let r = secs(p.ipt) / secs(p.full);
    row(
        &mut table,
        "libipt block decoder alone",
        p.ipt,
        p.full,
        &format!("ours as fast, one core: {}", verdict(r >= 1.0)),
    );
    row(
        &mut table,
        "… with its block cache warm",
        p.ipt_warm,
        p.full,
        "",
    );
    row(
        &mut table,
        "ptscope walk, resolve and stacks (symbols loaded)",
        p.pass,
        p.full,
        &format!("libipt alone / this: {:.2}x", secs(p.ipt) / secs(p.pass)),
    );
    match p.perf {
        Some(perf) => {
            let r = secs(perf) / secs(p.full);
            row(
                &mut table,
                "perf script --itrace=cr",
                perf,
                p.full,
                &format!(">= 10x slower: {}", verdict(r >= 10.0)),
            );
        }
        None => table.row("16 MiB: perf script", "could not run", ""),
    }

    // Frames.
    for total in [10_000_000usize, 100_000_000] {
        eprintln!("frames, {} M spans…", total / 1_000_000);
        let model: Arc<Model> = Arc::new(frame::model(total));
        for (level, ms) in frame::frame_times(model) {
            table.row(
                format!("frame build, {}M spans, {level}", total / 1_000_000),
                format!("{ms:.2} ms"),
                &format!("<= 8 ms: {}", verdict(ms <= 8.0)),
            );
        }
    }

    // Line-level zoom on the capture itself.
    eprintln!("line-level zoom…");
    let snap = Snapshot::open(&src).unwrap();
    let model = Arc::new(decode_snapshot(&snap, &DecodeOptions::default()).unwrap());
    let ti = (0..model.threads.len())
        .max_by_key(|&i| model.threads[i].walk.instructions)
        .unwrap();
    for n in [10_000u64, 100_000] {
        let z = lines::zoom(&model, ti, n, 15);
        table.row(
            format!("line-level zoom, {}k instructions, cold", n / 1000),
            format!(
                "{:.1} ms (worst {:.1} ms; cached {:.1} ms)",
                secs(z.cold) * 1e3,
                secs(z.cold_max) * 1e3,
                secs(z.warm) * 1e3
            ),
            if n == 100_000 {
                if z.cold <= Duration::from_millis(50) {
                    "<= 50 ms: met"
                } else {
                    "<= 50 ms: NOT met"
                }
            } else {
                ""
            },
        );
    }

    println!();
    println!("| figure | value | target |");
    println!("|---|---|---|");
    for (a, b, c) in &table.0 {
        println!("| {a} | {b} | {c} |");
    }
}
