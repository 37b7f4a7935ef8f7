//! End to end: `ptscope decode` and `ptscope stats` on emulated captures of
//! the test programs, judged by perf's own decoder of the same file, by
//! what each program's source implies, and by the emulated clock.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use crate::support::*;

/// Function names as both tools print them: C++ without parameters.
fn norm(name: &str) -> String {
    match name.find('(') {
        Some(p) if p > 0 => name[..p].to_string(),
        _ => name.to_string(),
    }
}

/// perf's decoding: per thread, calls per target function, jumps that land
/// on another function's entry (tail calls, PLT stubs), and the deepest
/// nesting of `deep` below `root` on a naive call/return stack.
struct PerfBranches {
    /// Calls per target address, with perf's name for it.
    calls: BTreeMap<u64, (u64, String)>,
    /// Jumps from one function to another's entry, per target address.
    tail: BTreeMap<u64, (u64, String)>,
}

/// Runs perf's decoder on the snapshot and hands each entry into a
/// function to `each`: tid, target address, perf's name for it, and
/// whether it was a jump (a tail call). An entry is what ptscope opens a
/// called span for:
/// - a call;
/// - a jump to another function's entry (another name, or the same name in
///   another DSO: libc's `_dl_find_object` stub jumping to ld.so's);
/// - a jump from named code to code perf has no symbol for (a stripped
///   library's static function, called through a pointer), whose first
///   address ptscope takes for an entry;
/// - tracing that begins at a function's entry (a process's `_start`, a
///   signal handler the kernel delivers to);
/// - a return that lands on a function's entry (`_dl_start` returning to
///   `_dl_start_user`, a handler returning to `__restore_rt`): the code
///   there is that function, entered.
fn perf_entries(extracted: &Path, mut each: impl FnMut(i32, u64, &str, bool)) {
    use ptscope_decoder::EventKind;
    use ptscope_decoder::{parse_script_line, ScriptRecord};
    let out = perf_script(
        extracted,
        &[
            "--itrace=b",
            "-F",
            "pid,tid,time,flags,ip,addr,sym,symoff,dso",
        ],
    );
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(Some(ScriptRecord::Branch {
            tid,
            flags,
            from,
            to,
            ..
        })) = parse_script_line(line)
        else {
            continue;
        };
        let kind = flags.kind();
        let sym = to.sym.unwrap_or("?");
        let at_entry = to.symoff == Some(0);
        let another = from.sym != to.sym || from.dso != to.dso;
        let jump = match kind {
            EventKind::Call => false,
            EventKind::Jump if at_entry && another => true,
            EventKind::Jump if to.sym.is_none() && from.sym.is_some() => true,
            EventKind::TraceBegin | EventKind::Return if at_entry => false,
            _ => continue,
        };
        each(tid, to.ip, sym, jump);
    }
}

fn perf_branches(extracted: &Path) -> PerfBranches {
    let mut calls = BTreeMap::new();
    let mut tail = BTreeMap::new();
    perf_entries(extracted, |_, ip, sym, is_tail| {
        let map = if is_tail { &mut tail } else { &mut calls };
        map.entry(ip).or_insert((0, sym.to_string())).0 += 1;
    });
    PerfBranches { calls, tail }
}

/// Spans entered by a call or tail call, per function entry address.
fn our_calls(spans: &[JsonSpan]) -> BTreeMap<u64, (u64, String)> {
    let mut out = BTreeMap::new();
    for s in spans {
        if let (true, Some(e), "call") = (s.called(), s.entry, s.kind.as_str()) {
            out.entry(e).or_insert((0, s.name.clone())).0 += 1;
        }
    }
    out
}

/// Every function perf saw entered ([`perf_entries`]) must have exactly as
/// many called spans, and every function with called spans must be one
/// perf saw entered. `slack` differing functions are tolerated
/// outside the program's own code (known gaps: crt start-up stubs without
/// unwind info, one libgcc unwinder entry).
fn check_against_perf(name: &str, snap: &Path, dir: &Path) -> Vec<JsonSpan> {
    check_against_perf_with(name, snap, dir, 0)
}

