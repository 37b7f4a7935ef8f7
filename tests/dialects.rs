//! End to end: every timing dialect the emulated PT unit writes, and its
//! overflows, decode to the same instructions in libipt, `perf script` and
//! ptscope, and ptscope's times are real and never run backwards.
//!
//! Each test records a program with the emulated backend and `--timing`,
//! then compares, per thread, libipt's instruction decoder, perf's
//! (`--itrace=i1i`) and ours (`decode --level insns`): any difference
//! fails the test.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::*;

/// Our decoder's instructions per thread, with each one's start time.
fn our_instructions(snap: &Path) -> BTreeMap<i32, Vec<(u64, u64)>> {
    let out = ptscope()
        .arg("decode")
        .arg(snap)
        .args(["--level", "insns", "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ptscope decode --level insns: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut per: BTreeMap<i32, Vec<(u64, u64)>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let tid = json_field(line, "tid").parse().unwrap();
        let ip = json_field(line, "ip").parse().unwrap();
        let start = json_field(line, "start_ns").parse().unwrap();
        per.entry(tid).or_default().push((ip, start));
    }
    per
}

/// perf's time of each instruction, per thread (`perf script --ns`).
fn perf_times(extracted: &Path) -> BTreeMap<i32, Vec<u64>> {
    // perf refuses the time field of a trace without timing: no times.
    let out = perf_script_as_is(extracted, &["--ns", "--itrace=i1i", "-F", "tid,time"]);
    let mut per: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut it = line.split_whitespace();
        let (Some(tid), Some(time)) = (it.next(), it.next()) else {
            continue;
        };
        let Some((s, ns)) = time.trim_end_matches(':').split_once('.') else {
            continue;
        };
        if let (Ok(tid), Ok(s), Ok(ns)) = (tid.parse(), s.parse::<u64>(), ns.parse::<u64>()) {
            per.entry(tid).or_default().push(s * 1_000_000_000 + ns);
        }
    }
    per
}

/// What a dialect's trace should give.
struct Expect {
    /// The trace carries time: our times must span more than zero.
    timed: bool,
    /// Packets were lost to overflows: the decoders must agree, but only
    /// on a part of the ground truth.
    overflows: bool,
}

