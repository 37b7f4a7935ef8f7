//! End to end: the emulated backend captures real programs, and both perf's
//! decoder and libipt's reproduce exactly the instructions each thread
//! executed, as an independent ptrace log of instruction pointers saw them.

use std::path::Path;

use crate::support::*;

/// The log's instructions must equal each decoder's, thread by thread.
/// Returns the log.
pub(crate) fn check_exact(dir: &Path, name: &str, argv: &[&str]) -> PerThread {
    check_exact_with(dir, name, &[], argv)
}

/// [`check_exact`] with extra `record` options. A per-CPU snapshot is one
/// trace for all threads, told apart by switch records: perf judges it
/// alone (libipt has no sideband; the decoder's tests cover our side).
pub(crate) fn check_exact_with(dir: &Path, name: &str, extra: &[&str], argv: &[&str]) -> PerThread {
    let per_cpu = extra.contains(&"--per-cpu");
    let (snap, log) = record(dir, name, extra, argv);
    let truth = read_ip_log(&log);
    assert!(
        !truth.is_empty() && truth.values().all(|v| !v.is_empty()),
        "{name}: empty log"
    );

    let (ipt, ipt_errors) = if per_cpu {
        (PerThread::new(), Vec::new())
    } else {
        libipt_instructions(&snap)
    };
    assert!(
        ipt_errors.is_empty(),
        "{name}: libipt errors: {ipt_errors:?}"
    );
    let extracted = extract(&snap, dir);
    let (perf, perf_errors) = perf_instructions(&extracted);
    assert!(
        perf_errors.trim().is_empty(),
        "{name}: perf reported: {perf_errors}"
    );

    for (judge, got) in [("libipt", &ipt), ("perf", &perf)] {
        if per_cpu && judge == "libipt" {
            continue;
        }
        assert_same_instructions(name, judge, &truth, got);
    }
    assert_eq!(truth.len(), perf.len(), "{name}: thread count");
    truth
}

#[test]
fn c_calls_recursion_longjmp_signal() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    check_exact(dir.path(), "calls", &[exe.to_str().unwrap()]);
}

#[test]
fn cpp_virtual_calls_and_exception() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exceptions.cpp");
    check_exact(dir.path(), "exceptions", &[exe.to_str().unwrap()]);
}

#[test]
fn rust_trait_objects_and_iterators() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "rust_prog.rs");
    check_exact(dir.path(), "rust", &[exe.to_str().unwrap()]);
}

#[test]
fn second_thread() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c");
    let truth = check_exact(dir.path(), "threads", &[exe.to_str().unwrap()]);
    assert_eq!(truth.len(), 2, "two threads traced");
}

#[test]
fn per_cpu_trace_of_two_threads() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c");
    let truth = check_exact_with(
        dir.path(),
        "threads",
        &["--per-cpu"],
        &[exe.to_str().unwrap()],
    );
    assert_eq!(truth.len(), 2, "two threads traced");
}

#[test]
fn per_cpu_trace_with_preemption() {
    // Both threads spin, so the one CPU switches between them mid-code;
    // perf must give every instruction to the thread that ran it.
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "spin.c");
    let truth = check_exact_with(
        dir.path(),
        "spin",
        &["--backend", "emulated", "--per-cpu"],
        &[exe.to_str().unwrap()],
    );
    assert_eq!(truth.len(), 2);
}

#[test]
fn spinning_thread_is_preempted() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "spin.c");
    let out = ptscope()
        .args(["record", "-q", "-o"])
        .arg(dir.path().join("spin.ptscope"))
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "flag seen\n");
    // Preemption is an asynchronous exit and a resume with a TSC: both
    // decoders must still agree with the log.
    let truth = check_exact(dir.path(), "spin", &[exe.to_str().unwrap()]);
    assert_eq!(truth.len(), 2);
}

#[test]
fn dlopen_library() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "dlopen.c");
    let lib = build_plugin(dir.path());
    check_exact(
        dir.path(),
        "dlopen",
        &[exe.to_str().unwrap(), lib.to_str().unwrap()],
    );
}

