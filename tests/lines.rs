//! Line-level zoom end to end: `ptscope decode --level insns|lines` over
//! emulated captures of the test programs, judged by perf's decoder
//! (`perf script --itrace=i1i`), libipt's instruction decoder and binutils'
//! addr2line, none of which share code with ours.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use crate::support::{
    build, decode_json, extract, libipt_instructions, perf_script, ptscope, record,
};

/// One instruction of ours: address and innermost `file:line` (basename).
struct OurInsn {
    ip: u64,
    line: Option<String>,
}

/// A JSON field that may be absent: a string unescaped, anything else as
/// its text.
fn field(line: &str, key: &str) -> Option<String> {
    let object: serde_json::Value = serde_json::from_str(line).ok()?;
    match object.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn decode_out(snap: &Path, args: &[&str]) -> String {
    let out = ptscope()
        .arg("decode")
        .arg(snap)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ptscope decode {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn our_insns(snap: &Path, tid: i32, from: u64, to: u64) -> Vec<OurInsn> {
    let text = decode_out(
        snap,
        &[
            "--level",
            "insns",
            "--format",
            "json",
            "--from",
            &from.to_string(),
            "--to",
            &to.to_string(),
        ],
    );
    text.lines()
        .filter(|l| field(l, "tid") == Some(tid.to_string()))
        .map(|l| OurInsn {
            ip: field(l, "ip").unwrap().parse().unwrap(),
            line: field(l, "file")
                .map(|f| format!("{}:{}", basename(&f), field(l, "line").unwrap())),
        })
        .collect()
}

/// One instruction as perf reports it: address, symbol, offset, dso.
#[derive(Clone, Debug)]
struct PerfInsn {
    ip: u64,
    sym: String,
    off: u64,
    dso: String,
}

fn perf_insns(extracted: &Path) -> BTreeMap<i32, Vec<PerfInsn>> {
    let out = perf_script(extracted, &["--itrace=i1ie", "-F", "tid,ip,sym,symoff,dso"]);
    let mut per: BTreeMap<i32, Vec<PerfInsn>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim();
        let Some((tid, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let rest = rest.trim_start();
        let Some((ip, rest)) = rest.split_once(char::is_whitespace) else {
            continue;
        };
        let (Ok(tid), Ok(ip)) = (tid.parse::<i32>(), u64::from_str_radix(ip, 16)) else {
            continue;
        };
        let (symoff, dso) = match rest.rfind(" (") {
            Some(i) => (&rest[..i], rest[i + 2..].trim_end_matches(')')),
            None => (rest, ""),
        };
        let (sym, off) = match symoff.rsplit_once("+0x") {
            Some((s, o)) => (s, u64::from_str_radix(o, 16).unwrap_or(0)),
            None => (symoff, 0),
        };
        per.entry(tid).or_default().push(PerfInsn {
            ip,
            sym: sym.to_string(),
            off,
            dso: dso.to_string(),
        });
    }
    per
}

/// Where `needle` occurs in `hay`, comparing with `eq`.
fn find<A, B>(hay: &[A], needle: &[B], eq: impl Fn(&A, &B) -> bool) -> Option<usize> {
    (0..=hay.len().checked_sub(needle.len())?)
        .find(|&k| needle.iter().zip(&hay[k..]).all(|(n, h)| eq(h, n)))
}

/// binutils' `file:line` of addresses in `exe` (innermost, basename,
/// without discriminators); `None` where it knows no line.
fn addr2line(exe: &Path, svmas: &[u64]) -> HashMap<u64, Option<String>> {
    let mut cmd = Command::new("addr2line");
    cmd.arg("-e").arg(exe);
    for a in svmas {
        cmd.arg(format!("{a:#x}"));
    }
    let out = cmd.output().expect("addr2line (binutils) is needed");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    svmas
        .iter()
        .zip(text.lines())
        .map(|(&a, l)| {
            let l = l.split(" (discriminator").next().unwrap();
            (a, (!l.starts_with("??")).then(|| basename(l).to_string()))
        })
        .collect()
}

fn symbols(exe: &Path) -> HashMap<String, u64> {
    let out = Command::new("nm")
        .arg("--defined-only")
        .arg(exe)
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let addr = u64::from_str_radix(it.next()?, 16).ok()?;
            let _kind = it.next()?;
            Some((it.next()?.to_string(), addr))
        })
        .collect()
}

/// Consecutive duplicates folded: a line sequence.
fn fold(lines: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in lines {
        if out.last() != Some(&l) {
            out.push(l);
        }
    }
    out
}

/// For the window of `func`'s first call in every thread that runs it:
/// our instructions are a run of perf's and of libipt's, and the line of
/// each one in `exe` is the line addr2line gives for perf's address.
/// Returns (instructions compared, windows, longest line sequence).
fn check_window(exe: &Path, snap: &Path, dir: &Path, func: &str) -> (usize, usize, usize) {
    check_window_with(exe, snap, dir, func, true)
}

/// [`check_window`]; `with_libipt`: also against libipt's instruction
/// decoder (which walks per-thread queues only).
fn check_window_with(
    exe: &Path,
    snap: &Path,
    dir: &Path,
    func: &str,
    with_libipt: bool,
) -> (usize, usize, usize) {
    let spans = decode_json(snap, &[]);
    let perf = perf_insns(&extract(snap, dir));
    let libipt = if with_libipt {
        libipt_instructions(snap).0
    } else {
        Default::default()
    };
    let syms = symbols(exe);
    let exe_name = exe.to_str().unwrap();
    let mut compared = 0;
    let mut windows = 0;
    let mut longest = 0;
    for s in spans.iter().filter(|s| s.name == func) {
        if spans
            .iter()
            .any(|o| o.tid == s.tid && o.name == func && o.start < s.start)
        {
            continue;
        }
        windows += 1;
        let ours = our_insns(snap, s.tid, s.start, s.end);
        assert!(ours.len() > 200, "{func}: only {} instructions", ours.len());
        let theirs = &perf[&s.tid];
        let at = find(theirs, &ours, |p, o| p.ip == o.ip).unwrap_or_else(|| {
            panic!(
                "{func} (tid {}): our instructions are not a run of perf's",
                s.tid
            )
        });
        if with_libipt {
            let lib = &libipt[&s.tid];
            assert!(
                find(lib, &ours, |l, o| *l == o.ip).is_some(),
                "{func} (tid {}): our instructions are not a run of libipt's",
                s.tid
            );
        }
        let run = &theirs[at..at + ours.len()];
        // PLT stubs have no symbol in nm and no line in DWARF.
        for (i, p) in run.iter().enumerate() {
            if p.dso == exe_name && p.sym.ends_with("@plt") {
                assert_eq!(ours[i].line, None, "{p:?}");
            }
        }
        let in_exe: Vec<(usize, u64)> = run
            .iter()
            .enumerate()
            .filter(|(_, p)| p.dso == exe_name && !p.sym.ends_with("@plt"))
            .map(|(i, p)| {
                let base = syms
                    .get(&p.sym)
                    .unwrap_or_else(|| panic!("nm has no {p:?}"));
                (i, base + p.off)
            })
            .collect();
        let mut addrs: Vec<u64> = in_exe.iter().map(|x| x.1).collect();
        addrs.sort_unstable();
        addrs.dedup();
        let lines = addr2line(exe, &addrs);
        for &(i, svma) in &in_exe {
            assert_eq!(
                ours[i].line, lines[&svma],
                "{func}: instruction {i} at {svma:#x}"
            );
        }
        let ours_seq = fold(in_exe.iter().filter_map(|&(i, _)| ours[i].line.clone()));
        let theirs_seq = fold(in_exe.iter().filter_map(|&(_, a)| lines[&a].clone()));
        assert_eq!(ours_seq, theirs_seq);
        longest = longest.max(ours_seq.len());
        compared += in_exe.len();
    }
    assert!(windows >= 1, "{func} never ran");
    (compared, windows, longest)
}

#[test]
fn instructions_and_lines_match_perf_libipt_and_addr2line() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (snap, _) = record(dir.path(), "calls", &[], &[exe.to_str().unwrap()]);
    let (n, _, seq) = check_window(&exe, &snap, dir.path(), "work");
    assert!(n > 300 && seq > 10, "{n} {seq}");
    let (n, _, seq) = check_window(&exe, &snap, dir.path(), "main");
    assert!(n > 1000 && seq > 50, "{n} {seq}");
}

#[test]
fn every_thread_zooms_to_lines_like_perf() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c");
    let (snap, _) = record(dir.path(), "threads", &[], &[exe.to_str().unwrap()]);
    // Both threads run spin: each window is checked.
    let (n, windows, _) = check_window(&exe, &snap, dir.path(), "spin");
    assert!(windows >= 2 && n > 3000, "{windows} {n}");
}