fn check_against_perf_with(name: &str, snap: &Path, dir: &Path, slack: usize) -> Vec<JsonSpan> {
    let spans = decode_json(snap, &[]);
    assert!(!spans.is_empty(), "{name}: no spans");
    same_as_over_libipt(name, snap, &spans);
    let extracted = extract(snap, dir);
    let perf = perf_branches(&extracted);
    let ours = our_calls(&spans);
    let mut diffs = Vec::new();
    // PLT0, the lazy-binding trampoline every PLT entry jumps to once, is
    // judged neither way: ptscope knows it from the `.plt` section and
    // names it `[plt]`, while perf names it by whatever symbol precedes it
    // (`_init+0x20`) or by none, and so counts the jumps into it or not.
    let plt0: BTreeSet<u64> = ours
        .iter()
        .filter(|(_, (_, n))| n == "[plt]")
        .map(|(a, _)| *a)
        .collect();
    let mut addrs: Vec<&u64> = perf.calls.keys().chain(perf.tail.keys()).collect();
    addrs.sort();
    addrs.dedup();
    addrs.retain(|a| !plt0.contains(a));
    for a in addrs {
        let name = perf
            .calls
            .get(a)
            .or(perf.tail.get(a))
            .map_or("", |c| c.1.as_str());
        let want = perf.calls.get(a).map_or(0, |c| c.0) + perf.tail.get(a).map_or(0, |c| c.0);
        let (got, our_name) = ours.get(a).map_or((0, ""), |c| (c.0, c.1.as_str()));
        if got != want {
            diffs.push(format!(
                "{a:#x} {name} (ours: {our_name}): perf {want}, ptscope {got}"
            ));
        }
    }
    // And the other way: no function ptscope says was entered that perf
    // saw no entry into.
    for (a, (got, our_name)) in &ours {
        if !plt0.contains(a) && !perf.calls.contains_key(a) && !perf.tail.contains_key(a) {
            diffs.push(format!("{a:#x} {our_name}: perf 0, ptscope {got}"));
        }
    }
    let agree = addrs_len(&perf) - diffs.len().min(addrs_len(&perf));
    println!(
        "{name}: {agree} of {} called functions agree with perf",
        addrs_len(&perf)
    );
    assert!(
        diffs.len() <= slack && agree > 10,
        "{name}: call counts differ from perf's decoder:\n{}",
        diffs.join("\n")
    );
    spans
}

fn addrs_len(p: &PerfBranches) -> usize {
    let mut a: Vec<&u64> = p.calls.keys().chain(p.tail.keys()).collect();
    a.sort();
    a.dedup();
    a.len()
}

fn count(spans: &[JsonSpan], name: &str) -> usize {
    spans
        .iter()
        .filter(|s| norm(&s.name) == name && s.called())
        .count()
}

/// Deepest depth of `deep` minus the depth of `root`, on one thread.
fn relative_depth(spans: &[JsonSpan], root: &str, deep: &str) -> usize {
    let r = spans.iter().find(|s| norm(&s.name) == root).unwrap().depth;
    spans
        .iter()
        .filter(|s| norm(&s.name) == deep)
        .map(|s| s.depth - r)
        .max()
        .unwrap()
}

