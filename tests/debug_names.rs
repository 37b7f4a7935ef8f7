//! End to end: names from separate debug files. Debian strips libc and
//! the dynamic loader and ships their symbols apart (`libc6-dbg`, in
//! `/usr/lib/debug/.build-id`); perf reads them there, and so must we. A
//! C++ program that throws runs through the loader's and glibc's
//! internals, and every function perf names in them, ptscope names alike
//! at the same address.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use ptscope_decoder::{parse_script_line, ScriptRecord};
use ptscope_decoder::{ProcessSymbols, Resolve, SymbolCache};
use ptscope_formats::snapshot::Snapshot;
use ptscope_model::FuncTable;

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
    let out = perf_script(
        extracted,
        &[
            "--itrace=b",
            "-F",
            "pid,tid,time,flags,ip,addr,sym,symoff,dso",
        ],
    );
    let mut names = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(Some(ScriptRecord::Branch { from, to, .. })) = parse_script_line(line) else {
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
    let machine = ptscope_debuginfo::Search {
        debuginfod: None,
        ..ptscope_debuginfo::Search::system()
    };
    let lookup = ptscope_decoder::Lookup::new(Some(&snapshot), Some(std::sync::Arc::new(machine)));
    let (secs, missing) = ptscope_decoder::sections_with(&snapshot, &trace, None, &lookup);
    assert!(missing.is_empty(), "{missing:?}");
    let mut cache = SymbolCache::new(lookup);
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

/// `ptscope decode` of `snap` on a view of this machine without its debug
/// files: an empty tmpfs over `/usr/lib/debug` (in a private mount
/// namespace), an empty home (no `~/.debug`) and no debuginfod.
fn decode_with_debug_hidden(snap: &Path, home: &Path) -> Vec<JsonSpan> {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs none /usr/lib/debug && test -z \"$(ls -A /usr/lib/debug)\" && exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_ptscope"))
        .args(["decode", "--format", "json", "--no-debuginfod"])
        .arg(snap)
        .env("HOME", home)
        .env_remove("DEBUGINFOD_URLS");
    decode_json_by(cmd, snap)
}

/// Names of the spans in libc and the loader, by entry.
fn system_names(spans: &[JsonSpan]) -> BTreeMap<u64, String> {
    spans
        .iter()
        .filter(|s| s.kind == "call")
        .filter_map(|s| Some((s.entry?, s.name.clone())))
        .collect()
}

#[test]
fn a_snapshot_names_system_libraries_where_their_debug_files_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let exe = build(dir.path(), "exceptions.cpp");
    let (snap, _) = record(dir.path(), "exceptions", &[], &[exe.to_str().unwrap()]);

    // The snapshot carries libc's and the loader's debug files, and says so.
    let out = run_ok(ptscope().arg("info").arg(&snap), "ptscope info");
    let info = String::from_utf8_lossy(&out.stdout);
    let carried = info
        .lines()
        .filter(|l| {
            (l.contains("/libc.so") || l.contains("/ld-linux")) && l.contains("debug file from")
        })
        .count();
    assert!(carried >= 2, "{info}");

    // Where this machine has them, and where it has none: the same names.
    let here = system_names(&decode_json(&snap, &["--no-debuginfod"]));
    let hidden = system_names(&decode_with_debug_hidden(&snap, &home));
    assert!(
        ["_dl_start", "_dl_relocate_object", "do_lookup_x"]
            .iter()
            .all(|f| here.values().any(|n| n == f)),
        "{here:?}"
    );
    assert_eq!(hidden, here);

    // Without them (`--no-debug-info`), the same view names less: the
    // names above came from what the snapshot carries.
    let (bare, _) = record(
        dir.path(),
        "exceptions-bare",
        &["--no-debug-info"],
        &[exe.to_str().unwrap()],
    );
    let unnamed = decode_with_debug_hidden(&bare, &home);
    assert!(
        !unnamed.iter().any(|s| s.name == "_dl_relocate_object"),
        "a snapshot without debug files still named the loader's internals"
    );
    assert!(unnamed
        .iter()
        .any(|s| s.name.starts_with("[unknown] ld-linux")));
}

#[test]
fn a_stripped_program_is_named_from_debuginfod_with_its_progress_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let served = dir.path().join("served");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&served).unwrap();
    // The program stripped of every name, its debug file on the server
    // only (no debuglink, nothing in /usr/lib/debug), as for a binary
    // whose `-dbgsym` a distribution serves.
    let exe = build(dir.path(), "calls.c");
    let debug = served.join("calls.debug");
    run_ok(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&exe)
            .arg(&debug),
        "objcopy --only-keep-debug",
    );
    run_ok(
        Command::new("objcopy").arg("--strip-all").arg(&exe),
        "objcopy --strip-all",
    );
    let snap = dir.path().join("calls.ptscope");
    run_ok(
        ptscope()
            .args(["record", "-q", "-o"])
            .arg(&snap)
            .arg("--")
            .arg(&exe)
            .env("HOME", &home)
            .env_remove("DEBUGINFOD_URLS"),
        "ptscope record",
    );
    let server = crate::debuginfod_server::Server::start(&served, 1, &dir.path().join("server"));
    let decode = |extra: &[&str]| {
        let mut cmd = ptscope();
        cmd.args(["decode", "--format", "json"])
            .args(extra)
            .arg(&snap)
            .env("HOME", &home)
            .env("DEBUGINFOD_URLS", &server.url)
            .env("DEBUGINFOD_CACHE_PATH", dir.path().join("client-cache"));
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let names: Vec<String> = decode_json_by(cmd, &snap)
            .into_iter()
            .map(|s| s.name)
            .collect();
        (names, String::from_utf8_lossy(&out.stderr).into_owned())
    };

    // Told not to ask, the program's functions have no names.
    let (names, _) = decode(&["--no-debuginfod"]);
    assert!(!names.iter().any(|n| n == "fib"), "{names:?}");
    // Asked, the server's debug file names them, and stderr says what
    // was fetched from where.
    let (names, stderr) = decode(&[]);
    assert!(names.iter().any(|n| n == "fib"), "{names:?}");
    assert!(names.iter().any(|n| n == "main"), "{names:?}");
    assert!(
        stderr.contains("debuginfod: ") && stderr.contains(&server.url),
        "{stderr}"
    );
}

/// A binary that is not at hand, asked of a debuginfod server that
/// refuses the connection: the decode says so, naming the server, rather
/// than only that the binary is missing.
#[test]
fn a_refusing_debuginfod_server_is_named_when_a_binary_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let exe = build(dir.path(), "calls.c");
    let snap = dir.path().join("calls.ptscope");
    run_ok(
        ptscope()
            .args(["record", "-q", "-o"])
            .arg(&snap)
            .arg("--")
            .arg(&exe)
            .env("HOME", &home),
        "ptscope record",
    );
    // The perf.data alone, the program gone from its path.
    let extracted = extract(&snap, dir.path());
    std::fs::remove_file(&exe).unwrap();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = ptscope()
        .args(["decode", "--no-cache", "--format", "json"])
        .arg(extracted.join("perf.data"))
        .env("HOME", &home)
        .env("DEBUGINFOD_URLS", &url)
        .env("DEBUGINFOD_CACHE_PATH", dir.path().join("client-cache"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("debuginfod server {url} is not reachable"))
            && stderr.contains("executable"),
        "{stderr}"
    );
}
