//! End to end: the emulated (single-stepping) backend's per-CPU mode writes what
//! `perf record -e intel_pt//u CMD` writes by default (a buffer per CPU,
//! AUXTRACE records naming the process, threads migrating between CPUs),
//! and libipt, `perf script` and ptscope each give every thread exactly the
//! instructions it ran, with one track per thread.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ptscope_decoder::{decode_snapshot, DecodeOptions};
use ptscope_formats::snapshot::Snapshot;

use crate::support::*;

/// Every thread's instructions, and no other thread.
fn same_threads(judge: &str, got: &PerThread, truth: &PerThread) {
    assert_same_instructions("per-cpu", judge, truth, got);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        truth.keys().collect::<Vec<_>>(),
        "{judge}: threads"
    );
}

/// libipt, `perf script` and ptscope each give every thread of `snap`
/// exactly the instructions of `truth`, without an error. A thread's runs
/// on several CPUs interleave: each must put them in time order.
pub(crate) fn three_judges(snap: &Path, dir: &Path, truth: &PerThread) {
    let (ipt, ipt_errors) = libipt_instructions(snap);
    assert!(ipt_errors.is_empty(), "libipt: {ipt_errors:?}");
    same_threads("libipt", &ipt, truth);
    let (perf, perf_errors) = perf_instructions(&extract(snap, dir));
    assert!(perf_errors.trim().is_empty(), "perf: {perf_errors}");
    same_threads("perf", &perf, truth);
    same_threads("ptscope", &our_instructions(snap, &[]), truth);
}

/// Per CPU: (tid, start, end) of each stay, times relative to the first
/// stay's start anywhere.
type Lanes = BTreeMap<u32, Vec<(i32, i64, i64)>>;

/// `decode --level cpus` equals perf's `--show-switch-events`: every
/// stay of a thread on a CPU, from its switch-in to the next switch-in
/// there or its own switch-out, to the nanosecond (but the last stay of
/// each CPU, which ptscope ends where the trace does).
pub(crate) fn cpu_lanes_match_perfs(snap: &Path, dir: &Path) {
    let out = run_ok(
        ptscope()
            .args(["decode", "--level", "cpus", "--format", "json"])
            .arg(snap),
        "decode --level cpus",
    );
    let mut ours = Lanes::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        ours.entry(v["cpu"].as_u64().unwrap() as u32)
            .or_default()
            .push((
                v["tid"].as_i64().unwrap() as i32,
                v["start_ns"].as_i64().unwrap(),
                v["end_ns"].as_i64().unwrap(),
            ));
    }
    let extracted = extract(snap, dir);
    let out = perf_script(
        &extracted,
        &[
            "--ns",
            "--show-switch-events",
            "--itrace=",
            "-F",
            "tid,cpu,time",
        ],
    );
    // Per CPU: (time, tid, in).
    let mut events: BTreeMap<u32, Vec<(i64, i32, bool)>> = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() < 5 || w[3] != "PERF_RECORD_SWITCH" {
            continue;
        }
        let tid: i32 = w[0].parse().unwrap();
        let cpu: u32 = w[1].trim_matches(|c| c == '[' || c == ']').parse().unwrap();
        let (sec, ns) = w[2].trim_end_matches(':').split_once('.').unwrap();
        let time = sec.parse::<i64>().unwrap() * 1_000_000_000 + ns.parse::<i64>().unwrap();
        events
            .entry(cpu)
            .or_default()
            .push((time, tid, w[4] == "IN"));
    }
    let mut perf = Lanes::new();
    for (cpu, evs) in &events {
        let ins: Vec<&(i64, i32, bool)> = evs.iter().filter(|e| e.2).collect();
        for (i, &&(t, tid, _)) in ins.iter().enumerate() {
            let next = ins.get(i + 1).map_or(i64::MAX, |n| n.0);
            let end = evs
                .iter()
                .find(|e| !e.2 && e.1 == tid && e.0 >= t && e.0 <= next)
                .map_or(next, |e| e.0);
            perf.entry(*cpu).or_default().push((tid, t, end));
        }
    }
    let origin = |l: &Lanes| l.values().flatten().map(|s| s.1).min().unwrap();
    let (o, p) = (origin(&ours), origin(&perf));
    let rel = |l: &Lanes, o: i64| -> Lanes {
        l.iter()
            .map(|(cpu, v)| {
                let n = v.len();
                let v = v
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (s.0, s.1 - o, if i + 1 == n { 0 } else { s.2 - o }))
                    .collect();
                (*cpu, v)
            })
            .collect()
    };
    let (ours, perf) = (rel(&ours, o), rel(&perf, p));
    assert!(ours.values().map(Vec::len).sum::<usize>() >= 4, "{ours:?}");
    assert_eq!(ours, perf);
}

