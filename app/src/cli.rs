//! The command line: argument parsing and the non-GUI commands.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use ptscope::name_dirs::NameDirs;
use ptscope::recorder::{self, Progress, Request};
use ptscope::size::{parse_ring_size, parse_size};
use ptscope_capture::intel_pt::Timing;
use ptscope_capture::recording::Target;
use ptscope_capture::supervise;
use ptscope_capture::tracee;
use ptscope_capture::trigger::Trigger;
use ptscope_decoder::coarse::chunks::Parallel;
use ptscope_decoder::decode::Engine;
use ptscope_decoder::open::OpenOptions;
use ptscope_decoder::packet;

mod packets;
use packets::{packets, parse_packets_cpu, raw_packets, PacketsCpu};

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
    #[arg(long = "source-map", value_name = "FROM=TO", value_parser = ptscope_viewer::source_tab::parse_map)]
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
    pub cpu: Option<ptscope_decoder::block::Cpu>,
    /// The IP filter the FILEs' traces were written under, as `decode
    /// --ip-filter` takes it.
    #[arg(long, value_name = "RANGES")]
    pub ip_filter: Option<ptscope_decoder::ip_filter::IpFilter>,
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
    /// cross-check). `--level lines|insns` re-decodes with ptscope's; the
    /// tests hold it to libipt's instruction decoder and to perf's.
    #[arg(long, value_enum, default_value = "ptscope")]
    pub decoder: DecoderChoice,
    /// Threads for ptscope's coarse pass (default: every core). 1: one
    /// walk; more: the trace walked in chunks cut at PSBs, that many at
    /// once, stitched into the same spans one walk gives.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// PT bytes per chunk of the parallel coarse pass (K, M suffixes;
    /// default 128K).
    #[arg(long, value_name = "SIZE", value_parser = parse_chunk)]
    pub chunk: Option<usize>,
    /// Decode afresh: neither read the model a decode of this file with
    /// these options kept in ~/.cache/ptscope/models, nor keep one.
    #[arg(long)]
    pub no_cache: bool,
    /// Decode as on this CPU (FAMILY/MODEL[/STEPPING], decimal or 0x hex,
    /// e.g. 6/0x8e/9): its errata are worked around as libipt does. Over
    /// the cpuid a perf.data or snapshot records; a raw dump records none.
    #[arg(long, value_name = "F/M[/S]")]
    pub cpu: Option<ptscope_decoder::block::Cpu>,
    /// The IP filter the trace was written under, as runtime address
    /// ranges inclusive at both ends, comma-separated: FIRST-LAST for a
    /// range traced (FilterEn), stop:FIRST-LAST for one that stops tracing
    /// (at most 4). Needed for CPUs with erratum SKL014 to bind a TIP.PGD
    /// without IP to the branch that left the filter. Over the filter a
    /// perf.data or snapshot records; a raw dump records none.
    #[arg(long, value_name = "RANGES")]
    pub ip_filter: Option<ptscope_decoder::ip_filter::IpFilter>,
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

pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        None => ptscope::gui::run(
            args.files,
            args.screenshot,
            match (args.select, args.explain) {
                (Some(f), _) => Some(ptscope::gui::OnLoad::Select(f)),
                (None, Some(f)) => Some(ptscope::gui::OnLoad::Explain(f)),
                (None, None) => None,
            },
            args.source_maps,
            args.capture,
            ptscope::loader::Decoding {
                raw_images: args.raw,
                cpu: args.cpu,
                ip_filter: args.ip_filter,
            },
            args.names,
        ),
        Some(Command::Record { opts, command }) => capture(
            Target::Spawn {
                argv: command,
                cwd: None,
            },
            opts,
        ),
        Some(Command::Attach { pid, opts }) => capture(Target::Attach(pid), opts),
        Some(Command::Check) => check(),
        Some(Command::Grow {
            snapshot,
            size,
            output,
        }) => {
            let t = std::time::Instant::now();
            let g = ptscope::scale::grow(&snapshot, &output, size)?;
            eprintln!(
                "ptscope: {}: {} MiB of trace: a {}-byte period ({} instructions) repeated {} times, in {:.2?}",
                output.display(),
                g.aux_bytes >> 20,
                g.period.to - g.period.from,
                g.period.instructions,
                g.copies,
                t.elapsed()
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Info { file, raw, .. }) if is_raw(&file, &raw)? => raw_info(&file, &raw),
        Some(Command::Info {
            file,
            names,
            kernel,
            ..
        }) => info(&file, &names, &kernel),
        Some(Command::Packets {
            file,
            raw,
            thread,
            cpu,
            limit,
        }) if is_raw(&file, &raw)? => raw_packets(&file, thread, cpu, limit),
        Some(Command::Packets {
            file,
            thread,
            cpu,
            limit,
            ..
        }) => packets(&file, thread, cpu, limit),
        Some(Command::Decode {
            input,
            from,
            to,
            level,
            format,
        }) => print_model(input, |m, file, out| match level {
            ptscope::report::Level::Calls => ptscope::report::decode(m, from, to, format, out),
            ptscope::report::Level::Marks => {
                ptscope::report::decode_marks(m, from, to, format, out)
            }
            ptscope::report::Level::Cpus => {
                ptscope::report::decode_cpus(m, file, from, to, format, out)
            }
            fine => ptscope::report::decode_fine(m, file, from, to, fine, format, out),
        }),
        Some(Command::Stats {
            input,
            sort,
            limit,
            function,
            histogram,
            format,
        }) => print_model(input, |m, file, out| match &function {
            Some(f) if histogram => ptscope::outlier::histogram(m, file, f, format, out),
            Some(f) => ptscope::outlier::function_ids(m, file, f)
                .and_then(|ids| ptscope::report::stats(m, sort, limit, Some(&ids), out)),
            None => ptscope::report::stats(m, sort, limit, None, out),
        }),
        Some(Command::Export {
            input,
            format,
            output,
            level,
            from,
            to,
        }) => {
            let file = input.file.clone();
            let m = load_input(input)?;
            let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let format = format.unwrap_or_else(|| ptscope::export::ExportFormat::for_path(&output));
            let sel = ptscope::export::Selection {
                from,
                to,
                threads: None,
                level,
            };
            let n = ptscope::export::export(&m, &file, &sel, format, &output, |n| {
                if tty {
                    eprint!("\rptscope: {n} spans written");
                }
            })?;
            if tty {
                eprintln!();
            }
            eprintln!("ptscope: {}: {n} spans", output.display());
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Compare {
            input,
            function,
            call,
            against,
            level,
            format,
        }) => {
            let args = ptscope::outlier::CompareArgs {
                function: &function,
                call,
                against,
                level,
                format,
            };
            print_model(input, |m, file, out| {
                ptscope::outlier::compare(m, file, &args, out)
            })
        }
    }
}

/// Opens the input and prints what `print` makes of its model to stdout;
/// a closed pipe (`| head`) is not an error.
fn print_model(
    input: InputOpts,
    print: impl FnOnce(
        &ptscope_decoder::model::Model,
        &Path,
        &mut std::io::BufWriter<std::io::StdoutLock<'static>>,
    ) -> Result<()>,
) -> Result<ExitCode> {
    let file = input.file.clone();
    let m = load_input(input)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    ptscope::report::quiet_pipe(print(&m, &file, &mut out).and_then(|()| Ok(out.flush()?)))?;
    Ok(ExitCode::SUCCESS)
}

fn load_input(input: InputOpts) -> Result<ptscope_decoder::model::Model> {
    let threads = (!input.threads.is_empty()).then_some(input.threads);
    let engine = match input.decoder {
        DecoderChoice::Ptscope => Engine::Flow,
        DecoderChoice::Libipt => Engine::Libipt,
    };
    let mut parallel = match input.jobs {
        Some(n) => Parallel::on(n.into()),
        None => Parallel::default(),
    };
    if let Some(chunk) = input.chunk {
        parallel.chunk_bytes = chunk;
        parallel.first_chunk_bytes = parallel.first_chunk_bytes.min(chunk);
    }
    let opts = input.names.apply(OpenOptions {
        raw_images: input.raw.clone(),
        decode: ptscope_decoder::decode::DecodeOptions {
            cpu: input.cpu,
            ip_filter: input.ip_filter,
            threads,
            engine,
            parallel,
            names: ptscope_decoder::names::NameOptions {
                debuginfod_on_stderr: true,
                kallsyms: input.kernel.kallsyms.clone(),
                vmlinux: input.kernel.vmlinux.clone(),
                ..Default::default()
            },
            progress: None,
        },
        cache: if input.no_cache {
            None
        } else {
            ptscope_decoder::cache::ModelCache::user()
        },
        ..OpenOptions::default()
    });
    let model = with_decode_progress(opts, |opts| ptscope_decoder::open::open(&input.file, opts))?;
    for w in &model.warnings {
        eprintln!("ptscope: warning: {}: {w}", input.file.display());
    }
    Ok(model)
}

