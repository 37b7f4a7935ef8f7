//! End to end: range capture (`--range START STOP`) on the emulated
//! backend. Tracing starts paused, resumes at each entry to START and
//! pauses at each entry to STOP: perf, libipt and both of our engines
//! give exactly the instructions the ptrace log saw inside the ranges,
//! and the range works together with a trigger.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::*;

/// Records `range.c` under `extra`; returns the snapshot, the log and
/// START's and STOP's runtime addresses (which the program prints).
fn record_range(
    dir: &Path,
    name: &str,
    extra: &[&str],
) -> (std::path::PathBuf, PerThread, u64, u64) {
    let exe = build(dir, "range.c");
    let snap = dir.join(format!("{name}.ptscope"));
    let log = dir.join(format!("{name}.iplog"));
    let out = run_ok(
        ptscope()
            .args(["record", "-q", "-o"])
            .arg(&snap)
            .arg("--ip-log")
            .arg(&log)
            .args(extra)
            .arg("--")
            .arg(&exe),
        "ptscope record --range",
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let addrs: Vec<u64> = printed
        .split_whitespace()
        .take(2)
        .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap())
        .collect();
    (snap, read_ip_log(&log), addrs[0], addrs[1])
}

/// The log's instructions from each entry to `start` up to (not
/// including) the next entry to `stop`.
fn in_ranges(log: &PerThread, start: u64, stop: u64) -> PerThread {
    let mut out = BTreeMap::new();
    for (&tid, ips) in log {
        let mut on = false;
        let mut kept = Vec::new();
        for &ip in ips {
            if ip == start {
                on = true;
            } else if ip == stop {
                on = false;
            }
            if on {
                kept.push(ip);
            }
        }
        out.insert(tid, kept);
    }
    out
}

#[test]
fn a_range_traces_exactly_from_each_start_to_its_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (snap, log, start, stop) =
        record_range(dir.path(), "range", &["--range", "begin_work", "end_work"]);
    let truth = in_ranges(&log, start, stop);
    let traced = crate::filter::three_decoders_agree("range", &snap, dir.path());
    for (tid, want) in &truth {
        let got = traced.get(tid).map_or(&[][..], Vec::as_slice);
        assert!(
            got == want.as_slice(),
            "thread {tid}: {} instructions traced, {} ran in the ranges",
            got.len(),
            want.len()
        );
    }
    let kept: usize = truth.values().map(Vec::len).sum();
    let all: usize = log.values().map(Vec::len).sum();
    assert!(kept > 30 && kept * 4 < all, "{kept} of {all}");
    // The calls in the ranges are there, those outside are not.
    let spans = decode_json(&snap, &[]);
    let calls = |name: &str| spans.iter().filter(|s| s.name == name).count();
    assert_eq!(calls("work"), 3);
    assert_eq!(calls("noise") + calls("finish"), 0);
}

#[test]
fn a_range_works_with_a_trigger_and_says_when_it_is_never_entered() {
    let dir = tempfile::tempdir().unwrap();
    // The trigger fires at `finish`, after the three ranges.
    let (snap, _, _, _) = record_range(
        dir.path(),
        "trig",
        &["--range", "begin_work", "end_work", "--trigger", "finish"],
    );
    let spans = decode_json(&snap, &[]);
    assert_eq!(spans.iter().filter(|s| s.name == "work").count(), 3);
    let info = run_ok(ptscope().arg("info").arg(&snap), "info");
    assert!(String::from_utf8_lossy(&info.stdout).contains("finish"));

    // A START that is never entered: nothing traced, and the capture (its
    // messages and its snapshot) says why.
    let exe = build(dir.path(), "range.c");
    let never = dir.path().join("never-entered.ptscope");
    let out = ptscope()
        .args(["record", "-o"])
        .arg(&never)
        .args(["--range", "never_called", "end_work", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let warning = "`never_called` was never entered, so nothing was traced";
    assert!(err.contains(warning), "{err}");
    let info = run_ok(ptscope().arg("info").arg(&never), "info");
    assert!(
        String::from_utf8_lossy(&info.stdout).contains(warning),
        "{}",
        String::from_utf8_lossy(&info.stdout)
    );

    // A STOP that names no function: refused up front.
    let out = ptscope()
        .args(["record", "-o"])
        .arg(dir.path().join("never.ptscope"))
        .args(["--range", "finish", "nosuchfunction", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no function `nosuchfunction`"), "{err}");
    let out = ptscope()
        .args(["record", "-o"])
        .arg(dir.path().join("same.ptscope"))
        .args(["--range", "work", "work", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("must differ"));
}
