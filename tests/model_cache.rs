//! The decoded-model cache, end to end: a file opened again with the same
//! options is read from the cache and gives the same model, down to every
//! instruction its fine pass re-decodes (per-CPU traces too); an entry that
//! was damaged is never trusted but decoded afresh and written anew; other
//! options are other entries; `--no-cache` neither reads nor writes.

use std::path::{Path, PathBuf};

use ptscope_decoder::Decoded;
use ptscope_decoder::{open, OpenOptions};
use ptscope_decoder::{ModelCache, DEFAULT_CACHE_BYTES};

use crate::support::*;

/// The entries in a cache directory.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    out.retain(|p| p.extension().is_some_and(|e| e == "model"));
    out.sort();
    out
}

fn open_with(file: &Path, cache: &ModelCache, threads: Option<Vec<i32>>) -> Decoded {
    let opts = OpenOptions {
        cache: Some(cache.clone()),
        decode: ptscope_decoder::DecodeOptions {
            threads,
            ..Default::default()
        },
        ..OpenOptions::default()
    };
    let model = open(file, &opts).unwrap();
    // The entry is written on a thread of its own: waited for, as the
    // cache's last handle going waits.
    cache.finish_writes();
    model
}

/// Everything a model holds but its fine pass, as text.
fn whole(m: &Decoded) -> Vec<String> {
    let mut out = m.canonical();
    out.extend(m.warnings.iter().map(|w| format!("warning {w}")));
    out.extend(m.missing_binaries.iter().map(|b| format!("missing {b}")));
    out.push(format!("{:?} {}", m.unit, m.lines.is_some()));
    out
}

#[test]
fn a_file_opened_again_is_read_from_the_cache_as_it_was_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ModelCache::new(dir.path().join("models"), DEFAULT_CACHE_BYTES);
    let demo = demo_snapshot();

    let decoded = open_with(&demo, &cache, None);
    assert_eq!(cache.hits(), 0);
    assert_eq!(entries(cache.dir()).len(), 1);
    let reopened = open_with(&demo, &cache, None);
    assert_eq!(cache.hits(), 1, "the second open was decoded again");
    assert!(decoded.span_count() > 1000);
    assert_eq!(whole(&reopened), whole(&decoded));

    // Other options give another model, so another entry.
    let tid = decoded.threads[0].spans.tid;
    let one = open_with(&demo, &cache, Some(vec![tid]));
    assert_eq!(cache.hits(), 1);
    assert_eq!(entries(cache.dir()).len(), 2);
    assert_eq!(
        whole(&open_with(&demo, &cache, Some(vec![tid]))),
        whole(&one)
    );
    assert_eq!(cache.hits(), 2);
}

#[test]
fn a_damaged_entry_is_decoded_afresh_and_written_anew() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ModelCache::new(dir.path().join("models"), DEFAULT_CACHE_BYTES);
    let demo = demo_snapshot();
    let decoded = open_with(&demo, &cache, None);
    let entry = entries(cache.dir()).pop().unwrap();
    let good = std::fs::read(&entry).unwrap();

    // A flipped byte in the middle, then an entry cut short, then another
    // file altogether: each is decoded afresh, never read.
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    for bad in [
        flipped,
        good[..good.len() / 3].to_vec(),
        b"not a model".to_vec(),
    ] {
        std::fs::write(&entry, &bad).unwrap();
        let again = open_with(&demo, &cache, None);
        assert_eq!(cache.hits(), 0, "a damaged entry was trusted");
        assert_eq!(whole(&again), whole(&decoded));
        assert_eq!(std::fs::read(&entry).unwrap(), good, "not written anew");
    }
    open_with(&demo, &cache, None);
    assert_eq!(cache.hits(), 1);
}