#[test]
fn trigger_snapshot_ends_at_symbol_entry() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    // The hardware breakpoint's semantics and registers: the emulated
    // backend (QEMU's plugin reads no registers; tests/qemu.rs).
    let (snap, log) = record(
        dir.path(),
        "trig",
        &["--backend", "emulated", "--trigger", "work"],
        &[exe.to_str().unwrap()],
    );
    let truth = read_ip_log(&log);
    let ips = truth.values().next().unwrap();
    let (ipt, errors) = libipt_instructions(&snap);
    assert!(errors.is_empty(), "{errors:?}");
    let decoded = ipt.values().next().unwrap();
    assert_eq!(decoded, ips);
    // The hardware breakpoint fires as `work`'s first instruction runs: the
    // trace ends with the call into `work` (a direct call whose target is
    // the symbol, found in the ELF independently) and that instruction.
    let work = symbol_address(&exe, "work");
    let info = ptscope_formats::snapshot::Snapshot::open(&snap).unwrap();
    let trace = info.trace().unwrap();
    let main_map = trace
        .mmaps
        .iter()
        .find(|m| m.path == exe.to_str().unwrap())
        .unwrap();
    let base = main_map.start - main_map.pgoff;
    let (call, entry) = (decoded[decoded.len() - 2], decoded[decoded.len() - 1]);
    assert_eq!(entry - base, work, "the last instruction is work's first");
    let bytes = std::fs::read(&exe).unwrap();
    let call_off = (call - base) as usize;
    assert_eq!(bytes[call_off], 0xe8, "the one before is a call");
    let rel = i32::from_le_bytes(bytes[call_off + 1..call_off + 5].try_into().unwrap());
    let target = (call as i64 + 5 + rel as i64) as u64;
    assert_eq!(target - base, work, "the call goes to `work`");
    // The breakpoint sampled the argument registers: work(50).
    let meta = info.metadata.clone().unwrap();
    assert!(
        meta.trigger_registers.contains(&("rdi".to_string(), 50)),
        "{:?}",
        meta.trigger_registers
    );
    // The metadata says why it stopped.
    assert!(info.metadata.unwrap().stop.contains("entered work"));
}

/// A trigger fires on whichever thread reaches its function first, here a
/// thread created after the capture began that calls it at once (the
/// emulated backend arms each new thread as it is created, before it
/// runs; the Intel PT backend's breakpoints are inherited, tested on the
/// real breakpoint PMU in `perf_event::breakpoint`). Both kinds of
/// trigger: on entry, and on a slow call.
#[test]
fn triggers_fire_on_a_thread_created_late() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "late_thread.c");
    let exe = exe.to_str().unwrap();
    for (name, extra) in [
        ("entry", &["--trigger", "late_work"][..]),
        (
            "slow",
            &["--trigger", "late_work", "--slower-than", "1us"][..],
        ),
    ] {
        let (snap, _) = record(dir.path(), name, extra, &[exe]);
        let meta = ptscope_formats::snapshot::Snapshot::read_metadata(&snap)
            .unwrap()
            .unwrap();
        // Each kind fires as itself: a slow call's snapshot names the call,
        // an entry's the entry.
        let tid = match &meta.trigger_call {
            Some(c) => {
                assert_eq!(name, "slow", "an entry trigger named a call: {c:?}");
                assert_eq!(c.function, "late_work");
                assert!(c.duration > 1000, "{c:?}");
                c.tid
            }
            None => {
                assert_eq!(
                    name, "entry",
                    "a slow call fired as an entry: {}",
                    meta.stop
                );
                assert!(meta.stop.contains("entered late_work"), "{}", meta.stop);
                meta.stop
                    .split_whitespace()
                    .nth(1)
                    .and_then(|t| t.parse().ok())
                    .expect("the thread in the stop text")
            }
        };
        assert_ne!(tid, meta.pid, "{name}: the late thread, not the main one");
        // The late thread's trace is in the snapshot, and reaches the call.
        let spans = decode_json(&snap, &[]);
        assert!(
            spans.iter().any(|s| s.tid == tid && s.name == "late_work"),
            "{name}"
        );
    }
}

#[test]
fn small_ring_keeps_the_last_bytes_and_decodes_from_first_psb() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exceptions.cpp");
    let (snap, log) = record(
        dir.path(),
        "ring",
        &["--size", "8K"],
        &[exe.to_str().unwrap()],
    );
    let truth = read_ip_log(&log);
    let ips = truth.values().next().unwrap();
    let info = ptscope_formats::snapshot::Snapshot::open(&snap).unwrap();
    let trace = info.trace().unwrap();
    assert_eq!(
        trace.streams[0].data.len(),
        8192,
        "the ring keeps exactly its size"
    );
    let (ipt, errors) = libipt_instructions(&snap);
    assert!(errors.is_empty(), "{errors:?}");
    let decoded = ipt.values().next().unwrap();
    assert!(
        decoded.len() > 1000 && decoded.len() < ips.len() / 2,
        "decoded {}",
        decoded.len()
    );
    assert!(
        ips.ends_with(decoded),
        "the decoded tail is the end of the execution"
    );
    let extracted = extract(&snap, dir.path());
    let (perf, perf_errors) = perf_instructions(&extracted);
    assert!(perf_errors.trim().is_empty(), "{perf_errors}");
    assert_eq!(perf.values().next().unwrap(), decoded);
}

#[test]
fn info_and_packets_describe_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (snap, _) = record(dir.path(), "info", &[], &[exe.to_str().unwrap()]);
    let out = ptscope().arg("info").arg(&snap).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("GenuineIntel,6,85,4"), "{text}");
    assert!(text.contains("PSBs"), "{text}");
    assert!(
        text.contains(exe.to_str().unwrap()) && text.contains("libc.so"),
        "{text}"
    );
    assert!(!text.contains("MISSING"), "{text}");
    let out = ptscope().arg("packets").arg(&snap).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let first: Vec<&str> = text.lines().take(3).collect();
    assert!(first[0].ends_with("psb"), "{first:?}");
    assert!(text.contains("tip.pge") && text.contains("tnt.8") && text.contains("tip.pgd"));
}

