//! magic-trace's own replay cases, fed through our perf-script import and
//! stack reconstruction, compared by span tree.
//!
//! The cases live in `tests/fixtures/magic-trace/` (see its README for
//! where they come from and their licence). We compare what must match, the span tree: for every
//! real (non-pseudo) span in tree order, its name and the names of its real
//! ancestors. magic-trace's times are its own heuristic and pseudo-frames
//! (`[untraced]`, `[syscall]`, `[decode error: …]`) sit where its writer
//! happened to put them, so those are compared as counts only.
//!
//! Where ptscope deliberately differs, the case is listed in `DIFFERENT`
//! with the reason, and the test checks our tree for that case instead.
//!
//! Beyond master's replay cases: its synthetic event sequences (and PR
//! 354's), turned into the perf-script text a trace of them would give;
//! and the cases of unmerged pull requests and of an old release, whose
//! expected output is sometimes the bug the PR was about, so each of those
//! tests checks what its case is about.

use std::path::{Path, PathBuf};

use ptscope_decoder::from_script;
use ptscope_decoder::{import_perf_script, parse_script_line, ScriptRecord};
use ptscope_model::Model;
use ptscope_model::SpanKind;

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/magic-trace")
}

struct Case {
    name: String,
    input: String,
    expected: Vec<String>,
}

fn load(path: &Path) -> Case {
    let text = std::fs::read_to_string(path).unwrap();
    let mut input = String::new();
    let mut expected = Vec::new();
    let mut section = 0;
    for line in text.lines() {
        if line.starts_with("===== INPUT") {
            section = 1;
            continue;
        }
        if line.starts_with("===== EXPECTED") {
            section = 2;
            continue;
        }
        match section {
            1 => {
                input.push_str(line);
                input.push('\n');
            }
            2 => expected.push(line.to_string()),
            _ => {}
        }
    }
    Case {
        name: path.file_name().unwrap().to_string_lossy().into_owned(),
        input,
        expected,
    }
}

fn parse_time(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    for (unit, mult) in [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)] {
        if let Some(v) = s.strip_suffix(unit) {
            if let Ok(v) = v.trim().parse::<f64>() {
                return Some(v * mult);
            }
        }
    }
    None
}

fn is_pseudo(name: &str) -> bool {
    name.starts_with("[untraced")
        || name.starts_with("[syscall")
        || name.starts_with("[decode error")
        || name == "[unknown]"
        // magic-trace names unsymbolized code by address, we by module:
        // both are the `[unknown]` region.
        || name.starts_with("[unknown @ ")
}

/// magic-trace's expected output as (real-name paths in tree order,
/// pseudo-span names). Its writer emits BEGIN/END lines whose begins may be
/// deferred; a trace viewer orders them by time (stable), then nests with a
/// stack, and so do we.
fn expected_tree(lines: &[String]) -> (Vec<String>, Vec<String>) {
    let mut evs: Vec<(f64, usize, bool, String)> = Vec::new();
    let mut last = 0.0;
    for (i, l) in lines.iter().enumerate() {
        let Some(rest) = l.strip_prefix("->") else {
            continue;
        };
        let (time, begin, name) = if let Some(p) = rest.find(" BEGIN ") {
            (&rest[..p], true, &rest[p + 7..])
        } else if let Some(p) = rest.find(" END   ") {
            (&rest[..p], false, &rest[p + 7..])
        } else {
            continue;
        };
        let t = parse_time(time).unwrap_or(last);
        last = t;
        let name = name
            .trim()
            .trim_end_matches("[inferred start time]")
            .trim()
            .to_string();
        evs.push((t, i, begin, name));
    }
    evs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut stack: Vec<String> = Vec::new();
    let mut paths = Vec::new();
    let mut pseudo = Vec::new();
    for (_, _, begin, name) in evs {
        if begin {
            if is_pseudo(&name) {
                pseudo.push(name.clone());
            } else {
                let mut p: Vec<&str> = stack
                    .iter()
                    .filter(|n| !is_pseudo(n))
                    .map(String::as_str)
                    .collect();
                p.push(&name);
                paths.push(p.join(" > "));
            }
            stack.push(name);
        } else if let Some(pos) = stack.iter().rposition(|n| *n == name) {
            stack.truncate(pos);
        }
    }
    pseudo.sort();
    (paths, pseudo)
}

