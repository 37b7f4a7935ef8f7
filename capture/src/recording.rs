//! This module describes what a capture recorded, in one shape for both
//! backends: the PT bytes per thread or per CPU, the sideband (mappings,
//! names, threads, context switches), how the PT unit was set up, and why the
//! capture stopped. The snapshot writer ([`crate::save`]) turns
//! a [`Capture`] into a `.ptscope` file, so it does not need to know which
//! backend took it.

use std::path::PathBuf;
use std::time::Duration;

use crate::procfs::Mapping;
use ptscope_formats::pt_params::PtParams;

/// What to trace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Target {
    /// Run a command (in `cwd`, or the current directory).
    Spawn {
        argv: Vec<String>,
        cwd: Option<PathBuf>,
    },
    /// Attach to a running process and all its threads.
    Attach(i32),
}

/// What happened in the traced process, for the sideband records.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SidebandEvent {
    Comm {
        pid: i32,
        tid: i32,
        comm: String,
        exec: bool,
    },
    Mmap {
        pid: i32,
        tid: i32,
        mapping: Mapping,
    },
    Fork {
        pid: i32,
        ppid: i32,
        tid: i32,
        ptid: i32,
    },
    Exit {
        pid: i32,
        ppid: i32,
        tid: i32,
        ptid: i32,
    },
    ItraceStart {
        pid: i32,
        tid: i32,
    },
    /// A context switch on a CPU of a per-CPU capture: `tid` goes out or
    /// comes in; `next_prev` is the other side ((0, 0): none, idle).
    Switch {
        pid: i32,
        tid: i32,
        out: bool,
        preempt: bool,
        next_prev: (i32, i32),
    },
}

/// One timed sideband event.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Sideband {
    pub time: u64,
    /// The CPU it happened on (0 in a per-thread capture, whose records
    /// carry no CPU).
    pub cpu: u32,
    pub event: SidebandEvent,
}

/// The trace of one thread at the end of the capture.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ThreadTrace {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// The last `ring_size` bytes of PT.
    pub aux: Vec<u8>,
    /// Total bytes the thread's PT unit wrote (the AUX head).
    pub aux_head: u64,
    pub wrapped: bool,
    pub instructions: u64,
}

/// The trace of one CPU of a per-CPU capture.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CpuTrace {
    pub cpu: u32,
    pub aux: Vec<u8>,
    pub aux_head: u64,
    pub wrapped: bool,
}

/// Why the capture ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StopReason {
    ProcessExit,
    Symbol {
        name: String,
        address: u64,
        tid: i32,
    },
    /// A call to the slow-call trigger's function that returned after
    /// more than its threshold: from `start` to `end` (perf time, ns).
    SlowCall {
        name: String,
        tid: i32,
        start: u64,
        end: u64,
    },
    Duration,
    Interrupted,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Capture {
    pub pid: i32,
    /// Every thread; in a per-CPU capture their `aux` is empty and the
    /// trace is in `cpus`.
    pub threads: Vec<ThreadTrace>,
    pub cpus: Vec<CpuTrace>,
    pub sideband: Vec<Sideband>,
    /// The `[vdso]` image and its address, as dumped at the start.
    pub vdso: Option<(u64, Vec<u8>)>,
    pub start_time: u64,
    pub end_time: u64,
    pub stop: StopReason,
    pub cmdline: Vec<String>,
    /// Per thread, every retired instruction pointer (only with `ip_log`).
    pub ip_log: Vec<(i32, Vec<u64>)>,
    pub wall: Duration,
    /// The exit status of a spawned command, when the capture saw it exit.
    pub exit_code: Option<i32>,
    /// A spawned command still running after the snapshot; the caller waits
    /// for it once the snapshot is saved (see [`crate::tracee::wait_child`]).
    pub child: Option<i32>,
    /// How the PT unit was set up.
    pub pt: PtSetup,
    /// A per-CPU capture of one process's threads only, as perf's default
    /// `perf record -e intel_pt//u CMD` writes it (events inherited by
    /// every thread): AUXTRACE records name the process, and context
    /// switches are the threads' own SWITCH records. Otherwise a per-CPU
    /// capture is system-wide, as with `perf record -a`: AUXTRACE records
    /// name no thread and switches are SWITCH_CPU_WIDE records.
    pub inherit: bool,
    /// rdi and rsi at a hardware-breakpoint trigger.
    pub trigger_registers: Vec<(String, u64)>,
    /// What went wrong without spoiling the capture (lost records, ...).
    pub warnings: Vec<String>,
}

/// The PT event a capture used, as the snapshot records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PtSetup {
    pub pmu_type: u32,
    pub config: u64,
    /// perf's syntax for it, e.g. `intel_pt/cyc=1,.../u`.
    pub event: String,
    pub params: PtParams,
    /// perf's CPUID string (`GenuineIntel,6,85,4`) and the model name.
    pub cpuid: String,
    pub cpu_desc: String,
    pub kernel: bool,
}
