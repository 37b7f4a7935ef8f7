//! What the threads of the traced process share: the configuration, the
//! state of snapshots in progress, the mappings seen so far and their
//! sideband, and the trigger's resolved address. The threads' own PT
//! units are not here while they run: each thread keeps its own, and
//! lends it here only while it is in a system call ([`Shared::parked`]).
//!
//! A snapshot being gathered ([`Pending`]) is defined here, beside the
//! state that holds it, while its methods are the coordinator's, which
//! gathers and writes it: the coordinator uses this module, and this
//! module names none of the coordinator's, so that the two make no cycle.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};

use ptscope_capture::emulated::filter::IpFilter;
use ptscope_capture::procfs::{self, Mapping};
use ptscope_capture::qemu::per_cpu::ThreadPieces;
use ptscope_capture::qemu::wire::{PluginConfig, Report, CONFIG_FILE};
use ptscope_capture::recording::{Sideband, SidebandEvent, StopReason, ThreadTrace};
use ptscope_capture::trigger::{RangeSymbols, SymbolTrigger, Trigger};

use crate::blocks::Wanted;
use crate::thread::{Snapshots, ThreadState};

/// The plugin's state, set up once at install.
pub struct Plugin {
    pub config: PluginConfig,
    pub dir: PathBuf,
    /// The process QEMU runs; a forked child sees another pid and stops
    /// tracing.
    pub pid: i32,
    /// Where the trigger's function starts, once a mapping holds it (0
    /// before).
    pub trigger_address: AtomicU64,
    /// `--range`'s START and STOP, likewise.
    pub range_start: AtomicU64,
    pub range_stop: AtomicU64,
    /// Bumped each time the IP filter is placed anew in the mappings:
    /// a thread that sees it change takes the new filter.
    pub filter_generation: AtomicU64,
    /// The slow-call trigger watches the stack pointer at calls and
    /// returns.
    pub watch_stack: bool,
    /// Run the callbacks but write no packets (`PTSCOPE_PLUGIN_NO_ENCODE`),
    /// so that the capture benchmark can tell their cost from encoding's.
    pub no_encode: bool,
    /// Bumped by every snapshot request: a running thread that sees it
    /// change hands its trace over.
    pub epoch: AtomicU64,
    /// The last snapshot is taken: threads stop tracing.
    pub done: AtomicBool,
    /// The last snapshot is written: the callbacks can go, the exit
    /// need not wait.
    pub finished: AtomicBool,
    /// The latest virtual time at which a thread was created: a new
    /// thread's clock starts there.
    pub clone_clock: AtomicU64,
    pub shared: Mutex<Shared>,
    /// Signals changes of `shared` to the coordinator and to a thread
    /// waiting for the exit snapshot.
    pub changed: Condvar,
    /// How a running thread asks for a snapshot and answers one: the
    /// coordinator's functions, handed over at install.
    pub snapshots: Snapshots,
}

/// A snapshot being gathered. Its methods, which gather the threads'
/// traces into it, are in the coordinator, as is what reads its fields.
pub struct Pending {
    pub n: usize,
    pub(crate) stop: StopReason,
    /// The last one: tracing ends with it.
    pub(crate) last: bool,
    /// Taken at an `execve`: the last unless the call fails.
    pub(crate) checkpoint: bool,
    pub(crate) traces: Vec<ThreadTrace>,
    pub(crate) logs: Vec<(i32, Vec<u64>)>,
    pub(crate) pieces: Vec<ThreadPieces>,
    /// Running threads that have not handed their traces over yet.
    pub(crate) waiting: HashSet<i32>,
    pub(crate) since: Instant,
    pub(crate) end_time: u64,
}

