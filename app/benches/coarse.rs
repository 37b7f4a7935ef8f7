//! The coarse pass against its two yardsticks (issue 3, Performance): on one
//! core it must be at least 10x faster than `perf script --itrace=cr` on the
//! same file, and no slower than libipt's block decoder walking the same
//! trace alone. This prints figures; it asserts nothing.
//!
//! Input: `$PTSCOPE_BENCH_FILE` (a `.ptscope` snapshot or a per-thread
//! perf.data), else a snapshot of `tests/programs/bench_loop.c` taken by the
//! real binary with the emulated backend after 30 s (`$PTSCOPE_BENCH_SECONDS`)
//! and kept under the target directory for the next run
//! (`PTSCOPE_BENCH_RECAPTURE=1` takes a new one).
//!
//! What is timed, each the median of 9 rounds (`$PTSCOPE_BENCH_ROUNDS`) that
//! run every variant in turn, all in this one process pinned to CPU 0 (it
//! re-runs itself under `taskset -c 0`; perf inherits the pinning). The
//! decoder is single threaded, so pinning is all "one core" takes.
//! - **ptscope, end to end**: `decode::decode_snapshot` on the opened
//!   snapshot: perf.data parsing, symbol loading, mapping the code, the
//!   flow walk, timing, symbol resolution and stack reconstruction. Two of
//!   its fixed costs are also timed alone: parsing and loading every
//!   binary's symbols (and mapping the code).
//! - **ptscope, coarse pass**: the same per-thread `coarse::decode_thread`
//!   that `decode_snapshot` runs, with symbols already loaded: the code
//!   mapped afresh, a fresh flow decoder, walk, resolution and stacks; and
//!   our flow decoder alone, discarding what it reports.
//! - **the coarse pass over libipt**: the same with libipt's block decoder
//!   walking (`--decoder libipt`); its spans must be the same.
//! - **libipt alone**: a fresh section cache and image with the same
//!   sections and config (`BlockDecoder::new`: blocks end at calls and
//!   jumps, tick events on), and `BlockDecoder::walk` discarding every item;
//!   and again with one section cache kept across runs, so libipt's block
//!   cache is warm.
//! - **perf script**: `perf script --itrace=cr` on the same perf.data with
//!   the snapshot's binaries, output to /dev/null, wall time.

// A bench uses a few of the end-to-end tests' helpers.
#[allow(dead_code)]
#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ptscope_decoder::decode_thread;
use ptscope_decoder::decoder_config;
use ptscope_decoder::BlockItem;
use ptscope_decoder::FlowDecoder;
use ptscope_decoder::Parallel;
use ptscope_decoder::{decode_snapshot, DecodeOptions};
use ptscope_decoder::{libipt::BlockDecoder, libipt::Image, libipt::SectionCache};
use ptscope_decoder::{sections, Section};
use ptscope_decoder::{FileCache, Memory};
use ptscope_decoder::{ProcessSymbols, SymbolCache};
use ptscope_formats::pt::read::psb_offsets;
use ptscope_formats::{snapshot::Snapshot, snapshot::Trace};
use ptscope_model::FuncTable;
use ptscope_model::TimeUnit;

const PINNED: &str = "PTSCOPE_BENCH_PINNED";

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not,
    // and a filter argument means another benchmark was asked for.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| !a.starts_with('-')) {
        println!("coarse: skipped (run it with `cargo bench -p ptscope --bench coarse`)");
        return;
    }
    pin_to_one_core();
    let input = match std::env::var_os("PTSCOPE_BENCH_FILE") {
        Some(p) => bench_file(PathBuf::from(p)),
        None => support::bench_snapshot(),
    };
    run(&input);
}

