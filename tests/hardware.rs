//! End to end, issue 6: what of the hardware path runs without Intel PT.
//! The hardware-breakpoint trigger re-arming across snapshots of a running
//! process, the intel-pt backend's refusal on a machine without PT, and the
//! permission checks as a real unprivileged user.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use crate::support::*;

#[test]
fn breakpoint_trigger_rearms_for_each_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "forever.c");
    let mut child = std::process::Command::new(&exe).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let pid = child.id();
    let out_path = dir.path().join("tick.ptscope");
    let out = ptscope()
        .args(["attach", "-q", "--pid", &pid.to_string()])
        .args([
            "--trigger",
            "tick",
            "--snapshots",
            "3",
            "--size",
            "64K",
            "-o",
        ])
        .arg(&out_path)
        .output()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let state = process_state(pid);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        state == "S" || state == "R",
        "target state after detach: {state}"
    );
    assert!(!out_path.exists(), "several snapshots are numbered");
    let tick = symbol_address(&exe, "tick");
    let mut args = Vec::new();
    for n in 1..=3 {
        let snap = dir.path().join(format!("tick-{n}.ptscope"));
        let info = ptscope_formats::snapshot::Snapshot::open(&snap).unwrap();
        let meta = info.metadata.clone().unwrap();
        assert!(meta.stop.contains("entered tick"), "{}", meta.stop);
        let rdi = meta
            .trigger_registers
            .iter()
            .find(|(r, _)| r == "rdi")
            .map(|(_, v)| *v)
            .expect("rdi sampled");
        args.push(rdi);
        // Each snapshot decodes cleanly and ends at tick's first instruction.
        let (ipt, errors) = libipt_instructions(&snap);
        assert!(errors.is_empty(), "snapshot {n}: {errors:?}");
        let trace = info.trace().unwrap();
        let map = trace
            .mmaps
            .iter()
            .find(|m| m.path == exe.to_str().unwrap())
            .unwrap();
        let base = map.start - map.pgoff;
        let last = ipt.values().flat_map(|v| v.last()).copied().max().unwrap();
        let ends_at_tick = ipt
            .values()
            .any(|v| v.last().is_some_and(|&ip| ip - base == tick));
        assert!(
            ends_at_tick,
            "snapshot {n} ends at {last:#x}, tick is {tick:#x}"
        );
    }
    // tick(i) is called with i = 0, 1, 2, ...: each snapshot saw a later call.
    assert!(args.windows(2).all(|w| w[0] < w[1]), "{args:?}");
}

#[test]
fn intel_pt_backend_without_pt_is_a_clear_error() {
    if Path::new("/sys/bus/event_source/devices/intel_pt").exists() {
        return; // A machine with PT: the refusal does not apply.
    }
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("never.ptscope");
    let out = ptscope()
        .args(["record", "--backend", "intel-pt", "-o"])
        .arg(&snap)
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no Intel PT on this machine"), "{err}");
    assert!(
        err.contains("/sys/bus/event_source/devices/intel_pt"),
        "{err}"
    );
    assert!(err.contains("--backend emulated"), "{err}");
    assert!(!snap.exists());
    // auto says why it chose another backend (QEMU here, which the tests
    // install), and captures.
    let out = ptscope()
        .args(["record", "-o"])
        .arg(&snap)
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("auto chose qemu") && err.contains("no Intel PT on this machine"),
        "{err}"
    );
    assert!(snap.exists());
}

#[test]
fn option_errors_are_explained() {
    let out = ptscope()
        .args(["record", "--timing", "cyc=x", "--", "/bin/true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("`x` in `cyc=x` is not a number"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let out = ptscope()
        .current_dir(dir.path())
        .args([
            "record",
            "--backend",
            "emulated",
            "--kernel",
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--kernel needs the intel-pt backend"), "{err}");
}

/// `ptscope check` as an unprivileged user probes the kernel for real:
/// per-thread tracing is allowed at paranoid 2, kernel and per-CPU tracing
/// are refused with the paranoid value and the fixes.
#[test]
fn check_as_an_unprivileged_user_explains_denials() {
    const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";
    let read = || -> i32 {
        std::fs::read_to_string(PARANOID)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    // Root becomes another user for the probe; the default paranoia (2) is
    // set for it if the machine has less, and put back after.
    assert!(
        root,
        "this test runs as root, to probe as an unprivileged user"
    );
    struct Restore(i32);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::write(PARANOID, self.0.to_string());
        }
    }
    let _restore = (read() < 2).then(|| {
        let was = read();
        std::fs::write(PARANOID, "2").expect("setting kernel.perf_event_paranoid = 2");
        Restore(was)
    });
    let paranoid = read();
    assert!(paranoid >= 2, "{paranoid}");
    let out = ptscope()
        .arg("check")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("kernel.perf_event_paranoid = {paranoid}")),
        "{text}"
    );
    assert!(text.contains("CAP_PERFMON no"), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line in {text}"))
            .to_string()
    };
    assert!(line("per-thread").contains("allowed (probed)"), "{text}");
    let kernel = line("kernel ");
    assert!(kernel.contains("denied (probed: EACCES"), "{kernel}");
    assert!(
        kernel.contains("needs kernel.perf_event_paranoid ≤ 1"),
        "{kernel}"
    );
    assert!(
        kernel.contains(&format!("it is {paranoid} here")),
        "{kernel}"
    );
    assert!(kernel.contains("setcap cap_perfmon"), "{kernel}");
    let cpu = line("per-CPU");
    assert!(cpu.contains("denied (probed: EACCES"), "{cpu}");
    assert!(cpu.contains("sysctl kernel.perf_event_paranoid=0"), "{cpu}");
    // Root (CAP_PERFMON) is allowed everything.
    let out = ptscope().arg("check").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("CAP_PERFMON yes"), "{text}");
    assert!(!text.contains("denied"), "{text}");
}