/// Our tree in the same form.
fn our_tree(m: &Model) -> (Vec<String>, Vec<String>) {
    let mut paths = Vec::new();
    let mut pseudo = Vec::new();
    for t in &m.threads {
        // Open ancestors: (depth, end, name, real).
        let mut open: Vec<(usize, u64, String, bool)> = Vec::new();
        for (d, i) in t.spans.tree_order() {
            let s = t.spans.lane(d)[i];
            let f = m.funcs.get(s.func());
            while open.last().is_some_and(|o| o.0 >= d) {
                open.pop();
            }
            let real = f.kind == SpanKind::Call && f.name != "[unknown]";
            if real {
                let mut p: Vec<&str> = open.iter().filter(|o| o.3).map(|o| o.2.as_str()).collect();
                p.push(&f.name);
                paths.push(p.join(" > "));
            } else {
                pseudo.push(f.name.clone());
            }
            open.push((d, t.spans.end(d, i), f.name.clone(), real));
        }
    }
    pseudo.sort();
    (paths, pseudo)
}

/// Which side has the extra spans in a deliberate difference.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Extra {
    Ours,
    Theirs,
}

/// Cases where ptscope's tree deliberately differs: the case, why, which
/// side has extra spans and the functions they name (each must account for
/// at least one). Apart from those spans the trees must be the same.
const DIFFERENT: &[(&str, &str, Extra, &[&str])] = &[
    (
        "04_",
        "a jump into the middle of runtime.gopark, which is on the stack, pops down to that \
         frame and keeps it; magic-trace ends it and begins a second gopark",
        Extra::Theirs,
        &["runtime.gopark"],
    ),
    (
        "07_",
        "the trace begins with call_destructors tail-calling _fini: ptscope keeps the jump's \
         source as a zero-length inferred span (where the trace began), magic-trace drops it; \
         and native_iret falls through into native_irq_return_iret, whose iret leaves the \
         kernel: ptscope names the code that ran (as in 08)",
        Extra::Ours,
        &["call_destructors", "native_irq_return_iret"],
    ),
    (
        "08_",
        "__write falls through into __write_nocancel, which makes the syscall and returns: \
         ptscope names the code that ran; magic-trace keeps the first name",
        Extra::Ours,
        &["__write_nocancel"],
    ),
];

/// Cases that do not match yet, with what is known. Kept apart so that a
/// case that starts to match, or one that regresses, fails the test.
const NOT_YET: &[(&str, &str)] = &[];

/// `long` is `short` with extra spans inserted, each naming one of `names`,
/// and every one of `names` named by at least one of them.
fn only_extra(short: &[String], long: &[String], names: &[&str]) -> bool {
    let extra_name = |p: &String| {
        names
            .iter()
            .position(|n| p == n || p.ends_with(&format!(" > {n}")))
    };
    let mut seen = vec![false; names.len()];
    let (mut i, mut j) = (0, 0);
    while j < long.len() {
        if i < short.len() && short[i] == long[j] {
            i += 1;
        } else if let Some(k) = extra_name(&long[j]) {
            seen[k] = true;
        } else {
            return false;
        }
        j += 1;
    }
    i == short.len() && seen.iter().all(|&s| s)
}

