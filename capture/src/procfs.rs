//! This module reads what the capture needs to know about processes from
//! `/proc`: a process's mappings (which become MMAP sideband and tell where a
//! trigger symbol is), its threads, their names and thread group, its
//! scheduler state, its pending and caught signals, its command line, and the
//! list of processes a user can attach to. Reading `/proc` needs neither
//! privileges nor ptrace, so all of this works before anything is traced.

use std::path::PathBuf;

use crate::error::CaptureError;

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    pub offset: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// Path or pseudo-name (`[vdso]`, `[stack]`); empty for anonymous maps.
    pub path: String,
}

impl Mapping {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    pub fn is_vdso(&self) -> bool {
        self.path == "[vdso]"
    }

    /// A mapping of a file on disk, not a pseudo or anonymous one.
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }
}

/// Parses the text of `/proc/PID/maps`; lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_maps_line).collect()
}

fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?.as_bytes();
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let dev = fields.next()?;
    let inode = fields.next()?.parse().ok()?;
    let path = fields.next().unwrap_or("").trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    if perms.len() < 4 {
        return None;
    }
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        read: perms[0] == b'r',
        write: perms[1] == b'w',
        exec: perms[2] == b'x',
        offset,
        dev_major: u32::from_str_radix(major, 16).ok()?,
        dev_minor: u32::from_str_radix(minor, 16).ok()?,
        inode,
        path,
    })
}

pub fn read_maps(pid: i32) -> Result<Vec<Mapping>, CaptureError> {
    let path = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = std::fs::read_to_string(&path).map_err(|e| CaptureError::io(&path, e))?;
    Ok(parse_maps(&text))
}

/// The thread ids of a process.
pub fn threads(pid: i32) -> Result<Vec<i32>, CaptureError> {
    let path = PathBuf::from(format!("/proc/{pid}/task"));
    let mut tids = Vec::new();
    for entry in std::fs::read_dir(&path).map_err(|e| CaptureError::io(&path, e))? {
        let entry = entry.map_err(|e| CaptureError::io(&path, e))?;
        if let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    tids.sort_unstable();
    Ok(tids)
}

/// The `comm` of a thread, or an empty string if it is gone.
pub fn comm(pid: i32, tid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| s.trim_end_matches('\n').to_string())
        .unwrap_or_default()
}

/// The thread group id (process id) of a thread.
pub fn tgid(tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The scheduler state of a process (`R`, `S`, `T` stopped, `Z` zombie,
/// ...), or None when it is gone.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name in parentheses may hold spaces and parentheses itself.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Whether `sig` has a handler installed in the thread's process (SigCgt).
pub fn signal_caught(tid: i32, sig: i32) -> bool {
    signal_in_mask(tid, "SigCgt:", sig)
}

/// Signal `sig` is pending for thread `tid` itself (not its process).
pub fn signal_pending(tid: i32, sig: i32) -> bool {
    signal_in_mask(tid, "SigPnd:", sig)
}

fn signal_in_mask(tid: i32, field: &str, sig: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|mask| sig >= 1 && mask & (1u64 << (sig - 1)) != 0)
}

/// Parses `/proc/PID/cmdline`.
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A process, for the attach list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: i32,
    pub uid: u32,
    pub name: String,
    /// The command line, space-joined (empty for kernel threads).
    pub cmdline: String,
    /// Owned by the user running ptscope: attachable without privileges.
    pub own: bool,
}

fn real_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Every user-space process, the user's own first, newest first within.
/// Kernel threads (no command line) are left out: there is nothing to trace.
pub fn processes() -> Vec<ProcessInfo> {
    let me = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| real_uid(&s));
    let self_pid = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut list: Vec<ProcessInfo> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != self_pid)
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let cmdline = cmdline(pid).join(" ");
            if cmdline.is_empty() {
                return None;
            }
            let uid = real_uid(&status)?;
            Some(ProcessInfo {
                pid,
                uid,
                name: comm(pid, pid),
                cmdline,
                own: Some(uid) == me,
            })
        })
        .collect();
    list.sort_by_key(|p| (!p.own, std::cmp::Reverse(p.pid)));
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let text = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234                       /usr/bin/true
55d0c0a01000-55d0c0a05000 r-xp 00001000 fd:01 1234                       /usr/bin/my prog
7ffc1a3f2000-7ffc1a3f4000 r-xp 00000000 00:00 0                          [vdso]
7f0000000000-7f0000001000 rw-p 00000000 00:00 0 
garbage line
";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 4);
        assert_eq!(maps[1].path, "/usr/bin/my prog");
        assert!(maps[1].exec && !maps[1].write);
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(maps[1].dev_major, 0xfd);
        assert!(maps[2].is_vdso());
        assert_eq!(maps[3].path, "");
        assert!(!maps[3].is_file());
    }

    #[test]
    fn lists_processes_own_first() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Until the exec, the child still looks like this test.
        for _ in 0..1000 {
            if comm(pid, pid) == "sleep" && cmdline(pid) == ["sleep", "5"] {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let list = processes();
        let _ = child.kill();
        let _ = child.wait();
        let p = list
            .iter()
            .find(|p| p.pid == child.id() as i32)
            .expect("the child is listed");
        assert_eq!(p.name, "sleep");
        assert_eq!(p.cmdline, "sleep 5");
        assert!(p.own);
        // Own processes come first.
        let first_other = list.iter().position(|p| !p.own).unwrap_or(list.len());
        assert!(list[first_other..].iter().all(|p| !p.own));
        assert!(list.iter().all(|p| p.pid != std::process::id() as i32));
    }

    #[test]
    fn reads_own_process() {
        let me = std::process::id() as i32;
        let maps = read_maps(me).unwrap();
        assert!(maps.iter().any(|m| m.exec && m.is_file()));
        assert!(threads(me).unwrap().contains(&me));
        assert_eq!(tgid(me), Some(me));
        assert!(matches!(state(me), Some('R' | 'S')), "{:?}", state(me));
        assert_eq!(state(i32::MAX), None);
        // A stopped process reads as stopped.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
        let mut seen = None;
        for _ in 0..500 {
            seen = state(pid);
            if seen == Some('T') {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(seen, Some('T'));
    }
}