#[test]
fn attach_traces_a_running_process_and_leaves_it_running() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "forever.c");
    let mut child = std::process::Command::new(&exe).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let pid = child.id().to_string();
    let snap = dir.path().join("attach.ptscope");
    let log = dir.path().join("attach.iplog");
    let out = ptscope()
        .args(["attach", "-q", "--pid", &pid, "--duration", "400", "-o"])
        .arg(&snap)
        .arg("--ip-log")
        .arg(&log)
        .output()
        .unwrap();
    // The target must still be alive and not stopped.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let state = process_state(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        state == "S" || state == "R",
        "target state after detach: {state}"
    );
    let truth = read_ip_log(&log);
    let (ipt, errors) = libipt_instructions(&snap);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(&ipt, &truth);
    let (perf, perf_errors) = perf_instructions(&extract(&snap, dir.path()));
    assert!(perf_errors.trim().is_empty(), "{perf_errors}");
    assert_eq!(perf, truth);
}

#[test]
fn ctrl_c_takes_the_snapshot_now() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "forever.c");
    let snap = dir.path().join("intr.ptscope");
    let mut rec = ptscope()
        .args(["record", "-q", "-o"])
        .arg(&snap)
        .arg("--")
        .arg(&exe)
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let rc = std::process::Command::new("kill")
        .args(["-INT", &rec.id().to_string()])
        .status()
        .unwrap();
    assert!(rc.success());
    // The snapshot appears; then the recorded command, which Ctrl-C from a
    // terminal would also have reached, is ended by the test.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !snap.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The command is a child of the capture process ptscope supervises.
    for capture in children(rec.id()) {
        for child in children(capture) {
            let _ = std::process::Command::new("kill")
                .arg(child.to_string())
                .status();
        }
    }
    let status = rec.wait().unwrap();
    assert!(status.success(), "{status}");
    let info = ptscope_formats::snapshot::Snapshot::open(&snap).unwrap();
    assert_eq!(info.metadata.as_ref().unwrap().stop, "manual snapshot");
    let (ipt, errors) = libipt_instructions(&snap);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(ipt.values().next().unwrap().len() > 1000);
    let (perf, perf_errors) = perf_instructions(&extract(&snap, dir.path()));
    assert!(perf_errors.trim().is_empty(), "{perf_errors}");
    assert_eq!(perf, ipt);
}

/// The window's Capture panel runs `ptscope` with `Request::cli_args`:
/// every trigger, timing, backend and target it can ask for must parse
/// (a usage error exits 2), failing only for the reason given (no such
/// process or program) and saying so in a report.
#[test]
fn every_request_the_window_makes_is_a_valid_command_line() {
    use ptscope::recorder::{Backend, Report, Request};
    use ptscope_capture::intel_pt::Timing;
    use ptscope_capture::recording::Target;
    use ptscope_capture::trigger::{ArmAfter, Trigger};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never.ptscope");
    let targets = [
        Target::Attach(i32::MAX),
        Target::Spawn {
            argv: vec![
                "/nonexistent/program".into(),
                "-x".into(),
                "two words".into(),
            ],
            cwd: None,
        },
    ];
    let triggers = [
        Trigger::Symbol("-starts_with_a_dash".into()),
        Trigger::SlowCall {
            symbol: "handle".into(),
            slower_than: 2500,
        },
        Trigger::Duration(250),
        Trigger::Manual,
        Trigger::ProcessExit,
    ];
    let timings = [
        Timing::Low,
        Timing::Normal,
        Timing::High,
        "cyc=1,cyc_thresh=2,mtc_period=0".parse::<Timing>().unwrap(),
    ];
    for target in &targets {
        for trigger in &triggers {
            for (timing, backend) in timings.iter().zip([
                Backend::Auto,
                Backend::Emulated,
                Backend::IntelPt,
                Backend::Auto,
            ]) {
                let mut req = Request::new(target.clone(), trigger.clone());
                req.backend = backend;
                req.opts.timing = Some(timing.clone());
                req.opts.size = 64 << 10;
                req.opts.snapshots = 2;
                req.opts.arm_after = match backend {
                    Backend::Emulated | Backend::Qemu => Some(ArmAfter::History(1_000_000)),
                    Backend::Auto => Some(ArmAfter::Full),
                    Backend::IntelPt => None,
                };
                // `--no-debug-info` in half of them.
                req.debug_info = matches!(backend, Backend::Auto);
                let args = req.cli_args(&out);
                let o = ptscope().args(&args).output().unwrap();
                let stdout = String::from_utf8_lossy(&o.stdout);
                let failed = stdout
                    .lines()
                    .filter_map(Report::parse)
                    .find(|r| matches!(r, Report::Failed { .. }));
                assert!(
                    o.status.code() == Some(1) && failed.is_some(),
                    "{args:?}: {:?}\n{stdout}\n{}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                );
                assert!(!out.exists());
            }
        }
    }
}
