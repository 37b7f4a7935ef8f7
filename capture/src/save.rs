//! This module writes a capture as a `.ptscope` snapshot: the perf.data
//! records perf would have written for the same run (attrs, sideband, AUX and
//! AUXTRACE records, features), and every binary the trace maps, read now and
//! keyed by build id, so that the trace still decodes once the binaries have
//! changed or on another machine. Beside each stripped binary goes the
//! debug file the ecosystem's tools find for it ([`Search::system`]), and a
//! kernel trace takes the kernel's symbols along (`crate::kernel_symbols`),
//! so that another machine names what this one named. It serves captures
//! from both backends,
//! whose [`Capture`] says how the PT unit was set up; the file formats
//! themselves are `ptscope_formats`'.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};
use ptscope_debuginfo::Search;

use ptscope_formats::buildid;
use ptscope_formats::{
    perf_data, perf_data::flag, perf_data::sample, perf_data::BuildIdEntry, perf_data::EventAttr,
    perf_data::Features, perf_data::IdIndexEntry, perf_data::PerfDataWriter,
    perf_data::PerfEventAttr, perf_data::Record, perf_data::SampleId, perf_data::TimeConv,
};
use ptscope_formats::{
    snapshot::write_archive, snapshot::Metadata, snapshot::KALLSYMS_MEMBER,
    snapshot::MODULES_MEMBER, snapshot::SAMPLE_TYPE,
};

use crate::error::CaptureError;
use crate::kernel_symbols::{self, KernelFiles};
use crate::recording::{Capture, SidebandEvent};

struct Binary {
    id: Vec<u8>,
    data: Vec<u8>,
    vdso: bool,
    /// Whether the id is the ELF's own build id (not a content id), which
    /// debug files are found by.
    elf_id: bool,
}

/// What a snapshot takes along besides the trace and the binaries.
#[derive(Clone, Debug)]
pub struct SaveOptions {
    /// Store the debug file of each binary that lacks its own symbols
    /// (`--no-debug-info` turns this off).
    pub debug_info: bool,
    /// Where debug files are looked for ([`Search::system`]).
    pub search: Search,
    /// Where the kernel's symbols and modules are read for a kernel trace
    /// (`kernel_symbols::KALLSYMS`, `kernel_symbols::MODULES`).
    pub kallsyms: PathBuf,
    pub modules: PathBuf,
}

impl Default for SaveOptions {
    fn default() -> SaveOptions {
        SaveOptions {
            debug_info: true,
            search: Search::system(),
            kallsyms: PathBuf::from(kernel_symbols::KALLSYMS),
            modules: PathBuf::from(kernel_symbols::MODULES),
        }
    }
}

/// Whether an ELF image names its own functions: a `.symtab` or DWARF. A
/// stripped one keeps only `.dynsym`, which names its exports alone.
fn has_own_symbols(data: &[u8]) -> bool {
    object::File::parse(data).is_ok_and(|f| {
        f.sections()
            .any(|s| matches!(s.name(), Ok(".symtab") | Ok(".debug_info")))
    })
}

/// A debug file carried beside a binary: its archive member name, bytes,
/// and where it was found.
struct DebugFile {
    member: String,
    data: Vec<u8>,
    origin: String,
}

/// The debug files of the binaries that lack their own symbols, as `search`
/// finds them; what went wrong on the way goes to `notes`.
fn debug_files(
    binaries: &BTreeMap<String, Binary>,
    search: &Search,
    notes: &mut Vec<String>,
) -> Vec<DebugFile> {
    let mut out: Vec<DebugFile> = Vec::new();
    for (path, b) in binaries {
        if b.vdso || has_own_symbols(&b.data) {
            continue;
        }
        let member = buildid::debug_cache_path(&b.id);
        if out.iter().any(|d| d.member == member) {
            continue;
        }
        let id = b.elf_id.then_some(b.id.as_slice());
        let Some(found) = search.debug_file(Path::new(path), path, id, notes) else {
            continue;
        };
        match std::fs::read(&found.path) {
            Ok(data) => out.push(DebugFile {
                member,
                data,
                origin: found.origin.to_string(),
            }),
            Err(e) => notes.push(format!(
                "{path}: its debug file {} is not readable ({e}); the snapshot goes without it",
                found.path.display()
            )),
        }
    }
    out
}