#[test]
fn a_per_cpu_trace_zooms_to_each_threads_lines_like_perf() {
    // One CPU's queue holds both threads: each window must keep only its
    // own thread's instructions.
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c");
    let (snap, _) = record(
        dir.path(),
        "threads",
        &["--per-cpu"],
        &[exe.to_str().unwrap()],
    );
    let (n, windows, _) = check_window_with(&exe, &snap, dir.path(), "spin", false);
    assert!(windows >= 2 && n > 3000, "{windows} {n}");
}

#[test]
fn zooming_reaches_a_thread_that_ran_only_between_two_psbs() {
    // The second thread runs a few hundred instructions on the one CPU:
    // its PSB checkpoint, if it had to be one at a PSB in its own run,
    // would rarely exist. Every thread's instructions must be there to
    // zoom into, exactly as perf decodes them: none lost at a segment's
    // ends either (a PSB just after tracing resumes once lost one).
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "brief_thread.c");
    let (snap, _) = record(
        dir.path(),
        "brief",
        &["--backend", "emulated", "--per-cpu"],
        &[exe.to_str().unwrap()],
    );
    let perf = perf_insns(&extract(&snap, dir.path()));
    assert_eq!(perf.len(), 2, "two threads");
    let all = decode_out(&snap, &["--level", "insns", "--format", "json"]);
    for (tid, theirs) in &perf {
        let ours: Vec<u64> = all
            .lines()
            .filter(|l| field(l, "tid") == Some(tid.to_string()))
            .map(|l| field(l, "ip").unwrap().parse().unwrap())
            .collect();
        let theirs: Vec<u64> = theirs.iter().map(|p| p.ip).collect();
        assert!(
            ours == theirs,
            "tid {tid}: {} instructions, perf {}; first difference at {:?}",
            ours.len(),
            theirs.len(),
            (0..ours.len().max(theirs.len())).find(|&i| ours.get(i) != theirs.get(i))
        );
    }
    let brief = decode_json(&snap, &[])
        .into_iter()
        .find(|s| s.name == "brief")
        .expect("brief was called");
    let ours = our_insns(&snap, brief.tid, brief.start, brief.end);
    assert!(ours.len() >= 8 * 3, "brief: {} instructions", ours.len());
}

