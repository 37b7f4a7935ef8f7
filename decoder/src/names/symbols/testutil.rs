//! Test helpers shared by the symbol tests: they compile `testdata/symbols.c`
//! with the system C compiler and ask GNU binutils (nm, objdump, readelf,
//! addr2line) what they see, so each part's tests can check ours against
//! theirs. They live apart because the tests of every file use them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub(super) fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata/symbols.c")
}

pub(crate) fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Builds the test program with `flags` (after `-O2 -g`).
pub(crate) fn compile(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    run(Command::new("cc")
        .args(["-O2", "-g"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(source()));
    out
}

pub(crate) fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// `nm -S`: name -> (address, size) of the defined text symbols.
pub(crate) fn nm(bin: &Path) -> HashMap<String, (u64, u64)> {
    run(Command::new("nm").args(["-S", "--defined-only"]).arg(bin))
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [addr, size, kind, name] if kind.eq_ignore_ascii_case("t") => Some((
                    name.to_string(),
                    (
                        u64::from_str_radix(addr, 16).unwrap(),
                        u64::from_str_radix(size, 16).unwrap(),
                    ),
                )),
                _ => None,
            }
        })
        .collect()
}

/// objdump's `<foo@plt>` labels: (address, name).
pub(super) fn objdump_plt(bin: &Path) -> Vec<(u64, String)> {
    run(Command::new("objdump").arg("-d").arg(bin))
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(" <")?;
            let name = rest.strip_suffix(">:")?;
            if !name.ends_with("@plt") || name.contains('-') || name.contains('+') {
                return None;
            }
            Some((u64::from_str_radix(addr, 16).ok()?, name.to_string()))
        })
        .collect()
}

/// `readelf -SW`: (name, address, file offset, size) of each section.
pub(super) fn sections(bin: &Path) -> Vec<(String, u64, u64, u64)> {
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    run(Command::new("readelf").arg("-SW").arg(bin))
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_once(']')?.1.split_whitespace().collect();
            let name = f.first().filter(|n| n.starts_with('.'))?;
            Some((name.to_string(), hex(f[2]), hex(f[3]), hex(f[4])))
        })
        .collect()
}

pub(super) fn section_addr(bin: &Path, name: &str) -> Option<u64> {
    sections(bin)
        .into_iter()
        .find_map(|s| (s.0 == name).then_some(s.1))
}

/// `readelf -lW` LOAD headers: (offset, vaddr, filesz).
pub(super) fn load_segments(bin: &Path) -> Vec<(u64, u64, u64)> {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    run(Command::new("readelf").arg("-lW").arg(bin))
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"LOAD")).then(|| (hex(f[1]), hex(f[2]), hex(f[4])))
        })
        .collect()
}

/// GNU addr2line's (file, line) per address; line `None` for `?`.
pub(super) fn gnu_addr2line(bin: &Path, addrs: &[u64]) -> Vec<(String, Option<u32>)> {
    let mut cmd = Command::new("addr2line");
    cmd.arg("-e").arg(bin);
    cmd.args(addrs.iter().map(|a| format!("{a:#x}")));
    run(&mut cmd)
        .lines()
        .map(|l| {
            let l = l.split(" (discriminator").next().unwrap();
            let (file, line) = l.rsplit_once(':').unwrap();
            (file.to_string(), line.parse().ok().filter(|&n| n != 0))
        })
        .collect()
}

/// The line of the source holding `marker`.
pub(super) fn marker_line(marker: &str) -> u32 {
    let text = std::fs::read_to_string(source()).unwrap();
    text.lines().position(|l| l.contains(marker)).unwrap() as u32 + 1
}

pub(super) fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap()
}

/// Splits `bin` as distributions do: its symbols and DWARF into
/// `<bin>.debug` (`objcopy --only-keep-debug`), the binary stripped and
/// linked to it by `.gnu_debuglink`. Returns the debug file.
pub(crate) fn split_debug(bin: &Path, extra: &[&str]) -> PathBuf {
    let debug = bin.with_extension("debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .args(extra)
        .arg(bin)
        .arg(&debug));
    run(Command::new("strip").arg(bin));
    run(Command::new("objcopy")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(bin));
    debug
}
