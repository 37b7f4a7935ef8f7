//! Every input that ever made a fuzz target crash, hang or blow up
//! (`tests/fuzz/regressions/<target>/`), every seed, and the corpus the
//! fuzzing rounds built (`tests/fuzz/corpus/<target>.tar.xz`), replayed
//! through the same code the fuzzer runs (`tests/fuzz/targets.rs`), on
//! stable Rust.

use crate::fuzz_targets as targets;

use ptscope_formats::pt::write::{self, IpCompression, IpPacket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

/// Far above what any input takes here; past it the input hangs.
const HANG: Duration = Duration::from_secs(120);

/// The files of `dir`, sorted (none if it does not exist).
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// `tests/fuzz/<kind>/<target>`: a target's seeds, regressions, ...
fn folder(kind: &str, target: &str) -> PathBuf {
    targets::root().join("tests/fuzz").join(kind).join(target)
}

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    files_in(&folder(kind, target))
}

/// Runs `run` on every file, each on a thread of its own so that a hang
/// is reported as one; returns how many ran.
fn replay(target: &str, run: targets::Target, files: &[PathBuf]) -> usize {
    // One walk and chunks agree on every committed input.
    targets::compare_ways(true);
    for file in files {
        let data = std::fs::read(file).unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let ok = std::panic::catch_unwind(|| run(&data)).is_ok();
            let _ = tx.send(ok);
        });
        let name = file.display();
        match rx.recv_timeout(HANG) {
            Ok(true) => {}
            Ok(false) => panic!("{target} panicked on {name}"),
            Err(_) => panic!("{target} hangs on {name}"),
        }
    }
    files.len()
}

fn replay_kind(kind: &str) -> usize {
    targets::TARGETS
        .iter()
        .map(|&(target, run)| replay(target, run, &inputs(kind, target)))
        .sum()
}

#[test]
fn pt_decode_inputs_with_the_demo_prefix_decode_as_the_demo_was_captured() {
    use ptscope_decoder::decoder_config;
    use ptscope_formats::snapshot::Snapshot;
    let snap = Snapshot::open(&targets::root().join("assets/demo/demo.ptscope")).unwrap();
    let mut configured = snap.trace().unwrap();
    targets::configure_pt(&mut configured, targets::DEMO_PT_CONFIG);
    let demo = snap.trace().unwrap();
    assert_eq!(decoder_config(&configured), decoder_config(&demo));
    assert_eq!(configured.features.cpuid, demo.features.cpuid);
    // And the prefix does change it.
    targets::configure_pt(&mut configured, [0x11, 0, 3, 2]);
    let other = decoder_config(&configured);
    assert_eq!((other.family, other.mtc_freq, other.nom_freq), (0, 1, 0));
    assert_eq!((other.cpuid_0x15_ebx, other.cpuid_0x15_eax), (3, 2));
    assert!(!other.filter.is_configured());
    // The high bits record a filter and a TraceStop range in it.
    targets::configure_pt(&mut configured, [0xc3, 10, 40, 1]);
    let filtered = decoder_config(&configured).filter;
    assert_eq!(filtered.ranges().len(), 2, "{filtered}");
    assert!(filtered.ranges()[1].stop);
}

#[test]
fn seeds_pass_every_target() {
    // At least one seed per target, or the fuzzer would start blind.
    for &(target, _) in targets::TARGETS {
        assert!(!inputs("seeds", target).is_empty(), "no seeds for {target}");
    }
    replay_kind("seeds");
}

#[test]
fn inputs_that_found_bugs_stay_fixed() {
    // The folder is there and holds inputs: a missing or renamed one
    // would replay nothing and pass.
    let root = targets::root().join("tests/fuzz/regressions");
    assert!(
        files_in(&root).len() >= 3,
        "{} is missing or nearly empty",
        root.display()
    );
    let n = replay_kind("regressions");
    assert!(n >= 10, "only {n} regression inputs replayed");
}

#[test]
fn the_fuzzed_corpus_still_runs_clean() {
    // Each input reached something no other did (`tests/fuzz/minimize`);
    // a change that makes one crash or hang fails here, not in the next
    // fuzzing round. Replayed as the fuzzer ran it.
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for &(target, run) in targets::AS_FUZZED {
        let archive = targets::root()
            .join("tests/fuzz/corpus")
            .join(format!("{target}.tar.xz"));
        assert!(
            archive.exists(),
            "no corpus for {target}: run tests/fuzz/run, then tests/fuzz/minimize"
        );
        let status = Command::new("tar")
            .arg("-xJf")
            .arg(&archive)
            .arg("-C")
            .arg(dir.path())
            .status()
            .expect("tar runs");
        assert!(status.success(), "tar -xJf {}", archive.display());
        let files = files_in(&dir.path().join(target));
        assert!(!files.is_empty(), "{} is empty", archive.display());
        n += replay(target, run, &files);
    }
    eprintln!("{n} corpus inputs replayed");
}

