//! End to end: the QEMU backend (`--backend qemu`) runs real programs
//! under `qemu-x86_64` with ptscope's plugin. Its plugin logs every
//! instruction QEMU is about to run (a callback of its own per
//! instruction, apart from the block callbacks that feed the PT unit), and
//! perf, libipt and ptscope's own decoder must each read exactly those
//! instructions from the snapshot, thread by thread, with no error.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::*;

/// Records `argv` under QEMU with the instruction log; the snapshot and
/// the log.
fn record_qemu(
    dir: &Path,
    name: &str,
    extra: &[&str],
    argv: &[&str],
) -> (std::path::PathBuf, PerThread) {
    let mut args = vec!["--backend", "qemu"];
    args.extend_from_slice(extra);
    let (snap, log) = record(dir, name, &args, argv);
    let truth = read_ip_log(&log);
    assert!(
        !truth.is_empty() && truth.values().all(|v| !v.is_empty()),
        "{name}: empty log"
    );
    (snap, truth)
}

/// `got` must equal the log, thread by thread, and have no other thread.
fn same(name: &str, judge: &str, truth: &PerThread, got: &PerThread) {
    assert_same_instructions(name, judge, truth, got);
    assert_eq!(truth.len(), got.len(), "{name}: {judge}'s thread count");
}

/// ptscope's own instructions, compared with the log as they stream out
/// of `decode --level insns` (a real program's run is tens of millions).
fn ours_stream(name: &str, snap: &Path, truth: &PerThread) {
    let mut child = ptscope()
        .args(["decode", "--level", "insns", "--format", "json"])
        .arg(snap)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut at: std::collections::BTreeMap<i32, usize> = Default::default();
    for line in out.lines() {
        let line = line.unwrap();
        let tid: i32 = json_field(&line, "tid").parse().unwrap();
        let ip: u64 = json_field(&line, "ip").parse().unwrap();
        let i = at.entry(tid).or_default();
        let want = truth.get(&tid).and_then(|t| t.get(*i));
        assert_eq!(
            want,
            Some(&ip),
            "{name}: ptscope's instruction #{i} of thread {tid} is {ip:#x}"
        );
        *i += 1;
    }
    assert!(
        child.wait().unwrap().success(),
        "{name}: ptscope decode failed"
    );
    for (tid, ips) in truth {
        assert_eq!(
            at.get(tid).copied().unwrap_or(0),
            ips.len(),
            "{name}: ptscope's instructions of thread {tid}"
        );
    }
}

/// The log, perf, libipt and ptscope agree on every instruction.
fn check_all(
    dir: &Path,
    name: &str,
    extra: &[&str],
    argv: &[&str],
) -> (std::path::PathBuf, PerThread) {
    let (snap, truth) = record_qemu(dir, name, extra, argv);
    let (ipt, ipt_errors) = libipt_instructions(&snap);
    assert!(
        ipt_errors.is_empty(),
        "{name}: libipt errors: {ipt_errors:?}"
    );
    same(name, "libipt", &truth, &ipt);
    drop(ipt);
    let extracted = extract(&snap, dir);
    let (perf, perf_errors) = perf_instructions(&extracted);
    assert!(
        perf_errors.trim().is_empty(),
        "{name}: perf reported: {perf_errors}"
    );
    same(name, "perf", &truth, &perf);
    drop(perf);
    ours_stream(name, &snap, &truth);
    (snap, truth)
}

/// Builds `tests/programs/SOURCE`, records it under QEMU with `extra`,
/// and holds every decoder to the log.
fn exact(source: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), source);
    check_all(dir.path(), source, extra, &[exe.to_str().unwrap()]);
}

#[test]
fn c_calls_recursion_longjmp_signal() {
    exact("calls.c", &[]);
}

/// Timer signals land between a conditional branch and what follows it,
/// wherever QEMU ends a block; the handler and the sigreturn back are
/// traced exactly.
#[test]
fn asynchronous_signals_land_anywhere() {
    exact("async_signal.c", &["--size", "64M"]);
}

#[test]
fn cpp_exceptions() {
    exact("exceptions.cpp", &[]);
}

#[test]
fn rust_program() {
    exact("rust_prog.rs", &["--size", "64M"]);
}

#[test]
fn threads_each_get_a_trace_and_start_after_their_clone() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c");
    let (snap, truth) = check_all(dir.path(), "threads", &[], &[exe.to_str().unwrap()]);
    assert!(truth.len() >= 2, "{truth:?}");
    // The clock: no thread's first span starts before the main thread's
    // first (the clone comes after it), and each thread's trace is named
    // after the program, as a native run's would be.
    let spans = decode_json(&snap, &[]);
    let first = |tid: i32| spans.iter().filter(|s| s.tid == tid).map(|s| s.start).min();
    let main = *truth.keys().next().unwrap();
    for &tid in truth.keys().skip(1) {
        assert!(first(tid) > first(main), "thread {tid} starts before main");
    }
    let info = run_ok(ptscope().arg("info").arg(&snap), "info");
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("qemu backend"), "{info}");
    assert!(info.contains("ran on:  qemu-x86_64"), "{info}");
    assert!(
        !info.contains("qemu-x86_64    "),
        "threads named after QEMU: {info}"
    );
}