/// `$PTSCOPE_BENCH_FILE`: cargo runs benchmarks in `app/`, so a relative
/// path that is not found there is taken from the workspace root.
fn bench_file(p: PathBuf) -> PathBuf {
    if p.is_absolute() || p.exists() {
        return p;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(&p);
    if root.exists() {
        root
    } else {
        p
    }
}

/// Re-runs this benchmark under `taskset -c 0`, so that it and its perf
/// child use one core. Without taskset it runs unpinned and says so.
fn pin_to_one_core() {
    if std::env::var_os(PINNED).is_some() {
        println!("pinned to CPU 0 (taskset -c 0)");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let status = Command::new("taskset")
        .args(["-c", "0"])
        .arg(&exe)
        .args(std::env::args_os().skip(1))
        .env(PINNED, "1")
        .status();
    match status {
        Ok(s) => std::process::exit(s.code().unwrap_or(1)),
        Err(e) => println!("not pinned: cannot run taskset ({e}); figures may use several cores"),
    }
}

use ptscope_viewer::bench::median;

/// One timed variant: `f` returns a count to cross-check.
struct Variant<'a> {
    name: &'static str,
    f: Box<dyn FnMut() -> u64 + 'a>,
    samples: Vec<Duration>,
    count: u64,
}

fn variant<'a>(name: &'static str, f: impl FnMut() -> u64 + 'a) -> Variant<'a> {
    Variant {
        name,
        f: Box::new(f),
        samples: Vec::new(),
        count: 0,
    }
}

/// Runs every variant once as a warm-up, then `rounds` times in turn, so
/// that load from elsewhere on the machine falls on all of them alike.
fn measure(variants: &mut [Variant], rounds: usize) {
    for v in variants.iter_mut() {
        v.count = (v.f)();
    }
    for _ in 0..rounds {
        for v in variants.iter_mut() {
            let t = Instant::now();
            let n = std::hint::black_box((v.f)());
            v.samples.push(t.elapsed());
            assert_eq!(n, v.count, "{}: not the same result twice", v.name);
        }
    }
}

/// Per process: its sections and mapped paths whose binaries are missing.
struct Proc {
    sections: Vec<Section>,
    missing: Vec<(u64, u64, String)>,
}

fn processes(snap: &Snapshot, trace: &Trace) -> HashMap<i32, Proc> {
    let mut out = HashMap::new();
    for s in &trace.streams {
        let Some(tid) = s.tid else { continue };
        let pid = trace.thread(tid).map_or(tid, |t| t.pid);
        out.entry(pid).or_insert_with(|| {
            let (sections, missing) = sections(snap, trace, Some(pid));
            let missing = trace
                .mmaps
                .iter()
                .filter(|m| m.pid == pid && missing.contains(&m.path))
                .map(|m| (m.start, m.len, m.path.clone()))
                .collect();
            Proc { sections, missing }
        });
    }
    out
}

/// A fresh section cache holding every process's sections, and the
/// section ids per process.
fn section_cache(procs: &HashMap<i32, Proc>) -> (SectionCache, HashMap<i32, Vec<i32>>) {
    let mut cache = SectionCache::new().unwrap();
    let mut ids = HashMap::new();
    for (&pid, p) in procs {
        let v = p
            .sections
            .iter()
            .map(|s| cache.add_file(&s.file, s.offset, s.size, s.vaddr).unwrap())
            .collect();
        ids.insert(pid, v);
    }
    (cache, ids)
}

fn image<'c>(cache: &'c SectionCache, ids: &[i32]) -> Image<'c> {
    let mut image = Image::new(cache).unwrap();
    for &id in ids {
        image.add(id).unwrap();
    }
    image
}