#[test]
fn magic_trace_replay_cases_give_the_same_span_tree() {
    let dir = cases_dir().join("master");
    assert!(
        dir.is_dir(),
        "{} is missing: the peer cases live in tests/fixtures/magic-trace",
        dir.display()
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            p.is_file() && n.ends_with(".txt") && ("01".."09").contains(&&n[..2])
        })
        .collect();
    files.sort();
    assert_eq!(files.len(), 8, "in-scope cases 01-08");
    let mut passed = 0;
    let mut report = String::new();
    for f in &files {
        let case = load(f);
        let script = import_perf_script(&case.input, f).unwrap();
        let m = from_script(script);
        let (ours, our_pseudo) = our_tree(&m);
        let (theirs, their_pseudo) = expected_tree(&case.expected);
        let same = ours == theirs;
        if same {
            passed += 1;
        }
        let why = DIFFERENT.iter().find(|d| case.name.starts_with(d.0));
        let not_yet = NOT_YET.iter().any(|n| case.name.starts_with(n.0));
        assert!(
            !(same && not_yet),
            "{} matches now: move it out of NOT_YET",
            case.name
        );
        if not_yet {
            report.push_str(&format!("{}: not yet the same tree\n", case.name));
            continue;
        }
        if let Some(&(_, _, side, names)) = why {
            let ok = match side {
                Extra::Ours => only_extra(&theirs, &ours, names),
                Extra::Theirs => only_extra(&ours, &theirs, names),
            };
            assert!(
                ok,
                "{}: the trees differ by other than the documented {names:?} spans",
                case.name
            );
        }
        report.push_str(&format!(
            "{}: {} ({} spans, pseudo ours {:?} theirs {:?}){}\n",
            case.name,
            if same { "same tree" } else { "DIFFERENT" },
            ours.len(),
            our_pseudo.len(),
            their_pseudo.len(),
            why.map_or(String::new(), |w| format!(" — deliberate: {}", w.1)),
        ));
        if !same && why.is_none() {
            let first = ours
                .iter()
                .zip(&theirs)
                .position(|(a, b)| a != b)
                .unwrap_or(ours.len().min(theirs.len()));
            report.push_str(&format!(
                "  first difference at #{first}:\n    ours:   {:?}\n    theirs: {:?}\n",
                ours.get(first),
                theirs.get(first)
            ));
        }
    }
    println!(
        "{report}peer cases: {passed} of {} same tree, {} differ only as documented",
        files.len(),
        DIFFERENT.len()
    );
    assert_eq!(passed + DIFFERENT.len() + NOT_YET.len(), files.len());
    let unexplained = report
        .lines()
        .filter(|l| l.contains("first difference"))
        .count();
    assert_eq!(unexplained, 0, "\n{report}");
}

/// The case in `sub` whose file name starts with `prefix`.
fn case(sub: &str, prefix: &str) -> Case {
    let dir = cases_dir().join(sub);
    let path = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(prefix) && n.ends_with(".txt")
        })
        .unwrap_or_else(|| panic!("no {prefix}* case in {}", dir.display()));
    load(&path)
}

fn decode(case: &Case) -> Model {
    from_script(import_perf_script(&case.input, Path::new(&case.name)).unwrap())
}

/// Paths in which some function is nested inside itself: a staircase,
/// unless the code really recursed.
fn self_nested(paths: &[String]) -> Vec<&String> {
    paths
        .iter()
        .filter(|p| {
            let names: Vec<&str> = p.split(" > ").collect();
            let set: std::collections::HashSet<&&str> = names.iter().collect();
            set.len() < names.len()
        })
        .collect()
}

fn names(paths: &[String]) -> std::collections::BTreeMap<&str, usize> {
    let mut m = std::collections::BTreeMap::new();
    for p in paths {
        *m.entry(p.rsplit(" > ").next().unwrap()).or_default() += 1;
    }
    m
}

// The cases below come from magic-trace pull requests and an old release.
// Their expected output is what magic-trace did then, sometimes the bug
// the PR set out to fix, so each test checks what the case is about.

/// PR 261 shows OCaml Async code; its tree is ours but for the frame the
/// trace began in (the first branch returns from `Base.Int63.fun_4896`,
/// which ptscope keeps as a zero-length inferred span, as in master 07).
/// It also has long runs of branches stamped with one nanosecond, where a
/// stub's zero-length span and the span it tail-calls both contain the
/// calls made at that instant; those calls must stay under the callee.
#[test]
fn pr261_ocaml_async_gives_the_same_tree_but_for_the_first_frame() {
    let c = case("pr", "02_pr261");
    let (ours, _) = our_tree(&decode(&c));
    let (theirs, _) = expected_tree(&c.expected);
    assert!(
        only_extra(&theirs, &ours, &["Base.Int63.fun_4896"]),
        "first difference: {:?}",
        ours.iter().zip(&theirs).find(|(a, b)| a != b)
    );
    assert!(ours
        .iter()
        .any(|p| p
            .ends_with("Thread.fun_709 > caml_thread_yield > caml_process_pending_signals_exn")));
}

/// PR 264 shows magic-trace stair-stepping when OCaml exceptions unwind
/// through `caml_apply` closures: functions end up nested inside
/// themselves. Ours must not, and must name the same functions.
#[test]
fn pr264_ocaml_exceptions_do_not_staircase() {
    let c = case("pr", "03_pr264");
    let (ours, _) = our_tree(&decode(&c));
    let (theirs, _) = expected_tree(&c.expected);
    assert!(
        self_nested(&theirs).len() >= 10,
        "the case shows magic-trace's staircase"
    );
    assert_eq!(self_nested(&ours), Vec::<&String>::new());
    let (a, b) = (names(&ours), names(&theirs));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "the same functions ran"
    );
    assert!(
        theirs.len() > ours.len(),
        "the staircase adds spans: {} vs {}",
        theirs.len(),
        ours.len()
    );
}