/// Records `program` with `--timing timing` (and `extra`), then checks
/// that libipt, perf and ptscope decode the same instructions per thread,
/// and what `expect` says of the ground truth and the times.
fn check_dialect(name: &str, program: &str, timing: &str, extra: &[&str], expect: Expect) {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), program);
    let mut args = vec!["--backend", "emulated", "--timing", timing];
    args.extend(extra);
    let (snap, log) = record(dir.path(), name, &args, &[exe.to_str().unwrap()]);
    let truth = read_ip_log(&log);
    let info = ptscope().arg("info").arg(&snap).output().unwrap();
    let info = String::from_utf8_lossy(&info.stdout).into_owned();

    // Every output names what its times count.
    let unit = if expect.timed { "ns" } else { "insns" };
    assert_eq!(
        info.contains("timing:  none (tsc=0)"),
        !expect.timed,
        "{name}: {info}"
    );
    let spans = ptscope()
        .args(["decode", "--format", "json"])
        .arg(&snap)
        .output()
        .unwrap();
    let spans = String::from_utf8(spans.stdout).unwrap();
    assert!(spans.lines().count() > 10, "{name}: {spans}");
    for line in spans.lines() {
        assert_eq!(json_string(line, "unit"), unit, "{name}: {line}");
    }
    let stats = ptscope().arg("stats").arg(&snap).output().unwrap();
    let stats = String::from_utf8(stats.stdout).unwrap();
    assert!(stats.contains(&format!("total {unit}")), "{name}: {stats}");
    assert_eq!(
        stats.contains("has no timing"),
        !expect.timed,
        "{name}: {stats}"
    );

    let (ipt, ipt_errors) = libipt_instructions(&snap);
    let extracted = extract(&snap, dir.path());
    let (perf, perf_errors) = perf_instructions(&extracted);
    let perf_times = perf_times(&extracted);
    let ours = our_instructions(&snap);
    let our_ips: BTreeMap<i32, Vec<u64>> = ours
        .iter()
        .map(|(t, v)| (*t, v.iter().map(|(ip, _)| *ip).collect()))
        .collect();
    for (tid, want) in &ipt {
        assert!(
            want.len() > 1000,
            "{name}: tid {tid}: {} instructions",
            want.len()
        );
        for (who, got) in [("perf", perf.get(tid)), ("ptscope", our_ips.get(tid))] {
            let got = got.map_or(&[][..], |v| &v[..]);
            if let Some(i) = (0..want.len().max(got.len())).find(|&i| want.get(i) != got.get(i)) {
                panic!(
                    "{name}: tid {tid}: {who} differs from libipt at instruction {i} of {}/{}: \
                     libipt {:x?}, {who} {:x?}\n{info}\nlibipt errors: {ipt_errors:?}\nperf: {perf_errors}",
                    want.len(),
                    got.len(),
                    want.get(i.saturating_sub(2)..(i + 3).min(want.len())),
                    got.get(i.saturating_sub(2)..(i + 3).min(got.len())),
                );
            }
        }
    }
    assert_eq!(
        ipt.keys().collect::<Vec<_>>(),
        perf.keys().collect::<Vec<_>>(),
        "{name}: threads"
    );
    assert_eq!(
        ipt.keys().collect::<Vec<_>>(),
        ours.keys().collect::<Vec<_>>(),
        "{name}: threads"
    );
    if expect.overflows {
        // perf reports each (libipt takes it as an event, not an error),
        // and every decoder decodes past it.
        assert!(ipt_errors.is_empty(), "{name}: libipt: {ipt_errors:?}");
        let overflows = perf_errors.matches("Overflow packet").count();
        assert_eq!(overflows, 3, "{name}: perf: {perf_errors}");
        for (tid, got) in &ipt {
            let all = &truth[tid];
            assert!(got.len() < all.len(), "{name}: packets were lost");
            assert!(all.ends_with(&got[got.len() - 1000..]), "{name}: the tail");
        }
    } else {
        assert!(ipt_errors.is_empty(), "{name}: libipt: {ipt_errors:?}");
        assert!(perf_errors.trim().is_empty(), "{name}: perf: {perf_errors}");
        assert_eq!(ipt, truth, "{name}: libipt against the ground truth");
    }
    for (tid, insns) in &ours {
        let times: Vec<u64> = insns.iter().map(|(_, t)| *t).collect();
        if let Some(w) = times.windows(2).position(|w| w[1] < w[0]) {
            panic!(
                "{name}: tid {tid}: time runs backwards at instruction {w}: {:?}",
                &times[w.saturating_sub(3)..(w + 3).min(times.len())]
            );
        }
        let span = times.last().unwrap() - times[0];
        if !expect.timed {
            // Without timing, an instruction's time is its position.
            if let Some(i) = (0..times.len()).find(|&i| times[i] - times[0] != i as u64) {
                panic!(
                    "{name}: tid {tid}: instruction {i} at {}, the first at {}",
                    times[i], times[0]
                );
            }
        }
        if expect.timed && !expect.overflows {
            // perf reads the same time from the packets: over the whole
            // trace, its clock and ours agree within 5%, and so does every
            // instruction's time within 2 µs of the first's. (Not to the
            // nanosecond: between two timing packets ours spreads the time
            // over the instructions, where perf gives each the last
            // packet's; and perf converts CYC by a ratio it calibrates.)
            let theirs = &perf_times[tid];
            assert_eq!(theirs.len(), times.len(), "{name}: tid {tid}");
            let (ours, perf) = (span, theirs.last().unwrap() - theirs[0]);
            assert!(
                ours.abs_diff(perf) * 20 <= perf,
                "{name}: tid {tid}: the trace lasts {ours} ns for ptscope, {perf} ns for perf"
            );
            let off = |i: usize| (times[i] - times[0]).abs_diff(theirs[i] - theirs[0]);
            let worst = (0..times.len()).max_by_key(|&i| off(i)).unwrap();
            assert!(
                off(worst) <= 2_000,
                "{name}: tid {tid}: instruction {worst} at {} ns for ptscope, {} ns for perf (from the first)",
                times[worst] - times[0],
                theirs[worst] - theirs[0]
            );
            assert!(
                theirs.windows(2).all(|w| w[0] <= w[1]),
                "{name}: tid {tid}: perf's times run backwards"
            );
        }
        if expect.timed {
            // The virtual clock: 1 ns per instruction, more in syscalls.
            assert!(
                span >= insns.len() as u64 / 2,
                "{name}: tid {tid}: {} instructions in {span} ns",
                insns.len()
            );
        }
    }
}

const TIMED: Expect = Expect {
    timed: true,
    overflows: false,
};

#[test]
fn timing_low_decodes_alike_everywhere() {
    check_dialect("low", "calls.c", "low", &[], TIMED);
}

