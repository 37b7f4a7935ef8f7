//! Line-level zoom against its budget (issue 5): from a zoom request to
//! line spans ready to draw takes at most 50 ms for a window of up to 100k
//! instructions, and the cache stays bounded however long the user
//! explores. This prints figures; it asserts nothing.
//!
//! Input: `$PTSCOPE_BENCH_FILE`, else the `bench_loop` snapshot both
//! benchmarks keep under the target directory (`support::bench_snapshot`).
//!
//! What is timed (medians over `$PTSCOPE_BENCH_ROUNDS` windows, default 15,
//! spread over the main thread):
//! - **cold**: a fresh [`SegmentWorker`] worker with an empty cache; from `want()`
//!   of the PSB segments covering a window of N instructions until all are
//!   decoded (walk, instructions, timing, depth, DWARF lines, line spans),
//!   then the window's line spans merged across segments and its per-line
//!   heat (what the source pane shows);
//! - **warm**: the same request again, served from the cache;
//! - **the fine pass against its walk**: what a segment's decode costs
//!   (instructions, lines, line spans) against the walk inside it, which
//!   is the coarse pass's work over the same trace (issue 41 asks for
//!   little more); the first segment, which reads the line tables, is
//!   timed apart;
//! - **exploring**: 3000 random windows through one worker with a 64 MiB
//!   budget: the cache's peak, evictions, and the process's resident memory
//!   before and after;
//! - **a model left idle first**: the same input decoded afresh, its
//!   workers left to prepare the line lookups of the modules its code ran
//!   in (as while the user looks before zooming), then windows of 1000
//!   instructions: the first zoom into a library's code no longer reads
//!   its DWARF (the cold max above).

// A bench uses a few of the end-to-end tests' helpers.
#[allow(dead_code)]
#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ptscope_decoder::decode_snapshot;
use ptscope_decoder::LineSource;
use ptscope_decoder::SegmentWorker;
use ptscope_formats::snapshot::Snapshot;
use ptscope_model::line_heat;
use ptscope_model::window_lines;
use ptscope_model::DetailSource;
use ptscope_model::Segment;
use ptscope_model::WorkerFigures;
use ptscope_model::{Model, ThreadModel};
use ptscope_viewer::{bench::median, bench::rss_bytes};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| !a.starts_with('-')) {
        println!("lines: skipped (run it with `cargo bench -p ptscope --bench lines`)");
        return;
    }
    let input = match std::env::var_os("PTSCOPE_BENCH_FILE") {
        Some(p) => PathBuf::from(p),
        None => support::bench_snapshot(),
    };
    let rounds: usize = std::env::var("PTSCOPE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let t = Instant::now();
    let (model, src) = decoded(&input);
    println!(
        "input: {} (coarse pass {:.0?})",
        input.display(),
        t.elapsed()
    );
    let (ti, thread) = busiest(&model);
    let segs = thread.checkpoints.len();
    println!(
        "thread {}: {} instructions, {} PSB segments (~{} instructions each)",
        thread.spans.tid,
        thread.walk.instructions,
        segs,
        thread.walk.instructions / segs.max(1) as u64
    );
    // The first segment decoded reads the line tables of the binaries it
    // runs in, once for the source: timed apart, so that the windows'
    // figures are those of every zoom after it.
    let t = Instant::now();
    src.decode_segment(thread, 0, None).expect("segment 0");
    println!(
        "first segment decoded, reading the line tables: {:.1?}",
        t.elapsed()
    );
    println!();
    println!(
        "{:>12} {:>9} {:>12} {:>12} {:>12} {:>12}",
        "window", "segments", "cold", "cold max", "warm", "lines"
    );
    let mut cold_decodes = WorkerFigures::default();
    for n in [1_000u64, 10_000, 50_000, 100_000] {
        let z = zoom(&model, &src, ti, n, rounds);
        // The first windows read the line tables of the code they run
        // (libc's: some 35 ms, once), which the cold max shows: the
        // fine pass's cost against its walk is taken from the zooms after.
        if n > 1_000 {
            cold_decodes.add_counts(&z.decodes);
        }
        println!(
            "{:>12} {:>9} {:>12.1?} {:>12.1?} {:>12.1?} {:>12}",
            format!("{n} insns"),
            z.segments,
            z.cold,
            z.cold_max,
            z.warm,
            z.lines
        );
    }
    // What a segment's line-level decode costs against the walk inside
    // it, which is the coarse pass's work over the same trace.
    let per = |ns: u64| ns as f64 / cold_decodes.decoded.max(1) as f64 / 1e3;
    println!();
    println!(
        "fine pass (the cold zooms of 10k instructions and more): {} segments decoded, \
         {:.0} µs each on average ({:.0} instructions), of which the walk {:.0} µs: \
         {:.1}x the walk alone (the coarse pass's work over it)",
        cold_decodes.decoded,
        per(cold_decodes.decode_ns),
        thread.walk.instructions as f64 / segs.max(1) as f64,
        per(cold_decodes.walk_ns),
        cold_decodes.decode_ns as f64 / cold_decodes.walk_ns.max(1) as f64,
    );
    explore(&model, &src, ti, thread);
    // Nothing of this model is kept, so that the next reads its binaries,
    // and their DWARF, anew.
    drop(src);
    drop(model);
    prepared(&input, rounds);
}

/// `input` decoded: its model and its fine pass.
fn decoded(input: &std::path::Path) -> (Arc<Model>, Arc<LineSource>) {
    let snap = Snapshot::open(input).expect("open the input");
    let decoded = decode_snapshot(&snap, &Default::default()).expect("decode");
    let src = decoded.lines.expect("an instruction trace");
    (Arc::new(decoded.model), src)
}