/// What threads change together, under [`Plugin::shared`].
#[derive(Default)]
pub struct Shared {
    /// Threads in a system call: their state, which a snapshot reads here.
    pub parked: HashMap<i32, ThreadState>,
    /// Threads running guest code with their state in hand.
    pub running: HashSet<i32>,
    /// Threads that ended, with their traces.
    pub finished: Vec<ThreadTrace>,
    pub finished_logs: Vec<(i32, Vec<u64>)>,
    /// Their pieces, in per-CPU mode.
    pub finished_pieces: Vec<ThreadPieces>,
    pub sideband: Vec<Sideband>,
    /// The guest's executable file mappings known so far.
    pub maps: Vec<Mapping>,
    /// Mappings of files that were QEMU's own when the plugin started.
    pub own: Vec<Mapping>,
    /// Per file, the file-offset ranges of its code ([`code_ranges`]).
    pub code_ranges: HashMap<String, Vec<(u64, u64)>>,
    pub symbol: Option<SymbolTrigger>,
    /// `--range`'s functions, and how often a thread entered START.
    pub range: Option<RangeSymbols>,
    pub range_entries: u64,
    /// `--filter` placed in the mappings, as the kernel does on each mmap.
    pub filter: IpFilter,
    /// Per futex word, the latest virtual time a thread woke it at.
    pub wakes: HashMap<u64, u64>,
    /// The snapshot being gathered.
    pub pending: Option<Pending>,
    /// Snapshots gathered whole, for the coordinator to write. A trigger
    /// may fire again as soon as its last one is gathered.
    pub ready: std::collections::VecDeque<Pending>,
    /// Snapshots asked for, and written.
    pub asked: usize,
    pub written: usize,
    /// Reports for the coordinator to send.
    pub outbox: Vec<Report>,
    pub warnings: Vec<String>,
    /// Times the trigger would have fired before `--arm-after` armed it.
    pub unarmed: u64,
    /// Slow calls the ring no longer held whole, and the longest.
    pub missed: u64,
    pub missed_longest: u64,
    /// The first thread has started.
    pub started: bool,
    /// The coordinator is to end (ptscope said stop, or is gone).
    pub quit: bool,
    /// tids seen, so that each gets its sideband once.
    pub seen: HashSet<i32>,
}

static PLUGIN: OnceLock<Plugin> = OnceLock::new();

/// The plugin, once installed and while this process is the one traced.
pub fn plugin() -> Option<&'static Plugin> {
    PLUGIN.get()
}

/// Reads the configuration and sets the shared state up, with the
/// coordinator's `snapshots` for the threads. The crate root's `install`
/// then starts the coordinator, which reads this state.
pub fn start(dir: &Path, snapshots: Snapshots) -> Result<(), String> {
    let config = PluginConfig::read(&dir.join(CONFIG_FILE)).map_err(|e| e.to_string())?;
    let watch_stack = matches!(config.trigger, Trigger::SlowCall { .. });
    let symbol = config.trigger.symbol().map(SymbolTrigger::new);
    let range = config.range.as_ref().map(RangeSymbols::new);
    // A configured filter traces nothing until its file is mapped.
    let filter = match config.filter.is_empty() {
        true => IpFilter::default(),
        false => IpFilter::placed(&config.filter, &[]),
    };
    let own = own_mappings();
    let clock = config.start_time;
    let plugin = Plugin {
        config,
        dir: dir.to_path_buf(),
        pid: std::process::id() as i32,
        trigger_address: AtomicU64::new(0),
        range_start: AtomicU64::new(0),
        range_stop: AtomicU64::new(0),
        filter_generation: AtomicU64::new(0),
        watch_stack,
        no_encode: std::env::var_os("PTSCOPE_PLUGIN_NO_ENCODE").is_some(),
        epoch: AtomicU64::new(0),
        done: AtomicBool::new(false),
        finished: AtomicBool::new(false),
        clone_clock: AtomicU64::new(clock),
        shared: Mutex::new(Shared {
            own,
            symbol,
            range,
            filter,
            ..Shared::default()
        }),
        changed: Condvar::new(),
        snapshots,
    };
    if PLUGIN.set(plugin).is_err() {
        return Err("installed twice".into());
    }
    Ok(())
}

