//! What ptscope and its QEMU plugin say to each other. ptscope writes a
//! [`PluginConfig`] into the capture's directory and names the directory
//! in the plugin's arguments; the plugin answers with [`Report`] lines on
//! a FIFO in that directory, and writes each snapshot as a serialized
//! [`Capture`] beside it. ptscope asks for a snapshot, or for the end of
//! tracing, with [`Command`] lines on a second FIFO.
//!
//! Both sides are built from this one file in one build, so the encoding
//! (postcard for the files, one line of text per message) needs no
//! versioning of its own.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::per_cpu::{Layout, ThreadPieces};
use crate::emulated::hardware::PtSettings;
use crate::error::CaptureError;
use crate::recording::{Capture, PtSetup};
use crate::trigger::{ArmAfter, Range, Trigger};
use ptscope_formats::filter::FilterRange;

/// The file in the capture directory that holds the [`PluginConfig`].
pub const CONFIG_FILE: &str = "config";
/// The FIFO the plugin writes [`Report`] lines to.
pub const REPORTS_FIFO: &str = "reports";
/// The FIFO the plugin reads [`Command`] lines from.
pub const COMMANDS_FIFO: &str = "commands";

/// How ptscope sets up one capture under QEMU.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PluginConfig {
    /// The PT unit every thread gets.
    pub settings: PtSettings,
    /// The PT event the snapshot claims.
    pub pt: PtSetup,
    pub trigger: Trigger,
    pub arm_after: Option<ArmAfter>,
    /// How many snapshots to take; the trigger re-arms in between.
    pub snapshots: usize,
    /// Log every executed instruction per thread, as ground truth.
    pub ip_log: bool,
    /// The command as the user gave it, for the snapshot.
    pub cmdline: Vec<String>,
    /// perf time (CLOCK_MONOTONIC ns) at which the virtual clock starts.
    pub start_time: u64,
    /// The CPU model QEMU runs the program on, for warnings.
    pub cpu_model: String,
    /// Range capture (`--range START STOP`).
    pub range: Option<Range>,
    /// IP filter ranges (`--filter`); none traces everything.
    pub filter: Vec<FilterRange>,
    /// The per-CPU layout (`--per-cpu`, `--system-wide`): the plugin cuts
    /// each thread's trace into pieces at its entries to the kernel, and
    /// ptscope lays them out per CPU. `None`: a trace per thread.
    pub per_cpu: Option<Layout>,
}

/// What the plugin writes for a snapshot: the capture, with a buffer per
/// thread, and in per-CPU mode the pieces those buffers are cut into.
#[derive(Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub capture: Capture,
    pub pieces: Vec<ThreadPieces>,
}

/// A message from the plugin to ptscope, one line each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// The plugin is loaded and tracing the program's first thread.
    Started,
    /// Snapshot `n` (from 1) is written to the file at this path.
    Snapshot { n: usize, path: PathBuf },
    /// A snapshot taken as the program calls `execve`: the new program
    /// runs natively, out of the trace, so this is the last one unless
    /// the call fails ([`Report::Retract`]).
    Checkpoint { path: PathBuf },
    /// The `execve` after the last checkpoint failed; tracing goes on.
    Retract,
    /// Something went wrong without spoiling the capture.
    Warning(String),
    /// Tracing is over; the program runs on untraced.
    Done,
}

impl Report {
    /// The report as one line, without its newline.
    pub fn to_line(&self) -> String {
        let one_line = |s: &str| s.replace('\n', " ");
        match self {
            Report::Started => "started".into(),
            Report::Snapshot { n, path } => format!("snapshot {n} {}", path.display()),
            Report::Checkpoint { path } => format!("checkpoint {}", path.display()),
            Report::Retract => "retract".into(),
            Report::Warning(w) => format!("warning {}", one_line(w)),
            Report::Done => "done".into(),
        }
    }

    /// A line the plugin wrote; `None` for one it cannot have written.
    pub fn parse(line: &str) -> Option<Report> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        Some(match word {
            "started" => Report::Started,
            "snapshot" => {
                let (n, path) = rest.split_once(' ')?;
                Report::Snapshot {
                    n: n.parse().ok()?,
                    path: PathBuf::from(path),
                }
            }
            "checkpoint" => Report::Checkpoint {
                path: PathBuf::from(rest),
            },
            "retract" => Report::Retract,
            "warning" => Report::Warning(rest.to_string()),
            "done" => Report::Done,
            _ => return None,
        })
    }
}

/// A request from ptscope to the plugin, one line each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Take a snapshot now: Ctrl-C or the window's button.
    Interrupt,
    /// Take a snapshot now: `--duration` elapsed.
    Duration,
    /// Stop tracing and save nothing more; the program runs on.
    Stop,
}

impl Command {
    pub fn to_line(self) -> &'static str {
        match self {
            Command::Interrupt => "interrupt",
            Command::Duration => "duration",
            Command::Stop => "stop",
        }
    }

    pub fn parse(line: &str) -> Option<Command> {
        match line.trim() {
            "interrupt" => Some(Command::Interrupt),
            "duration" => Some(Command::Duration),
            "stop" => Some(Command::Stop),
            _ => None,
        }
    }
}

/// Writes `value` to `path` whole: into a temporary file renamed into
/// place, so that a reader never sees half of it.
fn write_whole<T: Serialize>(path: &Path, value: &T) -> Result<(), CaptureError> {
    let bytes = postcard::to_allocvec(value)
        .map_err(|e| CaptureError::Invalid(format!("cannot encode {}: {e}", path.display())))?;
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| CaptureError::Invalid(format!("cannot write {}: {e}", path.display())))
}

fn read_whole<T: for<'a> Deserialize<'a>>(path: &Path) -> Result<T, CaptureError> {
    let bytes = std::fs::read(path)
        .map_err(|e| CaptureError::Invalid(format!("cannot read {}: {e}", path.display())))?;
    postcard::from_bytes(&bytes).map_err(|e| {
        CaptureError::Invalid(format!(
            "{} is not what the QEMU plugin writes: {e}",
            path.display()
        ))
    })
}

impl PluginConfig {
    pub fn write(&self, path: &Path) -> Result<(), CaptureError> {
        write_whole(path, self)
    }

    pub fn read(path: &Path) -> Result<PluginConfig, CaptureError> {
        read_whole(path)
    }
}

/// Writes a snapshot the plugin took.
pub fn write_snapshot(path: &Path, snapshot: &Snapshot) -> Result<(), CaptureError> {
    write_whole(path, snapshot)
}

/// Reads a snapshot the plugin wrote.
pub fn read_snapshot(path: &Path) -> Result<Snapshot, CaptureError> {
    read_whole(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_and_commands_read_back_as_written() {
        let reports = [
            Report::Started,
            Report::Snapshot {
                n: 3,
                path: PathBuf::from("/tmp/a b/snapshot-3"),
            },
            Report::Checkpoint {
                path: PathBuf::from("/tmp/x"),
            },
            Report::Retract,
            Report::Warning("two\nlines".into()),
            Report::Done,
        ];
        for r in reports {
            let back = Report::parse(&r.to_line()).unwrap();
            match (&r, &back) {
                (Report::Warning(_), Report::Warning(w)) => assert_eq!(w, "two lines"),
                _ => assert_eq!(back, r),
            }
        }
        assert_eq!(Report::parse("bogus"), None);
        assert_eq!(Report::parse("snapshot x /p"), None);
        for c in [Command::Interrupt, Command::Duration, Command::Stop] {
            assert_eq!(Command::parse(c.to_line()), Some(c));
        }
    }
}