/// Runs `decode` with `opts`; on a terminal, a line on stderr says how far
/// it is, how fast it goes and the time left, rewritten twice a second
/// once the decode has taken a second, and cleared at the end.
fn with_decode_progress<T>(mut opts: OpenOptions, decode: impl FnOnce(&OpenOptions) -> T) -> T {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return decode(&opts);
    }
    let progress = ptscope_decoder::progress::DecodeProgress::counting();
    opts.decode.progress = Some(progress.clone());
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let reporter = std::thread::spawn(move || {
        let mut shown = false;
        let wait = |d| stopped.recv_timeout(d) != Err(std::sync::mpsc::RecvTimeoutError::Timeout);
        if wait(std::time::Duration::from_secs(1)) {
            return;
        }
        loop {
            let (done, total) = progress.segments();
            if let Some(r) = progress.rate() {
                eprint!("\r\x1b[Kdecoding: {done} of {total} segments, {r}");
                shown = true;
            }
            if wait(std::time::Duration::from_millis(500)) {
                break;
            }
        }
        if shown {
            eprint!("\r\x1b[K");
        }
    });
    let out = decode(&opts);
    drop(stop);
    let _ = reporter.join();
    out
}

/// Where `--json-progress` reports go: a private copy of stdout, which a
/// recorded command does not inherit.
struct Reports(Option<std::fs::File>);

impl Reports {
    /// With `json`, keeps stdout for reports and points fd 1 at stderr, so
    /// that a command started later writes there and not into the reports.
    fn new(json: bool) -> Result<Reports> {
        if !json {
            return Ok(Reports(None));
        }
        use std::os::fd::AsFd;
        // try_clone_to_owned dups with FD_CLOEXEC: no command inherits it.
        let out = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .context("cannot keep stdout for reports")?;
        nix::unistd::dup2_stdout(std::io::stderr()).context("cannot redirect stdout")?;
        Ok(Reports(Some(out.into())))
    }

    fn send(&self, r: recorder::Report) {
        if let Some(mut f) = self.0.as_ref() {
            // A front end that went away is told nothing more.
            let _ = writeln!(f, "{}", r.to_line());
        }
    }
}

fn capture(target: Target, opts: CaptureOpts) -> Result<ExitCode> {
    // The capture runs in a child that survives us: see `supervise`.
    if !supervise::adopt().context("cannot start the capture")? {
        let code = supervise::supervise(std::env::args_os().skip(1))
            .context("cannot start the capture process")?;
        return Ok(ExitCode::from(code.clamp(0, 255) as u8));
    }
    let reports = Reports::new(opts.json_progress)?;
    let result = capture_here(target, opts, &reports);
    if let Err(e) = &result {
        reports.send(recorder::Report::Failed {
            error: format!("{e:#}"),
        });
    }
    result
}

