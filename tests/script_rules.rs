//! End to end: one `perf script` text per stack-reconstruction rule (issue 3
//! §4), decoded by the real `ptscope decode` and compared with the tree the
//! rule demands.
//!
//! Each `tests/fixtures/script-rules/NAME.perf` is `perf script --ns
//! --itrace=bep -F pid,tid,time,flags,ip,addr,sym,symoff,dso,event` text (or
//! its perf 5.x form) and `NAME.expected` the tree derived from the rule by
//! hand, never pasted from our output; see the folder's README. The tree is
//! normalized from `--format json`: per thread, every span in tree order as
//! `START END  <2 spaces per depth>NAME [inferred start]`, times in ns since
//! the input's first timestamp.
//!
//! Where ptscope does not (yet) do what a rule demands, the fixture stays as
//! the rule says and is listed in `KNOWN` with the reason; the test then
//! checks that it still differs (in the listed way only), so a fix has to
//! update the list.

use std::path::{Path, PathBuf};

use crate::support::decode_json;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/script-rules")
}

/// How a known difference shows.
#[allow(dead_code)] // `Tree` is for the next one
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// Names, nesting and times agree; only `[inferred start]` marks differ.
    InferredMarks,
    /// The tree itself differs.
    Tree,
}

/// Fixtures whose decoding does not match the rule yet.
const KNOWN: &[(&str, Known, &str)] = &[];

#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    tid: i32,
    depth: usize,
    start: u64,
    end: u64,
    name: String,
    inferred: bool,
}

/// `ptscope decode FILE --format json`, one row per span.
fn decode(file: &Path) -> Vec<Row> {
    decode_json(file, &[])
        .into_iter()
        .map(|s| Row {
            tid: s.tid,
            depth: s.depth,
            start: s.start,
            end: s.end,
            name: s.name,
            inferred: s.inferred,
        })
        .collect()
}

/// The canonical text of a tree: threads by tid, spans in decode order.
fn render(rows: &[Row], ignore_inferred: bool) -> Vec<String> {
    let mut tids: Vec<i32> = rows.iter().map(|r| r.tid).collect();
    tids.sort();
    tids.dedup();
    let mut out = Vec::new();
    for tid in tids {
        out.push(format!("thread {tid}"));
        let rows: Vec<&Row> = rows.iter().filter(|r| r.tid == tid).collect();
        let w = rows
            .iter()
            .map(|r| r.end.to_string().len())
            .max()
            .unwrap_or(1);
        for r in rows {
            out.push(format!(
                "{:>w$} {:>w$}  {}{}{}",
                r.start,
                r.end,
                "  ".repeat(r.depth),
                r.name,
                if r.inferred && !ignore_inferred {
                    " [inferred start]"
                } else {
                    ""
                },
            ));
        }
    }
    out
}

/// Reads an `.expected` file: `#` comments, `thread TID` headers, and
/// `START END  <indent>NAME [inferred start]` rows, whatever the column
/// widths.
fn parse_expected(path: &Path) -> Vec<Row> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows = Vec::new();
    let mut tid = None;
    for (n, line) in text.lines().enumerate() {
        let at = || format!("{}:{}", path.display(), n + 1);
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(t) = line.strip_prefix("thread ") {
            tid = Some(
                t.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{}: bad tid", at())),
            );
            continue;
        }
        let tid = tid.unwrap_or_else(|| panic!("{}: a span before any `thread` line", at()));
        let s = line.trim_start();
        let (start, s) = s.split_once(' ').unwrap_or_else(|| panic!("{}", at()));
        let s = s.trim_start();
        let (end, s) = s.split_once(' ').unwrap_or_else(|| panic!("{}", at()));
        let spaces = 1 + s.len() - s.trim_start().len();
        assert!(
            spaces >= 2 && spaces % 2 == 0,
            "{}: the name must follow END by 2 spaces plus 2 per depth",
            at()
        );
        let name = s.trim_start();
        let (name, inferred) = match name.strip_suffix(" [inferred start]") {
            Some(n) => (n, true),
            None => (name, false),
        };
        rows.push(Row {
            tid,
            depth: (spaces - 2) / 2,
            start: start
                .parse()
                .unwrap_or_else(|_| panic!("{}: bad start", at())),
            end: end.parse().unwrap_or_else(|_| panic!("{}: bad end", at())),
            name: name.to_string(),
            inferred,
        });
    }
    rows
}