#[test]
fn a_model_whose_names_came_from_files_that_changed_is_decoded_afresh() {
    // The snapshot's program is named from its separate debug file in a
    // --debug-dir: once that file is gone, the cached names are stale.
    let dir = tempfile::tempdir().unwrap();
    let cache = ModelCache::new(dir.path().join("models"), DEFAULT_CACHE_BYTES);
    let exe = build(dir.path(), "calls.c");
    let debug_dir = dir.path().join("debug");
    let id = ptscope_formats::buildid::elf_build_id(&std::fs::read(&exe).unwrap()).unwrap();
    let debug = debug_dir.join(ptscope_formats::buildid::debug_dir_path(&id));
    std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
    run_ok(
        std::process::Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&exe)
            .arg(&debug),
        "objcopy --only-keep-debug",
    );
    run_ok(
        std::process::Command::new("objcopy")
            .arg("--strip-all")
            .arg(&exe),
        "objcopy --strip-all",
    );
    let (snap, _) = record(
        dir.path(),
        "calls",
        &["--no-debug-info"],
        &[exe.to_str().unwrap()],
    );
    let opts = OpenOptions {
        cache: Some(cache.clone()),
        decode: ptscope_decoder::DecodeOptions {
            names: ptscope_decoder::NameOptions {
                lookup: Some(std::sync::Arc::new(ptscope_debuginfo::Search {
                    debug_dirs: vec![debug_dir.clone()],
                    ..Default::default()
                })),
                ..Default::default()
            },
            ..Default::default()
        },
        ..OpenOptions::default()
    };
    let names =
        |m: &Decoded| -> Vec<String> { m.funcs.iter().map(|(_, f)| f.name.clone()).collect() };
    // Each entry is written on a thread of its own: waited for, as a
    // process that exits waits.
    let open = |snap: &Path, opts: &OpenOptions| {
        let m = open(snap, opts).unwrap();
        if let Some(c) = &opts.cache {
            c.finish_writes();
        }
        m
    };
    let named = open(&snap, &opts);
    assert!(names(&named).iter().any(|n| n == "fib"));
    assert_eq!(whole(&open(&snap, &opts)), whole(&named));
    assert_eq!(cache.hits(), 1);
    std::fs::remove_file(&debug).unwrap();
    let unnamed = open(&snap, &opts);
    assert_eq!(cache.hits(), 1, "a stale model was used");
    assert!(!names(&unnamed).iter().any(|n| n == "fib"));
}

/// `ptscope decode ARGS FILE` with the user's cache in `home`.
fn decode_text(home: &Path, file: &Path, args: &[&str]) -> String {
    let out = run_ok(
        ptscope()
            .arg("decode")
            .args(args)
            .arg(file)
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("HOME", home)
            .env_remove("DEBUGINFOD_URLS"),
        "ptscope decode",
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_per_cpu_trace_reopened_from_the_cache_zooms_to_the_same_instructions() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let exe = build(dir.path(), "spin.c");
    let (snap, _) = record(
        dir.path(),
        "spin",
        &["--backend", "emulated", "--per-cpu", "--cpus", "2"],
        &[exe.to_str().unwrap()],
    );
    let models = home.join("cache/ptscope/models");
    let args = ["--format", "json", "--level", "insns"];
    let fresh = decode_text(&home, &snap, &[&args[..], &["--no-cache"]].concat());
    assert!(entries(&models).is_empty(), "--no-cache wrote an entry");
    assert!(
        fresh.lines().count() > 10_000,
        "{} instructions",
        fresh.lines().count()
    );
    let first = decode_text(&home, &snap, &args);
    assert_eq!(entries(&models).len(), 1);
    let entry = entries(&models).pop().unwrap();
    use std::os::unix::fs::MetadataExt;
    let inode = |p: &std::path::Path| std::fs::metadata(p).unwrap().ino();
    let written = inode(&entry);
    let bytes = std::fs::read(&entry).unwrap();
    let reopened = decode_text(&home, &snap, &args);
    // Read, not written again: an entry written anew is a new file
    // renamed into place (another inode); a hit only marks the entry
    // used (its mtime).
    assert_eq!(entries(&models), std::slice::from_ref(&entry));
    assert_eq!(inode(&entry), written, "the entry was written anew");
    assert_eq!(std::fs::read(&entry).unwrap(), bytes);
    assert_eq!(first, fresh);
    assert_eq!(reopened, fresh);
    let spans = ["--format", "json"];
    assert_eq!(
        decode_text(&home, &snap, &spans),
        decode_text(&home, &snap, &[&spans[..], &["--no-cache"]].concat())
    );
}
