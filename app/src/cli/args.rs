//! The command line's arguments: the clap types, whose doc comments are
//! `ptscope --help`, with the options several commands share and the
//! parsers of their values.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use ptscope::name_dirs::NameDirs;
use ptscope::size::{parse_ring_size, parse_size};
use ptscope_capture::intel_pt::Timing;

use super::packets::{parse_packets_cpu, PacketsCpu};

#[derive(Parser, Debug)]
#[command(
    name = "ptscope",
    version,
    about = "Intel Processor Trace: capture the last milliseconds before something interesting happens, and see every call on a timeline.",
    long_about = "Intel Processor Trace: capture the last milliseconds before something interesting happens, and see every call on a timeline.\n\nWith no command, opens the window on each FILE (one tab each), or on the bundled demo snapshot. More files open from File > Open, the recent-files list, or by dropping them on the window.\nOn machines without Intel PT (AMD, most VMs), `record` runs the command under QEMU's user-mode emulator (qemu-x86_64), whose ptscope plugin writes the packets PT hardware would write, at hundreds of millions of instructions per second; `attach`, and programs QEMU cannot run, use the emulated backend, which single-steps with ptrace."
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Files to open in the viewer: `.ptscope` snapshots, perf.data files
    /// recorded with intel_pt, or `perf script` branch text.
    pub files: Vec<PathBuf>,
    /// Save a PNG of the window once the first file is drawn, then exit.
    #[arg(long, value_name = "PNG", hide = true)]
    pub screenshot: Option<PathBuf>,
    /// Open the Capture panel at start (attach to a process or run a
    /// command, pick a trigger, capture).
    #[arg(long)]
    pub capture: bool,
    /// Select the first call of FUNCTION and zoom to it once loaded.
    #[arg(long, value_name = "FUNCTION")]
    pub select: Option<String>,
    /// Open at the slowest call of FUNCTION, compared with a typical call
    /// in the Details tab, its slowest calls (p99 and up) brushed on the
    /// histogram of its durations.
    #[arg(long, value_name = "FUNCTION", conflicts_with = "select")]
    pub explain: Option<String>,
    /// Where to find source files whose DWARF path starts with FROM: read
    /// them under TO instead (for binaries built elsewhere). Repeatable;
    /// also settable in the Source pane.
    #[arg(long = "source-map", value_name = "FROM=TO", value_parser = ptscope_viewer::parse_source_map)]
    pub source_maps: Vec<(String, String)>,
    /// The FILEs are raw PT dumps: decode them with the raw binary image
    /// IMAGE loaded at ADDR (repeatable). The window also asks for these
    /// when a raw dump is opened without them.
    #[arg(long, value_name = "IMAGE:ADDR", value_parser = ptscope::report::parse_raw)]
    pub raw: Vec<(PathBuf, u64)>,
    /// Decode the FILEs as on this CPU (FAMILY/MODEL[/STEPPING], decimal
    /// or 0x hex, e.g. 6/0x8e/9), working around its errata as `decode
    /// --cpu` does: over the cpuid a file records; a raw dump records
    /// none (its tab also takes the CPU).
    #[arg(long, value_name = "F/M[/S]")]
    pub cpu: Option<ptscope_decoder::Cpu>,
    /// The IP filter the FILEs' traces were written under, as `decode
    /// --ip-filter` takes it.
    #[arg(long, value_name = "RANGES")]
    pub ip_filter: Option<ptscope_decoder::IpFilter>,
    #[command(flatten)]
    pub names: NameDirs,
}

