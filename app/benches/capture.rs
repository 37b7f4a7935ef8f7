//! How fast each backend without Intel PT captures, against the program
//! running natively. This prints figures; it asserts nothing.
//!
//! For `tests/programs/bench_loop.c` (a steady loop of calls and
//! branches) and for `python3 -c pass` (an interpreter starting and
//! stopping, which no one here wrote):
//! - **native:** the program alone;
//! - **QEMU alone:** `qemu-x86_64 PROG`, no plugin: the cost of TCG;
//! - **QEMU, callbacks only:** ptscope's plugin with its block callbacks
//!   registered but writing no packets (`PTSCOPE_PLUGIN_NO_ENCODE=1`): the
//!   cost of a callback per executed block;
//! - **QEMU backend:** `ptscope record --backend qemu` with a 4 MiB ring
//!   and no trigger, the whole capture from start to saved snapshot;
//! - **emulated:** `ptscope record --backend emulated` (single-stepping)
//!   on a run short enough to wait for.
//!
//! Instructions are counted by the QEMU backend (every instruction the
//! program retired), so every row's instructions per second are of the
//! same run. `$PTSCOPE_BENCH_ROUNDS` (default 3) runs each; the minimum
//! time is kept, since the machine's noise only ever adds time.

// A bench uses a few of the end-to-end tests' helpers.
#[allow(dead_code)]
#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn rounds() -> usize {
    std::env::var("PTSCOPE_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

/// The fastest of `rounds()` runs of `cmd`, which must succeed.
fn time(what: &str, mut make: impl FnMut() -> Command) -> Duration {
    (0..rounds())
        .map(|_| {
            let mut cmd = make();
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let t = Instant::now();
            let status = cmd.status().unwrap_or_else(|e| panic!("{what}: {e}"));
            let took = t.elapsed();
            assert!(status.success(), "{what} failed: {status}");
            took
        })
        .min()
        .unwrap()
}

/// The instructions the QEMU backend traced in a run of `argv`.
fn instructions(dir: &Path, argv: &[&str]) -> u64 {
    let snap = dir.join("count.ptscope");
    let out = support::ptscope()
        .args(["record", "-q", "--backend", "qemu", "--no-debug-info", "-o"])
        .arg(&snap)
        .arg("--")
        .args(argv)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = ptscope_formats::snapshot::Snapshot::read_metadata(&snap)
        .unwrap()
        .unwrap();
    meta.instructions
}

fn record(dir: &Path, backend: &str, argv: &[&str]) -> Command {
    let mut cmd = support::ptscope();
    cmd.args([
        "record",
        "-q",
        "--no-debug-info",
        "--backend",
        backend,
        "-o",
    ])
    .arg(dir.join(format!("{backend}.ptscope")))
    .arg("--")
    .args(argv);
    cmd
}

struct Row {
    name: &'static str,
    took: Duration,
    insns: u64,
    native: Duration,
}

impl Row {
    fn print(&self) {
        let rate = self.insns as f64 / self.took.as_secs_f64();
        println!(
            "| {:<32} | {:>10.3} s | {:>8.0}M insns/s | {:>7.1}× native |",
            self.name,
            self.took.as_secs_f64(),
            rate / 1e6,
            self.took.as_secs_f64() / self.native.as_secs_f64()
        );
    }
}

fn program(dir: &Path, label: &str, argv: &[&str], emulated_argv: Option<&[&str]>) {
    let insns = instructions(dir, argv);
    let native = time("native", || {
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..]);
        c
    });
    let qemu = support::which("qemu-x86_64").expect("qemu-x86_64 (qemu-user)");
    let bare = time("qemu alone", || {
        let mut c = Command::new(&qemu);
        c.args(argv);
        c
    });
    let callbacks = time("callbacks only", || {
        let mut c = record(dir, "qemu", argv);
        c.env("PTSCOPE_PLUGIN_NO_ENCODE", "1");
        c
    });
    let traced = time("qemu backend", || record(dir, "qemu", argv));
    println!();
    println!("{label}: {insns} instructions ({:.1}M)", insns as f64 / 1e6);
    println!();
    println!("| run | time | instructions/s | against native |");
    println!("|---|---|---|---|");
    for (name, took) in [
        ("native", native),
        ("QEMU alone (TCG)", bare),
        ("QEMU + plugin, callbacks only", callbacks),
        ("QEMU backend (4 MiB ring)", traced),
    ] {
        Row {
            name,
            took,
            insns,
            native,
        }
        .print();
    }
    if let Some(short) = emulated_argv {
        let short_insns = instructions(dir, short);
        let stepped = time("emulated", || record(dir, "emulated", short));
        let rate = short_insns as f64 / stepped.as_secs_f64();
        println!(
            "| emulated (single-step), {:>5.1}M insns | {:>10.3} s | {:>8.3}M insns/s | QEMU backend is {:.0}× faster |",
            short_insns as f64 / 1e6,
            stepped.as_secs_f64(),
            rate / 1e6,
            (insns as f64 / traced.as_secs_f64()) / rate
        );
    }
    let tcg = bare.as_secs_f64();
    let cb = (callbacks.as_secs_f64() - tcg).max(0.0);
    let enc = (traced.as_secs_f64() - callbacks.as_secs_f64()).max(0.0);
    println!(
        "\nwhere the time goes: TCG {:.0}%, block callbacks {:.0}%, PT encoding and the snapshot {:.0}%",
        100.0 * tcg / traced.as_secs_f64(),
        100.0 * cb / traced.as_secs_f64(),
        100.0 * enc / traced.as_secs_f64()
    );
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let exe = support::build(dir.path(), "bench_loop.c");
    let exe = exe.to_str().unwrap().to_string();
    let rounds_arg = std::env::var("PTSCOPE_BENCH_LOOP").unwrap_or_else(|_| "3000000".into());
    println!(
        "capture benchmark: {} runs each, the fastest kept",
        rounds()
    );
    program(
        dir.path(),
        "bench_loop",
        &[&exe, &rounds_arg],
        Some(&[&exe, "2000"]),
    );
    program(
        dir.path(),
        "python3 -c pass",
        &["/usr/bin/python3", "-c", "pass"],
        None,
    );
}