/// The marks seeds are the encoder's (`ptscope_formats::pt::write`), as
/// every packet a test writes is: each committed file equals what its
/// builder below writes. With `PTSCOPE_WRITE_SEEDS=1` the test writes
/// the files instead, after a builder changes.
#[test]
fn marks_seeds_are_written_by_the_encoder() {
    let rewrite = std::env::var("PTSCOPE_WRITE_SEEDS").is_ok_and(|v| v == "1");
    // (target, file name, builder)
    type Seed = (&'static str, &'static str, fn() -> Vec<u8>);
    let seeds: [Seed; 4] = [
        ("marks", "ptwrites", ptwrites_seed),
        ("marks", "power-events", power_events_seed),
        ("marks", "mtc-timed", mtc_timed_seed),
        ("pt_decode", "marks", pt_decode_marks_seed),
    ];
    for (target, name, build) in seeds {
        let path = folder("seeds", target).join(name);
        let want = build();
        if rewrite {
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        let got = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            got == want,
            "{} is not what the encoder writes (PTSCOPE_WRITE_SEEDS=1 rewrites it)\n\
             committed: {got:02x?}\n\
             encoder:   {want:02x?}",
            path.display()
        );
    }
}

/// A fuzz input of the `marks` and `pt_decode` targets: the configuration
/// bytes ([`targets::configure_pt`]), then the PT.
fn seed(config: [u8; targets::PT_CONFIG_BYTES], pt: &[Vec<u8>]) -> Vec<u8> {
    let mut input = config.to_vec();
    for part in pt {
        input.extend_from_slice(part);
    }
    input
}

/// `marks/ptwrites`: PTWRITEs of both widths, with and without their IP,
/// under the demo's configuration, so that the scan binds a PTW to its
/// FUP and places its marks in time by TSC, MTC, CYC and TMA.
fn ptwrites_seed() -> Vec<u8> {
    seed(targets::DEMO_PT_CONFIG, &[ptwrites()])
}

/// `marks/power-events`: the frequency and power packets (CBR, MWAIT,
/// PWRE, EXSTOP with its IP, PWRX) under the demo's configuration, so
/// that the marks make frequency steps and a sleep.
fn power_events_seed() -> Vec<u8> {
    seed(targets::DEMO_PT_CONFIG, &[power_events()])
}

/// `marks/mtc-timed`: both traces under another configuration, an MTC
/// every CTC tick (period 1), no CPU and no nominal ratio stated, and
/// TSC:CTC 3/2, so that the marks are timed another way.
fn mtc_timed_seed() -> Vec<u8> {
    seed([0x11, 0, 3, 2], &[ptwrites(), power_events()])
}

/// `pt_decode/marks`: both traces under the demo's configuration, read
/// by the packet parser and decoded by both engines over the demo's
/// image, so that a flow decode meets every PTW and power packet.
fn pt_decode_marks_seed() -> Vec<u8> {
    seed(targets::DEMO_PT_CONFIG, &[ptwrites(), power_events()])
}

/// PSB+ at TSC 500 (CBR 10); an 8-byte PTW bound to the FUP after it; a
/// 4-byte PTW without an IP; an MTC; a 4-byte PTW bound to a FUP that
/// updates 16 bits of the last IP; a CYC and a TMA.
fn ptwrites() -> Vec<u8> {
    let mut pt = write::PSB.to_vec();
    write::tsc(&mut pt, 500);
    write::cbr(&mut pt, 10);
    pt.extend(write::PSBEND);
    write::ptw(&mut pt, 0x1122_3344_5566_7788, 8, true);
    write::ip_packet(&mut pt, IpPacket::Fup, 0x40_1234, IpCompression::Full);
    write::ptw(&mut pt, 0x2a, 4, false);
    write::mtc(&mut pt, 0x10);
    write::ptw(&mut pt, 7, 4, true);
    write::ip_packet(&mut pt, IpPacket::Fup, 0x40_1210, IpCompression::Update16);
    write::cyc(&mut pt, 3);
    write::tma(&mut pt, 0x10, 0x20);
    pt
}

/// The marks test's power trace ([`crate::marks::power_events_pt`]).
fn power_events() -> Vec<u8> {
    crate::marks::power_events_pt()
}