/// PR 200 shows a Go program exiting: `gogo` jumps into the middle of
/// `runtime.gopark` on a goroutine's stack, which then returns through
/// callers the trace never saw called, up to `main.main`. magic-trace's PR
/// nests those callers inside `gopark`, upside down. ptscope files each as
/// an inferred span beside the last (a stack switch it cannot see leaves
/// the scheduler's frame open below), so no caller sits inside its callee.
#[test]
fn pr200_go_exit_never_nests_a_caller_inside_its_callee() {
    let c = case("pr", "01_pr200");
    let (ours, _) = our_tree(&decode(&c));
    let (theirs, _) = expected_tree(&c.expected);
    let inverted = |paths: &[String]| {
        paths
            .iter()
            .filter(|p| p.contains("runtime.gopark > ") && p.contains("main.main"))
            .count()
    };
    assert!(inverted(&theirs) > 0, "the case shows the inverted nesting");
    assert_eq!(inverted(&ours), 0, "{ours:#?}");
    assert_eq!(names(&ours), names(&theirs), "the same calls");
    assert!(ours
        .iter()
        .any(|p| p.ends_with("main.main > os.Exit > syscall.Exit > runtime.exit.abi0")));
}

/// The 2022 hello world with kernel tracing, in perf 5.x's text: its
/// expected output is stale, so check the semantics. Every page fault
/// (`hw int`) and system call (`syscall`) enters the kernel from a user
/// function, and the kernel's span must nest directly under it.
#[test]
fn old_kernel_tracing_nests_every_kernel_entry_under_the_code_that_made_it() {
    let c = case("old-2022-04", "01_hello");
    let (ours, _) = our_tree(&decode(&c));
    let mut entries = Vec::new();
    for line in c.input.lines() {
        if let Some(ScriptRecord::Branch {
            flags, from, to, ..
        }) = parse_script_line(line).unwrap()
        {
            if matches!(
                flags.kind(),
                ptscope_decoder::EventKind::Syscall | ptscope_decoder::EventKind::Interrupt
            ) {
                entries.push((from.sym.unwrap(), to.sym.unwrap()));
            }
        }
    }
    assert!(entries.len() >= 50, "{} kernel entries", entries.len());
    let kernel: std::collections::HashSet<&str> = entries.iter().map(|e| e.1).collect();
    let spans: Vec<Vec<&str>> = ours
        .iter()
        .map(|p| p.split(" > ").collect::<Vec<_>>())
        .filter(|p| {
            kernel.contains(p.last().unwrap()) && p.len() >= 2 && !kernel.contains(p[p.len() - 2])
        })
        .collect();
    assert_eq!(spans.len(), entries.len());
    for ((from, to), p) in entries.iter().zip(&spans) {
        assert_eq!((p[p.len() - 2], p[p.len() - 1]), (*from, *to), "{p:?}");
    }
}

/// magic-trace's synthetic cases: `KIND TIME_NS DST_SYMBOL` events, with
/// sources implied by a shadow stack (the case files' header), and the
/// Fuchsia trace records its writer made of them.
struct Synthetic {
    name: String,
    events: Vec<(String, u64, String)>,
    /// The records' begins and ends, as `expected_tree` reads them.
    expected: Vec<String>,
}

