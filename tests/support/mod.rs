//! Shared helpers of the end-to-end tests: building the test programs,
//! running the real `ptscope` binary, and the two judges of a snapshot
//! (perf's decoder and libipt's).

pub mod malformed;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test. Its model cache is the tests' own (under the
/// build's temporary directory), never the user's: tests that open a file
/// again meet it as users do, and a cached model that a change of
/// binaries or debug files makes stale must be decoded afresh.
pub fn ptscope() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptscope"));
    cmd.env(
        "XDG_CACHE_HOME",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-cache"),
    );
    cmd
}

/// The bundled demo snapshot, as the checkout has it (the installed app
/// carries its own copy: `ptscope::demo`).
pub fn demo_snapshot() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo.ptscope")
}

/// The demo's trace as a raw PT dump `demo.pt` in `dir`, and each mapped
/// piece of its binaries as a raw image there, as `IMAGE:ADDR` (what
/// ptxed's --raw takes).
pub fn raw_demo(dir: &Path) -> (PathBuf, Vec<String>) {
    raw_dump(&demo_snapshot(), dir, "demo")
}

/// The first trace of the snapshot `snap` as a raw PT dump `NAME.pt` in
/// `dir`, with its binaries as raw images (see [`raw_demo`]).
pub fn raw_dump(snap: &Path, dir: &Path, name: &str) -> (PathBuf, Vec<String>) {
    let snap = ptscope_formats::snapshot::Snapshot::open(snap).unwrap();
    let trace = snap.trace().unwrap();
    let pt = dir.join(format!("{name}.pt"));
    std::fs::write(&pt, &trace.streams[0].data).unwrap();
    let mut images = Vec::new();
    for (i, m) in trace.mmaps.iter().enumerate() {
        let Some(file) = snap.find_binary(m.build_id.as_deref(), &m.path) else {
            continue;
        };
        let bytes = std::fs::read(&file).unwrap();
        let start = m.pgoff as usize;
        let end = (start + m.len as usize).min(bytes.len());
        if start >= end {
            continue;
        }
        let img = dir.join(format!("{name}-image{i}.bin"));
        std::fs::write(&img, &bytes[start..end]).unwrap();
        images.push(format!("{}:{:#x}", img.display(), m.start));
    }
    assert!(!images.is_empty());
    (pt, images)
}

/// `--raw IMAGE:ADDR` for each of `images`, as arguments.
pub fn raw_args(images: &[String]) -> Vec<&str> {
    images.iter().flat_map(|i| ["--raw", i.as_str()]).collect()
}

pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs")
}

pub fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Compiles a test program from tests/programs into `dir`.
pub fn build(dir: &Path, source: &str) -> PathBuf {
    let src = programs_dir().join(source);
    let stem = Path::new(source).file_stem().unwrap().to_str().unwrap();
    let out = dir.join(stem);
    let mut cmd = match Path::new(source).extension().and_then(|e| e.to_str()) {
        Some("c") => {
            let mut c = Command::new("cc");
            c.args(["-O1", "-g", "-pthread", "-o"])
                .arg(&out)
                .arg(&src)
                .arg("-ldl");
            c
        }
        Some("cpp") => {
            let mut c = Command::new("c++");
            c.args(["-O1", "-g", "-o"]).arg(&out).arg(&src);
            c
        }
        Some("rs") => {
            let mut c = Command::new("rustc");
            c.args(["-O", "-g", "-o"]).arg(&out).arg(&src);
            c
        }
        _ => panic!("unknown source kind {source}"),
    };
    run_ok(&mut cmd, &format!("compiling {source}"));
    out
}

/// Builds tests/programs/plugin.c as a shared library.
pub fn build_plugin(dir: &Path) -> PathBuf {
    let out = dir.join("libplugin.so");
    run_ok(
        Command::new("cc")
            .args(["-O1", "-g", "-shared", "-fPIC", "-o"])
            .arg(&out)
            .arg(programs_dir().join("plugin.c")),
        "compiling plugin.c",
    );
    out
}