#[test]
fn threads_migrating_between_two_cpus_decode_exactly_as_perf_and_libipt_do() {
    // Both threads spin, so time slices end mid-code and each thread comes
    // back on the other CPU.
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "spin.c");
    let (snap, log) = record(
        dir.path(),
        "spin",
        &["--backend", "emulated", "--per-cpu", "--cpus", "2"],
        &[exe.to_str().unwrap()],
    );
    let truth = read_ip_log(&log);
    assert_eq!(truth.len(), 2, "two threads");

    // The layout: a buffer per CPU, recorded for the process, and every
    // thread switched in on both CPUs.
    let snapshot = Snapshot::open(&snap).unwrap();
    let trace = snapshot.trace().unwrap();
    // The process's id, which its main thread's tid is: not the smallest
    // of the two, once thread ids wrap around.
    let pid = trace.thread(*truth.keys().next().unwrap()).unwrap().pid;
    assert!(truth.contains_key(&pid), "the main thread logs too");
    let cpus: Vec<Option<u32>> = trace.streams.iter().map(|s| s.cpu).collect();
    assert_eq!(cpus, [Some(0), Some(1)]);
    assert!(trace
        .streams
        .iter()
        .all(|s| s.tid.is_none() && s.recorded_tid == Some(pid)));
    assert!(trace.params.per_cpu_mmaps);
    assert_eq!(trace.params.have_sched_switch, 2);
    let mut ran_on: BTreeMap<i32, BTreeSet<u32>> = BTreeMap::new();
    for sw in &trace.switches {
        ran_on.entry(sw.tid).or_default().insert(sw.cpu);
    }
    for tid in truth.keys() {
        assert_eq!(ran_on[tid].len(), 2, "thread {tid} migrated: {ran_on:?}");
    }

    // Three decoders, one truth.
    three_judges(&snap, dir.path(), &truth);

    // The CPU lanes: who ran on each CPU when, as perf's switch events
    // tell it.
    cpu_lanes_match_perfs(&snap, dir.path());

    // One track per thread; each buffer's checkpoints are timed by its own
    // packets: nonzero, and in order along the buffer.
    let model = decode_snapshot(&snapshot, &DecodeOptions::default()).unwrap();
    let tids: Vec<i32> = model.threads.iter().map(|t| t.spans.tid).collect();
    assert_eq!(tids, truth.keys().copied().collect::<Vec<_>>());
    let mut per_queue: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for t in &model.threads {
        for c in &t.checkpoints {
            per_queue
                .entry(c.queue)
                .or_default()
                .push((c.offset, c.time));
        }
    }
    assert_eq!(per_queue.len(), 2, "checkpoints in both buffers");
    for (queue, mut cps) in per_queue {
        cps.sort_unstable();
        assert!(cps.iter().all(|c| c.1 > 0), "queue {queue}: {cps:?}");
        assert!(
            cps.windows(2).all(|w| w[0].1 <= w[1].1),
            "queue {queue}: times go back: {cps:?}"
        );
    }

    // `info` lists the buffers per CPU and each thread once.
    let out = run_ok(ptscope().arg("info").arg(&snap), "ptscope info");
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.contains("  buffers:"), "{info}");
    for cpu in [0, 1] {
        assert_eq!(
            info.lines()
                .filter(|l| l.trim_start().starts_with(&format!("cpu {cpu} ")))
                .count(),
            1,
            "{info}"
        );
    }
    for tid in truth.keys() {
        let lines = info
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("tid {tid} ")))
            .collect::<Vec<_>>();
        assert_eq!(lines.len(), 1, "{info}");
        assert!(lines[0].ends_with("on cpu 0,1"), "{info}");
    }

    // `packets --cpu N` reaches each buffer.
    let mut dumps = Vec::new();
    for cpu in ["0", "1"] {
        let out = run_ok(
            ptscope()
                .args(["packets", "--limit", "50", "--cpu", cpu])
                .arg(&snap),
            "ptscope packets --cpu",
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains("  psb"), "{text}");
        dumps.push(text);
    }
    assert_ne!(dumps[0], dumps[1]);
    let out = ptscope()
        .args(["packets", "--thread", &pid.to_string()])
        .arg(&snap)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("use --cpu N"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ptscope()
        .args(["packets", "--cpu", "7"])
        .arg(&snap)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no trace buffer for CPU 7"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--system-wide` writes what `perf record -a -e intel_pt//u` writes:
/// CPU-wide events whose AUXTRACE records name no thread, a
/// SWITCH_CPU_WIDE record for every switch (the idle task's too), and
/// ITRACE_START under the idle task. libipt, perf and ptscope still give
/// every thread exactly its instructions, and the idle task gets no track.
#[test]
fn a_system_wide_layout_decodes_exactly_as_perf_and_libipt_do() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "spin.c");
    let (snap, log) = record(
        dir.path(),
        "spin-a",
        &["--backend", "emulated", "--system-wide", "--cpus", "2"],
        &[exe.to_str().unwrap()],
    );
    let truth = read_ip_log(&log);
    assert_eq!(truth.len(), 2, "two threads");

    let snapshot = Snapshot::open(&snap).unwrap();
    let trace = snapshot.trace().unwrap();
    let cpus: Vec<Option<u32>> = trace.streams.iter().map(|s| s.cpu).collect();
    assert_eq!(cpus, [Some(0), Some(1)]);
    assert!(
        trace
            .streams
            .iter()
            .all(|s| s.tid.is_none() && s.recorded_tid.is_none_or(|t| t == -1)),
        "{:?}",
        trace
            .streams
            .iter()
            .map(|s| (s.tid, s.recorded_tid))
            .collect::<Vec<_>>()
    );
    assert!(trace.params.per_cpu_mmaps);
    assert_eq!(trace.params.have_sched_switch, 3);
    // Both CPUs went idle and came out of it at least once.
    for cpu in [0, 1] {
        assert!(
            trace.switches.iter().any(|s| s.cpu == cpu && s.tid == 0),
            "cpu {cpu}: {:?}",
            trace.switches
        );
    }

    three_judges(&snap, dir.path(), &truth);

    let model = decode_snapshot(&snapshot, &DecodeOptions::default()).unwrap();
    let tids: Vec<i32> = model.threads.iter().map(|t| t.spans.tid).collect();
    assert_eq!(tids, truth.keys().copied().collect::<Vec<_>>());
}