/// The thread that ran the most instructions, and its index.
fn busiest(model: &Model) -> (usize, &ThreadModel) {
    model
        .threads
        .iter()
        .enumerate()
        .max_by_key(|(_, t)| t.walk.instructions)
        .expect("a thread")
}

/// The first zooms into a model whose workers were left idle first, as a
/// window is before the user zooms: they prepare the line lookups of the
/// modules its code ran in. Opened afresh (its binaries read anew).
fn prepared(input: &std::path::Path, rounds: usize) {
    let (model, src) = decoded(input);
    let (ti, _) = busiest(&model);
    let t = Instant::now();
    let d = SegmentWorker::new(model.clone(), src.clone(), 256 << 20, || {}).unwrap();
    while !d.figures().lines_prepared {
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = t.elapsed();
    drop(d);
    let z = zoom(&model, &src, ti, 1_000, rounds);
    println!();
    println!(
        "a model left idle first: its workers prepared the line lookups of the modules its \
         code ran in in {took:.1?}; then windows of 1000 instructions took {:.1?} cold \
         (median), {:.1?} at most",
        z.cold, z.cold_max
    );
}

/// Medians over `rounds` windows of `n` instructions of thread `ti`.
pub struct Zoom {
    pub segments: usize,
    pub cold: Duration,
    pub cold_max: Duration,
    pub warm: Duration,
    pub lines: usize,
    /// What the fresh workers' cold decodes did, summed.
    pub decodes: WorkerFigures,
}

/// Line-level zoom into windows of `n` instructions spread over thread
/// `ti`: cold (a fresh worker) and warm (the same request again).
pub fn zoom(model: &Arc<Model>, src: &Arc<LineSource>, ti: usize, n: u64, rounds: usize) -> Zoom {
    let thread = &model.threads[ti];
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    let mut nsegs = 0;
    let mut nlines = 0;
    let mut decodes = WorkerFigures::default();
    for r in 0..rounds {
        let (from, to) = window(thread, n, r, rounds);
        let d = SegmentWorker::new(model.clone(), src.clone(), 256 << 20, || {}).unwrap();
        let keys = d.keys(ti, from, to);
        nsegs = keys.len();
        let t = Instant::now();
        nlines = request(&d, &keys, from, to);
        cold.push(t.elapsed());
        decodes.add_counts(&d.figures());
        let t = Instant::now();
        request(&d, &keys, from, to);
        warm.push(t.elapsed());
    }
    let cold_max = cold.iter().copied().max().unwrap_or_default();
    Zoom {
        segments: nsegs,
        cold: median(cold),
        cold_max,
        warm: median(warm),
        lines: nlines,
        decodes,
    }
}

/// One request as the viewer makes it: want, wait, then the window's lines
/// and heat. Returns the number of line spans.
fn request(d: &SegmentWorker, keys: &[(u32, u32)], from: u64, to: u64) -> usize {
    d.want(keys);
    d.wait();
    let segs: Vec<Arc<Segment>> = keys.iter().filter_map(|&k| d.get(k)).collect();
    let refs: Vec<&Segment> = segs.iter().map(|s| &**s).collect();
    let lines = window_lines(&refs, from, to);
    let heat = line_heat(refs.iter().copied(), from, to);
    std::hint::black_box(&heat);
    lines.len()
}

/// The `r`-th of `rounds` windows of about `n` instructions, spread over
/// the thread: time is taken as proportional to instructions between two
/// checkpoints.
fn window(t: &ThreadModel, n: u64, r: usize, rounds: usize) -> (u64, u64) {
    let cps = &t.checkpoints;
    let first = cps.first().map_or(0, |c| c.insn);
    let total = t.walk.instructions.saturating_sub(first).max(1);
    let at = |insn: u64| -> u64 {
        let i = cps.partition_point(|c| c.insn <= insn).max(1) - 1;
        let (a, b) = (cps[i], cps.get(i + 1).copied().unwrap_or(cps[i]));
        if b.insn <= a.insn {
            return a.time;
        }
        a.time + (b.time - a.time) * (insn - a.insn) / (b.insn - a.insn)
    };
    let span = total.saturating_sub(n);
    let start = first + span * r as u64 / rounds.max(1) as u64;
    (at(start), at((start + n).min(first + total)))
}

/// A long random exploration through one worker with a 64 MiB budget.
fn explore(model: &Arc<Model>, src: &Arc<LineSource>, ti: usize, thread: &ThreadModel) {
    let budget = 64 << 20;
    let d = SegmentWorker::new(model.clone(), src.clone(), budget, || {}).unwrap();
    let rss0 = rss_bytes();
    let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
    let t = Instant::now();
    let windows = 3000;
    for _ in 0..windows {
        let n = 1_000 + rng.u64(..100_000);
        let r = rng.usize(..1000);
        let (from, to) = window(thread, n, r, 1000);
        let keys = d.keys(ti, from, to);
        request(&d, &keys, from, to);
    }
    let f = d.figures();
    let rss1 = rss_bytes();
    println!();
    println!(
        "exploring: {windows} random windows in {:.1?}: {} segments decoded ({} ms decoding), \
         {} evicted; cache now {} segments, {:.1} MiB, peak {:.1} MiB of a {} MiB budget; \
         resident memory {:.0} -> {:.0} MiB",
        t.elapsed(),
        f.decoded,
        f.decode_ns / 1_000_000,
        f.evicted,
        f.cached,
        f.cached_bytes as f64 / 1048576.0,
        f.peak_bytes as f64 / 1048576.0,
        budget >> 20,
        rss0 as f64 / 1048576.0,
        rss1 as f64 / 1048576.0
    );
}