fn uname_field(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Builds the perf.data bytes and the binaries of an emulated capture.
fn build_perf_data(
    cap: &Capture,
    ring_size: u64,
) -> Result<(Vec<u8>, BTreeMap<String, Binary>), std::io::Error> {
    // Binaries: every mapped file, read now, by build id.
    let mut binaries: BTreeMap<String, Binary> = BTreeMap::new();
    for sb in &cap.sideband {
        if let SidebandEvent::Mmap { mapping, .. } = &sb.event {
            if mapping.is_file() && !binaries.contains_key(&mapping.path) {
                if let Ok(data) = std::fs::read(&mapping.path) {
                    let elf_id = buildid::elf_build_id(&data);
                    binaries.insert(
                        mapping.path.clone(),
                        Binary {
                            id: elf_id.clone().unwrap_or_else(|| buildid::content_id(&data)),
                            elf_id: elf_id.is_some(),
                            data,
                            vdso: false,
                        },
                    );
                }
            }
        }
    }
    if let Some((_, data)) = &cap.vdso {
        let id = buildid::id_of(data);
        binaries.insert(
            "[vdso]".into(),
            Binary {
                id,
                data: data.clone(),
                vdso: true,
                elf_id: false,
            },
        );
    }

    // Per-CPU captures have one event pair per CPU and records carry the
    // CPU. A system-wide one (as `perf record -a` opens them) names no
    // thread in its AUXTRACE records and has CPU-wide switch records
    // naming the other thread; an inherited one (`perf record CMD`, the
    // default) names the process (perf's auxtrace_mmap_params__set_idx)
    // and has each thread's own switch records.
    let per_cpu = !cap.cpus.is_empty();
    let inherit = per_cpu && cap.inherit;
    let queue_tid = if inherit { cap.pid } else { -1 };
    let sample_type = if per_cpu {
        SAMPLE_TYPE | sample::CPU
    } else {
        SAMPLE_TYPE
    };
    let tids: Vec<i32> = cap.threads.iter().map(|t| t.tid).collect();
    let index: std::collections::HashMap<i32, u64> = tids
        .iter()
        .enumerate()
        .map(|(i, &t)| (t, i as u64))
        .collect();
    let cpu_index: std::collections::HashMap<u32, u64> = cap
        .cpus
        .iter()
        .enumerate()
        .map(|(i, c)| (c.cpu, i as u64))
        .collect();
    // The queue a record belongs to: its thread's, or its CPU's.
    let index_of = |tid: i32, cpu: u32| {
        if per_cpu {
            cpu_index.get(&cpu).copied().unwrap_or(0)
        } else {
            index.get(&tid).copied().unwrap_or(0)
        }
    };
    let pt_id = |idx: u64| 2 * idx + 1;
    let dummy_id = |idx: u64| 2 * idx + 2;
    // (queue index, tid, cpu) of each PT queue.
    let queues: Vec<(u64, i32, u32)> = if per_cpu {
        cap.cpus
            .iter()
            .enumerate()
            .map(|(i, c)| (i as u64, queue_tid, c.cpu))
            .collect()
    } else {
        tids.iter()
            .enumerate()
            .map(|(i, &t)| (i as u64, t, u32::MAX))
            .collect()
    };

    // What both events share, as `perf record -e intel_pt//u` sets it.
    let exclude_kernel = if cap.pt.kernel {
        0
    } else {
        flag::EXCLUDE_KERNEL
    };
    let base = PerfEventAttr {
        sample_period: 1,
        sample_type,
        read_format: 4,
        flags: flag::DISABLED
            | exclude_kernel
            | flag::EXCLUDE_HV
            // `perf record -a` enables its CPU-wide events at once.
            | if per_cpu && !inherit { 0 } else { flag::ENABLE_ON_EXEC }
            | flag::SAMPLE_ID_ALL
            | if inherit { flag::INHERIT } else { 0 },
        ..Default::default()
    };
    let pt_attr = PerfEventAttr {
        kind: cap.pt.pmu_type,
        config: cap.pt.config,
        aux_watermark: (ring_size / 4) as u32,
        ..base.clone()
    };
    let dummy_attr = PerfEventAttr {
        kind: perf_data::PERF_TYPE_SOFTWARE,
        config: perf_data::PERF_COUNT_SW_DUMMY,
        flags: base.flags
            | flag::EXCLUDE_GUEST
            | flag::MMAP
            | flag::COMM
            | flag::TASK
            | flag::MMAP2
            | flag::COMM_EXEC
            | if per_cpu { flag::CONTEXT_SWITCH } else { 0 },
        ..base
    };
    let attrs = vec![
        EventAttr {
            attr: pt_attr,
            name: cap.pt.event.clone(),
            ids: queues.iter().map(|q| pt_id(q.0)).collect(),
        },
        EventAttr {
            attr: dummy_attr,
            name: if cap.pt.kernel { "dummy" } else { "dummy:u" }.into(),
            ids: queues.iter().map(|q| dummy_id(q.0)).collect(),
        },
    ];

    let mut params = cap.pt.params.clone();
    if per_cpu {
        // Context switches come from the threads' switch records (2) or
        // from CPU-wide ones (3).
        params.have_sched_switch = if inherit { 2 } else { 3 };
        params.per_cpu_mmaps = true;
    }
    let mut w = PerfDataWriter::new(Cursor::new(Vec::new()), sample_type)?;
    w.write(&Record::TimeConv(TimeConv {
        time_shift: params.time_shift,
        time_mult: params.time_mult,
        time_zero: params.time_zero,
        time_cycles: 0,
        time_mask: u64::MAX,
        cap_user_time_zero: params.cap_user_time_zero,
        cap_user_time_short: false,
    }))?;
    let mut index = Vec::new();
    for &(idx, tid, cpu) in &queues {
        for id in [pt_id(idx), dummy_id(idx)] {
            index.push(IdIndexEntry {
                id,
                idx,
                cpu: if per_cpu { cpu as u64 } else { u64::MAX },
                tid: tid as u64,
            });
        }
    }
    w.write(&Record::IdIndex(index))?;
    w.write(&Record::AuxtraceInfo(params.to_info()))?;

    let sid = |pid: i32, tid: i32, time: u64, id: u64, cpu: u32| SampleId {
        pid: pid as u32,
        tid: tid as u32,
        time,
        id,
        cpu,
    };
    let mut sideband = cap.sideband.clone();
    sideband.sort_by_key(|s| s.time);
    for sb in &sideband {
        let t = sb.time;
        let rec = match &sb.event {
            SidebandEvent::Comm {
                pid,
                tid,
                comm,
                exec,
            } => Record::Comm {
                pid: *pid as u32,
                tid: *tid as u32,
                exec: *exec,
                comm,
                sample_id: sid(*pid, *tid, t, dummy_id(index_of(*tid, sb.cpu)), sb.cpu),
            },
            SidebandEvent::Mmap { pid, tid, mapping } => {
                let build_id = if mapping.is_vdso() {
                    binaries.get("[vdso]").map(|b| b.id.clone())
                } else {
                    binaries.get(&mapping.path).map(|b| b.id.clone())
                };
                let prot = libc::PROT_EXEC as u32
                    | if mapping.read {
                        libc::PROT_READ as u32
                    } else {
                        0
                    }
                    | if mapping.write {
                        libc::PROT_WRITE as u32
                    } else {
                        0
                    };
                Record::Mmap2 {
                    pid: *pid as u32,
                    tid: *tid as u32,
                    addr: mapping.start,
                    len: mapping.len(),
                    pgoff: mapping.offset,
                    build_id,
                    maj: mapping.dev_major,
                    min: mapping.dev_minor,
                    ino: mapping.inode,
                    prot,
                    flags: libc::MAP_PRIVATE as u32,
                    filename: &mapping.path,
                    sample_id: sid(*pid, *tid, t, dummy_id(index_of(*tid, sb.cpu)), sb.cpu),
                }
            }
            SidebandEvent::Fork {
                pid,
                ppid,
                tid,
                ptid,
            } => Record::Fork {
                pid: *pid as u32,
                ppid: *ppid as u32,
                tid: *tid as u32,
                ptid: *ptid as u32,
                time: t,
                sample_id: sid(*pid, *tid, t, dummy_id(index_of(*tid, sb.cpu)), sb.cpu),
            },
            SidebandEvent::Exit {
                pid,
                ppid,
                tid,
                ptid,
            } => Record::Exit {
                pid: *pid as u32,
                ppid: *ppid as u32,
                tid: *tid as u32,
                ptid: *ptid as u32,
                time: t,
                sample_id: sid(*pid, *tid, t, dummy_id(index_of(*tid, sb.cpu)), sb.cpu),
            },
            SidebandEvent::ItraceStart { pid, tid } => Record::ItraceStart {
                pid: *pid as u32,
                tid: *tid as u32,
                sample_id: sid(*pid, *tid, t, pt_id(index_of(*tid, sb.cpu)), sb.cpu),
            },
            SidebandEvent::Switch {
                pid,
                tid,
                out,
                preempt,
                next_prev,
            } => {
                if per_cpu && !inherit {
                    Record::SwitchCpuWide {
                        out: *out,
                        preempt: *preempt,
                        next_prev_pid: next_prev.0 as u32,
                        next_prev_tid: next_prev.1 as u32,
                        sample_id: sid(*pid, *tid, t, dummy_id(index_of(*tid, sb.cpu)), sb.cpu),
                    }
                } else {
                    Record::Switch {
                        out: *out,
                        preempt: *preempt,
                        sample_id: sid(*pid, *tid, t, dummy_id(index_of(*tid, sb.cpu)), sb.cpu),
                    }
                }
            }
        };
        w.write(&rec)?;
    }
    for t in cap.threads.iter().filter(|_| !per_cpu) {
        let size = t.aux.len() as u64;
        w.write(&Record::Aux {
            offset: t.aux_head.saturating_sub(size),
            size,
            flags: perf_data::aux_flag::OVERWRITE,
            sample_id: sid(t.pid, t.tid, cap.end_time, pt_id(index_of(t.tid, 0)), 0),
        })?;
    }
    for c in &cap.cpus {
        let size = c.aux.len() as u64;
        w.write(&Record::Aux {
            offset: c.aux_head.saturating_sub(size),
            size,
            flags: perf_data::aux_flag::OVERWRITE,
            sample_id: SampleId {
                pid: queue_tid as u32,
                tid: queue_tid as u32,
                time: cap.end_time,
                id: pt_id(index_of(-1, c.cpu)),
                cpu: c.cpu,
            },
        })?;
    }
    for t in cap.threads.iter().filter(|_| !per_cpu) {
        w.write(&Record::Auxtrace {
            offset: t.aux_head.saturating_sub(t.aux.len() as u64),
            reference: cap.end_time,
            idx: index_of(t.tid, 0) as u32,
            tid: t.tid as u32,
            cpu: u32::MAX,
            data: &t.aux,
        })?;
    }
    for c in &cap.cpus {
        w.write(&Record::Auxtrace {
            offset: c.aux_head.saturating_sub(c.aux.len() as u64),
            reference: cap.end_time,
            idx: index_of(-1, c.cpu) as u32,
            tid: queue_tid as u32,
            cpu: c.cpu,
            data: &c.aux,
        })?;
    }
    w.write(&Record::FinishedRound)?;

    let features = Features {
        hostname: uname_field("/proc/sys/kernel/hostname"),
        osrelease: uname_field("/proc/sys/kernel/osrelease"),
        version: Some(format!("ptscope {}", env!("CARGO_PKG_VERSION"))),
        arch: Some("x86_64".into()),
        nrcpus: {
            let n = std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1);
            Some((n, n))
        },
        cpudesc: Some(cap.pt.cpu_desc.clone()),
        cpuid: Some(cap.pt.cpuid.clone()),
        total_mem_kib: None,
        cmdline: Some(std::env::args().collect()),
        build_ids: binaries
            .iter()
            .map(|(path, b)| BuildIdEntry {
                pid: -1,
                build_id: b.id.clone(),
                filename: path.clone(),
                cpumode: perf_data::misc::USER,
            })
            .collect(),
        auxtrace_index: Vec::new(),
    };
    let bytes = w.finish(&attrs, features)?.into_inner();
    Ok((bytes, binaries))
}