/// Real programs no one here wrote: the interpreter's whole run, and gzip
/// compressing a quarter of a megabyte, decoded exactly by all three.
#[test]
fn python_and_gzip_decode_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // Debian's interpreter, an ELF (a PATH's python3 may be a script).
    let python = Path::new("/usr/bin/python3");
    check_all(
        dir.path(),
        "python",
        &["--size", "256M"],
        &[
            python.to_str().unwrap(),
            "-c",
            "import json; print(sum(json.loads('[1, 2, 3]')))",
        ],
    );
    let input = dir.path().join("input");
    let text: String = (0..20_000)
        .map(|i| format!("line {i} of {}\n", i * 7 % 13))
        .collect();
    std::fs::write(&input, &text.as_bytes()[..256 * 1024]).unwrap();
    let gzip = which("gzip").expect("gzip");
    check_all(
        dir.path(),
        "gzip",
        &["--size", "256M"],
        &[gzip.to_str().unwrap(), "-kf", input.to_str().unwrap()],
    );
}

#[test]
fn entry_triggers_fire_in_the_plugin_and_rearm() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let out = dir.path().join("t.ptscope");
    run_ok(
        ptscope()
            .args([
                "record",
                "-q",
                "--backend",
                "qemu",
                "--trigger",
                "leaf",
                "--snapshots",
                "2",
                "-o",
            ])
            .arg(&out)
            .arg("--")
            .arg(&exe),
        "record --trigger leaf --snapshots 2",
    );
    for n in 1..=2 {
        let snap = dir.path().join(format!("t-{n}.ptscope"));
        let info = run_ok(ptscope().arg("info").arg(&snap), "info");
        let info = String::from_utf8_lossy(&info.stdout);
        assert!(info.contains("entered leaf"), "snapshot {n}: {info}");
        // The snapshot ends as the thread enters leaf, and perf decodes
        // it without an error.
        let extracted = extract(&snap, dir.path());
        let (_, errors) = perf_instructions(&extracted);
        assert!(errors.trim().is_empty(), "{errors}");
        assert!(
            spans_end_in(&snap, "leaf"),
            "snapshot {n} does not end in leaf"
        );
    }
}

/// Whether the call that starts last in the snapshot is `name`.
fn spans_end_in(snap: &Path, name: &str) -> bool {
    let spans = decode_json(snap, &[]);
    spans
        .iter()
        .filter(|s| s.kind == "call")
        .max_by_key(|s| s.start)
        .is_some_and(|s| s.name == name)
}

#[test]
fn a_slow_call_fires_as_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let snap = dir.path().join("slow.ptscope");
    run_ok(
        ptscope()
            .args([
                "record",
                "-q",
                "--backend",
                "qemu",
                "--trigger",
                "fib",
                "--slower-than",
                "2us",
                "-o",
            ])
            .arg(&snap)
            .arg("--")
            .arg(&exe),
        "record --slower-than",
    );
    let info = run_ok(ptscope().arg("info").arg(&snap), "info");
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("trigger call: fib"), "{info}");
    let ns: u64 = info
        .split("trigger call: fib on thread ")
        .nth(1)
        .and_then(|r| r.split(", ").nth(1))
        .and_then(|d| d.strip_suffix(" ns (perf time").or(d.split(' ').next()))
        .and_then(|d| d.trim().parse().ok())
        .unwrap_or_else(|| panic!("no duration in {info}"));
    assert!(ns > 2000, "{info}");
    // The call is whole in the snapshot and the last fib to return in
    // it, lasting as long, to the CYC packets' resolution.
    let spans = decode_json(&snap, &[]);
    let last = spans
        .iter()
        .filter(|s| s.name == "fib" && s.called())
        .max_by_key(|s| s.end)
        .expect("a fib call");
    let took = last.end - last.start;
    assert!(
        took.abs_diff(ns) <= ns / 50,
        "the last fib lasts {took} ns, the trigger says {ns}"
    );
}

#[test]
fn auto_takes_qemu_and_says_why_and_falls_back_where_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("auto.ptscope");
    let out = run_ok(
        ptscope()
            .args(["record", "-o"])
            .arg(&snap)
            .args(["--", "/bin/true"]),
        "record /bin/true",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("auto chose qemu"), "{err}");
    // Without QEMU, auto single-steps and says why.
    let out = run_ok(
        ptscope()
            .env("PTSCOPE_QEMU", dir.path().join("no-qemu"))
            .args(["record", "-o"])
            .arg(&snap)
            .args(["--", "/bin/true"]),
        "record without QEMU",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("auto chose emulated"), "{err}");
    // An option only single-stepping takes: qemu refuses it, auto
    // single-steps and says why.
    let out = ptscope()
        .args(["record", "--backend", "qemu", "--overflow-at", "100", "-o"])
        .arg(&snap)
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("does not take --overflow-at"),
        "{err}"
    );
    let out = run_ok(
        ptscope()
            .args(["record", "--overflow-at", "100", "-o"])
            .arg(&snap)
            .args(["--", "/bin/true"]),
        "record --overflow-at",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("auto chose emulated") && err.contains("--overflow-at"),
        "{err}"
    );
    // A script is no program QEMU runs.
    let script = dir.path().join("s.sh");
    std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    run_ok(Command::new("chmod").arg("+x").arg(&script), "chmod");
    let out = ptscope()
        .args(["record", "--backend", "qemu", "-o"])
        .arg(&snap)
        .arg("--")
        .arg(&script)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("a script (#!)"),
        "{err}"
    );
    // attach cannot run under QEMU.
    let out = ptscope()
        .args(["attach", "--backend", "qemu", "--pid", "1", "-o"])
        .arg(&snap)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot attach"),
        "{err}"
    );
}

