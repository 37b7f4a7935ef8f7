//! End to end: `ptscope export` read back by readers we did not write.
//! Chrome's JSON trace events are parsed by Python's `json`; Perfetto's
//! protobuf by Perfetto's own compiled schema (the `perfetto` package's
//! `perfetto_trace_pb2`); FXT by the `fxt` package's parser. Every span
//! `decode --format json` prints must be there, on its thread's track,
//! with its times.

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

/// (tid, start, end, name) of every span `decode --format json` prints.
fn decoded(snap: &std::path::Path) -> BTreeSet<(i32, u64, u64, String)> {
    decode_json(snap, &[])
        .iter()
        .map(|s| (s.tid, s.start, s.end, s.name.clone()))
        .collect()
}

/// Lines of `tid start end name`, as the Python readers print slices.
fn slices_of(text: &str, prefix: &str) -> BTreeSet<(i32, u64, u64, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|l| {
            let mut w = l.splitn(4, ' ');
            let mut next = || w.next().unwrap().to_string();
            let (tid, s, e, name) = (next(), next(), next(), next());
            (
                tid.parse().unwrap(),
                s.parse().unwrap(),
                e.parse().unwrap(),
                name,
            )
        })
        .collect()
}

/// Reads a Perfetto trace with Perfetto's schema: resolves the interned
/// names, annotations and source locations of the one sequence, pairs
/// each track's begins and ends, and prints every slice (`S tid start
/// end name`), every thread track (`T tid name`), and what the slices of
/// `main` carry (`A module source`).
const PERFETTO_READER: &str = r#"
import sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
trace = pb.Trace()
trace.ParseFromString(open(sys.argv[1], "rb").read())
names, values, sources, ann = {}, {}, {}, {}
tracks, stacks, ends = {}, {}, {}
TB = pb.TrackEvent.TYPE_SLICE_BEGIN
TE = pb.TrackEvent.TYPE_SLICE_END
for p in trace.packet:
    assert p.trusted_packet_sequence_id == 1
    d = p.interned_data
    for n in d.event_names: names[n.iid] = n.name
    for n in d.debug_annotation_names: ann[n.iid] = n.name
    for v in d.debug_annotation_string_values: values[v.iid] = v.str.decode()
    for s in d.source_locations: sources[s.iid] = "%s:%d" % (s.file_name, s.line_number)
    if p.HasField("track_descriptor"):
        t = p.track_descriptor
        if t.HasField("thread"):
            tracks[t.uuid] = t.thread.tid
            print("T", t.thread.tid, t.thread.thread_name)
        elif t.parent_uuid in tracks:
            tracks[t.uuid] = tracks[t.parent_uuid]
            print("L", tracks[t.uuid], t.name)
    if p.HasField("track_event"):
        e = p.track_event
        st = stacks.setdefault(e.track_uuid, [])
        if e.type == TB:
            st.append((p.timestamp, names[e.name_iid], e))
        elif e.type == TE:
            start, name, b = st.pop()
            assert p.timestamp >= start, (name, start, p.timestamp)
            # Ends on a track never go back in time: nesting is by time,
            # as trace_processor pairs them after sorting.
            last = ends.get(e.track_uuid, 0)
            assert p.timestamp >= last, (name, last, p.timestamp)
            ends[e.track_uuid] = p.timestamp
            print("S", tracks[e.track_uuid], start, p.timestamp, name)
            if name == "main":
                a = {ann[x.name_iid]: values.get(x.string_value_iid) for x in b.debug_annotations}
                print("A", a.get("module"), sources.get(b.source_location_iid))
assert all(not s for s in stacks.values()), "unended slices"
"#;

#[test]
fn a_perfetto_trace_holds_every_span_and_reads_with_perfettos_schema() {
    let dir = tempfile::tempdir().unwrap();
    let snap = demo_snapshot();
    // The extension picks the format.
    let out = dir.path().join("demo.pftrace");
    run_ok(
        ptscope().args(["export", "-o"]).arg(&out).arg(&snap),
        "export",
    );
    let py = run_ok(
        Command::new(python_readers())
            .arg("-c")
            .arg(PERFETTO_READER)
            .arg(&out),
        "read the Perfetto trace with perfetto_trace_pb2",
    );
    let text = String::from_utf8(py.stdout).unwrap();
    let want = decoded(&snap);
    let got = slices_of(&text, "S ");
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    let threads: BTreeSet<i32> = want.iter().map(|s| s.0).collect();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("T ")).count(),
        threads.len()
    );
    // The function's module and source go along.
    let main = text.lines().find(|l| l.starts_with("A ")).expect(&text);
    assert!(
        main.contains("/demo ") && main.contains("demo.c:"),
        "{main}"
    );
}