/// Records `argv` into `dir/<name>.ptscope` with the instruction log.
/// Returns (snapshot, ground-truth log path).
pub fn record(dir: &Path, name: &str, extra: &[&str], argv: &[&str]) -> (PathBuf, PathBuf) {
    let snap = dir.join(format!("{name}.ptscope"));
    let log = dir.join(format!("{name}.iplog"));
    let mut cmd = ptscope();
    cmd.args(["record", "-q", "-o"])
        .arg(&snap)
        .arg("--ip-log")
        .arg(&log);
    cmd.args(extra).arg("--").args(argv);
    run_ok(&mut cmd, &format!("ptscope record {name}"));
    (snap, log)
}

pub type PerThread = BTreeMap<i32, Vec<u64>>;

/// The ground truth: per thread, every retired instruction pointer as
/// ptrace reported it.
pub fn read_ip_log(path: &Path) -> PerThread {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = PerThread::new();
    for line in text.lines() {
        let (tid, ip) = line.split_once(' ').unwrap();
        out.entry(tid.parse().unwrap())
            .or_default()
            .push(u64::from_str_radix(ip, 16).unwrap());
    }
    out
}

/// Untars a snapshot so perf can read it.
pub fn extract(snap: &Path, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{}.d", snap.file_name().unwrap().to_str().unwrap()));
    std::fs::create_dir_all(&out).unwrap();
    run_ok(
        Command::new("tar").arg("-xf").arg(snap).arg("-C").arg(&out),
        "tar -x",
    );
    out
}

/// `perf script ARGS` on the snapshot `extract`ed to `extracted` (its
/// perf.data, with its binaries as perf's build-id cache); it must succeed.
pub fn perf_script(extracted: &Path, args: &[&str]) -> Output {
    let out = perf_script_as_is(extracted, args);
    assert!(
        out.status.success(),
        "perf script {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`perf_script`], which may fail (perf refuses some fields for some
/// traces): its output as it is.
pub fn perf_script_as_is(extracted: &Path, args: &[&str]) -> Output {
    Command::new("perf")
        .arg("--buildid-dir")
        .arg(extracted)
        .arg("script")
        .args(args)
        .arg("-i")
        .arg(extracted.join("perf.data"))
        .output()
        .expect("perf is not installed; the tests need linux-perf (see README)")
}

/// perf's own decoding of the snapshot, per thread: `perf script
/// --itrace=i1i -F tid,ip` over the extracted perf.data.
pub fn perf_instructions(extracted: &Path) -> (PerThread, String) {
    let out = perf_script(extracted, &["--itrace=i1ie", "-F", "tid,ip"]);
    let mut per = PerThread::new();
    let mut errors = String::from_utf8_lossy(&out.stderr).into_owned();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut it = line.split_whitespace();
        let (Some(tid), Some(ip)) = (it.next(), it.next()) else {
            continue;
        };
        match (tid.parse(), u64::from_str_radix(ip, 16)) {
            (Ok(tid), Ok(ip)) => per.entry(tid).or_default().push(ip),
            _ => {
                errors.push_str(line);
                errors.push('\n');
            }
        }
    }
    (per, errors)
}

/// libipt's decoding of every thread of the snapshot: per thread the
/// instruction pointers and the decode errors. Per-CPU queues are decoded
/// per CPU and their instructions given to threads by the switch records;
/// a thread that ran on several CPUs has its runs put in time order.
pub fn libipt_instructions(snap: &Path) -> (PerThread, Vec<String>) {
    use ptscope_formats::snapshot::Snapshot;
    let snapshot = Snapshot::open(snap).unwrap();
    let trace = snapshot.trace().unwrap();
    let (sections, missing) = ptscope_decoder::sections(&snapshot, &trace, None);
    let mut errors: Vec<String> = missing
        .iter()
        .map(|m| format!("missing binary {m}"))
        .collect();
    let mut per = PerThread::new();
    // Per-CPU queues: per thread, (time its run began, ip).
    let mut runs: std::collections::BTreeMap<i32, Vec<(u64, u64)>> = Default::default();
    for stream in &trace.streams {
        let Some(tid) = stream.tid else {
            // A per-CPU queue: each run of a thread on the CPU starts with
            // a timed TIP.PGE after its switch-in record.
            let cpu = stream.cpu.expect("a per-CPU queue names its CPU");
            let owner = |tsc: u64| {
                let ns = trace.params.tsc_to_ns(tsc);
                trace
                    .switches
                    .iter()
                    .rfind(|s| s.cpu == cpu && s.time <= ns)
                    .map_or(-1, |s| s.tid)
            };
            let stats = ptscope_decoder::libipt::walk_stream(&trace, stream, &sections, |i| {
                runs.entry(owner(i.enabled_tsc))
                    .or_default()
                    .push((i.enabled_tsc, i.ip))
            })
            .unwrap();
            for (off, e) in stats.errors {
                errors.push(format!("cpu {cpu} offset {off:#x}: {e}"));
            }
            continue;
        };
        let mut ips = Vec::new();
        let stats =
            ptscope_decoder::libipt::walk_stream(&trace, stream, &sections, |i| ips.push(i.ip))
                .unwrap();
        for (off, e) in stats.errors {
            errors.push(format!("tid {tid} offset {off:#x}: {e}"));
        }
        per.insert(tid, ips);
    }
    for (tid, mut run) in runs {
        // Runs in time order; a run's instructions keep theirs.
        run.sort_by_key(|r| r.0);
        per.insert(tid, run.into_iter().map(|r| r.1).collect());
    }
    (per, errors)
}

/// `got`, a decoder's instructions (`judge`'s), must equal the log's
/// `truth`, thread by thread; a difference is named by its first index.
pub fn assert_same_instructions(name: &str, judge: &str, truth: &PerThread, got: &PerThread) {
    for (tid, ips) in truth {
        let got = got
            .get(tid)
            .unwrap_or_else(|| panic!("{name}: {judge} has no thread {tid}"));
        if got != ips {
            let first = got
                .iter()
                .zip(ips)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(ips.len()));
            panic!(
                "{name}: {judge} decodes {} instructions for thread {tid}, the log has {}; first difference at #{first}",
                got.len(),
                ips.len()
            );
        }
    }
}

