//! What the slow-call trigger (`--trigger F --slower-than D`) costs the
//! traced program, per call of F, on each path. This prints figures; it
//! asserts nothing.
//!
//! - **Breakpoints (Intel PT):** a thread calls a short function in a loop,
//!   first with nothing armed, then with hardware breakpoints on its entry
//!   and its returns (the real breakpoint PMU, as the Intel PT backend arms
//!   them), while this thread drains the samples and pairs them into calls
//!   as the backend does. The cost per call is the difference of the two
//!   loops' times over the calls; pairing is timed apart.
//! - **Emulated:** `ptscope record` of `tests/programs/outlier.c` (the real
//!   binary), without a trigger and with a slow-call trigger that never
//!   fires, so that every step is watched; the difference over the steps
//!   and over the calls of `handle`.
//!
//! `$PTSCOPE_BENCH_ROUNDS` (default 5) rounds each; the minimum is kept,
//! since the machine's noise only ever adds time.

// A bench uses a few of the end-to-end tests' helpers.
#[allow(dead_code)]
#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use ptscope_capture::intel_pt::slow_call::{call_sites, CallTimer};
use ptscope_capture::perf_event::breakpoint::Breakpoint;

/// A short function: some 20 instructions.
#[inline(never)]
extern "C" fn ptscope_bench_target(n: u64) -> u64 {
    let mut h = n;
    for i in 0..4 {
        h = std::hint::black_box(h.wrapping_mul(31).wrapping_add(i));
    }
    h
}

const CALLS: u64 = 20_000;

fn rounds() -> usize {
    std::env::var("PTSCOPE_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
}

/// Runs `CALLS` calls on a new thread, armed with `bp` if given, draining
/// and pairing its samples here meanwhile. (loop time, pairing time,
/// calls paired, whether samples were lost).
fn calls_on_a_thread(
    mut bp: Option<&mut Breakpoint>,
    timer: &mut CallTimer,
) -> (Duration, Duration, u64, bool) {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
        go_rx.recv().unwrap();
        let t = Instant::now();
        for n in 0..CALLS {
            std::hint::black_box(ptscope_bench_target(n));
        }
        t.elapsed()
    });
    let tid = tid_rx.recv().unwrap();
    if let Some(bp) = bp.as_deref_mut() {
        bp.arm(tid).unwrap();
    }
    let before = timer.calls;
    go_tx.send(()).unwrap();
    let mut pairing = Duration::ZERO;
    let mut lost = false;
    if let Some(bp) = bp {
        while !worker.is_finished() {
            let hits = bp.wait_for_hits(Duration::from_millis(1)).unwrap();
            let t = Instant::now();
            timer.feed(&hits);
            pairing += t.elapsed();
            lost |= hits.lost;
        }
        let hits = bp.wait_for_hits(Duration::from_millis(1)).unwrap();
        timer.feed(&hits);
        lost |= hits.lost;
        bp.disarm();
    }
    let looped = worker.join().unwrap();
    (looped, pairing, timer.calls - before, lost)
}

fn breakpoints() {
    println!("## Breakpoints (the Intel PT backend's slow-call trigger)");
    if !Breakpoint::available() {
        println!("the breakpoint PMU is missing: nothing to measure");
        return;
    }
    let me = std::env::current_exe().unwrap();
    let name = ptscope_capture::trigger::functions_in(&me)
        .into_iter()
        .find(|f| f.name.ends_with("ptscope_bench_target"))
        .expect("the bench function's symbol")
        .name;
    let maps = ptscope_capture::procfs::read_maps(std::process::id() as i32).unwrap();
    let sites = call_sites(&maps, &name)
        .unwrap()
        .expect("found in this binary");
    println!(
        "function: some 20 instructions, entry and {} return(s) watched",
        sites.returns.len()
    );
    let mut plain = Duration::MAX;
    let mut armed = Duration::MAX;
    let mut pairing = Duration::MAX;
    let mut paired = 0;
    let mut lost_any = false;
    for _ in 0..rounds() {
        let mut timer = CallTimer::new(sites.clone(), u64::MAX);
        let (p, ..) = calls_on_a_thread(None, &mut timer);
        plain = plain.min(p);
        let mut bp = Breakpoint::at(sites.addresses(), 64);
        let (a, pair, n, lost) = calls_on_a_thread(Some(&mut bp), &mut timer);
        armed = armed.min(a);
        pairing = pairing.min(pair);
        paired = paired.max(n);
        lost_any |= lost;
    }
    let per = |d: Duration| d.as_nanos() as f64 / CALLS as f64;
    println!("| figure | value |");
    println!("|---|---|");
    println!("| a call, nothing armed | {:.1} ns |", per(plain));
    println!("| a call, entry and returns armed | {:.0} ns |", per(armed));
    println!(
        "| **cost per call** (two debug exceptions and two samples) | **{:.2} µs** |",
        (per(armed) - per(plain)) / 1e3
    );
    println!(
        "| pairing the samples into calls (ptscope's side, per call) | {:.0} ns |",
        per(pairing)
    );
    println!(
        "| calls paired | {paired} of {CALLS}{} |",
        if lost_any {
            " (the kernel lost samples)"
        } else {
            ""
        }
    );
}

fn emulated() {
    println!();
    println!("## Emulated (every step watched)");
    let dir = tempfile::tempdir().unwrap();
    let exe = support::build(dir.path(), "outlier.c");
    let requests = "2000";
    let run = |extra: &[&str]| -> (Duration, u64) {
        let out = dir.path().join("bench.ptscope");
        let t = Instant::now();
        let o = support::ptscope()
            .args(["record", "-q", "--backend", "emulated", "-o"])
            .arg(&out)
            .args(extra)
            .arg("--")
            .arg(&exe)
            .arg(requests)
            .output()
            .unwrap();
        let wall = t.elapsed();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let meta = std::process::Command::new("tar")
            .arg("-xOf")
            .arg(&out)
            .arg("ptscope.json")
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&meta.stdout).unwrap();
        (wall, json["instructions"].as_u64().unwrap_or(0))
    };
    let mut plain = (Duration::MAX, 0);
    let mut watched = (Duration::MAX, 0);
    for _ in 0..rounds() {
        let p = run(&[]);
        if p.0 < plain.0 {
            plain = p;
        }
        let w = run(&["--trigger", "handle", "--slower-than", "1s"]);
        if w.0 < watched.0 {
            watched = w;
        }
    }
    let calls: u64 = requests.parse().unwrap();
    let diff = watched.0.as_secs_f64() - plain.0.as_secs_f64();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| record, no trigger | {:.2} s for {} steps ({:.1} µs a step) |",
        plain.0.as_secs_f64(),
        plain.1,
        plain.0.as_secs_f64() * 1e6 / plain.1.max(1) as f64
    );
    println!(
        "| record, slow-call trigger watching every step | {:.2} s |",
        watched.0.as_secs_f64()
    );
    println!(
        "| **difference per step** | **{:.2} µs** ({:+.1}%) |",
        diff * 1e6 / watched.1.max(1) as f64,
        diff / plain.0.as_secs_f64() * 100.0
    );
    println!(
        "| difference per call of `handle` ({calls} calls) | {:.1} µs |",
        diff * 1e6 / calls as f64
    );
}

fn main() {
    breakpoints();
    emulated();
}