/// The capture child's work: trace, snapshot, and wait for a recorded
/// command to end.
fn capture_here(target: Target, opts: CaptureOpts, reports: &Reports) -> Result<ExitCode> {
    let trigger = match (&opts.trigger, opts.duration) {
        (Some(_), Some(_)) => bail!("use either --trigger or --duration, not both"),
        (Some(s), None) => match opts.slower_than {
            Some(ns) => Trigger::SlowCall {
                symbol: s.clone(),
                slower_than: ns,
            },
            None => Trigger::Symbol(s.clone()),
        },
        (None, Some(ms)) => Trigger::Duration(ms),
        (None, None) if opts.manual => Trigger::Manual,
        (None, None) => Trigger::ProcessExit,
    };
    let mut req = Request::new(target, trigger.clone());
    req.backend = opts.backend;
    req.opts.size = opts.size;
    req.opts.timing = opts.timing.clone();
    req.overflow_at = opts.overflow_at.clone();
    req.emulate_skl014 = opts.emulate_skl014;
    req.opts.kernel = opts.kernel;
    req.debug_info = !opts.no_debug_info;
    req.opts.per_cpu = opts.per_cpu || opts.system_wide;
    req.system_wide = opts.system_wide;
    match opts.cpus {
        Some(n) if !req.opts.per_cpu => bail!("--cpus {n} needs --per-cpu or --system-wide"),
        Some(n) => req.cpus = n,
        None => {}
    }
    req.opts.snapshots = opts.snapshots;
    req.opts.arm_after = opts.arm_after;
    if let Some(r) = &opts.range {
        if r[0] == r[1] {
            bail!(
                "--range: START and STOP are both `{}`; they must differ",
                r[0]
            );
        }
        req.opts.range = Some(ptscope_capture::trigger::Range {
            start: r[0].clone(),
            stop: r[1].clone(),
        });
    }
    if let Some(text) = &opts.filter {
        use ptscope_capture::filter;
        let specs = filter::parse(text)?;
        let program = filter::target_program(&req.target);
        req.opts.filter = filter::resolve(&specs, program.as_deref())?;
    }
    req.ip_log = opts.ip_log.is_some();
    req.progress = !opts.quiet && !opts.json_progress;
    signal_hook::flag::register(signal_hook::consts::SIGINT, req.opts.interrupt.clone())
        .context("cannot install the Ctrl-C handler")?;
    // SIGTERM (also when the supervising ptscope dies) and SIGHUP cancel:
    // tracees are detached and left running, nothing is written.
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, req.opts.cancel.clone())
            .context("cannot install the signal handlers")?;
    }
    let quiet = opts.quiet || opts.json_progress;
    let json = opts.json_progress;
    let report = |r: recorder::Report| reports.send(r);
    let mut last_log: Vec<(i32, Vec<u64>)> = Vec::new();
    let saved = recorder::run(
        &req,
        &opts.output,
        |p| match p {
            p if json => report(recorder::Report::Progress(p)),
            Progress::Backend(why) if !quiet => eprintln!("ptscope: {why}"),
            Progress::Warning(w) => eprintln!("ptscope: warning: {w}"),
            Progress::Armed { threads } if !quiet => {
                eprintln!("ptscope: tracing {threads} thread(s); Ctrl-C takes a snapshot now")
            }
            _ => {}
        },
        |cap| {
            // Each snapshot's log holds everything before it: keep the last.
            if !cap.ip_log.is_empty() {
                last_log = cap.ip_log.clone();
            }
            Ok(())
        },
    )?;
    if let Some(path) = &opts.ip_log {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        );
        for (tid, ips) in &last_log {
            for ip in ips {
                writeln!(out, "{tid} {ip:x}")?;
            }
        }
        out.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let (Some(name), Some(last)) = (trigger.symbol(), saved.last()) {
        if last.metadata.stop == "process exit" {
            let w = match &trigger {
                Trigger::SlowCall { slower_than, .. } => format!(
                    "no call to {name} longer than {} fired the trigger; the snapshot ends at the process's exit",
                    ptscope::durations::format_duration(*slower_than)
                ),
                _ => format!(
                    "the process exited before entering {name}; the snapshot ends at its exit"
                ),
            };
            if json {
                report(recorder::Report::Progress(Progress::Warning(w)));
            } else {
                eprintln!("ptscope: warning: {w}");
            }
        }
    }
    if !quiet {
        for s in &saved {
            let secs = s.wall.as_secs_f64().max(1e-9);
            eprintln!(
                "ptscope: {} ({}): {} threads, {} instructions in {:.2} s ({:.0}k steps/s)",
                s.path.display(),
                s.metadata.stop,
                s.threads,
                s.instructions,
                secs,
                s.instructions as f64 / secs / 1e3,
            );
        }
        if saved.len() > 1 && saved.iter().any(|s| s.metadata.trigger_call.is_some()) {
            let files: Vec<String> = saved.iter().map(|s| s.path.display().to_string()).collect();
            eprintln!(
                "ptscope: open them as one session, their slow calls listed slowest first: ptscope {}",
                files.join(" ")
            );
        }
    }
    if json {
        report(recorder::Report::Done {
            saved: saved.iter().map(|s| s.path.clone()).collect(),
        });
    }
    let Some(last) = saved.last() else {
        return Ok(ExitCode::SUCCESS);
    };
    // A recorded command runs to its end after the snapshot; SIGTERM stops
    // waiting for it (it runs on).
    let code = match last.child {
        Some(pid) => loop {
            if let Some(code) = tracee::try_wait_child(pid) {
                break Some(code);
            }
            if req.opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        },
        None => last.exit_code,
    };
    if json && last.child.is_some() && !req.opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
        report(recorder::Report::CommandExited { code });
    }
    if let Some(c) = code.filter(|&c| c != 0 && !quiet) {
        eprintln!("ptscope: the traced command exited with status {c}");
    }
    Ok(ExitCode::SUCCESS)
}