/// ptscope's own instructions, per thread: `ptscope decode --level insns`.
pub fn our_instructions(snap: &Path, extra: &[&str]) -> PerThread {
    let out = ptscope()
        .args(["decode", "--level", "insns", "--format", "json"])
        .args(extra)
        .arg(snap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut per = PerThread::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let tid = v["tid"].as_i64().unwrap() as i32;
        per.entry(tid).or_default().push(v["ip"].as_u64().unwrap());
    }
    per
}

/// One span of `ptscope decode --format json`.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonSpan {
    pub tid: i32,
    pub depth: usize,
    pub start: u64,
    pub end: u64,
    pub name: String,
    pub kind: String,
    /// `inferred_start`: the call began before the trace did.
    pub inferred: bool,
    /// `mid_entry`: entered by a jump into the middle of the function.
    pub mid_entry: bool,
    /// The function's entry address, when known.
    pub entry: Option<u64>,
}

impl JsonSpan {
    /// Entered by a call or tail call that the trace shows: neither
    /// back-dated nor entered mid-function.
    pub fn called(&self) -> bool {
        !self.inferred && !self.mid_entry
    }
}

/// `ptscope decode FILE --format json [extra]`, one span per line.
pub fn decode_json(file: &Path, extra: &[&str]) -> Vec<JsonSpan> {
    let mut cmd = ptscope();
    cmd.args(["decode", "--format", "json"])
        .args(extra)
        .arg(file);
    decode_json_by(cmd, file)
}