/// The file mappings of this process before QEMU loads the guest (QEMU
/// loads plugins first): its own executable and libraries.
fn own_mappings() -> Vec<Mapping> {
    procfs::read_maps(std::process::id() as i32)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.is_file())
        .collect()
}

impl Plugin {
    pub fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock()
    }

    /// Whether this is a forked child of the traced process, which is not
    /// traced.
    pub fn foreign(&self) -> bool {
        std::process::id() as i32 != self.pid
    }

    /// What translation looks for in the blocks: the addresses found so
    /// far, and the configuration's logging and stack watching.
    pub fn wanted(&self) -> Wanted<'_> {
        Wanted {
            trigger_address: &self.trigger_address,
            range_start: &self.range_start,
            range_stop: &self.range_stop,
            ip_log: self.config.ip_log,
            watch_stack: self.watch_stack,
        }
    }

    /// Tells the coordinator of `report`.
    pub fn report(&self, sh: &mut Shared, report: Report) {
        sh.outbox.push(report);
        self.changed.notify_all();
    }
}

impl Shared {
    /// Records `event` at virtual time `time`.
    pub fn emit(&mut self, time: u64, event: SidebandEvent) {
        self.sideband.push(Sideband {
            time,
            cpu: 0,
            event,
        });
    }

    /// Reads the mappings again after thread `tid` changed them (or
    /// started): the code in every new mapping of a file that QEMU did not
    /// have mapped for itself becomes an MMAP2 record, and the trigger is
    /// looked for in it. Returns the trigger's address, if known.
    pub fn refresh_maps(&mut self, pid: i32, tid: i32, time: u64) -> Option<u64> {
        let Ok(all) = procfs::read_maps(pid) else {
            return None;
        };
        let mut guest = Vec::new();
        for m in all.iter().filter(|m| m.is_file() && !self.own.contains(m)) {
            let ranges = self
                .code_ranges
                .entry(m.path.clone())
                .or_insert_with(|| code_ranges(Path::new(&m.path)));
            guest.extend(code_parts(m, ranges));
        }
        for m in &guest {
            if !self.maps.contains(m) {
                self.emit(
                    time,
                    SidebandEvent::Mmap {
                        pid,
                        tid,
                        mapping: m.clone(),
                    },
                );
            }
        }
        self.maps = guest;
        if let Some(r) = self.range.as_mut() {
            r.resolve(&self.maps);
        }
        let symbol = self.symbol.as_mut()?;
        symbol.resolve(&self.maps);
        symbol.address()
    }