#[test]
fn c_program_calls_match_perf_and_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (snap, _) = record(dir.path(), "calls", &[], &[exe.to_str().unwrap()]);
    let spans = check_against_perf("calls", &snap, dir.path());
    same_in_chunks("calls", &snap);
    // What calls.c implies: work(50) calls leaf for i % 3 == 0, fib(12)
    // makes 2*fib(13)-1 calls, ops alternate twice/negate over 10 calls,
    // deep_jump recurses 5..0 and longjmps out.
    assert_eq!(count(&spans, "main"), 1);
    assert_eq!(count(&spans, "work"), 1);
    assert_eq!(count(&spans, "leaf"), 17);
    assert_eq!(count(&spans, "fib"), 465);
    assert_eq!(count(&spans, "twice"), 5);
    assert_eq!(count(&spans, "negate"), 5);
    assert_eq!(count(&spans, "deep_jump"), 6);
    assert_eq!(count(&spans, "on_signal"), 1);
    // fib(12) nests 12 deep under main; deep_jump 6 deep.
    assert_eq!(relative_depth(&spans, "main", "fib"), 12);
    assert_eq!(relative_depth(&spans, "main", "deep_jump"), 6);
    // longjmp unwound every deep_jump frame: they all end together.
    let ends: Vec<u64> = spans
        .iter()
        .filter(|s| s.name == "deep_jump")
        .map(|s| s.end)
        .collect();
    assert!(ends.windows(2).all(|w| w[0] == w[1]), "{ends:?}");
}

#[test]
fn cpp_exceptions_match_perf() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exceptions.cpp");
    let (snap, _) = record(dir.path(), "exceptions", &[], &[exe.to_str().unwrap()]);
    let spans = check_against_perf_with("exceptions", &snap, dir.path(), 3);
    same_in_chunks("exceptions", &snap);
    for f in ["main", "thrower"] {
        assert!(count(&spans, f) >= 1, "{f}");
    }
    let max = spans.iter().map(|s| s.depth).max().unwrap();
    assert!(max < 40, "unwinding must not grow the stack: depth {max}");
}

#[test]
fn rust_program_matches_perf() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "rust_prog.rs");
    let (snap, _) = record(dir.path(), "rust", &[], &[exe.to_str().unwrap()]);
    check_against_perf_with("rust", &snap, dir.path(), 3);
    same_in_chunks("rust", &snap);
}

#[test]
fn threads_decode_separately_and_match_perf() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c");
    let (snap, _) = record(dir.path(), "threads", &[], &[exe.to_str().unwrap()]);
    let spans = check_against_perf_with("threads", &snap, dir.path(), 3);
    same_in_chunks("threads", &snap);
    let tids: std::collections::BTreeSet<i32> = spans.iter().map(|s| s.tid).collect();
    assert!(tids.len() >= 2, "{tids:?}");
}

/// Our flow decoder and libipt's block decoder, each under the coarse
/// pass, give the very same spans: names, nesting, times and marks.
fn same_as_over_libipt(name: &str, snap: &Path, ours: &[JsonSpan]) {
    let theirs = decode_json(snap, &["--decoder", "libipt"]);
    assert_eq!(ours.len(), theirs.len(), "{name}: span counts differ");
    if let Some((a, b)) = ours.iter().zip(&theirs).find(|(a, b)| a != b) {
        panic!("{name}: the decoders differ first at\nours:   {a:?}\nlibipt: {b:?}");
    }
}

/// The coarse pass on two cores, cut at every PSB past 4 KiB, gives the
/// very spans one walk gives; and so does the plain walk (`--no-memo`),
/// which replays nothing the memo recorded, nor what the walker made of
/// its entries before.
fn same_in_chunks(name: &str, snap: &Path) {
    // Decoded each time: a model kept by the first would answer the next.
    let one = decode_json(snap, &["--jobs", "1", "--no-cache"]);
    let many = decode_json(snap, &["--jobs", "2", "--chunk", "4K", "--no-cache"]);
    assert_eq!(one.len(), many.len(), "{name}: span counts differ");
    if let Some((a, b)) = one.iter().zip(&many).find(|(a, b)| a != b) {
        panic!("{name}: chunks differ first at\none walk: {a:?}\nchunks:   {b:?}");
    }
    let plain = decode_json(snap, &["--jobs", "1", "--no-cache", "--no-memo"]);
    assert_eq!(one.len(), plain.len(), "{name}: span counts differ");
    if let Some((a, b)) = one.iter().zip(&plain).find(|(a, b)| a != b) {
        panic!("{name}: the plain walk differs first at\nthe memo's: {a:?}\nplain:      {b:?}");
    }
}

