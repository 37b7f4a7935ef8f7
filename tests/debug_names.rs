//! End to end: names from separate debug files. Debian strips libc and
//! the dynamic loader and ships their symbols apart (`libc6-dbg`, in
//! `/usr/lib/debug/.build-id`); perf reads them there, and so must we. A
//! C++ program that throws runs through the loader's and glibc's
//! internals, and every function perf names in them, ptscope names alike
//! at the same address.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use ptscope_decoder::event::FuncTable;
use ptscope_decoder::perf_script::{parse_line, ScriptRecord};
use ptscope_decoder::resolve::{ProcessSymbols, Resolve, SymbolCache};
use ptscope_formats::snapshot::Snapshot;

use crate::support::*;

/// A name as both tools can print it: C++ without its parameter list
/// (perf prints none), `@plt` kept.
fn norm(name: &str) -> String {
    let (base, plt) = match name.strip_suffix("@plt") {
        Some(b) => (b, "@plt"),
        None => (name, ""),
    };
    let base = match base.find('(') {
        Some(p) if p > 0 => &base[..p],
        _ => base,
    };
    format!("{base}{plt}")
}

/// Every address perf's decoder names in the snapshot's branches (both
/// ends of each), with perf's name and the binary it is in.
fn perf_names(extracted: &Path) -> BTreeMap<u64, (String, String)> {
    let out = Command::new("perf")
        .arg("--buildid-dir")
        .arg(extracted)
        .args([
            "script",
            "--itrace=b",
            "-F",
            "pid,tid,time,flags,ip,addr,sym,symoff,dso",
            "-i",
        ])
        .arg(extracted.join("perf.data"))
        .output()
        .expect("perf is not installed; the tests need linux-perf (see README)");
    assert!(
        out.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(Some(ScriptRecord::Branch { from, to, .. })) = parse_line(line) else {
            continue;
        };
        for at in [from, to] {
            if let (Some(sym), Some(dso)) = (at.sym, at.dso) {
                names
                    .entry(at.ip)
                    .or_insert_with(|| (sym.to_string(), dso.to_string()));
            }
        }
    }
    names
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// The done-when of separate debug info: a capture of a C++ program that
/// throws names the dynamic loader's and glibc's internals (`_dl_start`,
/// `do_lookup_x`, `_dl_relocate_object`, `__strlen_evex`...) exactly as
/// perf does on the same file, function by function. Before, they were
/// `[unknown] libc.so.6+0x...`: only the stripped binaries' dynamic
/// symbols were read.
#[test]
fn system_libraries_are_named_as_perf_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exceptions.cpp");
    let (snap, _) = record(dir.path(), "exceptions", &[], &[exe.to_str().unwrap()]);
    let extracted = extract(&snap, dir.path());
    let perf = perf_names(&extracted);
    let in_system_libs = |dso: &str| {
        let b = basename(dso);
        b.starts_with("libc.so") || b.starts_with("ld-linux")
    };
    let internals = perf
        .values()
        .filter(|(name, dso)| in_system_libs(dso) && name.starts_with("_dl_"))
        .count();
    assert!(
        internals > 20,
        "perf names only {internals} of the loader's internals: is libc6-dbg installed?"
    );

    // Our resolver, as the decoder builds it for this snapshot, at every
    // address perf names.
    let snapshot = Snapshot::open(&snap).unwrap();
    let trace = snapshot.trace().unwrap();
    let search = ptscope_decoder::names::search(Some(&snapshot), &[], &[], false);
    let (secs, missing) = ptscope_decoder::image::sections_with(&snapshot, &trace, None, &search);
    assert!(missing.is_empty(), "{missing:?}");
    let mut cache = SymbolCache::new(search);
    let mut resolver = ProcessSymbols::new(&secs, &[], &mut cache);
    assert!(cache.notes().is_empty(), "{:?}", cache.notes());
    let mut funcs = FuncTable::default();
    let mut diffs = Vec::new();
    let mut compared = 0;
    for (&ip, (name, dso)) in &perf {
        // PLT stubs are named after their GOT slots' relocations, as
        // objdump names them; perf 6.1 misnames libc's (`@plt` for an
        // IRELATIVE slot, the neighbour's name for the next) and, where it
        // makes no PLT symbols, extends `_init` over the program's PLT.
        let func = resolver.resolve(ip, &mut funcs).func;
        let ours = funcs.name(func).to_string();
        if name.ends_with("@plt") || ours.ends_with("@plt") || ours == "[plt]" {
            continue;
        }
        compared += 1;
        if norm(&ours) != norm(name) {
            diffs.push(format!(
                "{ip:#x} in {}: perf {name}, ptscope {ours}",
                basename(dso)
            ));
        }
    }
    assert!(compared > 300, "perf named only {compared} addresses");
    assert!(
        diffs.is_empty(),
        "{} of {compared} addresses are named otherwise than perf names them:\n{}",
        diffs.len(),
        diffs.join("\n")
    );

    // And as `ptscope decode` shows them: every span that starts at a
    // function's entry bears perf's name for that entry.
    let spans = decode_json(&snap, &["--no-debuginfod"]);
    let mut checked = 0;
    for s in &spans {
        let Some((name, _)) = s.entry.and_then(|e| perf.get(&e)) else {
            continue;
        };
        // The PLT, as above.
        if name.ends_with("@plt") || s.name.ends_with("@plt") || s.name == "[plt]" {
            continue;
        }
        checked += 1;
        assert_eq!(norm(&s.name), norm(name), "the span at {:?}", s.entry);
    }
    assert!(checked > 100, "only {checked} spans start where perf names");
    for internal in ["_dl_start", "_dl_relocate_object", "do_lookup_x"] {
        assert!(
            spans.iter().any(|s| s.name == internal),
            "no span of {internal}"
        );
    }
    assert!(
        !spans
            .iter()
            .any(|s| s.name.starts_with("[unknown] libc.so")
                || s.name.starts_with("[unknown] ld-linux")),
        "code of libc or the loader is still unnamed"
    );
}