#[derive(clap::Args, Debug)]
pub struct CaptureOpts {
    /// Capture backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: ptscope::recorder::Backend,
    /// Per-thread trace ring size in bytes (suffixes K, M, G allowed); the
    /// snapshot keeps the last SIZE bytes of each thread's trace.
    #[arg(long, default_value = "4M", value_parser = parse_ring_size)]
    pub size: u64,
    /// Take the snapshot the first time the program enters SYMBOL (mangled or
    /// demangled, in the program or any library it loads).
    #[arg(long, value_name = "SYMBOL")]
    pub trigger: Option<String>,
    /// With --trigger: take the snapshot when a call to SYMBOL returns
    /// after more than DURATION (800ns, 2.5us, 1ms; a bare number is ns),
    /// so that the snapshot ends with the whole slow call. The emulated
    /// backend measures every call exactly.
    #[arg(long, value_name = "DURATION", requires = "trigger", value_parser = ptscope::durations::parse_duration)]
    pub slower_than: Option<u64>,
    /// Let the trigger fire only once the trace ring holds DURATION of
    /// history (the emulated backend measures its ring; Intel PT counts
    /// the time since tracing began), or with `full`, once the ring has
    /// filled (emulated backend only): without it, a trigger on a hot
    /// function fires at once and the snapshot holds almost nothing.
    #[arg(long, value_name = "DURATION|full", requires = "trigger", value_parser = ptscope::durations::parse_arm_after)]
    pub arm_after: Option<ptscope_capture::trigger::ArmAfter>,
    /// Trace only between START and STOP (functions, named as for
    /// --trigger): tracing starts paused, resumes each time a thread
    /// enters START and pauses each time one enters STOP. Works with every
    /// trigger. Intel PT does it in the kernel (AUX pause/resume, Linux
    /// 6.13 or newer); the emulated backend does the same.
    #[arg(long, num_args = 2, value_names = ["START", "STOP"])]
    pub range: Option<Vec<String>>,
    /// Take the snapshot after MS milliseconds.
    #[arg(long, value_name = "MS")]
    pub duration: Option<u64>,
    /// Take N snapshots: the trigger re-arms after each, and they are
    /// written as NAME-1.ptscope ... NAME-N.ptscope. Stops early if the
    /// program exits.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub snapshots: usize,
    /// Intel PT timing: low (perf's defaults, smallest trace), normal
    /// (cycle-accurate, cyc_thresh=1, an MTC per crystal tick), high
    /// (normal plus a timed packet at every return), or config terms over
    /// perf's defaults such as `cyc=1,cyc_thresh=2,mtc_period=0`; `tsc=0`
    /// for no timing at all. Checked against the CPU's caps (the emulated
    /// backend's are a Skylake's). Default: normal on Intel PT; on the
    /// emulated backend cycle-accurate without MTC, a PSB every 4 KiB
    /// (`cyc=1,mtc=0,psb_period=1`).
    #[arg(long, value_name = "PRESET|TERMS")]
    pub timing: Option<Timing>,
    /// Make the emulated PT unit's buffer overflow at these instruction
    /// counts of each unit (comma-separated): OVF as hardware writes it,
    /// for testing decoders. Emulated backend only.
    #[arg(long, value_name = "N,...", value_delimiter = ',', hide = true)]
    pub overflow_at: Vec<u64>,
    /// Make the emulated PT unit write as erratum SKL014 makes Skylakes
    /// write: a direct call or jump out of the IP filter gets its TIP.PGD
    /// without the IP. Emulated backend only; for testing decoders.
    #[arg(long, hide = true)]
    pub emulate_skl014: bool,
    /// Trace the kernel too (intel-pt backend; needs
    /// kernel.perf_event_paranoid ≤ 1 or CAP_PERFMON).
    #[arg(long)]
    pub kernel: bool,
    /// Do not store debug files in the snapshot. By default, each mapped
    /// binary without its own symbols (a stripped system library) takes
    /// along the debug file found for it (in /usr/lib/debug, by
    /// .gnu_debuglink, in ~/.debug or from debuginfod), so that the
    /// snapshot names its functions on any machine; this keeps files small.
    #[arg(long)]
    pub no_debug_info: bool,
    /// Trace only inside address ranges, in perf's syntax: `filter SYMBOL`,
    /// `filter SYMBOL @ FILE`, `filter OFFSET/SIZE @ FILE` (OFFSET a file
    /// offset), several separated by commas. A filter without a file is in
    /// the traced program's binary. Calls that leave the ranges show as
    /// `[untraced]` gaps. `tracestop SYMBOL` (same forms) stops a thread's
    /// trace where a branch lands in the range, until the thread is next
    /// scheduled out and in. At most the CPU's number of address ranges,
    /// both kinds together (2 on the emulated CPU;
    /// caps/num_address_ranges on real hardware).
    #[arg(long, value_name = "FILTERS")]
    pub filter: Option<String>,
    /// Where to write the snapshot.
    #[arg(short, long, default_value = "snapshot.ptscope")]
    pub output: PathBuf,
    /// Write every retired instruction pointer to FILE (`tid ip` per line),
    /// as ground truth for testing. Emulated and QEMU backends (the QEMU
    /// plugin logs each instruction as QEMU is about to run it).
    #[arg(long, value_name = "FILE", hide = true)]
    pub ip_log: Option<PathBuf>,
    /// Trace per CPU instead of per thread: one PT unit and AUX buffer per
    /// CPU, threads told apart by context-switch records. The intel-pt
    /// backend traces every CPU system-wide, as `perf record -a -e
    /// intel_pt//u` does; the QEMU and emulated backends write what `perf
    /// record -e intel_pt//u CMD` writes by default (per-CPU buffers
    /// inherited by every thread of the process, SWITCH and ITRACE_START
    /// sideband), running the threads on --cpus virtual CPUs between which
    /// they migrate.
    #[arg(long)]
    pub per_cpu: bool,
    /// Trace per CPU as `perf record -a -e intel_pt//u` does: CPU-wide
    /// events, AUXTRACE records that name no thread, and a
    /// SWITCH_CPU_WIDE record for every switch, the idle task's included.
    /// The intel-pt backend's --per-cpu is this already; the QEMU and
    /// emulated backends write this layout for the traced process's
    /// threads.
    #[arg(short = 'a', long)]
    pub system_wide: bool,
    /// Virtual CPUs of the QEMU and emulated backends' --per-cpu and
    /// --system-wide modes (at least 1): a thread that runs again after
    /// another one did moves to the next (emulated), or to the CPU idle
    /// the longest when its own is taken (QEMU, where threads that ran at
    /// the same virtual time need a CPU each and add CPUs beyond N, with a
    /// warning). Default 2.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub cpus: Option<u32>,
    /// Do not print progress on stderr.
    #[arg(short, long)]
    pub quiet: bool,
    /// Take the snapshot only on Ctrl-C (SIGINT) or when the program
    /// exits; recorded as a manual trigger.
    #[arg(long, conflicts_with_all = ["trigger", "duration"])]
    pub manual: bool,
    /// Report progress on stdout as JSON lines, for a front end: the
    /// window's Capture panel runs captures this way. A recorded
    /// command's output then goes to stderr, never into the reports.
    #[arg(long)]
    pub json_progress: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command under trace and save a snapshot when it exits or the
    /// trigger fires (Ctrl-C takes the snapshot at once).
    Record {
        #[command(flatten)]
        opts: CaptureOpts,
        /// The command to run, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Attach to a running process, trace all its threads and save a
    /// snapshot when the trigger fires, on Ctrl-C, or when it exits. The
    /// process keeps running afterwards.
    Attach {
        /// The process to attach to.
        #[arg(long)]
        pid: i32,
        #[command(flatten)]
        opts: CaptureOpts,
    },
    /// Tell what this machine and user can capture: Intel PT and its
    /// capabilities, which timing presets fit, perf_event_paranoid,
    /// capabilities and locked-memory limits, with a real probe of each
    /// kind of tracing and how to enable what is denied.
    Check,
    /// Make a large genuine snapshot for benchmarks: SNAPSHOT (a capture of
    /// a program in a steady loop) with one period of its trace, between
    /// two PSBs where the program is in the same state, repeated until the
    /// trace holds SIZE bytes, each copy's timestamps moved on.
    Grow {
        snapshot: PathBuf,
        /// Trace bytes to reach (K, M, G suffixes).
        #[arg(long, default_value = "256M", value_parser = parse_size)]
        size: u64,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Describe a snapshot: threads with their trace bytes and PSBs, the
    /// time range, the CPU and PT configuration, and every mapped binary.
    /// Of a raw PT dump: its bytes and PSBs, and the binaries given.
    Info {
        file: PathBuf,
        /// FILE is a raw PT dump to be decoded with the raw binary image
        /// IMAGE at ADDR (repeatable): says whether each is there. A file
        /// that starts with a PSB is taken as a raw dump without it.
        #[arg(long, value_name = "IMAGE:ADDR", value_parser = ptscope::report::parse_raw)]
        raw: Vec<(PathBuf, u64)>,
        #[command(flatten)]
        names: NameDirs,
        #[command(flatten)]
        kernel: KernelOpts,
    },
    /// List the PT packets of one thread, like libipt's ptdump. A raw PT
    /// dump (a file that starts with a PSB, or any file with --raw) lists
    /// its packets too; listing needs no binaries.
    Packets {
        file: PathBuf,
        /// FILE is a raw PT dump (accepted for symmetry with decode; the
        /// images are not needed to list packets).
        #[arg(long, value_name = "IMAGE:ADDR", value_parser = ptscope::report::parse_raw)]
        raw: Vec<(PathBuf, u64)>,
        /// The thread (default: the first one).
        #[arg(long, conflicts_with = "cpu")]
        thread: Option<i32>,
        /// N: the buffer of CPU N, in a per-CPU trace. F/M[/S] (as decode
        /// takes it, e.g. 6/0x55/4): list as written by that CPU, with its
        /// packet-level errata worked around as libipt's ptdump does
        /// (SKD007: a CYC cut by an OVF; SKZ84: a TMA with reserved bits),
        /// over the CPU a snapshot records; a raw dump records none.
        #[arg(long, value_name = "N|F/M[/S]", value_parser = parse_packets_cpu)]
        cpu: Option<PacketsCpu>,
        /// Stop after N packets.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Decode into call spans per thread, with stacks rebuilt and times in
    /// ns since the input's first timestamp (in instructions retired, for a
    /// trace recorded without timing).
    Decode {
        #[command(flatten)]
        input: InputOpts,
        /// Only spans that end at or after NS.
        #[arg(long, value_name = "NS")]
        from: Option<u64>,
        /// Only spans that start at or before NS.
        #[arg(long, value_name = "NS")]
        to: Option<u64>,
        /// calls: function spans; lines: re-decode the PSB segments that
        /// cover --from..--to down to source lines (from DWARF, with
        /// inlined functions as their own lines); insns: every instruction
        /// with its disassembly, line and time ("exact":false, or `~`, where
        /// the time is spread between timing packets); marks: PTWRITE
        /// values, frequency (CBR) changes and power events (MWAIT, PWRE,
        /// EXSTOP, PWRX), per thread and per CPU; cpus: for a per-CPU
        /// trace, which thread ran on each CPU when.
        #[arg(long, value_enum, default_value = "calls")]
        level: ptscope::report::Level,
        /// text: an indented call tree; json: one span per line, with
        /// "inferred_start":true for calls that began before the trace and
        /// "mid_entry":true for spans entered by a jump into the middle of
        /// a function (not by a call).
        #[arg(long, value_enum, default_value = "text")]
        format: ptscope::report::Format,
    },
    /// Per function: calls, total, self, min, avg and max time. With
    /// --function F --histogram: how F's call durations are spread.
    Stats {
        #[command(flatten)]
        input: InputOpts,
        /// Column to sort by (descending; name ascending).
        #[arg(long, value_enum, default_value = "total")]
        sort: ptscope::report::SortKey,
        /// Print only the first N functions.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Only the function named NAME (as `decode` prints it).
        #[arg(long, value_name = "NAME")]
        function: Option<String>,
        /// The durations of --function's calls in log-scaled buckets (four
        /// to a doubling), with min, median, p90, p99 and max: two modes
        /// mean some calls take another path.
        #[arg(long, requires = "function")]
        histogram: bool,
        /// text, or json (with --histogram): one object with the
        /// percentiles and every bucket's from, to and count.
        #[arg(long, value_enum, default_value = "text", requires = "histogram")]
        format: ptscope::outlier::Output,
    },
    /// Write the decoded spans in a format other tools read: Perfetto's
    /// TrackEvent protobuf (ui.perfetto.dev), the Fuchsia trace format
    /// (FXT, as magic-trace writes it) or Chrome's JSON trace events; one
    /// track per thread, and with --level lines the source lines under the
    /// calls. Streamed: a big trace is never held in memory, and OUT
    /// appears only when whole.
    Export {
        #[command(flatten)]
        input: InputOpts,
        /// The format to write: perfetto (TrackEvent protobuf), fxt
        /// (Fuchsia trace format, as magic-trace writes), chrome (JSON
        /// trace events). By default, as OUT's extension says (.json:
        /// chrome, .fxt: fxt), else perfetto.
        #[arg(long, value_enum)]
        format: Option<ptscope::export::ExportFormat>,
        /// Where to write it.
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
        /// calls: function calls; lines: calls, and under them (on a
        /// track of their own in Perfetto) the source lines that ran, from
        /// the fine pass (narrow it with --from/--to: every instruction of
        /// the window is decoded).
        #[arg(long, value_enum, default_value = "calls")]
        level: ptscope::export::ExportLevel,
        /// Only spans that end at or after NS (from the first timestamp).
        #[arg(long, value_name = "NS")]
        from: Option<u64>,
        /// Only spans that start at or before NS.
        #[arg(long, value_name = "NS")]
        to: Option<u64>,
    },
    /// Explain a slow call: compare one call of a function (by default the
    /// slowest) with another (by default the one nearest the median), by
    /// call path, or line by line.
    Compare {
        #[command(flatten)]
        input: InputOpts,
        /// The function whose calls are compared (as `decode` prints it).
        #[arg(long, value_name = "NAME")]
        function: String,
        /// The call to explain: slowest, median, trigger (the call that
        /// fired a --slower-than capture), or N (the N-th call in time
        /// order, from 1).
        #[arg(long, default_value = "slowest", value_parser = ptscope::outlier::parse_choice)]
        call: ptscope::outlier::Choice,
        /// The call to compare it with: median (the typical call), slowest,
        /// or N. Never the --call itself, when there is another.
        #[arg(long, default_value = "median", value_parser = ptscope::outlier::parse_choice)]
        against: ptscope::outlier::Choice,
        /// calls: both calls' trees aligned by call path, each path's count
        /// and time in both and its share of the difference, the biggest
        /// first; lines: both calls re-decoded to source lines, with the
        /// lines that ran in one call only, loops whose trip counts differ,
        /// and every line's runs, instructions and time side by side.
        #[arg(long, value_enum, default_value = "calls")]
        level: ptscope::outlier::CompareLevel,
        /// text, or json: one object.
        #[arg(long, value_enum, default_value = "text")]
        format: ptscope::outlier::Output,
    },
}

/// Where the kernel's symbols come from, for a trace that includes the
/// kernel (a snapshot captured with --kernel carries them).
#[derive(clap::Args, Debug, Default)]
pub struct KernelOpts {
    /// Name kernel code from FILE, a copy of /proc/kallsyms taken on the
    /// machine and boot that recorded the trace (as `perf report
    /// --kallsyms`); over the snapshot's own.
    #[arg(long, value_name = "FILE")]
    pub kallsyms: Option<PathBuf>,
    /// Name kernel code from FILE, the vmlinux (with symbols) of the
    /// kernel that recorded the trace, moved to where the trace says it ran
    /// (as `perf report --vmlinux`); over --kallsyms.
    #[arg(long, value_name = "FILE")]
    pub vmlinux: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct InputOpts {
    /// A `.ptscope` snapshot, a perf.data recorded with intel_pt, a text
    /// file of `perf script --itrace=bep -F pid,tid,time,flags,ip,addr,sym,symoff,dso,event`
    /// output, or with --raw a raw PT dump.
    pub file: PathBuf,
    /// Only this thread (repeatable).
    #[arg(long = "thread", value_name = "TID")]
    pub threads: Vec<i32>,
    /// FILE is a raw PT dump; load the raw binary image IMAGE at ADDR
    /// (repeatable, like ptxed's --raw). Times are then TSC ticks, or
    /// instructions retired if the dump has no timing packets.
    #[arg(long, value_name = "IMAGE:ADDR", value_parser = ptscope::report::parse_raw)]
    pub raw: Vec<(PathBuf, u64)>,
    /// What walks the trace in the coarse pass: ptscope's own flow
    /// decoder (fast), or libipt's block decoder (the reference, to
    /// cross-check; built in with the default `libipt` feature). `--level lines|insns` re-decodes with ptscope's; the
    /// tests hold it to libipt's instruction decoder and to perf's.
    #[arg(long, value_enum, default_value = "ptscope")]
    pub decoder: DecoderChoice,
    /// Threads for ptscope's coarse pass (default: every core). 1: one
    /// walk; more: the trace walked in chunks cut at PSBs, that many at
    /// once, stitched into the same spans one walk gives.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// PT bytes per chunk of the parallel coarse pass (K, M suffixes;
    /// default 16K).
    #[arg(long, value_name = "SIZE", value_parser = parse_chunk)]
    pub chunk: Option<usize>,
    /// Decode afresh: neither read the model a decode of this file with
    /// these options kept in ~/.cache/ptscope/models, nor keep one.
    #[arg(long)]
    pub no_cache: bool,
    /// Walk every run of code: do not replay what ptscope's flow decoder
    /// remembers of runs it walked before with the same branch outcomes.
    /// The spans are the same: this is the reference the memo is tested
    /// against, to cross-check.
    #[arg(long)]
    pub no_memo: bool,
    /// Decode as on this CPU (FAMILY/MODEL[/STEPPING], decimal or 0x hex,
    /// e.g. 6/0x8e/9): its errata are worked around as libipt does. Over
    /// the cpuid a perf.data or snapshot records; a raw dump records none.
    #[arg(long, value_name = "F/M[/S]")]
    pub cpu: Option<ptscope_decoder::Cpu>,
    /// The IP filter the trace was written under, as runtime address
    /// ranges inclusive at both ends, comma-separated: FIRST-LAST for a
    /// range traced (FilterEn), stop:FIRST-LAST for one that stops tracing
    /// (at most 4). Needed for CPUs with erratum SKL014 to bind a TIP.PGD
    /// without IP to the branch that left the filter. Over the filter a
    /// perf.data or snapshot records; a raw dump records none.
    #[arg(long, value_name = "RANGES")]
    pub ip_filter: Option<ptscope_decoder::IpFilter>,
    #[command(flatten)]
    pub names: NameDirs,
    #[command(flatten)]
    pub kernel: KernelOpts,
}

fn parse_chunk(s: &str) -> std::result::Result<usize, String> {
    match parse_size(s)? {
        0 => Err("a chunk holds at least one byte".into()),
        n => usize::try_from(n).map_err(|_| format!("`{s}` is too large")),
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecoderChoice {
    Ptscope,
    Libipt,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_takes_the_binaries_of_raw_dumps() {
        let a = Args::try_parse_from(["ptscope", "--raw", "prog.bin:0x400000", "dump.pt"]).unwrap();
        assert!(a.command.is_none());
        assert_eq!(a.raw, [(PathBuf::from("prog.bin"), 0x400000)]);
        assert_eq!(a.files, [PathBuf::from("dump.pt")]);
        // The subcommands keep their own --raw.
        let a = Args::try_parse_from(["ptscope", "packets", "dump.pt", "--raw", "p:4096"]).unwrap();
        assert!(matches!(a.command, Some(Command::Packets { raw, .. }) if raw.len() == 1));
    }
}
