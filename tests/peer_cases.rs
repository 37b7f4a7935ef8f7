//! magic-trace's own replay cases, fed through our perf-script import and
//! stack reconstruction, compared by span tree.
//!
//! The cases live in `../shared/peer-cases/magic-trace/` beside the project
//! (see its README). We compare what must match, the span tree: for every
//! real (non-pseudo) span in tree order, its name and the names of its real
//! ancestors. magic-trace's times are its own heuristic and pseudo-frames
//! (`[untraced]`, `[syscall]`, `[decode error: …]`) sit where its writer
//! happened to put them, so those are compared as counts only.
//!
//! Where ptscope deliberately differs, the case is listed in `DIFFERENT`
//! with the reason, and the test checks our tree for that case instead.

use std::path::{Path, PathBuf};

use ptscope_decoder::event::SpanKind;
use ptscope_decoder::model::{from_script, Model};
use ptscope_decoder::perf_script;

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/peer-cases/magic-trace")
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
        "{} is missing: the peer cases live in ../shared beside the project",
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
        let script = perf_script::import(&case.input, f).unwrap();
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
