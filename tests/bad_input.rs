//! Bad input: `info` and `packets` answer with a clear error naming the
//! file, a non-zero exit, and no panic; and the malformed-input corpus
//! (`support::malformed`) through `info`, `decode` and `stats`.

use std::path::Path;

use crate::support::*;

fn expect_error(file: &Path, needle: &str) {
    for cmd in ["info", "packets"] {
        let out = ptscope().arg(cmd).arg(file).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{cmd} {}: {err}",
            file.display()
        );
        assert!(!err.contains("panicked"), "{cmd}: {err}");
        assert!(
            err.contains(file.file_name().unwrap().to_str().unwrap()),
            "{cmd}: names the file: {err}"
        );
        assert!(
            err.to_lowercase().contains(needle),
            "{cmd}: says `{needle}`: {err}"
        );
    }
}

#[test]
fn empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("empty.ptscope");
    std::fs::write(&f, b"").unwrap();
    expect_error(&f, "empty");
}

#[test]
fn random_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("random.data");
    std::fs::write(
        &f,
        crate::support::malformed::random_bytes(10_000, 0x1234_5678),
    )
    .unwrap();
    expect_error(&f, "not a perf.data");
}

#[test]
fn directory() {
    let dir = tempfile::tempdir().unwrap();
    expect_error(dir.path(), "directory");
}

#[test]
fn truncated_snapshot_and_perf_data() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c");
    let (snap, _) = record(dir.path(), "whole", &[], &[exe.to_str().unwrap()]);
    let bytes = std::fs::read(&snap).unwrap();
    let cut = dir.path().join("cut.ptscope");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    expect_error(&cut, "truncated");
    // The perf.data inside, cut in its data section.
    let extracted = extract(&snap, dir.path());
    let data = std::fs::read(extracted.join("perf.data")).unwrap();
    let cut = dir.path().join("cut.data");
    std::fs::write(&cut, &data[..data.len() / 2]).unwrap();
    expect_error(&cut, "truncated");
}

#[test]
fn perf_data_without_pt() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("cycles.data");
    let out = std::process::Command::new("perf")
        .args(["record", "-q", "-e", "task-clock", "-o"])
        .arg(&f)
        .args(["--", "true"])
        .output()
        .expect("perf is not installed; the tests need linux-perf (see README)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    expect_error(&f, "no intel pt trace");
}

#[test]
fn missing_file() {
    expect_error(Path::new("/nonexistent/nothing.ptscope"), "no such file");
}

/// Runs `ptscope ARGS`, killing it if it takes more than a minute (a hang
/// is a failure, not a stuck test run).
fn run_bounded(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    use std::io::Read;
    let mut child = ptscope()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let ereader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ptscope {args:?} hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.signal().is_none(),
        "ptscope {args:?} died of {status:?}"
    );
    (
        status.code(),
        reader.join().unwrap(),
        ereader.join().unwrap(),
    )
}

/// Whether a message repeats its cause: `a: b: b`.
fn says_twice(err: &str) -> bool {
    err.match_indices(": ").any(|(k, _)| {
        let tail = &err[k + 2..];
        !tail.is_empty() && err[..k].ends_with(tail)
    })
}

#[test]
fn malformed_corpus_gets_clear_answers() {
    use crate::support::malformed::{corpus, Expect};
    let dir = tempfile::tempdir().unwrap();
    let cases = corpus(dir.path());
    assert!(cases.len() >= 20, "{} cases", cases.len());
    let mut wrong = Vec::new();
    for c in &cases {
        let name = c.path.file_name().unwrap().to_str().unwrap();
        let file = c.path.as_os_str();
        match c.expect {
            Expect::Error(needle) => {
                for cmd in ["info", "decode", "stats"] {
                    let (code, _, err) = run_bounded(&[cmd.as_ref(), file]);
                    let err = err.trim();
                    if code != Some(1)
                        || err.contains("panicked")
                        || !err.contains(name)
                        || !needle.split('|').any(|n| err.to_lowercase().contains(n))
                        || says_twice(err)
                    {
                        wrong.push(format!("{cmd} {name} (want `{needle}`): {code:?} {err}"));
                    }
                }
            }
            Expect::Opens(label) => {
                let (code, out, err) = run_bounded(&["decode".as_ref(), file]);
                if code != Some(0) || !out.contains(label) {
                    wrong.push(format!(
                        "decode {name} (want `{label}`): {code:?} {}",
                        err.trim()
                    ));
                }
                let (code, _, err) = run_bounded(&["stats".as_ref(), file]);
                if code != Some(0) {
                    wrong.push(format!("stats {name}: {code:?} {}", err.trim()));
                }
            }
        }
        for p in &c.must_not_exist {
            if p.exists() {
                wrong.push(format!("{name}: wrote {}", p.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A trace with no PSB cannot be decoded at all: the demo with every PSB
/// overwritten still opens, and both the CLI and the window say why its
/// thread has no calls instead of showing nothing silently.
#[test]
fn a_trace_without_a_psb_is_reported_not_silently_empty() {
    let dir = tempfile::tempdir().unwrap();
    let dst = crate::support::malformed::without_psbs(dir.path());
    let (code, out, err) = run_bounded(&["decode".as_ref(), dst.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("no-psb.ptscope: the 32768 bytes of trace of thread")
            && err.contains("hold no PSB packet to synchronize on"),
        "{err}"
    );
    assert!(out.contains("0 spans"), "{out}");
}

/// A damaged trace that lands in a function calling itself with no trace
/// (the fuzzer's find): the walk gives up on the loop, the stack stops
/// growing at the store's limit, and the user is told why the timeline
/// starts over, instead of the file taking gigabytes or minutes.
#[test]
fn runaway_recursion_is_bounded_and_reported() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fuzz/regressions/snapshot/runaway-recursion");
    let (code, out, err) = run_bounded(&["stats".as_ref(), file.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("runaway-recursion: thread ")
            && err.contains("its calls nested more than 16384 levels deep"),
        "{err}"
    );
    // Each stretch without trace stops at 2^16 runs, here calls. The walk
    // resumes at the next packet with a full IP (as perf does), not only at
    // a PSB, so this damaged trace has five such stretches, not four.
    let calls: u64 = out
        .lines()
        .find(|l| l.contains("demo+0x1159"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .expect("the recursing function's row");
    assert!(calls <= 6 << 16, "{calls} calls\n{out}");
}