#[test]
fn an_inlined_call_is_its_own_nested_line_span() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "inline.c");
    let (snap, _) = record(dir.path(), "inline", &[], &[exe.to_str().unwrap()]);
    let (n, _, _) = check_window(&exe, &snap, dir.path(), "churn");
    assert!(n > 200, "{n}");
    let churn = decode_json(&snap, &[])
        .into_iter()
        .find(|s| s.name == "churn")
        .unwrap();
    let text = decode_out(
        &snap,
        &[
            "--level",
            "lines",
            "--format",
            "json",
            "--from",
            &churn.start.to_string(),
            "--to",
            &churn.end.to_string(),
        ],
    );
    struct L {
        depth: u32,
        start: u64,
        end: u64,
        line: u32,
        function: String,
        inlined: bool,
    }
    let lines: Vec<L> = text
        .lines()
        .map(|l| L {
            depth: field(l, "depth").unwrap().parse().unwrap(),
            start: field(l, "start_ns").unwrap().parse().unwrap(),
            end: field(l, "end_ns").unwrap().parse().unwrap(),
            line: field(l, "line").unwrap().parse().unwrap(),
            function: field(l, "function").unwrap(),
            inlined: field(l, "inlined").unwrap() == "true",
        })
        .collect();
    // churn's own lines sit one below its span.
    assert!(lines
        .iter()
        .any(|l| l.function == "churn" && !l.inlined && l.depth as usize == churn.depth + 1));
    // mix runs 40 times, inlined at churn's line 14, with its lines 6 and 7.
    let mixes: Vec<&L> = lines.iter().filter(|l| l.function == "mix").collect();
    assert!(mixes.iter().all(|l| l.inlined && (6..=7).contains(&l.line)));
    assert_eq!(mixes.iter().filter(|l| l.line == 7).count(), 40);
    for m in &mixes {
        let outer = lines.iter().find(|o| {
            o.depth + 1 == m.depth && o.start <= m.start && o.end >= m.end && o.line == 14
        });
        assert!(outer.is_some(), "mix at {} is not under churn:14", m.start);
    }
}

#[test]
fn branch_text_has_no_lines_to_zoom_into() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("script.txt");
    std::fs::write(
        &text,
        "demo 1/1 [000] 1.000000000: 1 branches: call 401000 main+0x0 (/bin/x) => 401100 f+0x0 (/bin/x)\n",
    )
    .unwrap();
    let out = ptscope()
        .args(["decode", "--level", "lines"])
        .arg(&text)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("script.txt") && err.contains("instruction trace"),
        "{err}"
    );
}