    /// After the mappings changed: publishes `--range`'s addresses and
    /// places `--filter` in the new mappings (`filters` are the ranges as
    /// configured), for the threads to take at their next block.
    pub fn publish(&mut self, plugin: &Plugin, trigger: Option<u64>) {
        if let Some(addr) = trigger {
            plugin.trigger_address.store(addr, Ordering::Release);
        }
        if let Some((start, stop)) = self.range.as_ref().and_then(|r| r.addresses()) {
            plugin.range_start.store(start, Ordering::Release);
            plugin.range_stop.store(stop, Ordering::Release);
        }
        if !plugin.config.filter.is_empty() {
            let placed = IpFilter::placed(&plugin.config.filter, &self.maps);
            if placed != self.filter {
                self.filter = placed;
                plugin.filter_generation.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

/// The file-offset ranges, page-aligned, of the executable segments
/// (PT_LOAD with PF_X) of the ELF file at `path`; none for other files.
///
/// QEMU maps guest memory without PROT_EXEC on the host (it runs the code
/// it translated, never the guest's), and the kernel merges neighbouring
/// mappings of one file, so the host's view does not say which guest
/// pages are code. The file's program headers do, for every mapping of
/// it, whoever mapped it: QEMU's loader or the guest's ld.so.
pub fn code_ranges(path: &Path) -> Vec<(u64, u64)> {
    use object::read::elf::{FileHeader, ProgramHeader};
    const PAGE: u64 = 4096;
    let Ok(data) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(elf) = object::elf::FileHeader64::<object::Endianness>::parse(&*data) else {
        return Vec::new();
    };
    let Ok(endian) = elf.endian() else {
        return Vec::new();
    };
    let Ok(headers) = elf.program_headers(endian, &*data) else {
        return Vec::new();
    };
    headers
        .iter()
        .filter(|h| {
            h.p_type(endian) == object::elf::PT_LOAD
                && h.p_flags(endian).0 & object::elf::PF_X.0 != 0
        })
        .map(|h| {
            let start = h.p_offset(endian) / PAGE * PAGE;
            let end = (h.p_offset(endian) + h.p_filesz(endian)).div_ceil(PAGE) * PAGE;
            (start, end)
        })
        .collect()
}

/// The parts of mapping `m` that hold code, by the file's `ranges`.
pub fn code_parts(m: &Mapping, ranges: &[(u64, u64)]) -> Vec<Mapping> {
    let file_end = m.offset + m.len();
    ranges
        .iter()
        .filter_map(|&(lo, hi)| {
            let (from, to) = (lo.max(m.offset), hi.min(file_end));
            (from < to).then(|| Mapping {
                start: m.start + (from - m.offset),
                end: m.start + (to - m.offset),
                read: true,
                write: false,
                exec: true,
                offset: from,
                ..m.clone()
            })
        })
        .collect()
}

/// The name of thread `tid` of this process, as the kernel has it (QEMU
/// passes the guest's `prctl(PR_SET_NAME)` on).
pub fn comm(pid: i32, tid: i32) -> String {
    procfs::comm(pid, tid)
}

/// Names the calling thread (QEMU's first, which runs the program's)
/// after the program, as its exec would have: the basename of
/// `cmdline[0]`, cut to the kernel's 15 bytes.
pub fn name_thread(cmdline: &[String]) {
    let Some(first) = cmdline.first() else { return };
    let base = Path::new(first)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name: Vec<u8> = base.into_bytes();
    name.truncate(15);
    if let Ok(name) = std::ffi::CString::new(name) {
        let _ = nix::sys::prctl::set_name(&name);
    }
}

/// Prints `what` on stderr when `PTSCOPE_PLUGIN_DEBUG` is set.
pub fn debug(what: &str) {
    if std::env::var_os("PTSCOPE_PLUGIN_DEBUG").is_some() {
        eprintln!("ptscope plugin [{}]: {what}", nix::unistd::gettid());
    }
}

/// The plugin's own threads take no signal meant for the program: QEMU
/// delivers a signal to the guest through whichever thread the kernel
/// picks, and a plugin thread is no guest thread.
pub fn block_signals() {
    let all = nix::sys::signal::SigSet::all();
    let _ = all.thread_block();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_is_found_by_program_headers_in_merged_mappings() {
        let me = std::env::current_exe().unwrap();
        let ranges = code_ranges(&me);
        assert!(!ranges.is_empty());
        let (lo, hi) = ranges[0];
        // One host mapping of the whole file, as the kernel merges QEMU's
        // read-only mappings of its segments.
        let whole = Mapping {
            start: 0x40_0000_0000,
            end: 0x40_0000_0000 + hi + 0x10000,
            read: true,
            write: false,
            exec: false,
            offset: 0,
            dev_major: 0,
            dev_minor: 0,
            inode: 1,
            path: me.display().to_string(),
        };
        let parts = code_parts(&whole, &ranges);
        assert_eq!(parts[0].start, 0x40_0000_0000 + lo);
        assert_eq!(parts[0].offset, lo);
        assert!(parts[0].exec);
        assert!(code_ranges(Path::new("/nonexistent")).is_empty());
    }
}