/// The spans `cmd`, a `ptscope decode --format json` of `file` run some
/// other way (in another mount namespace, say), prints.
pub fn decode_json_by(mut cmd: Command, file: &Path) -> Vec<JsonSpan> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}: ptscope decode failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| JsonSpan {
            tid: json_field(l, "tid").parse().unwrap(),
            depth: json_field(l, "depth").parse().unwrap(),
            start: json_field(l, "start_ns").parse().unwrap(),
            end: json_field(l, "end_ns").parse().unwrap(),
            name: json_string(l, "name"),
            kind: json_string(l, "kind"),
            inferred: l.contains("\"inferred_start\":true"),
            mid_entry: l.contains("\"mid_entry\":true"),
            entry: l
                .contains("\"entry\":")
                .then(|| json_field(l, "entry").parse().unwrap()),
        })
        .collect()
}

/// `key` of the JSON object on `line`, whatever its type.
fn json_value(line: &str, key: &str) -> serde_json::Value {
    let object: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    object
        .get(key)
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        .clone()
}

/// A JSON number or boolean, as its text.
pub fn json_field(line: &str, key: &str) -> String {
    json_value(line, key).to_string()
}

/// A JSON string value, unescaped (names may hold quotes and backslashes).
pub fn json_string(line: &str, key: &str) -> String {
    match json_value(line, key) {
        serde_json::Value::String(s) => s,
        other => panic!("{key} is not a string but {other} in {line}"),
    }
}

/// The benchmarks' input: a snapshot of bench_loop.c taken with the
/// emulated backend, reused while it is newer than the program's source.
pub fn bench_snapshot() -> PathBuf {
    bench_capture("bench_loop")
}

/// [`bench_snapshot`] of the steady loop `tests/programs/NAME.c`.
pub fn bench_capture(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-coarse");
    std::fs::create_dir_all(&dir).unwrap();
    let snap = dir.join(format!("{name}.ptscope"));
    let src = programs_dir().join(format!("{name}.c"));
    let fresh = |p: &Path| {
        let (Ok(a), Ok(b)) = (std::fs::metadata(p), std::fs::metadata(&src)) else {
            return false;
        };
        a.modified().unwrap() > b.modified().unwrap()
    };
    if fresh(&snap) && std::env::var_os("PTSCOPE_BENCH_RECAPTURE").is_none() {
        println!("input: {} (kept from an earlier run)", snap.display());
        return snap;
    }
    let secs: u64 = std::env::var("PTSCOPE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let exe = build(&dir, &format!("{name}.c"));
    println!("capturing {name} with the emulated backend for {secs} s (ring 64M) ...");
    let t = std::time::Instant::now();
    let out = ptscope()
        .args(["record", "-q", "--backend", "emulated", "--size", "64M"])
        .args(["--duration", &(secs * 1000).to_string(), "-o"])
        .arg(&snap)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ptscope record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "input: {} (captured in {:.1?})",
        snap.display(),
        t.elapsed()
    );
    snap
}

/// The scheduler state letter of a process ("?" when it is gone).
/// The children of process `p` (of all its threads).
pub fn children(p: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{p}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default() + " ")
        .collect::<String>()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}

pub fn process_state(pid: u32) -> String {
    ptscope_capture::procfs::state(pid as i32).map_or("?".into(), String::from)
}

/// The address of `name` in the symbol table of `exe`, by binutils' nm.
pub fn symbol_address(exe: &Path, name: &str) -> u64 {
    let out = Command::new("nm").arg(exe).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<_> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .expect("symbol in nm output")
}

/// An X server of its own for a test that runs the real window: Xvfb on a
/// display it picks itself, killed when this is dropped.
pub struct Xvfb {
    child: std::process::Child,
    display: u32,
}

