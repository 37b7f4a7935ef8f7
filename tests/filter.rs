//! End to end: IP-filtered captures (`--filter`). The emulated backend
//! traces the test program with a filter; perf's decoder (`perf script
//! --itrace=i1i`), libipt's instruction decoder and ours must read the
//! very instructions the filter let through, and the span tree must show
//! every trip out of the filter as one span with an `[untraced]` gap, with
//! no artefact frames at the re-enables, the same from both engines.

use std::path::Path;
use std::process::Command;

use crate::support::{
    build, decode_json, extract, libipt_instructions, our_instructions, perf_instructions, ptscope,
    read_ip_log, record, JsonSpan, PerThread,
};

/// File offset and size of the executable segment of `exe`, by readelf.
fn text_segment(exe: &Path) -> (u64, u64) {
    let out = Command::new("readelf")
        .arg("-lW")
        .arg(exe)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            (f.first() == Some(&"LOAD") && f.get(6) == Some(&"R") && f.get(7) == Some(&"E"))
                .then(|| (hex(f[1]), hex(f[4])))
        })
        .expect("an R E LOAD segment")
}

/// The runtime ranges of `exe`'s file range [off, off + size) in the
/// snapshot's mappings.
fn runtime_range(snap: &Path, exe: &Path, off: u64, size: u64) -> (u64, u64) {
    let snapshot = ptscope_formats::snapshot::Snapshot::open(snap).unwrap();
    let trace = snapshot.trace().unwrap();
    let exe = std::fs::canonicalize(exe).unwrap();
    let m = trace
        .mmaps
        .iter()
        .find(|m| Path::new(&m.path) == exe && m.pgoff <= off && off < m.pgoff + m.len)
        .expect("the program's text is mapped");
    let start = m.start + (off - m.pgoff);
    (start, start + size)
}

/// Per thread, the ground truth's instructions inside `range`: the
/// filter's ranges hold the program's whole text, which code only enters
/// and leaves by branches, so FilterEn is exactly being inside.
fn inside(log: &PerThread, range: (u64, u64)) -> PerThread {
    log.iter()
        .map(|(&tid, ips)| {
            let ips = ips
                .iter()
                .copied()
                .filter(|ip| (range.0..range.1).contains(ip))
                .collect();
            (tid, ips)
        })
        .collect()
}

/// perf, libipt and our flow and libipt engines give the same
/// instructions; returns them.
pub(crate) fn three_decoders_agree(name: &str, snap: &Path, dir: &Path) -> PerThread {
    let (libipt, errors) = libipt_instructions(snap);
    assert!(errors.is_empty(), "{name}: libipt: {errors:?}");
    let extracted = extract(snap, dir);
    let (perf, perf_errors) = perf_instructions(&extracted);
    assert!(perf_errors.trim().is_empty(), "{name}: perf: {perf_errors}");
    let ours = our_instructions(snap, &[]);
    let ours_libipt = our_instructions(snap, &["--decoder", "libipt"]);
    for (tid, ips) in &libipt {
        assert_eq!(
            perf.get(tid),
            Some(ips),
            "{name}: perf and libipt differ on {tid}"
        );
        assert_eq!(
            ours.get(tid),
            Some(ips),
            "{name}: we and libipt differ on {tid}"
        );
        assert_eq!(
            ours_libipt.get(tid),
            Some(ips),
            "{name}: engines differ on {tid}"
        );
    }
    assert_eq!(libipt.len(), perf.len(), "{name}: threads differ");
    libipt
}

/// Both engines give the same spans, none of them an artefact of a
/// re-enable: no nameless frame, none entered mid-function or back-dated
/// but the root.
fn clean_spans(name: &str, snap: &Path) -> Vec<JsonSpan> {
    let ours = decode_json(snap, &[]);
    let theirs = decode_json(snap, &["--decoder", "libipt"]);
    assert_eq!(ours.len(), theirs.len(), "{name}: span counts differ");
    if let Some((a, b)) = ours.iter().zip(&theirs).find(|(a, b)| a != b) {
        panic!("{name}: the engines differ first at\nflow:   {a:?}\nlibipt: {b:?}");
    }
    for s in &ours {
        assert!(
            !s.name.starts_with("[unknown]") && !s.mid_entry && (!s.inferred || s.depth == 0),
            "{name}: artefact span {s:?}"
        );
    }
    ours
}

