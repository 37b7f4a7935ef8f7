//! End to end: `ptscope export` read back by readers we did not write.
//! Chrome's JSON trace events are parsed by Python's `json`, and every
//! span `decode --format json` prints must be there as a complete event,
//! on its thread's track, with its times.

use std::collections::BTreeSet;
use std::process::Command;

use crate::support::*;

#[test]
fn chrome_trace_events_hold_every_span_and_parse_with_python() {
    let dir = tempfile::tempdir().unwrap();
    let snap = demo_snapshot();
    let out = dir.path().join("demo.json");
    let run = run_ok(
        ptscope()
            .args(["export", "--format", "chrome", "-o"])
            .arg(&out)
            .arg(&snap),
        "export",
    );
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(!dir.path().join("demo.json.partial").exists());
    // Python reads it, and says what it found: one line per event.
    let script = r#"
import json, sys
doc = json.load(open(sys.argv[1]))
for e in doc["traceEvents"]:
    if e["ph"] == "X":
        print("X", e["tid"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000), e["name"])
    elif e["ph"] == "M":
        print("M", e["tid"], e["args"]["name"])
print("unit", doc["displayTimeUnit"])
"#;
    let py = run_ok(
        Command::new("python3").arg("-c").arg(script).arg(&out),
        "python3 json.load",
    );
    let lines = String::from_utf8(py.stdout).unwrap();
    assert!(lines.ends_with("unit ns\n"), "{lines}");
    let events: BTreeSet<(i32, u64, u64, String)> = lines
        .lines()
        .filter_map(|l| l.strip_prefix("X "))
        .map(|l| {
            let mut w = l.splitn(4, ' ');
            let mut num = || w.next().unwrap().to_string();
            let (tid, s, e, name) = (num(), num(), num(), num());
            (
                tid.parse().unwrap(),
                s.parse().unwrap(),
                e.parse().unwrap(),
                name,
            )
        })
        .collect();
    let spans = decode_json(&snap, &[]);
    assert!(said.contains(&format!(": {} spans", spans.len())), "{said}");
    let want: BTreeSet<(i32, u64, u64, String)> = spans
        .iter()
        .map(|s| (s.tid, s.start, s.end, s.name.clone()))
        .collect();
    assert_eq!(events.len(), want.len());
    assert_eq!(events, want);
    // One track per thread, named.
    let tids: BTreeSet<i32> = spans.iter().map(|s| s.tid).collect();
    let named = lines.lines().filter(|l| l.starts_with("M ")).count();
    assert_eq!(named, tids.len(), "{lines}");

    // A window: only the spans in it.
    let part = dir.path().join("part.json");
    run_ok(
        ptscope()
            .args(["export", "--from", "100000", "--to", "200000", "-o"])
            .arg(&part)
            .arg(&snap),
        "export --from --to",
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&part).unwrap()).unwrap();
    let n = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    let inside = spans
        .iter()
        .filter(|s| s.end >= 100_000 && s.start <= 200_000)
        .count();
    assert_eq!(n, inside);
    assert!(n > 0 && n < spans.len());
}

#[test]
fn an_export_that_cannot_be_written_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("missing-dir").join("x.json");
    let run = ptscope()
        .args(["export", "-o"])
        .arg(&out)
        .arg(demo_snapshot())
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("x.json.partial"), "{err}");
    assert!(!out.exists());
}
