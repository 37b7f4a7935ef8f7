//! Finding QEMU and checking what it can run: `qemu-x86_64` on the PATH
//! (or where `PTSCOPE_QEMU` names it), its version, and whether a program
//! is an x86-64 ELF executable, which is all the QEMU backend runs.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::CaptureError;

/// The oldest QEMU whose plugin API (version 1, with syscall callbacks
/// and instruction bytes) the plugin is written against.
pub const MIN_VERSION: (u32, u32) = (7, 0);

/// The environment variable that names the QEMU executable to use.
pub const QEMU_ENV: &str = "PTSCOPE_QEMU";

/// `qemu-x86_64`: where `PTSCOPE_QEMU` says, else the first on the PATH.
pub fn find_qemu() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(QEMU_ENV).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    find_on_path("qemu-x86_64")
}

/// The first executable file named `name` in the PATH's directories; a
/// name with a slash is taken as it is.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The version QEMU prints (`qemu-x86_64 version 7.2.22 (Debian …)`).
pub fn version(qemu: &Path) -> Result<String, CaptureError> {
    let out = std::process::Command::new(qemu)
        .arg("--version")
        .output()
        .map_err(|error| CaptureError::Spawn {
            program: qemu.display().to_string(),
            error,
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_version(&text).map(str::to_string).ok_or_else(|| {
        CaptureError::Invalid(format!(
            "{} printed no version: is it QEMU's user-mode emulator?",
            qemu.display()
        ))
    })
}

/// The version number in `--version`'s first line.
pub fn parse_version(text: &str) -> Option<&str> {
    let line = text.lines().next()?;
    let rest = &line[line.find("version ")? + "version ".len()..];
    let v = rest.split_whitespace().next()?;
    v.chars().next()?.is_ascii_digit().then_some(v)
}

/// Major and minor of a version string.
pub fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// A QEMU that can run the plugin: its path and version, or why not.
pub fn usable_qemu() -> Result<(PathBuf, String), String> {
    let qemu = find_qemu().ok_or_else(|| {
        "qemu-x86_64 is not installed (Debian: apt install qemu-user)".to_string()
    })?;
    let version = version(&qemu).map_err(|e| e.to_string())?;
    match major_minor(&version) {
        Some(v) if v >= MIN_VERSION => Ok((qemu, version)),
        _ => Err(format!(
            "{} is QEMU {version}; the plugin needs {}.{} or newer",
            qemu.display(),
            MIN_VERSION.0,
            MIN_VERSION.1
        )),
    }
}

/// What a program file is, as far as QEMU is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgramKind {
    /// An x86-64 ELF executable: QEMU runs it.
    X86_64,
    /// Something else, said in a few words (`a script (#!)`, `a 32-bit ELF`).
    Other(String),
}

/// What the program file at `path` is.
pub fn program_kind(path: &Path) -> Result<ProgramKind, CaptureError> {
    let mut head = [0u8; 20];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|error| CaptureError::Io {
            path: path.to_path_buf(),
            error,
        })?;
    Ok(kind_of(&head[..n]))
}

/// [`program_kind`] of a file's first bytes.
pub fn kind_of(head: &[u8]) -> ProgramKind {
    if head.starts_with(b"#!") {
        return ProgramKind::Other("a script (#!)".into());
    }
    if head.len() < 20 || !head.starts_with(b"\x7fELF") {
        return ProgramKind::Other("not an ELF file".into());
    }
    let machine = u16::from_le_bytes([head[18], head[19]]);
    match (head[4], head[5], machine) {
        (2, 1, 0x3e) => ProgramKind::X86_64,
        (1, _, 0x03) => ProgramKind::Other("a 32-bit x86 ELF".into()),
        (1, _, _) => ProgramKind::Other("a 32-bit ELF".into()),
        (_, 2, _) => ProgramKind::Other("a big-endian ELF".into()),
        (_, _, m) => ProgramKind::Other(format!("an ELF for machine {m:#x}, not x86-64")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_qemu_prints_them() {
        let text = "qemu-x86_64 version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright";
        assert_eq!(parse_version(text), Some("7.2.22"));
        assert_eq!(major_minor("7.2.22"), Some((7, 2)));
        assert_eq!(parse_version("no version here"), None);
    }

    #[test]
    fn programs_are_told_apart_by_their_headers() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(program_kind(&me).unwrap(), ProgramKind::X86_64);
        assert_eq!(
            kind_of(b"#!/bin/sh\n"),
            ProgramKind::Other("a script (#!)".into())
        );
        let mut elf32 = b"\x7fELF\x01\x01\x01".to_vec();
        elf32.resize(20, 0);
        elf32[18] = 3;
        assert_eq!(
            kind_of(&elf32),
            ProgramKind::Other("a 32-bit x86 ELF".into())
        );
        let err = program_kind(Path::new("/nonexistent/x")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/x"), "{err}");
    }
}