/// The parent of each span, by depth and time.
fn parent<'a>(spans: &'a [JsonSpan], child: &JsonSpan) -> Option<&'a JsonSpan> {
    spans.iter().find(|p| {
        p.tid == child.tid
            && p.depth + 1 == child.depth
            && p.start <= child.start
            && child.end <= p.end
    })
}

#[test]
fn a_filter_on_the_main_binary_traces_it_alone_and_decodes_clean() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (off, size) = text_segment(&exe);
    let filter = format!("filter {off:#x}/{size:#x}@{}", exe.display());
    let (snap, log) = record(
        dir.path(),
        "main",
        &["--backend", "emulated", "--filter", &filter],
        &[exe.to_str().unwrap()],
    );
    // The snapshot records the filter, in the kernel's form perf reads.
    let snapshot = ptscope_formats::snapshot::Snapshot::open(&snap).unwrap();
    let params = snapshot.trace().unwrap().params;
    let canonical = std::fs::canonicalize(&exe).unwrap();
    assert_eq!(
        params.filter,
        format!("filter {off:#x}/{size:#x}@{}", canonical.display())
    );
    let info = ptscope().arg("info").arg(&snap).output().unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.contains(&format!("IP filter: {}", params.filter)),
        "{info}"
    );
    // And where the trace's mappings place it, the ranges SKL014 needs.
    let (lo, hi) = runtime_range(&snap, &exe, off, size);
    assert!(
        info.contains(&format!("placed at: {lo:#x}-{:#x}", hi - 1)),
        "{info}"
    );
    let traced = three_decoders_agree("main", &snap, dir.path());
    let range = runtime_range(&snap, &exe, off, size);
    let truth = inside(&read_ip_log(&log), range);
    for (tid, want) in &truth {
        let got = traced.get(tid).map_or(&[][..], Vec::as_slice);
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        assert!(
            at.is_none() && got.len() == want.len(),
            "thread {tid}: traced {} instructions, {} ran inside the filter; first difference at {at:?}: {:x?} vs {:x?}",
            got.len(),
            want.len(),
            at.map(|i| &got[i.saturating_sub(2)..(i + 3).min(got.len())]),
            at.map(|i| &want[i.saturating_sub(2)..(i + 3).min(want.len())]),
        );
    }
    let all: usize = read_ip_log(&log).values().map(Vec::len).sum();
    let kept: usize = traced.values().map(Vec::len).sum();
    assert!(kept > 1000 && kept * 5 < all, "{kept} of {all} traced");

    let spans = clean_spans("main", &snap);
    let untraced: Vec<&JsonSpan> = spans.iter().filter(|s| s.kind == "untraced").collect();
    assert!(untraced.len() >= 8, "{} untraced gaps", untraced.len());
    // The virtual clock runs a nanosecond per instruction (and wall time
    // in the kernel): the gaps last at least as long as most of the code
    // outside the filter (some ran before `_start`), not zero.
    let gaps: u64 = untraced.iter().map(|s| s.end - s.start).sum();
    let outside = (all - kept) as u64;
    assert!(
        gaps >= outside / 2,
        "untraced gaps last {gaps} ns for {outside} instructions outside"
    );
    // Every gap nests under one call span: the callee that left the filter.
    for gap in &untraced {
        let Some(p) = parent(&spans, gap) else {
            continue;
        };
        assert_eq!(p.kind, "call", "{gap:?} under {p:?}");
        assert!(p.end >= gap.end, "{gap:?} outlasts {p:?}");
    }
    // A call through the PLT into a bound library function is that
    // function's span, its gap under it.
    assert!(
        spans.iter().any(|s| s.name == "__cxa_finalize"
            && spans
                .iter()
                .any(|g| g.kind == "untraced" && parent(&spans, g) == Some(s))),
        "no __cxa_finalize span with its untraced gap"
    );
    // main, called from untraced libc, is one span under __libc_start_main
    // (named by its versioned symbol where libc's debug file is found, as
    // perf names it).
    let mains: Vec<&JsonSpan> = spans.iter().filter(|s| s.name == "main").collect();
    assert_eq!(mains.len(), 1, "{mains:?}");
    let caller = &parent(&spans, mains[0]).unwrap().name;
    assert!(caller.starts_with("__libc_start_main"), "{caller}");
}