#[test]
fn an_fxt_trace_holds_every_span_and_reads_with_a_third_party_parser() {
    let dir = tempfile::tempdir().unwrap();
    let snap = demo_snapshot();
    let out = dir.path().join("demo.fxt");
    run_ok(
        ptscope()
            .args(["export", "--format", "fxt", "-o"])
            .arg(&out)
            .arg(&snap),
        "export",
    );
    // The reader keeps the end in `duration_ns` (it does not subtract).
    let script = r#"
import sys
from fxt.reader import parse_records
from fxt.models import DurationCompleteEventRecord, KernelObjectRecord
res = parse_records(open(sys.argv[1], "rb"))
assert not res.had_unexpected_eof, res.eof_error
for prov in res.records_by_provider.values():
    print("P", prov.name)
    for r in prov.records:
        if isinstance(r, DurationCompleteEventRecord):
            print("S", r.thread.thread_id, r.timestamp_ns, r.duration_ns, r.name)
        elif isinstance(r, KernelObjectRecord) and "process" in r.args:
            print("T", r.id, r.name, r.args["process"])
"#;
    let py = run_ok(
        Command::new(python_readers())
            .arg("-c")
            .arg(script)
            .arg(&out),
        "read the FXT trace with fxt",
    );
    let text = String::from_utf8(py.stdout).unwrap();
    assert!(text.starts_with("P ptscope\n"), "{text}");
    let want = decoded(&snap);
    assert_eq!(slices_of(&text, "S "), want);
    let named: Vec<&str> = text.lines().filter(|l| l.starts_with("T ")).collect();
    let threads: BTreeSet<i32> = want.iter().map(|s| s.0).collect();
    assert_eq!(named.len(), threads.len(), "{named:?}");
}

#[test]
fn export_at_line_level_puts_the_lines_that_ran_under_their_calls() {
    let dir = tempfile::tempdir().unwrap();
    let snap = demo_snapshot();
    let (from, to) = ("0", "40000");
    let out = dir.path().join("lines.json");
    run_ok(
        ptscope()
            .args([
                "export", "--level", "lines", "--from", from, "--to", to, "-o",
            ])
            .arg(&out)
            .arg(&snap),
        "export --level lines",
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let lines: BTreeSet<(i32, u64, u64, String)> = events
        .iter()
        .filter(|e| e["cat"] == "line" || e["cat"] == "inlined")
        .map(|e| {
            let ns = |v: &serde_json::Value| (v.as_f64().unwrap() * 1000.0).round() as u64;
            let start = ns(&e["ts"]);
            (
                e["tid"].as_i64().unwrap() as i32,
                start,
                start + ns(&e["dur"]),
                e["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // Exactly the lines `decode --level lines` prints for the window.
    let text = run_ok(
        ptscope()
            .args([
                "decode", "--level", "lines", "--format", "json", "--from", from, "--to", to,
            ])
            .arg(&snap),
        "decode --level lines",
    );
    let want: BTreeSet<(i32, u64, u64, String)> = String::from_utf8_lossy(&text.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["tid"].as_i64().unwrap() as i32,
                v["start_ns"].as_u64().unwrap(),
                v["end_ns"].as_u64().unwrap(),
                format!(
                    "{}:{} {}",
                    v["file"].as_str().unwrap(),
                    v["line"],
                    v["function"].as_str().unwrap()
                ),
            )
        })
        .collect();
    assert!(!want.is_empty());
    let only_ours: Vec<_> = lines.difference(&want).take(5).collect();
    let only_decode: Vec<_> = want.difference(&lines).take(5).collect();
    assert!(
        only_ours.is_empty() && only_decode.is_empty(),
        "only in the export: {only_ours:?}\nonly in decode: {only_decode:?}"
    );
    // And the calls of the window are there too.
    assert!(events
        .iter()
        .any(|e| e["cat"] == "call" && e["name"] == "handle"));

    // In Perfetto, the lines get a track of their own under the thread's,
    // and every begin has its end.
    let pf = dir.path().join("lines.pftrace");
    run_ok(
        ptscope()
            .args([
                "export", "--level", "lines", "--from", from, "--to", to, "-o",
            ])
            .arg(&pf)
            .arg(&snap),
        "export --level lines (perfetto)",
    );
    let py = run_ok(
        Command::new(python_readers())
            .arg("-c")
            .arg(PERFETTO_READER)
            .arg(&pf),
        "read the Perfetto trace",
    );
    let text = String::from_utf8(py.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("L ") && l.ends_with(" lines")),
        "{text}"
    );
    let got = slices_of(&text, "S ");
    assert!(lines.is_subset(&got));
}