/// Writes `cap` as a `.ptscope` file at `path`, with the debug files and
/// kernel symbols `opts` asks for. Returns what the user should know: a
/// debug file that could not be had, kernel symbols that were hidden.
pub fn write_snapshot(
    path: &Path,
    cap: &Capture,
    meta: &Metadata,
    opts: &SaveOptions,
) -> Result<Vec<String>, CaptureError> {
    let io = |e| CaptureError::io(path, e);
    let (perf_data, binaries) = build_perf_data(cap, meta.ring_size).map_err(io)?;
    let mut notes = Vec::new();
    let mut meta = meta.clone();
    let mut members: Vec<(String, &[u8])> = binaries
        .values()
        .map(|b| (buildid::cache_path(&b.id, b.vdso), b.data.as_slice()))
        .collect();
    let debug = if opts.debug_info {
        debug_files(&binaries, &opts.search, &mut notes)
    } else {
        Vec::new()
    };
    for d in &debug {
        members.push((d.member.clone(), d.data.as_slice()));
        // The member is `.build-id/xx/yyyy…/debug`: the id is its middle.
        let hex: String = d
            .member
            .trim_start_matches(".build-id/")
            .trim_end_matches("/debug")
            .replace('/', "");
        meta.debug_files.insert(hex, d.origin.clone());
    }
    let kernel = if cap.pt.kernel {
        KernelFiles::read(&opts.kallsyms, &opts.modules)
    } else {
        KernelFiles::default()
    };
    if let Some(k) = &kernel.kallsyms {
        members.push((KALLSYMS_MEMBER.to_string(), k.as_slice()));
    }
    if let Some(m) = &kernel.modules {
        members.push((MODULES_MEMBER.to_string(), m.as_slice()));
    }
    if let Some(why) = &kernel.kallsyms_missing {
        notes.push(why.clone());
        meta.kallsyms_missing = Some(why.clone());
    }
    write_archive(path, &perf_data, &members, &meta)?;
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::Mapping;
    use crate::recording::{PtSetup, Sideband, StopReason};
    use ptscope_formats::snapshot::Snapshot;

    fn mmap(path: &Path, start: u64) -> Sideband {
        Sideband {
            time: 1,
            cpu: 0,
            event: SidebandEvent::Mmap {
                pid: 1,
                tid: 1,
                mapping: Mapping {
                    start,
                    end: start + 0x1000,
                    read: true,
                    write: false,
                    exec: true,
                    offset: 0,
                    dev_major: 0,
                    dev_minor: 0,
                    inode: 0,
                    path: path.display().to_string(),
                },
            },
        }
    }

    fn capture(kernel: bool, maps: Vec<Sideband>) -> Capture {
        Capture {
            pid: 1,
            threads: Vec::new(),
            cpus: Vec::new(),
            sideband: maps,
            vdso: None,
            start_time: 0,
            end_time: 2,
            stop: StopReason::ProcessExit,
            cmdline: Vec::new(),
            ip_log: Vec::new(),
            wall: std::time::Duration::ZERO,
            exit_code: None,
            child: None,
            pt: PtSetup {
                pmu_type: 8,
                config: 0,
                event: "intel_pt//".into(),
                params: Default::default(),
                cpuid: String::new(),
                cpu_desc: String::new(),
                kernel,
            },
            inherit: false,
            trigger_registers: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn objcopy(args: &[&std::ffi::OsStr]) {
        let st = std::process::Command::new("objcopy")
            .args(args)
            .status()
            .expect("objcopy (binutils) runs");
        assert!(st.success(), "objcopy {args:?}");
    }

    /// A stripped binary takes its debug file along (found by build id in
    /// a debug directory), one with its own symbols does not, and
    /// `--no-debug-info` takes none.
    #[test]
    fn stripped_binaries_take_their_debug_files_along() {
        let t = tempfile::tempdir().unwrap();
        let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo");
        let data = std::fs::read(&demo).unwrap();
        let id = buildid::elf_build_id(&data).unwrap();
        let stripped = t.path().join("stripped");
        let debug_dir = t.path().join("debug");
        let debug = debug_dir.join(buildid::debug_dir_path(&id));
        std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
        objcopy(&[
            "--strip-all".as_ref(),
            demo.as_os_str(),
            stripped.as_os_str(),
        ]);
        objcopy(&[
            "--only-keep-debug".as_ref(),
            demo.as_os_str(),
            debug.as_os_str(),
        ]);
        assert!(!has_own_symbols(&std::fs::read(&stripped).unwrap()));
        assert!(has_own_symbols(&data));
        let opts = SaveOptions {
            search: Search {
                debug_dirs: vec![debug_dir.clone()],
                ..Search::default()
            },
            ..SaveOptions::default()
        };
        let member = buildid::debug_cache_path(&id);
        for (bin, carried) in [(&stripped, true), (&demo, false)] {
            let out = t.path().join("s.ptscope");
            let cap = capture(false, vec![mmap(bin, 0x1000)]);
            write_snapshot(&out, &cap, &Metadata::default(), &opts).unwrap();
            let snap = Snapshot::open(&out).unwrap();
            let dir = snap.buildid_dir().unwrap();
            assert!(dir.join(buildid::cache_path(&id, false)).is_file());
            assert_eq!(dir.join(&member).is_file(), carried, "{}", bin.display());
            let origins = &snap.metadata.as_ref().unwrap().debug_files;
            assert_eq!(
                origins.get(&buildid::to_hex(&id)).cloned(),
                carried.then(|| format!("{}/.build-id", debug_dir.display()))
            );
            if carried {
                assert_eq!(
                    std::fs::read(dir.join(&member)).unwrap(),
                    std::fs::read(&debug).unwrap()
                );
            }
        }
        let out = t.path().join("none.ptscope");
        let cap = capture(false, vec![mmap(&stripped, 0x1000)]);
        let no_debug = SaveOptions {
            debug_info: false,
            ..opts
        };
        write_snapshot(&out, &cap, &Metadata::default(), &no_debug).unwrap();
        let snap = Snapshot::open(&out).unwrap();
        assert!(!snap.buildid_dir().unwrap().join(&member).exists());
        assert!(snap.metadata.unwrap().debug_files.is_empty());
    }

    /// A kernel trace carries kallsyms and modules where readable; where
    /// hidden it carries neither kallsyms nor a false copy, and says why.
    #[test]
    fn a_kernel_trace_carries_kallsyms_or_says_why_not() {
        let t = tempfile::tempdir().unwrap();
        let kallsyms = t.path().join("kallsyms");
        let modules = t.path().join("modules");
        std::fs::write(&kallsyms, "ffffffff81000000 T _text\n").unwrap();
        std::fs::write(&modules, "foo 4096 0 - Live 0xffffffffc0000000\n").unwrap();
        let opts = SaveOptions {
            search: Search::default(),
            kallsyms: kallsyms.clone(),
            modules: modules.clone(),
            ..SaveOptions::default()
        };
        let out = t.path().join("k.ptscope");
        let notes =
            write_snapshot(&out, &capture(true, vec![]), &Metadata::default(), &opts).unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        let snap = Snapshot::open(&out).unwrap();
        assert_eq!(
            snap.kallsyms.as_deref(),
            Some(&b"ffffffff81000000 T _text\n"[..])
        );
        assert!(snap.modules.is_some());
        assert_eq!(snap.metadata.unwrap().kallsyms_missing, None);
        // A user-space trace takes none.
        write_snapshot(&out, &capture(false, vec![]), &Metadata::default(), &opts).unwrap();
        assert_eq!(Snapshot::open(&out).unwrap().kallsyms, None);
        // Hidden by kptr_restrict.
        std::fs::write(&kallsyms, "0000000000000000 T _text\n").unwrap();
        let notes =
            write_snapshot(&out, &capture(true, vec![]), &Metadata::default(), &opts).unwrap();
        let snap = Snapshot::open(&out).unwrap();
        assert_eq!(snap.kallsyms, None);
        let why = snap.metadata.unwrap().kallsyms_missing.unwrap();
        assert!(why.contains("kptr_restrict"), "{why}");
        assert_eq!(notes, [why]);
    }
}