fn check() -> Result<ExitCode> {
    use ptscope_capture::intel_pt::Pmu;
    use ptscope_capture::perf_event::{permissions, Privileges, Scope};
    let mut out = std::io::stdout().lock();
    match Pmu::discover() {
        Ok(pmu) => {
            writeln!(
                out,
                "Intel PT:      yes (PMU type {}, {})",
                pmu.kind,
                pmu.dir.display()
            )?;
            let caps: Vec<String> = pmu
                .caps
                .raw
                .iter()
                .map(|(k, v)| format!("{k}={v:x}"))
                .collect();
            writeln!(out, "  caps:        {}", caps.join(" "))?;
            for t in [Timing::Low, Timing::Normal, Timing::High] {
                match t.resolve(&pmu) {
                    Ok(cfg) => writeln!(out, "  timing {t:<6} {}", cfg.event_string(false))?,
                    Err(e) => writeln!(out, "  timing {t:<6} not on this CPU: {e}")?,
                }
            }
        }
        Err(e) => writeln!(out, "Intel PT:      no: {e}")?,
    }
    match ptscope_capture::qemu::probe::usable_qemu() {
        Ok((qemu, version)) => writeln!(
            out,
            "QEMU:          yes ({}, version {version}): `record` traces commands under it, with ptscope's plugin, where there is no Intel PT; `attach` single-steps (QEMU cannot attach)",
            qemu.display()
        )?,
        Err(e) => writeln!(
            out,
            "QEMU:          no: {e}; without Intel PT, `record` single-steps (thousands of times slower)"
        )?,
    }
    let bp = ptscope_capture::perf_event::breakpoint::Breakpoint::available();
    writeln!(
        out,
        "breakpoints:   {}",
        if bp {
            "yes (symbol triggers use a hardware breakpoint)"
        } else {
            "no (symbol triggers compare addresses; emulated backend only)"
        }
    )?;
    let p = Privileges::read();
    writeln!(
        out,
        "paranoid:      kernel.perf_event_paranoid = {}",
        p.paranoid
    )?;
    writeln!(
        out,
        "capabilities:  CAP_PERFMON {}, CAP_IPC_LOCK {}",
        if p.perfmon() { "yes" } else { "no" },
        if p.ipc_lock() { "yes" } else { "no" }
    )?;
    writeln!(
        out,
        "locked memory: {} KiB per CPU × {} CPUs + RLIMIT_MEMLOCK {}",
        p.mlock_kb,
        p.cpus,
        if p.memlock_limit == u64::MAX {
            "unlimited".to_string()
        } else {
            format!("{} KiB", p.memlock_limit / 1024)
        }
    )?;
    for (scope, name) in [
        (Scope::PerThread, "per-thread"),
        (Scope::Kernel, "kernel"),
        (Scope::PerCpu, "per-CPU"),
    ] {
        match permissions::probe(scope) {
            Ok(()) => writeln!(out, "{name:<14} allowed (probed)")?,
            Err(e) => writeln!(
                out,
                "{name:<14} denied (probed: {e}): {}",
                p.explain_open(e, scope)
            )?,
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn info(path: &Path, names: &NameDirs, kernel_opts: &KernelOpts) -> Result<ExitCode> {
    let snap = ptscope_decoder::open::open_snapshot(path)?;
    let trace = snap.trace()?;
    let search = names.search(Some(&snap));
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", path.display())?;
    if let Some(m) = &snap.metadata {
        writeln!(
            out,
            "  capture: {} backend, trigger {}, stopped by {}",
            m.backend, m.trigger, m.stop
        )?;
        if !m.command.is_empty() {
            writeln!(out, "  command: {} (pid {})", m.command.join(" "), m.pid)?;
        }
        writeln!(out, "  clock:   {}", m.clock)?;
        if let Some(cpu) = &m.guest_cpu {
            writeln!(
                out,
                "  ran on:  {cpu} (QEMU's CPU model: glibc picked its routines for it)"
            )?;
        }
        for w in &m.warnings {
            writeln!(out, "  warning: {w}")?;
        }
        if m.backend == "qemu" && m.trigger.starts_with("symbol") {
            writeln!(
                out,
                "  trigger registers: none (QEMU 7.2's plugin API reads no registers)"
            )?;
        }
        if !m.trigger_registers.is_empty() {
            let regs: Vec<String> = m
                .trigger_registers
                .iter()
                .map(|(r, v)| format!("{r}={v:#x}"))
                .collect();
            writeln!(out, "  trigger registers: {}", regs.join(" "))?;
        }
        if let Some(c) = &m.trigger_call {
            writeln!(
                out,
                "  trigger call: {} on thread {}, {} ns (perf time {} .. {}); `ptscope compare --call trigger` explains it",
                c.function, c.tid, c.duration, c.start, c.end
            )?;
        }
    } else {
        writeln!(out, "  a plain perf.data file")?;
    }
    let f = &trace.features;
    writeln!(
        out,
        "  cpu:     {} ({})",
        f.cpuid.as_deref().unwrap_or("unknown"),
        f.cpudesc.as_deref().unwrap_or("?")
    )?;
    let errata =
        ptscope_decoder::errata::Errata::of(&ptscope_decoder::block::decoder_config(&trace));
    if errata != ptscope_decoder::errata::Errata::default() {
        writeln!(
            out,
            "  errata:  {} (worked around as libipt does)",
            errata.names().join(", ")
        )?;
    }
    if let Some(h) = &f.hostname {
        writeln!(
            out,
            "  host:    {h}, {} {}",
            f.osrelease.as_deref().unwrap_or(""),
            f.arch.as_deref().unwrap_or("")
        )?;
    }
    let p = &trace.params;
    let cfg = trace.pt_attr.config;
    writeln!(
        out,
        "  pt:      pmu type {}, config {:#x}: tsc={} cyc={} mtc={} (period {}) retcomp={} psb_period={}",
        p.pmu_type,
        cfg,
        (cfg & p.tsc_bit != 0) as u8,
        (cfg & p.cyc_bit != 0) as u8,
        (cfg & p.mtc_bit != 0) as u8,
        p.mtc_period(cfg),
        trace.ret_compression() as u8,
        (cfg >> 24) & 0xf,
    )?;
    writeln!(
        out,
        "           time_shift {} time_mult {} time_zero {}, TSC:CTC {}/{}, max non-turbo ratio {}, {}{}",
        p.time_shift,
        p.time_mult,
        p.time_zero,
        p.tsc_ctc_ratio_n,
        p.tsc_ctc_ratio_d,
        p.max_nonturbo_ratio,
        if p.snapshot_mode { "snapshot mode" } else { "full trace" },
        if p.per_cpu_mmaps { ", per-cpu" } else { ", per-thread" },
    )?;
    if !p.filter.is_empty() {
        writeln!(out, "           IP filter: {}", p.filter)?;
        match ptscope_decoder::ip_filter::IpFilter::recorded(&trace) {
            Ok(f) if f.is_configured() => writeln!(out, "           placed at: {f}")?,
            Ok(_) => writeln!(
                out,
                "           placed at: nowhere (its files are not mapped)"
            )?,
            Err(e) => writeln!(out, "           {e}")?,
        }
    }
    if ptscope_decoder::decode::time_unit(&trace) == ptscope_decoder::model::TimeUnit::Insns {
        writeln!(
            out,
            "  timing:  none (tsc=0): decoded times count instructions retired, not ns"
        )?;
    }
    if let Some((lo, hi)) = trace.time_range {
        writeln!(
            out,
            "  time:    {lo} .. {hi} ns (perf time), {}",
            ptscope_viewer::axis::format_duration(hi - lo)
        )?;
    }
    if trace.lost_records > 0 || trace.truncated_aux > 0 {
        writeln!(
            out,
            "  lost:    {} records, {} truncated AUX buffers",
            trace.lost_records, trace.truncated_aux
        )?;
    }
    let per_cpu: Vec<_> = trace.streams.iter().filter(|s| s.tid.is_none()).collect();
    if !per_cpu.is_empty() {
        // One buffer per CPU, holding whichever threads ran there.
        writeln!(out, "  buffers:")?;
        for s in &per_cpu {
            let psbs = packet::psb_offsets(&s.data).len();
            let cpu = s
                .cpu
                .map_or(format!("queue {}", s.idx), |c| format!("cpu {c}"));
            let owner = s
                .recorded_tid
                .map_or(String::new(), |t| format!(", recorded for pid/tid {t}"));
            writeln!(
                out,
                "    {cpu:<29} {:>10} bytes of PT, {psbs} PSBs{owner}",
                s.data.len()
            )?;
        }
    }
    writeln!(out, "  threads:")?;
    // Threads of per-CPU buffers, once each, with the CPUs they ran on.
    let mut ran_on: std::collections::BTreeMap<i32, std::collections::BTreeSet<u32>> =
        Default::default();
    for sw in trace.switches.iter().filter(|sw| sw.tid > 0) {
        ran_on.entry(sw.tid).or_default().insert(sw.cpu);
    }
    for (tid, cpus) in ran_on.iter().filter(|_| !per_cpu.is_empty()) {
        let comm = trace.thread(*tid).map(|t| t.comm.as_str()).unwrap_or("");
        let cpus: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
        writeln!(out, "    tid {tid:<8} {comm:<16} on cpu {}", cpus.join(","))?;
    }
    for s in trace.streams.iter().filter(|s| s.tid.is_some()) {
        let psbs = packet::psb_offsets(&s.data).len();
        let who = match (s.tid, s.cpu) {
            (Some(tid), _) => {
                let comm = trace.thread(tid).map(|t| t.comm.as_str()).unwrap_or("");
                format!("tid {tid:<8} {comm:<16}")
            }
            (None, Some(cpu)) => format!("cpu {cpu:<25}"),
            (None, None) => format!("queue {:<23}", s.idx),
        };
        writeln!(
            out,
            "    {who} {:>10} bytes of PT, {psbs} PSBs",
            s.data.len()
        )?;
    }
    writeln!(out, "  binaries:")?;
    let mut seen = std::collections::BTreeSet::new();
    let mut notes = Vec::new();
    for m in trace.mmaps.iter().filter(|m| !m.kernel) {
        if !seen.insert((m.path.clone(), m.build_id.clone())) {
            continue;
        }
        let found = ptscope_decoder::names::find_binary(
            &snap,
            &search,
            m.build_id.as_deref(),
            &m.path,
            &mut notes,
        );
        let id = build_id_text(m);
        let in_snapshot = |p: &Path| snap.buildid_dir().is_some_and(|d| p.starts_with(d));
        let binary = match &found {
            Some(p) if in_snapshot(p) => "(in snapshot".to_string(),
            Some(p) => format!("-> {}", p.display()),
            None => String::new(),
        };
        // What a snapshot carries beside the binary: its debug file.
        let debug = m
            .build_id
            .as_deref()
            .zip(snap.buildid_dir())
            .filter(|(id, dir)| {
                dir.join(ptscope_formats::buildid::debug_cache_path(id))
                    .is_file()
            })
            .map(|(id, _)| {
                let hex = ptscope_formats::buildid::to_hex(id);
                match snap
                    .metadata
                    .as_ref()
                    .and_then(|md| md.debug_files.get(&hex))
                {
                    Some(origin) => format!("debug file from {origin}"),
                    None => "debug file".to_string(),
                }
            });
        let carried = match (found.as_deref().is_some_and(in_snapshot), debug) {
            (true, Some(d)) => format!(" + {d})"),
            (true, None) => ")".to_string(),
            (false, Some(d)) => format!(" (in snapshot: {d})"),
            (false, None) if snap.buildid_dir().is_some() => " (not in snapshot)".to_string(),
            (false, None) => String::new(),
        };
        writeln!(
            out,
            "    {:<10} {:#014x} {} [{}] {binary}{carried}",
            if found.is_some() { "found" } else { "MISSING" },
            m.start,
            m.path,
            id,
        )?;
    }
    notes.dedup();
    for n in &notes {
        writeln!(out, "    warning: {n}")?;
    }
    let (_, missing) = ptscope_decoder::image::sections_with(&snap, &trace, None, &search);
    ptscope::missing::write_remedies(&mut out, &missing, &names.debug_dirs)?;
    // The kernel and its modules, as perf's kernel MMAP records map them:
    // their code is named `[kernel]` in the spans, never decoded.
    let kernel: Vec<_> = trace.mmaps.iter().filter(|m| m.kernel).collect();
    let (symbols, why) = ptscope_decoder::symbols::kallsyms::for_trace(
        &snap,
        &trace,
        kernel_opts.kallsyms.as_deref(),
        kernel_opts.vmlinux.as_deref(),
    );
    let source = match (&kernel_opts.vmlinux, &kernel_opts.kallsyms) {
        (Some(v), _) => v.display().to_string(),
        (None, Some(k)) => k.display().to_string(),
        (None, None) => "the snapshot's kallsyms".to_string(),
    };
    match (&symbols, &why) {
        (Some(k), _) => writeln!(
            out,
            "  kernel symbols: {} functions from {source}{}",
            k.len(),
            if snap.modules.is_some() && kernel_opts.vmlinux.is_none() {
                ", modules bounded by the snapshot's /proc/modules"
            } else {
                ""
            }
        )?,
        (None, Some(why)) => writeln!(out, "  kernel symbols: none: {why}")?,
        (None, None) => {}
    }
    if !kernel.is_empty() {
        writeln!(
            out,
            "  kernel (not decoded, {}):",
            if symbols.is_some() {
                "named from its symbols"
            } else {
                "shown as [kernel]"
            }
        )?;
        let mut seen = std::collections::BTreeSet::new();
        for m in kernel {
            if !seen.insert((m.start, m.path.clone())) {
                continue;
            }
            let id = build_id_text(m);
            writeln!(
                out,
                "    {:#018x}-{:#018x} {} [{}]",
                m.start,
                m.start.saturating_add(m.len),
                m.display_name(),
                id
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A mapping's build id as `info` prints it.
fn build_id_text(m: &ptscope_formats::snapshot::MmapEvent) -> String {
    m.build_id
        .as_deref()
        .map(ptscope_formats::buildid::to_hex)
        .unwrap_or_else(|| "no build id".into())
}

/// Whether `file` is to be read as a raw PT dump: `--raw` was given, or
/// it starts like one.
fn is_raw(file: &Path, raw: &[(PathBuf, u64)]) -> Result<bool> {
    use ptscope_decoder::open::{input_kind, InputKind};
    Ok(input_kind(file, !raw.is_empty())? == InputKind::RawPt)
}

/// `ptscope info` of a raw PT dump: its size and PSBs, and the binaries
/// given to decode it with.
fn raw_info(path: &Path, raw: &[(PathBuf, u64)]) -> Result<ExitCode> {
    let data = ptscope_decoder::open::read_raw(path)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", path.display())?;
    writeln!(
        out,
        "  a raw Intel PT dump: {} bytes of PT, {} PSBs; no sideband, no timing parameters",
        data.len(),
        packet::psb_offsets(&data).len()
    )?;
    if raw.is_empty() {
        writeln!(
            out,
            "  binaries: none given; decode it with --raw IMAGE:ADDR for each binary it ran"
        )?;
    } else {
        writeln!(out, "  binaries (--raw):")?;
        for (image, addr) in raw {
            let (state, size) = match std::fs::metadata(image) {
                Ok(m) => ("found", format!("({} bytes)", m.len())),
                Err(e) => ("MISSING", format!("({e})")),
            };
            writeln!(
                out,
                "    {state:<10} {addr:#014x} {} {size}",
                image.display()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
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
