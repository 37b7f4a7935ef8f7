//! Every input that ever made a fuzz target crash, hang or blow up
//! (`tests/fuzz/regressions/<target>/`), and every seed, replayed through
//! the same code the fuzzer runs (`tests/fuzz/targets.rs`), on stable Rust.

#[path = "fuzz/targets.rs"]
mod targets;

use std::sync::mpsc;
use std::time::Duration;

/// Far above what any input takes here; past it the input hangs.
const HANG: Duration = Duration::from_secs(120);

fn inputs(kind: &str, target: &str) -> Vec<std::path::PathBuf> {
    let dir = targets::root().join("tests/fuzz").join(kind).join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

fn replay(kind: &str) -> usize {
    let mut n = 0;
    for &(target, run) in targets::TARGETS {
        for file in inputs(kind, target) {
            let data = std::fs::read(&file).unwrap();
            let (tx, rx) = mpsc::channel();
            let name = file.display().to_string();
            std::thread::spawn(move || {
                let ok = std::panic::catch_unwind(|| run(&data)).is_ok();
                let _ = tx.send(ok);
            });
            match rx.recv_timeout(HANG) {
                Ok(true) => n += 1,
                Ok(false) => panic!("{target} panicked on {name}"),
                Err(_) => panic!("{target} hangs on {name}"),
            }
        }
    }
    n
}

#[test]
fn seeds_pass_every_target() {
    // At least one seed per target, or the fuzzer would start blind.
    for &(target, _) in targets::TARGETS {
        assert!(!inputs("seeds", target).is_empty(), "no seeds for {target}");
    }
    replay("seeds");
}

#[test]
fn inputs_that_found_bugs_stay_fixed() {
    replay("regressions");
}