impl Xvfb {
    pub fn start() -> Xvfb {
        let Some(xvfb) = which("Xvfb") else {
            panic!("Xvfb is not installed; the tests need it (scripts/test installs xvfb)");
        };
        // Xvfb picks a free display itself and prints its number once it
        // is ready (stale sockets in /tmp/.X11-unix do not fool it).
        let mut child = Command::new(&xvfb)
            .args([
                "-displayfd",
                "1",
                "-screen",
                "0",
                "1280x800x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let display: u32 = {
            use std::io::BufRead;
            let mut line = String::new();
            std::io::BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            line.trim().parse().expect("Xvfb told its display")
        };
        Xvfb { child, display }
    }

    /// Points `cmd` at this server (and away from any Wayland one), with
    /// `runtime` as its XDG runtime directory.
    pub fn display_for(&self, cmd: &mut Command, runtime: &Path) {
        cmd.env("DISPLAY", format!(":{}", self.display))
            .env_remove("WAYLAND_DISPLAY")
            .env("XDG_RUNTIME_DIR", runtime);
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A screenshot of a drawn window: a PNG of the window's size whose
/// timeline has spans drawn: enough coloured pixels (span boxes; the rest
/// of the window is greys), in enough colours (one per function).
pub fn check_png(shot: &Path) {
    let bytes = std::fs::read(shot).expect("a screenshot");
    assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
    let mut decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info().unwrap();
    let (width, height) = (reader.info().width, reader.info().height);
    assert!(width >= 1000 && height >= 600, "{width}x{height}");
    let mut buf = vec![0; reader.output_buffer_size().expect("a frame size")];
    let frame = reader.next_frame(&mut buf).unwrap();
    let channels = frame.color_type.samples();
    assert!(channels >= 3, "{:?}", frame.color_type);
    let mut coloured = 0usize;
    let mut colours = std::collections::HashSet::new();
    for px in buf[..frame.buffer_size()].chunks_exact(channels) {
        let (r, g, b) = (px[0], px[1], px[2]);
        let (hi, lo) = (r.max(g).max(b), r.min(g).min(b));
        if hi - lo > 60 {
            coloured += 1;
            colours.insert((r >> 4, g >> 4, b >> 4));
        }
    }
    let total = (width * height) as usize;
    assert!(
        coloured * 100 > total && colours.len() >= 5,
        "{}: {coloured} coloured pixels of {total}, {} colours: no spans drawn",
        shot.display(),
        colours.len()
    );
}

/// A Python with the readers of `tests/requirements.txt` (Perfetto's
/// schema, an FXT parser), in a venv beside the test binaries, made on
/// first use and again when the requirements change.
pub fn python_readers() -> PathBuf {
    static PY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PY.get_or_init(|| {
        let req = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/requirements.txt");
        let wanted = std::fs::read_to_string(&req).unwrap();
        let dir = Path::new(env!("CARGO_BIN_EXE_ptscope"))
            .parent()
            .unwrap()
            .join("python-readers");
        let py = dir.join("bin").join("python");
        let stamp = dir.join("requirements.txt");
        if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
            let _ = std::fs::remove_dir_all(&dir);
            run_ok(
                Command::new("python3").args(["-m", "venv"]).arg(&dir),
                "python3 -m venv (Debian: python3-venv)",
            );
            run_ok(
                Command::new(&py)
                    .args([
                        "-m",
                        "pip",
                        "install",
                        "-q",
                        "--disable-pip-version-check",
                        "-r",
                    ])
                    .arg(&req),
                "pip install -r tests/requirements.txt",
            );
            std::fs::write(&stamp, &wanted).unwrap();
        }
        py
    })
    .clone()
}

pub fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(prog))
            .find(|p| p.is_file())
    })
}

/// Set in a test process [`run_alone`] started.
const ALONE: &str = "PTSCOPE_TEST_ALONE";

/// Runs `test`, an ignored test of this binary that checks
/// [`running_alone`], in a process of its own and fails if it fails: for a
/// test that measures its process (its memory), which the other tests of
/// this one binary would otherwise share.
pub fn run_alone(test: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "{test} failed alone:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run alone: {stdout}"
    );
}

/// Whether this process is one [`run_alone`] started.
pub fn running_alone() -> bool {
    std::env::var_os(ALONE).is_some()
}