/// Code no symbol or unwind table covers: its functions are learned from
/// the calls into them, in trace order. Chunks defer those events to the
/// replay, which must learn them just as one walk does.
#[test]
fn stripped_code_learns_the_same_functions_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("calls");
    let mut cc = Command::new("cc");
    cc.args([
        "-O1",
        "-fno-asynchronous-unwind-tables",
        "-fno-unwind-tables",
        "-s",
        "-o",
    ])
    .arg(&exe)
    .arg(programs_dir().join("calls.c"));
    assert!(cc.status().unwrap().success());
    let (snap, _) = record(dir.path(), "stripped", &[], &[exe.to_str().unwrap()]);
    let spans = decode_json(&snap, &["--jobs", "1"]);
    let learned = spans
        .iter()
        .filter(|s| s.name.starts_with("[unknown] calls+") && s.entry.is_some())
        .count();
    assert!(learned > 100, "{learned} spans of learned functions");
    same_in_chunks("stripped", &snap);
}

/// perf's calls (plus tail calls) per (tid, entry address).
fn perf_calls_per_thread(extracted: &Path) -> BTreeMap<(i32, u64), u64> {
    let mut calls = BTreeMap::new();
    perf_entries(extracted, |tid, ip, _, _| {
        *calls.entry((tid, ip)).or_insert(0) += 1;
    });
    calls
}

#[test]
fn per_cpu_trace_is_divided_among_threads_like_perf_does() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c");
    let (snap, _) = record(
        dir.path(),
        "threads",
        &["--per-cpu"],
        &[exe.to_str().unwrap()],
    );
    let spans = decode_json(&snap, &[]);
    same_as_over_libipt("per-cpu threads", &snap, &spans);
    same_in_chunks("per-cpu threads", &snap);
    let extracted = extract(&snap, dir.path());
    let perf = perf_calls_per_thread(&extracted);
    let mut ours: BTreeMap<(i32, u64), u64> = BTreeMap::new();
    for s in &spans {
        if let (true, Some(e), "call") = (s.called(), s.entry, s.kind.as_str()) {
            *ours.entry((s.tid, e)).or_insert(0) += 1;
        }
    }
    let diffs: Vec<String> = perf
        .iter()
        .filter(|(k, n)| ours.get(k) != Some(n))
        .map(|((tid, a), n)| {
            format!(
                "tid {tid} {a:#x}: perf {n}, ptscope {:?}",
                ours.get(&(*tid, *a))
            )
        })
        .collect();
    println!(
        "per-cpu: {} of {} (thread, function) call counts agree with perf",
        perf.len() - diffs.len(),
        perf.len()
    );
    assert!(diffs.len() <= 3 && perf.len() > 20, "{}", diffs.join("\n"));
    // What threads.c implies, thread by thread: main spins once, the
    // worker once, inside `worker`.
    let tids: std::collections::BTreeSet<i32> = spans.iter().map(|s| s.tid).collect();
    assert_eq!(tids.len(), 2, "{tids:?}");
    let on = |tid: i32, f: &str| {
        spans
            .iter()
            .filter(|s| s.tid == tid && norm(&s.name) == f && s.called())
            .count()
    };
    let main_tid = *tids.iter().min().unwrap();
    let worker_tid = *tids.iter().max().unwrap();
    assert_eq!(on(main_tid, "main"), 1);
    assert_eq!(on(main_tid, "spin"), 1);
    assert_eq!(on(main_tid, "worker"), 0);
    assert_eq!(on(worker_tid, "worker"), 1);
    assert_eq!(on(worker_tid, "spin"), 1);
    assert_eq!(on(worker_tid, "main"), 0);
}

/// Number of instructions in `func` of `exe`, by objdump.
fn instructions_in(exe: &Path, func: &str) -> u64 {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(format!("--disassemble={func}"))
        .arg(exe)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            l.split_once(':').is_some_and(|(a, rest)| {
                u64::from_str_radix(a, 16).is_ok() && !rest.trim().is_empty()
            })
        })
        .count() as u64
}

