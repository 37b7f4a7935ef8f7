//! End to end: the outlier hunt on `tests/programs/outlier.c`, whose
//! `handle` is fast but for one request in 25, which runs `rebuild` and a
//! longer probe loop. The emulated clock counts one ns per instruction, so
//! the two kinds of call are told apart exactly.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::*;

/// Requests the program handles: 8 of them slow.
const REQUESTS: usize = 200;
const SLOW: u64 = (REQUESTS / 25) as u64;

/// The program recorded once for every test here.
fn snapshot() -> &'static (tempfile::TempDir, PathBuf) {
    static SNAP: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    SNAP.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let exe = build(dir.path(), "outlier.c");
        let n = REQUESTS.to_string();
        let (snap, _) = record(dir.path(), "outlier", &[], &[exe.to_str().unwrap(), &n]);
        (dir, snap)
    })
}

fn json_of(args: &[&str], snap: &Path) -> Value {
    let out = run_ok(ptscope().args(args).arg(snap), &args.join(" "));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: not one JSON object: {e}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The line of `outlier.c` that carries `marker`.
fn line_of(marker: &str) -> u64 {
    let src = std::fs::read_to_string(programs_dir().join("outlier.c")).unwrap();
    src.lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no `{marker}` in outlier.c")) as u64
        + 1
}

#[test]
fn the_histogram_of_handle_has_two_modes_the_slow_one_holding_the_slow_calls() {
    let (_, snap) = snapshot();
    let h = json_of(
        &[
            "stats",
            "--function",
            "handle",
            "--histogram",
            "--format",
            "json",
        ],
        snap,
    );
    assert_eq!(h["calls"], REQUESTS as u64, "{h}");
    assert_eq!(h["unit"], "ns");
    let buckets: Vec<(u64, u64, u64)> = h["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let f = |k: &str| b[k].as_u64().unwrap();
            (f("from"), f("to"), f("count"))
        })
        .collect();
    // Runs of non-empty buckets: the modes.
    let mut modes: Vec<u64> = Vec::new();
    let mut in_mode = false;
    for &(_, _, n) in &buckets {
        match (n > 0, in_mode) {
            (true, true) => *modes.last_mut().unwrap() += n,
            (true, false) => modes.push(n),
            _ => {}
        }
        in_mode = n > 0;
    }
    assert_eq!(modes, [REQUESTS as u64 - SLOW, SLOW], "{buckets:?}");
    // The median is a fast call, p99 and max slow ones, several times
    // longer.
    let v = |k: &str| h[k].as_u64().unwrap();
    assert!(v("p99") > 4 * v("p50"), "{h}");
    assert_eq!(v("p90"), v("p50").max(v("p90")));
    assert!(v("max") >= v("p99"));

    // The text form shows the same buckets and marks the percentiles.
    let out = run_ok(
        ptscope()
            .args(["stats", "--function", "handle", "--histogram"])
            .arg(snap),
        "stats --histogram",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("handle: {REQUESTS} calls")),
        "{text}"
    );
    assert!(text.contains("< median"), "{text}");
    assert!(text.contains("p99, max") || text.contains("max"), "{text}");
    let counted: u64 = text
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 3 && w[..3].iter().all(|x| x.parse::<u64>().is_ok()))
                .then(|| w[2].parse::<u64>().unwrap())
        })
        .sum();
    assert_eq!(counted, REQUESTS as u64, "{text}");

    // --function alone narrows the table to the function.
    let out = run_ok(
        ptscope().args(["stats", "--function", "probe"]).arg(snap),
        "stats --function",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.lines().nth(1).unwrap().contains(" probe  (outlier)"),
        "{text}"
    );
}