/// Medians of the variants (one walk each unless said), and what the input
/// held.
pub struct Peers {
    pub rounds: usize,
    pub pt_bytes: usize,
    pub spans: usize,
    pub events: u64,
    pub insns: u64,
    pub blocks: u64,
    pub errors: usize,
    pub threads: usize,
    pub perf_calls: Option<usize>,
    /// Every variant's name and median, in order.
    pub times: Vec<(&'static str, Duration)>,
    pub full: Duration,
    /// End to end on every core (`Parallel::default()`), if asked for.
    pub full_all: Option<Duration>,
    pub pass: Duration,
    pub ipt: Duration,
    pub ipt_warm: Duration,
    pub perf: Option<Duration>,
    /// End to end on one core with the memo off (`--no-memo`).
    pub no_memo: Duration,
    /// Our flow decoder alone, with the memo and without.
    pub flow: Duration,
    pub flow_no_memo: Duration,
    /// How the memo fared on one decode.
    pub memo: ptscope_decoder::MemoFigures,
    /// How the chunks of a decode on every core built their stacks.
    pub chunks: Option<ptscope_decoder::ChunkFigures>,
}

fn run(input: &Path) {
    let rounds: usize = std::env::var("PTSCOPE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    let Some(p) = measure_peers(input, rounds, false) else {
        return;
    };
    print_peers(input, &p);
}

/// Times every variant on `input`, `rounds` times each in turn; with
/// `all_cores`, also `decode_snapshot` on every core. `None` when only some
/// variants were asked for (`PTSCOPE_BENCH_ONLY`): those are printed.
pub fn measure_peers(input: &Path, rounds: usize, all_cores: bool) -> Option<Peers> {
    let snap = Snapshot::open(input).unwrap();
    let trace = snap.trace().unwrap();
    let cfg = decoder_config(&trace);
    let streams: Vec<_> = trace.streams.iter().filter(|s| s.tid.is_some()).collect();
    assert!(
        !streams.is_empty(),
        "{}: no per-thread trace (per-CPU traces are not decoded yet)",
        input.display()
    );
    let pt_bytes: usize = streams.iter().map(|s| s.data.len()).sum();
    let pid_of = |tid: i32| trace.thread(tid).map_or(tid, |t| t.pid);
    let procs = processes(&snap, &trace);
    let one_core = || DecodeOptions {
        parallel: Parallel::sequential(),
        ..DecodeOptions::default()
    };

    // How the memo fares: counted on a decode of its own.
    let progress = ptscope_decoder::DecodeProgress::counting();
    let counted = DecodeOptions {
        progress: Some(progress.clone()),
        ..one_core()
    };
    let model = decode_snapshot(&snap, &counted).unwrap();
    let memo = progress.memo();
    let spans = model.span_count();
    let events: u64 = model.threads.iter().map(|t| t.stack.events).sum();
    let blocks: u64 = model.threads.iter().map(|t| t.walk.blocks).sum();
    let insns: u64 = model.threads.iter().map(|t| t.walk.instructions).sum();
    let errors: usize = model.threads.iter().map(|t| t.walk.errors.len()).sum();
    drop(model);
    // How the chunks built their stacks, on every core: counted likewise.
    let chunks = all_cores.then(|| {
        let progress = ptscope_decoder::DecodeProgress::counting();
        let counted = DecodeOptions {
            progress: Some(progress.clone()),
            ..DecodeOptions::default()
        };
        let model = decode_snapshot(&snap, &counted).unwrap();
        assert_eq!(model.span_count(), spans);
        progress.chunks()
    });

    // The coarse pass proper, with symbols loaded once for all runs.
    // Names as the decoder finds them (libc's debug file among them), so
    // that the pass alone makes the very spans the whole decode makes.
    let search = || {
        let machine = ptscope_debuginfo::Search {
            debuginfod: None,
            ..ptscope_debuginfo::Search::system()
        };
        ptscope_decoder::Lookup::new(Some(&snap), Some(std::sync::Arc::new(machine)))
    };
    let symbols = std::cell::RefCell::new(SymbolCache::new(search()));
    for p in procs.values() {
        let _ = ProcessSymbols::new(&p.sections, &p.missing, &mut symbols.borrow_mut());
    }
    let params = trace.params.clone();
    let to_ns = ptscope_decoder::ToNs::perf(&params);
    // The coarse pass with libipt's block decoder walking.
    let coarse_libipt = |cache: &SectionCache, ids: &HashMap<i32, Vec<i32>>| {
        let mut funcs = FuncTable::default();
        let mut n = 0;
        for s in &streams {
            let tid = s.tid.unwrap();
            let pid = pid_of(tid);
            let p = &procs[&pid];
            let image = image(cache, &ids[&pid]);
            let mut resolver =
                ProcessSymbols::new(&p.sections, &p.missing, &mut symbols.borrow_mut());
            let psbs: Vec<u64> = psb_offsets(&s.data).into_iter().map(|o| o as u64).collect();
            let d = decode_thread(
                BlockDecoder::new(&s.data, &cfg).unwrap(),
                s.idx,
                &image,
                &mut resolver,
                &mut funcs,
                (&to_ns, TimeUnit::Ns),
                &psbs,
                (pid, tid, String::new()),
                None,
            )
            .unwrap();
            n += d.spans.span_count() as u64;
        }
        n
    };
    // The coarse pass as `decode_snapshot` runs it: our flow decoder, over
    // code read from the binaries afresh.
    let memories = || -> HashMap<i32, Memory> {
        let mut files = FileCache::default();
        procs
            .iter()
            .map(|(&pid, p)| (pid, Memory::new(&p.sections, &mut files).unwrap()))
            .collect()
    };
    let coarse = || {
        let mems = memories();
        let mut funcs = FuncTable::default();
        let mut n = 0;
        for s in &streams {
            let tid = s.tid.unwrap();
            let pid = pid_of(tid);
            let p = &procs[&pid];
            let mut resolver =
                ProcessSymbols::new(&p.sections, &p.missing, &mut symbols.borrow_mut());
            let psbs: Vec<u64> = psb_offsets(&s.data).into_iter().map(|o| o as u64).collect();
            let d = decode_thread(
                FlowDecoder::new(&s.data, &cfg),
                s.idx,
                &mems[&pid],
                &mut resolver,
                &mut funcs,
                (&to_ns, TimeUnit::Ns),
                &psbs,
                (pid, tid, String::new()),
                None,
            )
            .unwrap();
            n += d.spans.span_count() as u64;
        }
        n
    };
    // Our flow decoder alone, discarding what it reports.
    // With `memo` false, walking every run (`--no-memo`).
    let flow_walk = |memo: bool| {
        let mems = memories();
        let mut n = 0u64;
        for s in &streams {
            let mut dec = FlowDecoder::new(&s.data, &cfg);
            if !memo {
                dec.without_memo();
            }
            dec.set_image(&mems[&pid_of(s.tid.unwrap())]).unwrap();
            dec.walk(|_, item| {
                n += matches!(std::hint::black_box(item), BlockItem::Block(_)) as u64;
                true
            });
        }
        n
    };
    // libipt's block decoder alone, discarding what it reports.
    let ipt = |cache: &SectionCache, ids: &HashMap<i32, Vec<i32>>| {
        let mut n = 0u64;
        for s in &streams {
            let image = image(cache, &ids[&pid_of(s.tid.unwrap())]);
            let mut dec = BlockDecoder::new(&s.data, &cfg).unwrap();
            dec.set_image(&image).unwrap();
            dec.walk(|_, item| {
                n += matches!(std::hint::black_box(item), BlockItem::Block(_)) as u64;
                true
            });
        }
        n
    };
    // One section cache kept across runs: libipt's block cache warm.
    let (warm_cache, warm_ids) = section_cache(&procs);
    // Its blocks are split differently once cached: warm it now so that
    // every timed run sees the same.
    ipt(&warm_cache, &warm_ids);

    // perf script --itrace=cr, on the extracted perf.data.
    let tmp = tempfile::tempdir().unwrap();
    let (perf_data, buildid_dir) = if snap.buildid_dir().is_some() {
        let d = support::extract(input, tmp.path());
        (d.join("perf.data"), Some(d))
    } else {
        (input.to_path_buf(), None)
    };
    let perf_script = || {
        let mut cmd = Command::new("perf");
        if let Some(d) = &buildid_dir {
            cmd.arg("--buildid-dir").arg(d);
        }
        cmd.args(["script", "--itrace=cr", "-i"])
            .arg(&perf_data)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    let perf_ok = perf_script().status().is_ok_and(|s| s.success());
    let perf_calls = perf_ok.then(|| {
        let mut cmd = perf_script();
        cmd.stdout(Stdio::piped());
        let out = cmd.output().unwrap();
        out.stdout.iter().filter(|&&b| b == b'\n').count()
    });

    let mut variants = vec![
        variant("ptscope decode_snapshot (end to end)", || {
            decode_snapshot(&snap, &one_core()).unwrap().span_count() as u64
        }),
        variant("  of which: perf.data parse", || {
            snap.trace().unwrap().streams.len() as u64
        }),
        variant("  of which: symbol loading", || {
            let mut symbols = SymbolCache::new(search());
            for p in procs.values() {
                let _ = ProcessSymbols::new(&p.sections, &p.missing, &mut symbols);
            }
            0
        }),
        variant("  of which: reading the code", || memories().len() as u64),
        variant("ptscope coarse pass (symbols loaded)", coarse),
        variant("  of which: ptscope flow decoder alone", || flow_walk(true)),
        variant("ptscope coarse pass over libipt", || {
            let (cache, ids) = section_cache(&procs);
            coarse_libipt(&cache, &ids)
        }),
        variant("libipt block decoder alone", || {
            let (cache, ids) = section_cache(&procs);
            ipt(&cache, &ids)
        }),
        variant("libipt alone, warm block cache", || {
            ipt(&warm_cache, &warm_ids)
        }),
        variant("ptscope end to end, no memo", || {
            let opts = DecodeOptions {
                no_memo: true,
                ..one_core()
            };
            decode_snapshot(&snap, &opts).unwrap().span_count() as u64
        }),
        variant("  of which: flow decoder alone, no memo", || {
            flow_walk(false)
        }),
    ];
    if perf_ok {
        variants.push(variant("perf script --itrace=cr", || {
            assert!(perf_script().status().unwrap().success());
            0
        }));
    }
    if all_cores {
        variants.push(variant("ptscope end to end, every core", || {
            decode_snapshot(&snap, &DecodeOptions::default())
                .unwrap()
                .span_count() as u64
        }));
    }
    // For profiling one variant: `PTSCOPE_BENCH_ONLY=<part of its name>`.
    if let Some(only) = std::env::var_os("PTSCOPE_BENCH_ONLY") {
        let only = only.to_string_lossy().into_owned();
        variants.retain(|v| v.name.contains(&only));
        measure(&mut variants, rounds);
        for v in &variants {
            println!("{:<38} {:>12.3?}", v.name, median(v.samples.clone()));
        }
        return None;
    }
    measure(&mut variants, rounds);
    assert_eq!(variants[0].count, spans as u64);
    assert_eq!(
        variants[4].count, spans as u64,
        "the coarse pass alone made other spans"
    );
    assert_eq!(
        variants[6].count, spans as u64,
        "the coarse pass over libipt made other spans than over our decoder"
    );
    let t: Vec<Duration> = variants.iter().map(|v| median(v.samples.clone())).collect();
    let time_of = |name: &str| t[variants.iter().position(|v| v.name == name).unwrap()];
    let plain = variants
        .iter()
        .find(|v| v.name == "ptscope end to end, no memo")
        .unwrap();
    assert_eq!(plain.count, spans as u64, "the plain walk made other spans");
    if all_cores {
        assert_eq!(variants.last().unwrap().count, spans as u64);
    }
    Some(Peers {
        rounds,
        pt_bytes,
        spans,
        events,
        insns,
        blocks,
        errors,
        threads: streams.len(),
        perf_calls,
        times: variants
            .iter()
            .map(|v| v.name)
            .zip(t.iter().copied())
            .collect(),
        full: t[0],
        full_all: all_cores.then(|| *t.last().unwrap()),
        pass: t[4],
        ipt: t[7],
        ipt_warm: t[8],
        perf: perf_ok.then(|| time_of("perf script --itrace=cr")),
        no_memo: time_of("ptscope end to end, no memo"),
        flow: time_of("  of which: ptscope flow decoder alone"),
        flow_no_memo: time_of("  of which: flow decoder alone, no memo"),
        memo,
        chunks,
    })
}

fn print_peers(input: &Path, p: &Peers) {
    let (t_full, t_pass, t_ipt, t_ipt_warm, t_perf) = (p.full, p.pass, p.ipt, p.ipt_warm, p.perf);
    let (spans, events, rounds) = (p.spans, p.events, p.rounds);
    let pt_bytes = p.pt_bytes;

    // Figures.
    let mb = pt_bytes as f64 / 1e6;
    println!();
    println!("input:          {}", input.display());
    println!(
        "trace:          {pt_bytes} bytes of PT in {} thread(s), {} instructions, {} blocks, {} decode errors",
        p.threads, p.insns, p.blocks, p.errors
    );
    println!("produced:       {events} branch events, {spans} spans");
    if let Some(n) = p.perf_calls {
        println!("perf script:    {n} call/return samples");
    }
    println!();
    println!(
        "{:<38} {:>12} {:>10} {:>14} {:>12}",
        format!("one core, median of {rounds}"),
        "time",
        "MB/s",
        "ns per span",
        "ns per event"
    );
    let row = |name: &str, t: Duration| {
        let s = t.as_secs_f64();
        println!(
            "{:<38} {:>12.3?} {:>10.1} {:>14.1} {:>12.1}",
            name,
            t,
            mb / s,
            s * 1e9 / spans.max(1) as f64,
            s * 1e9 / events.max(1) as f64,
        );
    };
    for &(name, t) in &p.times {
        row(name, t);
    }
    if t_perf.is_none() {
        println!("perf script --itrace=cr: could not run (is linux-perf installed?)");
    }
    println!();
    if let Some(t) = t_perf {
        let r = t.as_secs_f64() / t_full.as_secs_f64();
        println!(
            "perf script / ptscope end to end:  {r:.1}x  (target >= 10x: {})",
            if r >= 10.0 { "met" } else { "NOT met" }
        );
    }
    let r = t_ipt.as_secs_f64() / t_pass.as_secs_f64();
    println!(
        "libipt alone / ptscope coarse pass: {r:.2}x  (target >= 1x, no slower: {})",
        if r >= 1.0 { "met" } else { "NOT met" }
    );
    let r = t_ipt_warm.as_secs_f64() / t_pass.as_secs_f64();
    println!("libipt alone with its block cache warm / ptscope coarse pass: {r:.2}x");
    let r = t_ipt.as_secs_f64() / t_full.as_secs_f64();
    println!("libipt alone / ptscope end to end:  {r:.2}x");
    let m = &p.memo;
    println!(
        "memo: {} lookups, {:.2}% hits, {} of {} blocks replayed, {} KB at most, {} flushes",
        m.lookups,
        m.hits as f64 * 100.0 / m.lookups.max(1) as f64,
        m.blocks,
        p.blocks,
        m.peak_bytes >> 10,
        m.flushes
    );
}