#[test]
fn emulated_clock_gives_exact_durations_for_a_known_loop() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "timing.c");
    let (snap, _) = record(dir.path(), "timing", &[], &[exe.to_str().unwrap()]);
    let spans = decode_json(&snap, &[]);
    let k = instructions_in(&exe, "step");
    assert!(k >= 10, "step has {k} instructions");
    let steps: Vec<&JsonSpan> = spans.iter().filter(|s| s.name == "step").collect();
    assert_eq!(steps.len(), 1000);
    // From the call's retirement to the ret's: step's own instructions.
    // Known gap: a call that straddles a PSB+ can be off by a few ns (two
    // calls a PSB). How many PSBs fall in the loop varies from run to run
    // (the trace's bytes carry wall time spent in the kernel), so up to 1%
    // of the calls may be off, none by more than 8 ns.
    let wrong: Vec<u64> = steps
        .iter()
        .map(|s| s.end - s.start)
        .filter(|&d| d != k)
        .collect();
    println!("{} of 1000 calls exactly {k} ns", 1000 - wrong.len());
    assert!(
        wrong.len() <= 10 && wrong.iter().all(|&d| d.abs_diff(k) <= 8),
        "{} of 1000 calls are not {k} ns: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    // And the loop around them repeats with a constant period. A call that
    // straddles a PSB+ may shift its own start, which changes the two
    // periods either side of it and no others.
    let mut periods: BTreeMap<u64, usize> = BTreeMap::new();
    for w in steps.windows(2) {
        *periods.entry(w[1].start - w[0].start).or_insert(0) += 1;
    }
    let (_, most) = periods.iter().max_by_key(|p| p.1).unwrap();
    assert!(*most >= 999 - 2 * wrong.len().max(5), "{periods:?}");
}

#[test]
fn stats_and_text_tree() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (snap, _) = record(dir.path(), "calls", &[], &[exe.to_str().unwrap()]);
    let out = ptscope()
        .args(["stats", "--sort", "calls", "--limit", "3"])
        .arg(&snap)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{text}");
    // fib is called most.
    assert!(rows[0].trim_end().ends_with("fib  (calls)"), "{text}");
    assert!(rows[0].trim_start().starts_with("465 "), "{text}");

    let out = ptscope().arg("decode").arg(&snap).output().unwrap();
    assert!(out.status.success());
    let tree = String::from_utf8(out.stdout).unwrap();
    assert!(tree.starts_with("thread "), "{tree}");
    // fib's recursion is indented under main.
    let main_indent = tree
        .lines()
        .find(|l| l.trim_end_matches(" ~").ends_with(" main"))
        .map(|l| {
            l.len()
                - l.trim_start_matches(|c: char| c == ' ' || c.is_ascii_digit())
                    .len()
        })
        .unwrap();
    assert!(main_indent > 0);
}

#[test]
fn perf_script_text_decodes_like_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (snap, _) = record(dir.path(), "calls", &[], &[exe.to_str().unwrap()]);
    let extracted = extract(&snap, dir.path());
    let out = perf_script(
        &extracted,
        &[
            "--itrace=bep",
            "-F",
            "pid,tid,time,flags,ip,addr,sym,symoff,dso,event",
        ],
    );
    let text_file = dir.path().join("calls.perf-script");
    std::fs::write(&text_file, &out.stdout).unwrap();
    let from_text = decode_json(&text_file, &[]);
    let from_snap = decode_json(&snap, &[]);
    // Same program functions, same call counts, same depths.
    for f in [
        "main",
        "work",
        "leaf",
        "fib",
        "twice",
        "negate",
        "deep_jump",
        "on_signal",
    ] {
        assert_eq!(count(&from_text, f), count(&from_snap, f), "{f}");
    }
    assert_eq!(
        relative_depth(&from_text, "main", "fib"),
        relative_depth(&from_snap, "main", "fib")
    );
}