#[test]
fn compare_at_call_level_names_the_slow_path_first() {
    let (_, snap) = snapshot();
    let c = json_of(
        &["compare", "--function", "handle", "--format", "json"],
        snap,
    );
    assert_eq!(c["level"], "calls");
    assert_eq!(c["a"]["pick"], "slowest");
    assert_eq!(c["b"]["pick"], "median");
    // The slowest is a request r with r % 25 == 24: the call numbered r+1.
    let slow_call = c["a"]["call"].as_u64().unwrap();
    assert_eq!(slow_call % 25, 0, "{c}");
    assert_ne!(c["b"]["call"].as_u64().unwrap() % 25, 0, "{c}");
    let nodes = c["nodes"].as_array().unwrap();
    let path = |n: &Value| -> Vec<String> {
        n["path"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(path(&nodes[0]), ["handle"]);
    assert_eq!(nodes[0]["diff"], c["diff"]);
    assert_eq!(path(&nodes[1]), ["handle", "rebuild"], "{c}");
    assert_eq!(nodes[1]["only_in"], "a");
    assert!(nodes[1]["share"].as_f64().unwrap() > 0.4, "{c}");
    // Both calls probe once, the slow one longer.
    let probe = nodes
        .iter()
        .find(|n| path(n) == ["handle", "probe"])
        .expect("handle > probe");
    assert_eq!(
        (probe["a"]["count"].as_u64(), probe["b"]["count"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(probe["diff"].as_i64().unwrap() > 0);
    // Every path's own time difference adds up to the whole.
    let selves: i64 = nodes.iter().map(|n| n["self_diff"].as_i64().unwrap()).sum();
    assert_eq!(selves, c["diff"].as_i64().unwrap());

    // Text says the same, the slow path on the first line after the call.
    let out = run_ok(
        ptscope()
            .args(["compare", "--function", "handle"])
            .arg(snap),
        "compare",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().filter(|l| l.contains('%')).collect();
    assert!(rows[0].trim_end().ends_with("  handle"), "{text}");
    assert!(rows[1].contains("handle > rebuild"), "{text}");
    assert!(
        rows[1].contains(&format!("(only in call {slow_call})")),
        "{text}"
    );

    // Two fast calls differ by no path of their own.
    let c = json_of(
        &[
            "compare",
            "--function",
            "handle",
            "--call",
            "1",
            "--against",
            "2",
            "--format",
            "json",
        ],
        snap,
    );
    assert!(
        c["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["only_in"].is_null()),
        "{c}"
    );
}

#[test]
fn compare_at_line_level_shows_the_branch_and_the_loops() {
    let (_, snap) = snapshot();
    let c = json_of(
        &[
            "compare",
            "--function",
            "handle",
            "--level",
            "lines",
            "--format",
            "json",
        ],
        snap,
    );
    assert_eq!(c["level"], "lines");
    assert_eq!(c["warnings"].as_array().unwrap().len(), 0, "{c}");
    let lines = c["lines"].as_array().unwrap();
    let runs = |l: &Value, side: &str| l[side]["runs"].as_u64().unwrap();
    let at = |n: u64| lines.iter().filter(move |l| l["line"].as_u64() == Some(n));
    // The branch only slow requests take ran in the slow call alone.
    let branch = at(line_of("marker: slow-branch"))
        .next()
        .expect("the slow branch's line");
    assert_eq!(branch["only_in"], "a", "{branch}");
    assert_eq!(branch["function"], "handle");
    // rebuild's loop ran 120 times, in the slow call only.
    let rebuild: Vec<&Value> = lines
        .iter()
        .filter(|l| l["function"] == "rebuild")
        .collect();
    assert!(
        !rebuild.is_empty() && rebuild.iter().all(|l| l["only_in"] == "a"),
        "{c}"
    );
    assert!(
        rebuild.iter().any(|l| (120..=121).contains(&runs(l, "a"))),
        "{c}"
    );
    // The probe loop ran 40 trips against 3.
    let probe: Vec<&Value> = lines
        .iter()
        .filter(|l| l["function"] == "probe" && l["runs_differ"] == true)
        .collect();
    assert!(
        probe
            .iter()
            .any(|l| (40..=41).contains(&runs(l, "a")) && (3..=4).contains(&runs(l, "b"))),
        "{c}"
    );
    // The line that explains the most time is one only the slow call ran,
    // or its longer loop.
    let first = &lines[0];
    assert!(
        first["function"] == "rebuild" || first["function"] == "probe",
        "{first}"
    );
    // No line ran in the typical call alone.
    assert!(lines.iter().all(|l| l["only_in"] != "b"), "{c}");

    let out = run_ok(
        ptscope()
            .args(["compare", "--function", "handle", "--level", "lines"])
            .arg(snap),
        "compare --level lines",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let only_a = text
        .split("lines that ran only in call")
        .nth(1)
        .expect("the section of lines that ran in the slow call only");
    assert!(
        only_a.contains(&format!(
            "outlier.c:{} handle",
            line_of("marker: slow-branch")
        )),
        "{text}"
    );
}

#[test]
fn a_function_or_call_that_is_not_there_is_a_clear_error() {
    let (_, snap) = snapshot();
    let fail = |args: &[&str]| {
        let out = ptscope().args(args).arg(snap).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let e = fail(&["compare", "--function", "handel"]);
    assert!(e.contains("outlier.ptscope"), "{e}");
    assert!(
        e.contains("no function named `handel`") && e.contains("handle"),
        "{e}"
    );
    let e = fail(&["stats", "--function", "nothing_like_it_xyz", "--histogram"]);
    assert!(e.contains("no function named"), "{e}");
    let e = fail(&["compare", "--function", "handle", "--call", "9999"]);
    assert!(
        e.contains("outlier.ptscope") && e.contains("no call 9999"),
        "{e}"
    );
    // A snapshot no slow call fired has no trigger call to explain.
    let e = fail(&["compare", "--function", "handle", "--call", "trigger"]);
    assert!(
        e.contains("no slow-call trigger fired this snapshot"),
        "{e}"
    );
    // --histogram without --function is refused by the parser.
    let out = ptscope()
        .args(["stats", "--histogram"])
        .arg(snap)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Records with `args` a trigger that must not fire: the snapshot ends at
/// the process's exit. What ptscope said on stderr.
fn record_unfired(dir: &Path, args: &[&str]) -> String {
    let snap = dir.join("unfired.ptscope");
    let out = run_ok(
        ptscope().args(["record", "-q", "-o"]).arg(&snap).args(args),
        &format!("record {args:?}"),
    );
    assert_eq!(metadata(&snap)["stop"], "process exit", "{args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The snapshot's `ptscope.json`.
fn metadata(snap: &Path) -> Value {
    let out = run_ok(
        std::process::Command::new("tar")
            .arg("-xOf")
            .arg(snap)
            .arg("ptscope.json"),
        "tar",
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_slow_call_trigger_snapshots_the_first_slow_call_whole() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "outlier.c");
    let exe = exe.to_str().unwrap();
    let (snap, _) = record(
        dir.path(),
        "slow",
        &["--trigger", "handle", "--slower-than", "300ns"],
        &[exe, "200"],
    );
    let meta = metadata(&snap);
    let call = &meta["trigger_call"];
    assert_eq!(call["function"], "handle", "{meta}");
    let duration = call["duration"].as_u64().unwrap();
    assert!(duration > 300, "{meta}");
    assert!(
        meta["stop"]
            .as_str()
            .unwrap()
            .contains("call to handle took"),
        "{meta}"
    );
    let info = run_ok(ptscope().arg("info").arg(&snap), "info");
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.contains(&format!(
            "trigger call: handle on thread {}, {duration} ns",
            call["tid"]
        )),
        "{info}"
    );
    // The first slow request is the 25th: every call before it was fast,
    // and it is the last, whole (not back-dated), ending the snapshot.
    let h = json_of(
        &[
            "stats",
            "--function",
            "handle",
            "--histogram",
            "--format",
            "json",
        ],
        &snap,
    );
    assert_eq!(h["calls"], 25, "{h}");
    let c = json_of(
        &[
            "compare",
            "--function",
            "handle",
            "--call",
            "trigger",
            "--format",
            "json",
        ],
        &snap,
    );
    // The trigger's call, which is also the slowest.
    assert_eq!(
        (&c["a"]["call"], &c["a"]["pick"]),
        (&25.into(), &"trigger".into()),
        "{c}"
    );
    let decoded = c["a"]["duration"].as_u64().unwrap();
    // The trigger measures to the instruction; the decoded return may take
    // the time of the last timing packet before it (a compressed return
    // is a TNT bit with no time of its own).
    assert!(
        decoded <= duration + 2 && decoded * 100 >= duration * 95,
        "decoded {decoded}, trigger {duration}"
    );
    assert!(h["p99"].as_u64().unwrap() < 300 || h["max"].as_u64().unwrap() == decoded);
    let spans = decode_json(&snap, &[]);
    let handles: Vec<&JsonSpan> = spans.iter().filter(|s| s.name == "handle").collect();
    let last = handles.iter().max_by_key(|s| s.start).unwrap();
    assert!(!last.inferred, "{last:?}");
    assert!(last.end - last.start > 300, "{last:?}");
    assert_eq!(handles.iter().filter(|s| s.end - s.start > 300).count(), 1);

    // A threshold no call reaches never fires: the snapshot ends at the
    // exit, and the user is told.
    let err = record_unfired(
        dir.path(),
        &[
            "--trigger",
            "handle",
            "--slower-than",
            "100us",
            "--",
            exe,
            "50",
        ],
    );
    assert!(
        err.contains("no call to handle longer than 100us fired the trigger"),
        "{err}"
    );
}

#[test]
fn arm_after_lets_the_trigger_fire_only_with_that_much_history() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "outlier.c");
    let exe = exe.to_str().unwrap();
    // A 4 KiB ring never holds 10 s of this program (kernel time counts
    // as wall time, so a busy machine stretches what it holds, but not
    // that far): the trigger never arms, and the warning says why.
    let err = record_unfired(
        dir.path(),
        &[
            "--size",
            "4K",
            "--arm-after",
            "10s",
            "--trigger",
            "handle",
            "--slower-than",
            "300ns",
            "--",
            exe,
            "200",
        ],
    );
    assert!(
        err.contains("before the ring held 10000000000 ns of history"),
        "{err}"
    );
    // `full` waits for the ring to fill: the snapshot is a full ring.
    let (snap, _) = record(
        dir.path(),
        "full",
        &[
            "--size",
            "4K",
            "--arm-after",
            "full",
            "--trigger",
            "handle",
            "--slower-than",
            "300ns",
        ],
        &[exe, "200"],
    );
    assert!(metadata(&snap)["trigger_call"].is_object(), "fired");
    let info = run_ok(ptscope().arg("info").arg(&snap), "info");
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains(" 4096 bytes of PT"), "{info}");
    // With the default ring it arms and fires, and the snapshot holds at
    // least that much before the call.
    let (snap, _) = record(
        dir.path(),
        "armed",
        &[
            "--trigger",
            "handle",
            "--slower-than",
            "300ns",
            "--arm-after",
            "30us",
        ],
        &[exe, "200"],
    );
    let meta = metadata(&snap);
    assert!(
        meta["trigger_call"]["start"].as_u64().is_some(),
        "fired: {meta}"
    );
    let spans = decode_json(&snap, &[]);
    let call = spans
        .iter()
        .filter(|s| s.name == "handle")
        .max_by_key(|s| s.start)
        .unwrap();
    // Times count from the snapshot's first timestamp: the trigger's call
    // starts at least 30 µs into it.
    assert!(call.start >= 30_000, "{call:?}");
}
