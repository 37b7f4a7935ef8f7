//! The shape of the code, held by reading it: within each crate, the
//! modules' imports form no cycle larger than a local pair, so that every
//! module can be read, tested and moved after the ones it uses.
//!
//! How: every `.rs` file of a crate's `src/` belongs to the top-level
//! module its path starts with (`coarse/walker.rs` to `coarse`). A module
//! uses another when its code, outside its unit tests and comments, names
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

/// The top-level module a file belongs to; `None` for the crate root.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
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
/// groups.
fn named(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
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

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::new();
    let mut texts = Vec::new();
    for f in &files {
        if let Some(m) = module_of(src, f) {
            g.entry(m.clone()).or_default();
            texts.push((m, std::fs::read_to_string(f).unwrap()));
        }
    }
    for (m, text) in texts {
        let uses: BTreeSet<String> = named(&code_of(&text))
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
    assert_eq!(
        named("use crate::{a::X, b}; crate::c::f(); // crate::d"),
        ["a", "b", "c", "d"].map(String::from).into()
    );
    assert_eq!(
        named(&code_of(
            "use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests { crate::c }"
        )),
        ["a"].map(String::from).into()
    );
}