#[test]
fn a_raw_dump_with_raw_images_decodes_the_same_over_either_walker() {
    // The demo's trace as a raw PT dump, and each mapped piece of its
    // binaries as a raw image at its address (what ptxed's --raw takes).
    let dir = tempfile::tempdir().unwrap();
    let (pt, images) = raw_demo(dir.path());
    let args = raw_args(&images);
    let raw = decode_json(&pt, &args);
    assert!(raw.len() > 100, "{} spans", raw.len());
    // Raw images carry no symbols: functions are known by call targets.
    assert!(raw.iter().any(|s| s.name.starts_with("[unknown]")));
    let mut over_libipt = args.clone();
    over_libipt.extend(["--decoder", "libipt"]);
    // Without the trace's timing parameters libipt gives up on time
    // altogether (all spans at 0, so their order is arbitrary); we still
    // read TSC packets. The same spans must come out.
    let tree = |spans: &[JsonSpan]| -> Vec<(usize, String, String)> {
        let mut v: Vec<_> = spans
            .iter()
            .map(|s| (s.depth, s.name.clone(), s.kind.clone()))
            .collect();
        v.sort();
        v
    };
    let (a, b) = (tree(&raw), tree(&decode_json(&pt, &over_libipt)));
    if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
        let r = i.saturating_sub(2)..i + 3;
        panic!(
            "raw trees differ at span {i} ({} vs {} spans)\nours:   {:?}\nlibipt: {:?}",
            a.len(),
            b.len(),
            a.get(r.start..r.end.min(a.len())),
            b.get(r.start..r.end.min(b.len()))
        );
    }
    let (lo, hi) = (
        raw.iter().map(|s| s.start).min(),
        raw.iter().map(|s| s.end).max(),
    );
    assert!(hi > lo, "TSC gives times: {lo:?}..{hi:?} {:?}", &raw[..3]);
    // A raw dump zooms to instructions too (no DWARF in raw images, so no
    // lines): the demo's whole trace, every instruction once.
    let out = ptscope()
        .arg("decode")
        .arg(&pt)
        .args(&args)
        .args(["--level", "insns", "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let n = text.lines().filter(|l| l.contains("\"asm\":")).count();
    let snap = ptscope_formats::snapshot::Snapshot::open(&demo_snapshot()).unwrap();
    let m = ptscope_decoder::decode_snapshot(&snap, &Default::default()).unwrap();
    let first = m.threads[0].checkpoints[0].insn;
    assert_eq!(n as u64, m.threads[0].walk.instructions - first);
}

/// The benchmark generator's snapshots are genuine: libipt decodes a grown
/// snapshot without an error, perf's decoder counts the same calls per
/// function as ours, and those counts are what the generator's period and
/// copies imply.
#[test]
fn grown_snapshots_decode_like_their_source() {
    let dir = tempfile::tempdir().unwrap();
    // The benchmarks' 30 s capture of bench_loop (kept under target/).
    let src = bench_snapshot();
    let big = dir.path().join("grown.ptscope");
    let grown = ptscope::scale::grow(&src, &big, 1 << 20).unwrap();
    assert!(grown.copies >= 10, "{} copies", grown.copies);
    assert!(grown.aux_bytes >= 1 << 20);
    let (_, errors) = libipt_instructions(&big);
    assert!(errors.is_empty(), "libipt: {errors:?}");
    check_against_perf("grown", &big, dir.path());
    same_in_chunks("grown", &big);
    let snap = ptscope_formats::snapshot::Snapshot::open(&big).unwrap();
    let model = ptscope_decoder::decode_snapshot(&snap, &Default::default()).unwrap();
    let (a, b) = model.time_range().unwrap();
    let got = ptscope::scale::calls(&model, a, b + 1);
    assert_eq!(got, grown.expected_calls());
    assert!(grown.period_calls.values().sum::<u64>() > 0);
}