#[test]
fn a_symbol_filter_traces_that_function() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (snap, _log) = record(
        dir.path(),
        "work",
        &["--backend", "emulated", "--filter", "filter work"],
        &[exe.to_str().unwrap()],
    );
    three_decoders_agree("work", &snap, dir.path());
    let spans = clean_spans("work", &snap);
    // work runs once; the calls it makes to leaf leave the filter and
    // come back: each is a leaf span with its untraced gap.
    let names: std::collections::BTreeSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["[untraced]", "leaf", "work"].into_iter().collect(),
        "{spans:?}"
    );
    let works: Vec<&JsonSpan> = spans.iter().filter(|s| s.name == "work").collect();
    assert_eq!(works.len(), 1);
    let leaves: Vec<&JsonSpan> = spans.iter().filter(|s| s.name == "leaf").collect();
    assert_eq!(leaves.len(), 17, "work(50) calls leaf for every third i");
    for leaf in leaves {
        assert_eq!(parent(&spans, leaf), Some(works[0]));
        assert!(spans
            .iter()
            .any(|g| g.kind == "untraced" && parent(&spans, g) == Some(leaf)));
    }
}

#[test]
fn skl014_disables_without_an_ip_bind_to_the_branch_that_left() {
    // The emulated unit writes as a Skylake with erratum SKL014: work's
    // direct calls to leaf leave the filter with a TIP.PGD that has no
    // IP. The snapshot records the filter (and a Skylake's cpuid), from
    // which perf, libipt's instruction decoder and ours bind each to its
    // call; without the filter our flow would run on into leaf.
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (snap, _log) = record(
        dir.path(),
        "work-skl014",
        &[
            "--backend",
            "emulated",
            "--filter",
            "filter work",
            "--emulate-skl014",
        ],
        &[exe.to_str().unwrap()],
    );
    let (libipt, errors) = libipt_instructions(&snap);
    assert!(errors.is_empty(), "libipt: {errors:?}");
    let extracted = extract(&snap, dir.path());
    let (perf, perf_errors) = perf_instructions(&extracted);
    assert!(perf_errors.trim().is_empty(), "perf: {perf_errors}");
    let ours = our_instructions(&snap, &[]);
    assert!(libipt.values().map(Vec::len).sum::<usize>() > 100);
    assert_eq!(perf, libipt, "perf and libipt differ");
    assert_eq!(ours, libipt, "we and libipt differ");
    // The span tree is the one a filter without the erratum gives: each
    // call to leaf one span with its untraced gap.
    let spans = decode_json(&snap, &[]);
    let leaves: Vec<&JsonSpan> = spans.iter().filter(|s| s.name == "leaf").collect();
    assert_eq!(leaves.len(), 17, "{spans:?}");
    for leaf in leaves {
        assert!(spans
            .iter()
            .any(|g| g.kind == "untraced" && parent(&spans, g) == Some(leaf)));
    }
    // A filter given by hand over what the snapshot records, one that
    // traces everywhere, leaves the disables unbound: the flow runs on
    // into leaf.
    let everywhere = our_instructions(&snap, &["--ip-filter", "0-0xffffffffffffffff"]);
    assert!(everywhere != libipt, "--ip-filter changed nothing");
}

#[test]
fn bad_filters_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exits_soon.c");
    for (filter, want) in [
        (
            "filter no_such_function",
            "filter symbol `no_such_function` was not found",
        ),
        (
            "filter main, filter main, filter main",
            "3 filter ranges given, but the CPU has 2",
        ),
        ("frob main", "bad filter `frob main`"),
        (
            "start main",
            "filter action `start` is not one Intel PT has",
        ),
    ] {
        let out = ptscope()
            .args([
                "record",
                "-q",
                "--backend",
                "emulated",
                "--filter",
                filter,
                "-o",
            ])
            .arg(dir.path().join("x.ptscope"))
            .arg("--")
            .arg(&exe)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "{filter}: {err}"
        );
    }
}