#[test]
fn timing_normal_decodes_alike_everywhere() {
    check_dialect("normal", "threads.c", "normal", &[], TIMED);
}

#[test]
fn timing_high_decodes_alike_everywhere() {
    check_dialect("high", "calls.c", "high", &[], TIMED);
}

#[test]
fn custom_timing_terms_decode_alike_everywhere() {
    check_dialect(
        "custom",
        "calls.c",
        "cyc=1,cyc_thresh=4,mtc_period=6,psb_period=0,noretcomp=1",
        &[],
        TIMED,
    );
}

#[test]
fn mtc_alone_gives_real_times() {
    // TSC, TMA and MTC without CYC, an MTC every crystal tick.
    check_dialect("mtc", "calls.c", "mtc_period=0", &[], TIMED);
}

#[test]
fn a_trace_without_timing_decodes_alike_everywhere() {
    check_dialect(
        "untimed",
        "calls.c",
        "tsc=0",
        &[],
        Expect {
            timed: false,
            overflows: false,
        },
    );
}

/// A raw dump without timing packets is laid out on the instruction axis,
/// as the tsc=0 snapshot it was cut from is: the same spans at the same
/// instruction counts, by both engines, and the JSON, stats, histogram,
/// compare and export all say that times count instructions.
#[test]
fn a_raw_dump_without_timing_counts_instructions_like_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (snap, _) = record(
        dir.path(),
        "untimed",
        &["--backend", "emulated", "--timing", "tsc=0"],
        &[exe.to_str().unwrap()],
    );
    let (pt, images) = raw_dump(&snap, dir.path(), "untimed");
    let raw = raw_args(&images);
    // The raw images have no symbols, so the spans are named and split
    // otherwise; the axis is the same: the walk counts the same
    // instructions to the last span's end.
    let last_end = |spans: &[JsonSpan]| spans.iter().map(|s| s.end).max().unwrap_or(0);
    for engine in ["ptscope", "libipt"] {
        let want = last_end(&decode_json(&snap, &["--decoder", engine]));
        let mut args = raw.clone();
        args.extend(["--decoder", engine]);
        let got = decode_json(&pt, &args);
        assert!(got.len() > 10, "{engine}: {} spans", got.len());
        assert!(want > 10_000, "{engine}: the snapshot's last end {want}");
        assert_eq!(last_end(&got), want, "{engine}: the raw dump's last end");
        let starts: std::collections::BTreeSet<u64> = got.iter().map(|s| s.start).collect();
        assert!(starts.len() > got.len() / 4, "{engine}: spans pile up");
    }
    let run = |args: &[&str]| -> String {
        let out = run_ok(ptscope().args(args).args(&raw).arg(&pt), &args.join(" "));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json = run(&["decode", "--format", "json"]);
    assert!(
        json.lines().all(|l| json_string(l, "unit") == "insns"),
        "{json}"
    );
    let stats = run(&["stats"]);
    assert!(
        stats.contains("has no timing") && stats.contains("total insns"),
        "{stats}"
    );
    // The function that recurses: a call of it nests in another.
    let spans = decode_json(&pt, &raw);
    let busiest = spans
        .iter()
        .filter(|s| s.kind == "call" && s.depth > 2)
        .map(|s| s.name.clone())
        .max_by_key(|n| spans.iter().filter(|s| &s.name == n).count())
        .unwrap();
    let histogram = run(&["stats", "--function", &busiest, "--histogram"]);
    assert!(
        histogram.contains("has no timing") && histogram.contains("durations in insns"),
        "{histogram}"
    );
    assert!(!histogram.contains(" 0 ns"), "{histogram}");
    let compare = run(&["compare", "--function", &busiest]);
    assert!(compare.contains("has no timing"), "{compare}");
    assert!(!compare.contains("0 ns"), "{compare}");
    let out = dir.path().join("untimed.json");
    run_ok(
        ptscope()
            .args(["export", "--format", "chrome", "-o"])
            .arg(&out)
            .args(&raw)
            .arg(&pt),
        "export",
    );
    let exported = std::fs::read_to_string(&out).unwrap();
    assert!(
        exported.contains("instructions retired (the trace has no timing)"),
        "{}",
        &exported[..exported.len().min(2000)]
    );
}

#[test]
fn overflows_decode_alike_everywhere() {
    check_dialect(
        "overflow",
        "calls.c",
        "normal",
        &["--overflow-at", "5000,20000,40000"],
        Expect {
            timed: true,
            overflows: true,
        },
    );
}