/// A line diff (longest common subsequence): `-` expected only, `+` got only.
fn diff(expected: &[String], got: &[String]) -> String {
    let (n, m) = (expected.len(), got.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if expected[i] == got[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    while i < n || j < m {
        if i < n && j < m && expected[i] == got[j] {
            out.push_str(&format!("   {}\n", expected[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!(" + {}\n", got[j]));
            j += 1;
        } else {
            out.push_str(&format!(" - {}\n", expected[i]));
            i += 1;
        }
    }
    out
}

fn fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "perf"))
        .collect();
    files.sort();
    files
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

#[test]
fn every_fixture_decodes_to_the_tree_its_rule_demands() {
    let files = fixtures();
    assert!(files.len() >= 7, "fixtures missing: {files:?}");
    let mut failures = Vec::new();
    let mut report = String::new();
    for file in &files {
        let name = stem(file);
        let expected_path = file.with_extension("expected");
        assert!(
            expected_path.is_file(),
            "{name}: no {}",
            expected_path.display()
        );
        let expected = parse_expected(&expected_path);
        assert!(!expected.is_empty(), "{name}: empty expected tree");
        let got = decode(file);
        let (want, have) = (render(&expected, false), render(&got, false));
        let same = want == have;
        let same_but_marks = render(&expected, true) == render(&got, true);
        let known = KNOWN.iter().find(|k| k.0 == name);
        match (known, same) {
            (None, true) => report.push_str(&format!("{name}: as the rule demands\n")),
            (None, false) => {
                report.push_str(&format!("{name}: DIFFERS\n"));
                failures.push(format!(
                    "{name}: the decoded tree differs from {} (- expected, + ptscope):\n{}",
                    expected_path.display(),
                    diff(&want, &have)
                ));
            }
            (Some(_), true) => failures.push(format!(
                "{name} now decodes as its rule demands: take it out of KNOWN"
            )),
            (Some(&(_, kind, why)), false) => {
                if kind == Known::InferredMarks && !same_but_marks {
                    failures.push(format!(
                        "{name}: listed as differing only in [inferred start] marks, but the tree differs:\n{}",
                        diff(&want, &have)
                    ));
                }
                report.push_str(&format!(
                    "{name}: known difference ({kind:?}): {why}\n{}",
                    diff(&want, &have)
                ));
            }
        }
    }
    println!("{report}");
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Every fixture line is read as a branch event or an error, so the trees
/// above rest on the whole text.
#[test]
fn fixtures_parse_without_skipped_lines() {
    for file in fixtures() {
        let text = std::fs::read_to_string(&file).unwrap();
        let t = ptscope_decoder::import_perf_script(&text, &file).unwrap();
        assert_eq!(
            (t.skipped, t.malformed),
            (0, 0),
            "{}: {:?}",
            file.display(),
            t.first_malformed
        );
        let events: usize = t.threads.iter().map(|th| th.events.len()).sum();
        assert_eq!(events, text.lines().count(), "{}", file.display());
    }
}

/// Jumps into the middle of a function that is not on the stack (PLT0 in
/// `09`, the exception cleanup in `03`) start frames marked `mid_entry`,
/// and only those: their start is exact, so not `inferred_start`.
#[test]
fn mid_function_jumps_are_marked_mid_entry() {
    let mid = |file: &str| -> Vec<(u64, usize, String)> {
        decode_json(&fixtures_dir().join(file), &[])
            .into_iter()
            .filter(|s| s.mid_entry)
            .inspect(|s| assert!(!s.inferred, "{file}: {s:?} is both"))
            .map(|s| (s.start, s.depth, s.name))
            .collect()
    };
    assert_eq!(mid("09-plt-stubs.perf"), [(3, 1, "_init".to_string())]);
    let cleanup: Vec<_> = [225, 475, 725]
        .into_iter()
        .map(|t| (t, 2, "[unknown]".to_string()))
        .collect();
    assert_eq!(mid("03-cxx-exception.perf"), cleanup);
    for file in fixtures() {
        let name = stem(&file);
        if !name.starts_with("03-") && !name.starts_with("09-") {
            assert_eq!(mid(&format!("{name}.perf")), [], "{name}");
        }
    }
}

/// The double enable and disable of `06-double-trace-start` are counted,
/// though not believed.
#[test]
fn double_enable_and_disable_are_counted() {
    let file = fixtures_dir().join("06-double-trace-start.perf");
    let text = std::fs::read_to_string(&file).unwrap();
    let t = ptscope_decoder::import_perf_script(&text, &file).unwrap();
    let m = ptscope_decoder::from_script(t);
    let s = &m.threads[0].stack;
    assert_eq!((s.double_enable, s.double_disable), (2, 1), "{s:?}");
}

/// The README names every fixture.
#[test]
fn readme_lists_every_fixture() {
    let readme = std::fs::read_to_string(fixtures_dir().join("README.md")).unwrap();
    for file in fixtures() {
        let name = stem(&file);
        assert!(readme.contains(&name), "README.md does not list {name}");
    }
}
