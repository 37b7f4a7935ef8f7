//! `ptscope.json`: what a `.ptscope` snapshot says about its capture.

use serde::{Deserialize, Serialize};

pub const FILE_NAME: &str = "ptscope.json";
pub const FORMAT_VERSION: u32 = 1;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Metadata {
    pub format: u32,
    /// `intel-pt`, `qemu` or `emulated`.
    pub backend: String,
    /// The trigger as configured, e.g. `symbol work`.
    pub trigger: String,
    /// What ended the capture, e.g. `symbol work entered by thread 1234`.
    pub stop: String,
    /// Per-thread ring size in bytes.
    pub ring_size: u64,
    /// The perf config string of the PT event.
    pub pt_config: String,
    /// The CPU, as perf's CPUID string.
    pub cpu: String,
    /// How time was kept (the emulated backend's virtual clock).
    pub clock: String,
    pub command: Vec<String>,
    pub pid: i32,
    pub capture_wall_ms: u64,
    pub instructions: u64,
    /// Registers at the trigger (rdi, rsi), for hardware triggers.
    #[serde(default)]
    pub trigger_registers: Vec<(String, u64)>,
    /// The call that fired a slow-call trigger (`--slower-than`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_call: Option<TriggerCall>,
    /// The debug files the snapshot carries (at `.build-id/xx/yyyy…/debug`),
    /// by build id in hex: where each was found at capture (a debug
    /// directory, `.gnu_debuglink`, perf's cache, a debuginfod server).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub debug_files: std::collections::BTreeMap<String, String>,
    /// A kernel trace whose symbols the snapshot does not carry
    /// ([`super::KALLSYMS_MEMBER`]): why not (`/proc/kallsyms` hidden by
    /// `kernel.kptr_restrict`, unreadable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kallsyms_missing: Option<String>,
    /// The CPU the program ran on when QEMU ran it (`qemu-x86_64 7.2.22,
    /// -cpu max`): what glibc chose its routines by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_cpu: Option<String>,
    /// What the capture warned of, such as a program that exec'd out of
    /// the trace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A call that fired a slow-call trigger: the snapshot ends as it returns.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TriggerCall {
    pub function: String,
    pub tid: i32,
    /// perf time (ns) of its entry and its return.
    pub start: u64,
    pub end: u64,
    /// `end - start`, in ns.
    pub duration: u64,
}
