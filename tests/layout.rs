//! The shape of the code, held by reading it: within each crate, the
//! modules' imports form no cycle larger than a local pair, so that every
//! module can be read, tested and moved after the ones it uses.
//!
//! How: every `.rs` file of a crate's `src/` belongs to the top-level
//! module its path starts with (`coarse/walker.rs` to `coarse`), or, in a
//! folder that only groups modules (its `mod.rs` declares and re-exports,
//! and defines nothing: the decoder's `pt/`, `names/`, `passes/`), to the
//! module under it (`pt/flow/walk.rs` to `pt::flow`). A module uses
//! another when its code, outside its unit tests (inline, or in files
//! declared `#[cfg(test)] mod ...;`) and comments, names
//! `crate::other` (in a path or a `use crate::{...}` group). Tarjan's
//! algorithm then finds the strongly connected components of that graph;
//! any of more than two modules is a cycle this test refuses, with the
//! edges that make it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The checkout's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The crates whose module graphs are held, by their `src/` folders.
const CRATES: &[&str] = &[
    "app/src",
    "capture/src",
    "capture/formats/src",
    "capture/debuginfo/src",
    "capture/qemu-plugin/src",
    "decoder/src",
    "decoder/model/src",
    "viewer/src",
];

/// A crate's modules and what each uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether the folder `dir` only groups modules: its `mod.rs` defines
/// nothing of its own.
fn is_group(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("mod.rs")) else {
        return false;
    };
    code_of(&text).lines().all(|l| {
        let l = l.trim();
        l.is_empty()
            || l.starts_with("#[")
            || l.starts_with("pub mod ")
            || l.starts_with("mod ")
            || l.starts_with("pub use ")
            || l.starts_with("use ")
    })
}

/// The module a file belongs to (see the module doc); `None` for the
/// crate root and for a group's own `mod.rs`.
fn module_of(src: &Path, groups: &BTreeSet<String>, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts = rel.components().map(|c| {
        c.as_os_str()
            .to_str()
            .map(|s| s.strip_suffix(".rs").unwrap_or(s))
    });
    let first = parts.next()??;
    if matches!(first, "lib" | "main") {
        return None;
    }
    if groups.contains(first) {
        let second = parts.next()??;
        return (second != "mod").then(|| format!("{first}::{second}"));
    }
    Some(first.to_string())
}

/// `text` without its unit tests and its comments: what the module's own
/// code names.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module named as `crate::name` in `code`, and in `use crate::{...}`
/// groups; `crate::group::name` for a module in a group of `groups`.
fn named(code: &str, groups: &BTreeSet<String>) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        let first: String = s
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        match s[first.len()..].strip_prefix("::") {
            Some(rest) if groups.contains(&first) => {
                let second: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                format!("{first}::{second}")
            }
            _ => first,
        }
    };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

/// The files of modules declared `#[cfg(test)] mod name;` in `files`:
/// unit tests, which may use anything.
fn test_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        // Where a file's child modules live: beside it for `mod.rs` and
        // the crate roots, in the folder of its name otherwise.
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let dir = match stem {
            "mod" | "lib" | "main" => f.parent().unwrap().to_path_buf(),
            _ => f.with_extension(""),
        };
        let mut lines = text.lines().map(str::trim);
        while let Some(l) = lines.next() {
            if l != "#[cfg(test)]" {
                continue;
            }
            let next = lines.next().unwrap_or("");
            if let Some(name) = next
                .strip_prefix("mod ")
                .or_else(|| next.strip_prefix("pub(crate) mod "))
                .and_then(|n| n.strip_suffix(';'))
            {
                out.insert(dir.join(format!("{name}.rs")));
                out.insert(dir.join(name).join("mod.rs"));
            }
        }
    }
    out
}

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let tests = test_files(&files);
    files.retain(|f| !tests.contains(f));
    let groups: BTreeSet<String> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && is_group(p))
        .filter_map(|p| Some(p.file_name()?.to_str()?.to_string()))
        .collect();
    let mut g = Graph::new();
    let mut texts = Vec::new();
    for f in &files {
        if let Some(m) = module_of(src, &groups, f) {
            g.entry(m.clone()).or_default();
            texts.push((m, std::fs::read_to_string(f).unwrap()));
        }
    }
    for (m, text) in texts {
        let uses: BTreeSet<String> = named(&code_of(&text), &groups)
            .into_iter()
            .filter(|n| *n != m && g.contains_key(n))
            .collect();
        g.get_mut(&m).unwrap().extend(uses);
    }
    g
}

/// The strongly connected components of `g` (Tarjan's algorithm).
fn components(g: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        g: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        for w in &s.g[v] {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.stack.contains(&w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_crate_has_an_import_cycle_of_more_than_two_modules() {
    let mut bad = Vec::new();
    for src in CRATES {
        let g = graph(&root().join(src));
        assert!(g.len() > 2, "{src}: its modules were not found");
        for comp in components(&g).into_iter().filter(|c| c.len() > 2) {
            let edges: Vec<String> = comp
                .iter()
                .flat_map(|a| {
                    g[a].iter()
                        .filter(|b| comp.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            bad.push(format!("{src}: {}", edges.join(", ")));
        }
    }
    assert!(bad.is_empty(), "import cycles:\n{}", bad.join("\n"));
}

/// The check itself finds what it is for: a cycle of three modules in a
/// made-up graph, and the pair it allows.
#[test]
fn the_cycle_check_finds_a_cycle_of_three() {
    let g: Graph = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("e", "d")]
        .into_iter()
        .fold(Graph::new(), |mut g, (a, b)| {
            g.entry(a.into()).or_default().insert(b.into());
            g.entry(b.into()).or_default();
            g
        });
    let mut sizes: Vec<usize> = components(&g).iter().map(Vec::len).collect();
    sizes.sort();
    assert_eq!(sizes, [2, 3]);
    let none = BTreeSet::new();
    assert_eq!(
        named("use crate::{a::X, b}; crate::c::f(); // crate::d", &none),
        ["a", "b", "c", "d"].map(String::from).into()
    );
    assert_eq!(
        named(
            &code_of("use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests { crate::c }"),
            &none
        ),
        ["a"].map(String::from).into()
    );
    // In a group folder, the module under it is the node.
    let pt = BTreeSet::from(["pt".to_string()]);
    assert_eq!(
        named("use crate::pt::flow::X; crate::decode::f()", &pt),
        ["decode", "pt::flow"].map(String::from).into()
    );
}