/// Per-CPU buffers bound to a task (their AUXTRACE records name it, as
/// `perf record CMD` writes them), with a CPU-wide switch record naming a
/// task the trace does not follow around the traced thread's system call:
/// every packet stays the thread's, as in its per-thread trace, and the
/// other task gets no track. Not bound to a task (`perf record -a`), the
/// same records give the other task the trace it names.
#[test]
fn a_task_bound_per_cpu_trace_gives_tasks_it_does_not_follow_nothing() {
    use ptscope_decoder::decode_trace;
    use ptscope_formats::snapshot::CpuSwitch;
    use ptscope_model::SpanKind;
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    // The emulated backend: its system calls take time.
    let (path, _) = record(
        dir.path(),
        "calls",
        &["--backend", "emulated"],
        &[exe.to_str().unwrap()],
    );
    let snap = Snapshot::open(&path).unwrap();
    let opts = DecodeOptions::default();
    let per_thread = decode_snapshot(&snap, &opts).unwrap();
    let lines = |m: &ptscope_model::Model| -> Vec<String> {
        m.canonical()
            .into_iter()
            .filter(|l| !l.starts_with("cp ") && !l.starts_with("thread "))
            .collect()
    };
    let mut trace = snap.trace().unwrap();
    let tid = trace.streams[0].tid.unwrap();
    let pid = trace.thread(tid).unwrap().pid;
    trace.streams[0].tid = None;
    trace.streams[0].recorded_tid = Some(tid);
    trace.streams[0].cpu = Some(3);
    // The last system call: the thread leaves at its TIP.PGD and comes
    // back at the TIP.PGE after it. The switch records say another task
    // ran from just before the one to just after the other: the enable
    // (and all after it) would be that task's if it were traced.
    let t = &per_thread.threads[0].spans;
    let (out, back) = t
        .lanes()
        .flat_map(|(d, lane)| lane.iter().enumerate().map(move |(i, s)| (d, i, *s)))
        .filter(|(_, _, s)| per_thread.funcs.kind(s.func()) == SpanKind::Syscall)
        .map(|(d, i, s)| (s.start, t.end(d, i)))
        .filter(|&(start, end)| end > start + 2)
        .max()
        .expect("a system call");
    let sw = |time: u64, pid: i32, tid: i32| CpuSwitch {
        time,
        cpu: 3,
        pid,
        tid,
    };
    trace.switches = vec![
        sw(0, pid, tid),
        sw(out - 1, 1760, 1760),
        sw(back + 1, pid, tid),
    ];
    let m = decode_trace(&snap, &trace, &opts).unwrap();
    let tids: Vec<i32> = m.threads.iter().map(|t| t.spans.tid).collect();
    assert_eq!(tids, [tid]);
    assert_eq!(lines(&m), lines(&per_thread));
    trace.streams[0].recorded_tid = None;
    let m = decode_trace(&snap, &trace, &opts).unwrap();
    let tids: Vec<i32> = m.threads.iter().map(|t| t.spans.tid).collect();
    assert!(tids.contains(&1760), "{tids:?}");
}