/// `--per-cpu` and `--system-wide` under QEMU: each thread's trace is cut
/// where it enters the kernel and the pieces are laid out on virtual CPUs,
/// so three threads passing a turn around hop between CPUs. perf, libipt
/// and ptscope still give every thread exactly what it ran, perf's switch
/// records place the threads where ptscope's CPU lanes do, and the
/// system-wide layout records the idle task too.
#[test]
fn per_cpu_layouts_spread_threads_over_cpus_and_decode_exactly() {
    use ptscope_formats::snapshot::Snapshot;
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "relay.c");
    for (name, layout) in [("relay-per-cpu", "--per-cpu"), ("relay-a", "--system-wide")] {
        // Where each piece lands follows the threads' virtual clocks,
        // which follow how the host ran them: tries until a run in which
        // a thread changed CPU, every one of them held to the log. A
        // loaded host can run the three threads in lockstep three times
        // over (a CI run did), so it takes up to eight; the first usually
        // hops.
        let mut hopped = false;
        for attempt in 0..8 {
            let name = format!("{name}-{attempt}");
            let (snap, truth) = check_all(
                dir.path(),
                &name,
                &[layout, "--cpus", "2"],
                &[exe.to_str().unwrap()],
            );
            assert_eq!(truth.len(), 3, "{name}: three threads");
            let snapshot = Snapshot::open(&snap).unwrap();
            let trace = snapshot.trace().unwrap();
            assert!(
                trace.streams.len() >= 2 && trace.streams.iter().all(|s| s.cpu.is_some()),
                "{name}: a buffer per CPU"
            );
            // Switch records: the process's own (2), or CPU-wide (3).
            let wide = layout == "--system-wide";
            assert_eq!(
                trace.params.have_sched_switch,
                if wide { 3 } else { 2 },
                "{name}"
            );
            if wide {
                assert!(trace.switches.iter().any(|s| s.tid == 0), "{name}: idle");
            }
            hopped = truth.keys().any(|&tid| {
                let cpus: std::collections::BTreeSet<u32> = trace
                    .switches
                    .iter()
                    .filter(|s| s.tid == tid)
                    .map(|s| s.cpu)
                    .collect();
                cpus.len() > 1
            });
            if hopped {
                if !wide {
                    crate::per_cpu::cpu_lanes_match_perfs(&snap, dir.path());
                }
                break;
            }
        }
        assert!(hopped, "{name}: no thread ever changed CPU");
    }
}

#[test]
fn a_program_that_execs_ends_the_trace_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "execs.c");
    let (snap, truth) = record_qemu(dir.path(), "execs", &[], &[exe.to_str().unwrap()]);
    let info = run_ok(ptscope().arg("info").arg(&snap), "info");
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("execve(/bin/true)"), "{info}");
    let extracted = extract(&snap, dir.path());
    let (perf, errors) = perf_instructions(&extracted);
    assert!(errors.trim().is_empty(), "{errors}");
    same("execs", "perf", &truth, &perf);
    // tick ran 20 times before the exec.
    let spans = decode_json(&snap, &[]);
    assert_eq!(spans.iter().filter(|s| s.name == "tick").count(), 20);
}

#[test]
fn ptscope_killed_mid_capture_leaves_the_program_running() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "forever.c");
    let snap = dir.path().join("k.ptscope");
    let mut child = ptscope()
        .args(["record", "-q", "--backend", "qemu", "-o"])
        .arg(&snap)
        .arg("--")
        .arg(&exe)
        .spawn()
        .unwrap();
    // Wait for QEMU to run, then kill ptscope (its capture child too).
    let qemu = (0..200)
        .find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            descendants(child.id()).into_iter().find(|&p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "forever")
            })
        })
        .expect("the program under QEMU");
    for p in descendants(child.id()) {
        if p != qemu {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let state = process_state(qemu);
    assert!(
        state.starts_with('R') || state.starts_with('S'),
        "the program is {state:?}, not running"
    );
    let _ = Command::new("kill")
        .args(["-9", &qemu.to_string()])
        .status();
}

/// Every process below `p`.
fn descendants(p: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![p];
    while let Some(q) = todo.pop() {
        for c in children(q) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}