/// The window runs captures through `ptscope record` arguments: a filter
/// resolved once reads back as the same ranges.
#[test]
fn a_resolved_filter_survives_the_command_line() {
    use ptscope_capture::filter;
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exits_soon.c");
    let target = ptscope_capture::recording::Target::Spawn {
        argv: vec![exe.display().to_string()],
        cwd: None,
    };
    let specs = filter::parse("filter main, tracestop 0x1000/0x10").unwrap();
    let ranges = filter::resolve(&specs, filter::target_program(&target).as_deref()).unwrap();
    let mut req =
        ptscope::recorder::Request::new(target, ptscope_capture::trigger::Trigger::ProcessExit);
    req.opts.filter = ranges.clone();
    let args = req.cli_args(&dir.path().join("x.ptscope"));
    let arg = args
        .iter()
        .find_map(|a| a.to_str()?.strip_prefix("--filter="))
        .expect("a --filter argument");
    let again = filter::resolve(&filter::parse(arg).unwrap(), None).unwrap();
    assert_eq!(again, ranges);
}

/// `tracestop SYMBOL`: where a thread's call lands in the function the
/// hardware writes TIP.PGD and TraceStop, and the thread's trace stops
/// there until it is scheduled out and back in (here: blocked in
/// `pthread_join` while the worker ran). perf, libipt and both our engines
/// read the very same instructions: for each thread, what ran up to that
/// call, and for the main thread everything from its return to user code
/// after the join.
#[test]
fn a_tracestop_range_stops_the_trace_until_the_thread_is_scheduled_again() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c");
    let (snap, log) = record(
        dir.path(),
        "tracestop",
        &["--backend", "emulated", "--filter", "tracestop spin"],
        &[exe.to_str().unwrap()],
    );
    let snapshot = ptscope_formats::snapshot::Snapshot::open(&snap).unwrap();
    let params = snapshot.trace().unwrap().params;
    assert!(params.filter.starts_with("stop 0x"), "{}", params.filter);

    let traced = three_decoders_agree("tracestop", &snap, dir.path());
    let (off, size) = ptscope_capture::filter::symbol_in_file(&exe, "spin")
        .unwrap()
        .unwrap();
    let spin = runtime_range(&snap, &exe, off, size);
    let truth = read_ip_log(&log);
    // The process's id, which its main thread's tid is: not the smallest
    // of them, once thread ids wrap around.
    let main_tid = snapshot
        .trace()
        .unwrap()
        .thread(*truth.keys().next().unwrap())
        .unwrap()
        .pid;
    for (tid, ran) in &truth {
        let packets = ptscope()
            .args(["packets", "--thread", &tid.to_string()])
            .arg(&snap)
            .output()
            .unwrap();
        let packets = String::from_utf8_lossy(&packets.stdout);
        assert_eq!(
            packets.lines().filter(|l| l.ends_with("  stop")).count(),
            1,
            "thread {tid}: {packets}"
        );
        let got = &traced[tid];
        // Up to the call that lands in spin, and nothing of spin.
        let call = ran
            .windows(2)
            .position(|w| w[1] == spin.0)
            .expect("a call to spin");
        assert_eq!(got[..=call], ran[..=call], "thread {tid}");
        assert!(
            got.iter().all(|ip| !(spin.0..spin.1).contains(ip)),
            "thread {tid} traced in spin"
        );
        if *tid == main_tid {
            // Then, after the join, to the end.
            let rest = &got[call + 1..];
            assert!(rest.len() > 1000, "main restarted: {} after", rest.len());
            assert_eq!(rest[..], ran[ran.len() - rest.len()..], "main's restart");
        } else {
            assert_eq!(got.len(), call + 1, "the worker stays stopped");
        }
    }
}