fn synthetic(path: &Path) -> Synthetic {
    let text = std::fs::read_to_string(path).unwrap();
    let (_, rest) = text.split_once("===== INPUT").unwrap();
    let (input, expected) = rest.split_once("===== EXPECTED").unwrap();
    let events = input
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (kind, time, name) = (w.next()?, w.next()?, w.next()?);
            Some((kind.to_string(), time.parse().ok()?, name.to_string()))
        })
        .collect();
    // Interned strings, then each event's time, name and type.
    let mut strings = std::collections::HashMap::new();
    let mut out = Vec::new();
    let records: Vec<&str> = expected.split("\n(").collect();
    for r in records {
        let r = r.replace('\n', " ");
        if let Some(rest) = r.strip_prefix("Interned_string (index ") {
            let (index, rest) = rest.split_once(") (value ").unwrap();
            let value = rest.trim_end().trim_end_matches("))").trim_matches('"');
            strings.insert(index.to_string(), value.to_string());
        } else if r.starts_with("Event") {
            let field = |key: &str| {
                let at = r.find(&format!("({key} ")).unwrap() + key.len() + 2;
                r[at..at + r[at..].find(')').unwrap()].to_string()
            };
            let kind = if field("event_type") == "Duration_begin" {
                "BEGIN"
            } else {
                "END  "
            };
            out.push(format!(
                "-> {} {kind} {}",
                field("timestamp"),
                strings[&field("name")]
            ));
        }
    }
    Synthetic {
        name: path.file_name().unwrap().to_string_lossy().into_owned(),
        events,
        expected: out,
    }
}

/// The `perf script` text a trace of these events would give: each
/// function gets an address, calls and jumps land on its entry, returns
/// just past a call site, and sources come from the shadow stack (0, as
/// perf prints an unknown source, when it is empty).
fn synthetic_script(events: &[(String, u64, String)]) -> String {
    let mut addr: Vec<String> = Vec::new();
    let mut at = |name: &str| -> u64 {
        let i = addr.iter().position(|n| n == name).unwrap_or_else(|| {
            addr.push(name.to_string());
            addr.len() - 1
        });
        0x40_0000 + 0x1000 * i as u64
    };
    let mut shadow: Vec<String> = Vec::new();
    let mut text = String::new();
    for (kind, t, dst) in events {
        let src = match kind.as_str() {
            "Call" => shadow.last().cloned(),
            "Return" => shadow.pop(),
            "Jump" => shadow.pop(),
            other => panic!("unknown synthetic kind {other}"),
        };
        let (flags, dst_off) = match kind.as_str() {
            "Call" => ("call", 0),
            "Return" => ("return", 0x10),
            _ => ("jmp", 0),
        };
        let from = match &src {
            Some(s) => format!("{:x} {s}+0x8 (prog)", at(s) + 8),
            None => "0 [unknown] ([unknown])".to_string(),
        };
        let to = format!("{:x} {dst}+{dst_off:#x} (prog)", at(dst) + dst_off);
        text.push_str(&format!(
            "1234/456 {}.{:09}: 1 branches:uH: {flags} {from} => {to}\n",
            t / 1_000_000_000,
            t % 1_000_000_000
        ));
        match kind.as_str() {
            "Call" | "Jump" => shadow.push(dst.clone()),
            // A return lands in the caller, which is the shadow's top
            // unless the stack began before the trace.
            _ => {
                if shadow.last() != Some(dst) {
                    shadow.push(dst.clone());
                }
            }
        }
    }
    text
}

/// Synthetic cases of a feature ptscope does not have, with why.
const SYNTHETIC_SKIPPED: &[(&str, &str)] = &[(
    "03_filtered",
    "magic-trace's -trigger range filter, which drops what ran outside the \
     start and stop symbols; ptscope keeps the whole snapshot",
)];

#[test]
fn magic_trace_synthetic_cases_give_the_same_span_tree() {
    let mut files = Vec::new();
    for sub in ["master/synthetic", "pr/pr354_synthetic"] {
        let dir = cases_dir().join(sub);
        let mut f: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .collect();
        f.sort();
        files.extend(f);
    }
    assert_eq!(files.len(), 7, "3 master and 4 PR 354 synthetic cases");
    let mut checked = 0;
    for f in &files {
        let case = synthetic(f);
        if SYNTHETIC_SKIPPED.iter().any(|s| case.name.starts_with(s.0)) {
            continue;
        }
        let text = synthetic_script(&case.events);
        let m = from_script(import_perf_script(&text, f).unwrap());
        let (ours, _) = our_tree(&m);
        let (theirs, _) = expected_tree(&case.expected);
        assert!(!theirs.is_empty(), "{}: no expected spans read", case.name);
        assert_eq!(ours, theirs, "{}\n{text}", case.name);
        assert!(
            self_nested(&ours).len() <= self_nested(&theirs).len(),
            "{}: a staircase",
            case.name
        );
        checked += 1;
    }
    assert_eq!(checked, files.len() - SYNTHETIC_SKIPPED.len());
}
