//! The malformed-input corpus: files a user might be sent or pick by
//! mistake, each made from the bundled demo snapshot (or from nothing),
//! with what ptscope must answer. Built afresh into a test's directory, so
//! it follows the demo and the formats as they change.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What opening a case must give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A clear error naming the file and saying this (lowercase; `|`
    /// separates what each command may say instead).
    Error(&'static str),
    /// It opens; the decoded calls show this label for what is missing.
    Opens(&'static str),
}

#[derive(Debug)]
pub struct Case {
    pub path: PathBuf,
    pub expect: Expect,
    /// Paths a hostile archive aims at: none may exist afterwards.
    pub must_not_exist: Vec<PathBuf>,
}

fn case(path: PathBuf, expect: Expect) -> Case {
    Case {
        path,
        expect,
        must_not_exist: Vec::new(),
    }
}

pub fn demo() -> PathBuf {
    super::demo_snapshot()
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// perf.data header fields (offsets into the file header).
const ATTR_SIZE: usize = 16;
const ATTRS: usize = 24;
const DATA: usize = 40;

/// The AUXTRACE records of a perf.data: (record offset, AUX bytes).
fn aux_records(b: &[u8]) -> Vec<(usize, u64)> {
    let (start, size) = (u64_at(b, DATA) as usize, u64_at(b, DATA + 8) as usize);
    let mut out = Vec::new();
    let mut at = start;
    while at + 8 <= start + size {
        let kind = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let len = u16::from_le_bytes(b[at + 6..at + 8].try_into().unwrap()) as usize;
        if len < 8 {
            break;
        }
        let mut next = at + len;
        if kind == 71 {
            let aux = u64_at(b, at + 8);
            out.push((at, aux));
            next += aux as usize;
        }
        at = next;
    }
    out
}

/// `n` bytes of noise, the same for the same seed.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0; n];
    fastrand::Rng::with_seed(seed).fill(&mut bytes);
    bytes
}

fn write(path: &Path, bytes: &[u8]) -> PathBuf {
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

fn tar(out: &Path, dir: &Path, members: &[&str], extra: &[&str]) -> PathBuf {
    let st = Command::new("tar")
        .args(["--format=gnu", "-cf"])
        .arg(out)
        .arg("-C")
        .arg(dir)
        .args(extra)
        .args(members)
        .status()
        .unwrap();
    assert!(st.success(), "tar {}", out.display());
    out.to_path_buf()
}

/// Sets a tar header's octal size field and mends its checksum.
fn set_tar_size(header: &mut [u8], size: u64) {
    let field = format!("{size:011o}\0");
    header[124..136].copy_from_slice(field.as_bytes());
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header[..512].iter().map(|&b| b as u32).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// Every case, written under `dir`.
pub fn corpus(dir: &Path) -> Vec<Case> {
    use Expect::*;
    let mut v = Vec::new();
    let p = |name: &str| dir.join(name);

    // The demo, unpacked: perf.data, ptscope.json and .build-id/.
    let stage = dir.join("stage");
    std::fs::create_dir_all(&stage).unwrap();
    let st = Command::new("tar")
        .arg("-xf")
        .arg(demo())
        .arg("-C")
        .arg(&stage)
        .status()
        .unwrap();
    assert!(st.success());
    let perf = std::fs::read(stage.join("perf.data")).unwrap();
    let ids: Vec<String> = walk(&stage.join(".build-id"))
        .into_iter()
        .map(|f| {
            f.strip_prefix(&stage)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    // The demo program: the smallest binary that is not the vDSO.
    let prog = ids
        .iter()
        .filter(|f| f.ends_with("/elf"))
        .min_by_key(|f| std::fs::metadata(stage.join(f)).unwrap().len())
        .unwrap()
        .clone();

    // Not snapshots at all.
    v.push(case(write(&p("empty.ptscope"), b""), Error("empty")));
    let d = p("a-directory.ptscope");
    std::fs::create_dir_all(&d).unwrap();
    v.push(case(d, Error("directory")));
    v.push(case(p("missing.ptscope"), Error("no such file")));
    v.push(case(
        write(&p("random.data"), &random_bytes(10_000, 0x1234_5678)),
        Error("not a perf.data"),
    ));
    v.push(case(
        write(
            &p("script-garbage.txt"),
            b"hello\nthis is not perf script\n",
        ),
        Error("perf script|not a perf.data"),
    ));

    // perf.data, broken in each part.
    let mut b = perf.clone();
    b[..8].copy_from_slice(b"PERFILE1");
    v.push(case(
        write(&p("wrong-magic.data"), &b),
        Error("not a perf.data"),
    ));
    v.push(case(
        write(&p("header-cut.data"), &perf[..60]),
        Error("truncated"),
    ));
    let attrs = u64_at(&perf, ATTRS) as usize;
    v.push(case(
        write(&p("attrs-cut.data"), &perf[..attrs + 40]),
        Error("truncated"),
    ));
    let (data, data_len) = (u64_at(&perf, DATA) as usize, u64_at(&perf, DATA + 8));
    v.push(case(
        write(&p("data-cut.data"), &perf[..data + data_len as usize / 2]),
        Error("truncated"),
    ));
    v.push(case(
        write(
            &p("features-cut.data"),
            &perf[..data + data_len as usize + 12],
        ),
        Error("truncated"),
    ));
    let mut b = perf.clone();
    put_u64(&mut b, DATA, perf.len() as u64 + 4096);
    v.push(case(write(&p("data-offset-past-end.data"), &b), Error("")));
    let mut b = perf.clone();
    put_u64(&mut b, ATTR_SIZE, 1 << 40);
    v.push(case(write(&p("attr-size-absurd.data"), &b), Error("")));
    let mut b = perf.clone();
    put_u64(&mut b, DATA + 8, 1 << 50);
    v.push(case(write(&p("data-size-lies.data"), &b), Error("")));
    let aux = aux_records(&perf);
    assert!(!aux.is_empty(), "the demo has an AUX trace");
    let (rec, len) = aux[0];
    let mut b = perf.clone();
    put_u64(&mut b, rec + 8, 1 << 40);
    v.push(case(write(&p("aux-size-too-big.data"), &b), Error("")));
    let mut b = perf.clone();
    put_u64(&mut b, rec + 8, len - 999);
    v.push(case(write(&p("aux-size-too-small.data"), &b), Error("")));
    let mut b = perf.clone();
    // Garbage from 256 bytes past the first PSB, so that decoding starts
    // and then fails.
    let aux_at = rec + 48;
    let psb = ptscope_formats::pt::write::PSB;
    let first = b[aux_at..aux_at + len as usize]
        .windows(16)
        .position(|w| w == psb.as_slice())
        .expect("a PSB in the demo's trace");
    let body = aux_at + first + 256;
    let n = aux_at + len as usize - body;
    b[body..body + n].copy_from_slice(&random_bytes(n, 0xfeed));
    // Garbage PT in a sound file: it opens, and says where decoding failed.
    write(&stage.join("perf.data"), &b);
    let mut members: Vec<&str> = vec!["perf.data", "ptscope.json"];
    members.extend(ids.iter().map(|s| s.as_str()));
    v.push(case(
        tar(&p("pt-garbage.ptscope"), &stage, &members, &[]),
        Opens("[decode error"),
    ));
    write(&stage.join("perf.data"), &perf);

    // Snapshots, broken as archives.
    let whole = std::fs::read(demo()).unwrap();
    v.push(case(
        write(&p("snapshot-cut-in-header.ptscope"), &whole[..300]),
        Error("not a perf.data file or a snapshot archive"),
    ));
    v.push(case(
        write(&p("snapshot-cut.ptscope"), &whole[..whole.len() / 3]),
        Error("truncated"),
    ));
    let mut b = whole.clone();
    set_tar_size(&mut b[..512], (8 << 30) - 1);
    v.push(case(write(&p("member-size-lies.ptscope"), &b), Error("")));
    let no_perf: Vec<&str> = members
        .iter()
        .copied()
        .filter(|m| *m != "perf.data")
        .collect();
    v.push(case(
        tar(&p("no-perf-data.ptscope"), &stage, &no_perf, &[]),
        Error("perf.data"),
    ));
    std::fs::write(stage.join("ptscope.json"), b"{ not json").unwrap();
    v.push(case(
        tar(&p("bad-metadata.ptscope"), &stage, &members, &[]),
        Error("ptscope.json"),
    ));
    let meta = Command::new("tar")
        .arg("-xOf")
        .arg(demo())
        .arg("ptscope.json")
        .output()
        .unwrap()
        .stdout;
    std::fs::write(stage.join("ptscope.json"), meta).unwrap();

    // Binaries missing, stripped, or for another machine: it opens, and
    // labels what it cannot name. The mapped paths are moved first (same
    // lengths), or this machine's own copies would stand in.
    let mut moved = perf.clone();
    for (from, to) in [
        (
            &b"/usr/lib/x86_64-linux-gnu/"[..],
            &b"/missing/x86_64-linux-gnu/"[..],
        ),
        (b"/assets/demo/demo", b"/assets/demo/gone"),
    ] {
        let mut i = 0;
        while let Some(at) = moved[i..].windows(from.len()).position(|w| w == from) {
            moved[i + at..i + at + from.len()].copy_from_slice(to);
            i += at + from.len();
        }
    }
    std::fs::write(stage.join("perf.data"), &moved).unwrap();
    v.push(case(
        tar(
            &p("missing-binaries.ptscope"),
            &stage,
            &["perf.data", "ptscope.json"],
            &[],
        ),
        Opens("[no binary:"),
    ));
    let prog_path = stage.join(&prog);
    let original = std::fs::read(&prog_path).unwrap();
    let st = Command::new("strip")
        .arg("-s")
        .arg(&prog_path)
        .status()
        .unwrap();
    assert!(st.success());
    v.push(case(
        tar(&p("stripped.ptscope"), &stage, &members, &[]),
        Opens("[unknown] "),
    ));
    let mut foreign = original.clone();
    foreign[18..20].copy_from_slice(&183u16.to_le_bytes()); // EM_AARCH64
    std::fs::write(&prog_path, &foreign).unwrap();
    v.push(case(
        tar(&p("foreign-arch.ptscope"), &stage, &members, &[]),
        Opens("[no binary:"),
    ));

    // Hostile archives: links are never followed or made, and nothing is
    // written outside the place ptscope chose.
    std::fs::remove_file(&prog_path).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &prog_path).unwrap();
    v.push(case(
        tar(&p("symlink-member.ptscope"), &stage, &members, &[]),
        Opens("[no binary:"),
    ));
    std::fs::remove_file(&prog_path).unwrap();
    std::fs::hard_link(stage.join("perf.data"), &prog_path).unwrap();
    v.push(case(
        tar(&p("hardlink-member.ptscope"), &stage, &members, &[]),
        Opens("[no binary:"),
    ));
    std::fs::remove_file(&prog_path).unwrap();
    std::fs::write(&prog_path, &original).unwrap();
    let escape = dir.join("escaped-by-dotdot");
    std::fs::write(&escape, b"x").unwrap();
    let inner = stage.join("sub");
    std::fs::create_dir_all(&inner).unwrap();
    // From stage/sub: `../` is the stage, `../../` the corpus directory.
    let mut dotdot: Vec<String> = members.iter().map(|m| format!("../{m}")).collect();
    dotdot.push("../../escaped-by-dotdot".into());
    let dotdot: Vec<&str> = dotdot.iter().map(|s| s.as_str()).collect();
    let out = tar(&p("dotdot-member.ptscope"), &inner, &dotdot, &["-P"]);
    std::fs::remove_file(&escape).unwrap();
    v.push(Case {
        path: out,
        expect: Error("escapes the archive"),
        must_not_exist: vec![escape],
    });
    let abs = dir.join("escaped-by-absolute-path");
    std::fs::write(&abs, b"x").unwrap();
    let mut absolute: Vec<&str> = members.clone();
    let abs_s = abs.to_str().unwrap().to_string();
    absolute.push(&abs_s);
    let out = tar(&p("absolute-member.ptscope"), &stage, &absolute, &["-P"]);
    std::fs::remove_file(&abs).unwrap();
    v.push(Case {
        path: out,
        expect: Error("escapes the archive"),
        must_not_exist: vec![abs],
    });
    v
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The demo with every PSB of its trace overwritten by padding: it opens,
/// but none of its trace can be decoded.
pub fn without_psbs(dir: &Path) -> PathBuf {
    use ptscope_formats::snapshot::{rewrite_aux, Snapshot};
    let demo = super::demo_snapshot();
    let snap = Snapshot::open(&demo).unwrap();
    let dst = dir.join("no-psb.ptscope");
    let psb = ptscope_formats::pt::write::PSB;
    rewrite_aux(&snap, &dst, 0, &|_, old| {
        let mut v = old.to_vec();
        for i in 0..v.len().saturating_sub(15) {
            if v[i..i + 16] == psb[..] {
                v[i..i + 16].fill(0); // PAD packets
            }
        }
        v
    })
    .unwrap();
    dst
}