/// Per function, its calls in the spans of `snap` decoded by `engine`.
fn call_counts(snap: &std::path::Path, engine: &str) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for s in decode_json(snap, &["--no-cache", "--decoder", engine]) {
        if s.kind == "call" {
            *counts.entry(s.name).or_insert(0) += 1;
        }
    }
    counts
}

/// The two engines (ptscope's flow decoder and libipt's block decoder)
/// agree on the project's own captures: the same calls of every function,
/// on every test program that runs to its end by itself (with the
/// backend that runs it: QEMU, or single-stepping for PTWRITE).
#[test]
fn both_engines_give_every_function_the_same_calls_on_every_test_program() {
    let dir = tempfile::tempdir().unwrap();
    let programs: [(&str, &[&str], &[&str]); 19] = [
        ("calls.c", &[], &[]),
        ("async_signal.c", &["--size", "64M"], &[]),
        ("exceptions.cpp", &[], &[]),
        ("rust_prog.rs", &["--size", "64M"], &[]),
        ("threads.c", &[], &[]),
        ("relay.c", &[], &[]),
        ("spin.c", &[], &[]),
        ("brief_thread.c", &[], &[]),
        ("late_thread.c", &[], &[]),
        ("inline.c", &[], &[]),
        ("outlier.c", &[], &[]),
        ("timing.c", &[], &[]),
        ("range.c", &[], &[]),
        ("exits_soon.c", &[], &[]),
        ("execs.c", &[], &[]),
        ("bench_loop.c", &[], &["2000"]),
        ("bench_sort.c", &[], &["20"]),
        ("ptwrite.c", &["--backend", "emulated"], &[]),
        ("ptwrite_threads.c", &["--backend", "emulated"], &[]),
    ];
    for (source, extra, args) in programs {
        let exe = build(dir.path(), source);
        let mut argv = vec![exe.to_str().unwrap()];
        argv.extend(args);
        let (snap, _) = record(dir.path(), source, extra, &argv);
        let ours = call_counts(&snap, "ptscope");
        let theirs = call_counts(&snap, "libipt");
        assert!(ours.values().sum::<usize>() > 10, "{source}: {ours:?}");
        let differ: Vec<_> = ours
            .keys()
            .chain(theirs.keys())
            .filter(|f| ours.get(*f) != theirs.get(*f))
            .map(|f| (f, ours.get(f), theirs.get(f)))
            .collect();
        assert!(differ.is_empty(), "{source}: ours, libipt's: {differ:?}");
    }
}

/// A count no tracer's own log gave: `counted` runs 2002 instructions a
/// call, as its source fixes them (a mov, 1000 trips of dec and jnz, a
/// ret). Recorded without timing, each of its three spans lasts exactly
/// that many instructions, captured by single-stepping or under QEMU and
/// decoded by either engine, and nothing warns of marks it cannot place.
#[test]
fn spans_count_the_instructions_the_source_fixes() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "counted.c");
    for backend in ["emulated", "qemu"] {
        let snap = dir.path().join(format!("counted-{backend}.ptscope"));
        run_ok(
            ptscope()
                .args([
                    "record",
                    "-q",
                    "--backend",
                    backend,
                    "--timing",
                    "tsc=0",
                    "-o",
                ])
                .arg(&snap)
                .arg("--")
                .arg(&exe),
            "ptscope record",
        );
        for engine in ["ptscope", "libipt"] {
            let out = run_ok(
                ptscope()
                    .args([
                        "decode",
                        "--no-cache",
                        "--format",
                        "json",
                        "--decoder",
                        engine,
                    ])
                    .arg(&snap),
                "decode",
            );
            let lengths: Vec<u64> = decode_json(&snap, &["--no-cache", "--decoder", engine])
                .iter()
                .filter(|s| s.name == "counted")
                .map(|s| s.end - s.start)
                .collect();
            assert_eq!(lengths, [2002, 2002, 2002], "{backend}, {engine}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("warning"), "{backend}, {engine}: {err}");
        }
    }
}
