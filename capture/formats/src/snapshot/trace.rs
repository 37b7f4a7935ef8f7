//! The trace model of a perf.data file: the PT parameters, the AUX data of
//! each queue (thread or CPU) and the sideband a decoder needs.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::perf_data::{EventAttr, Features, FormatError, PerfDataFile, PerfEventAttr, Record};
use crate::pt_params::PtParams;

/// Linux's `PROT_EXEC`, as MMAP2 records carry it: fixed by the kernel's
/// ABI, so the format needs no libc to read it.
const PROT_EXEC: u32 = 0x4;

/// The PT bytes of one AUX queue: per thread (cpu = None) or per CPU.
#[derive(Debug)]
pub struct AuxStream<'a> {
    pub idx: u32,
    /// The thread whose trace a per-thread queue is; `None` for a per-CPU
    /// queue, which holds whichever thread ran on the CPU (the switch
    /// sideband says which, when).
    pub tid: Option<i32>,
    /// The tid its AUXTRACE records name. A per-CPU queue of
    /// `perf record CMD` (events inherited by every thread) names the
    /// command's process here although it holds every thread's trace; a
    /// system-wide one (`perf record -a`) names none.
    pub recorded_tid: Option<i32>,
    pub cpu: Option<u32>,
    /// The queue's buffers joined; borrowed when there is only one.
    pub data: Cow<'a, [u8]>,
    /// How many AUXTRACE records made it up.
    pub buffers: usize,
}

/// An executable mapping from MMAP2/MMAP sideband.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MmapEvent {
    pub pid: i32,
    pub tid: i32,
    pub time: u64,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub path: String,
    pub build_id: Option<Vec<u8>>,
    /// The kernel or one of its modules (pid -1, a kernel cpumode):
    /// `[kernel.kallsyms]_text`, or a module's `.ko` path or name.
    pub kernel: bool,
}

impl MmapEvent {
    /// The code mapping an MMAP or MMAP2 record describes: an executable
    /// MMAP2 mapping (its build id from the record, or else the one the
    /// file's header lists for its path), or one of perf's synthesized
    /// kernel and module MMAPs (any MMAP but a data mapping). `None` for
    /// any other record, and for a mapping past the end of the address
    /// space: a damaged record, no code can be there.
    fn from_record(rec: &Record, build_ids_by_path: &BTreeMap<&str, Vec<u8>>) -> Option<MmapEvent> {
        use crate::perf_data::misc;
        let m = rec.mmap_fields()?;
        m.addr.checked_add(m.len)?;
        let by_path = || build_ids_by_path.get(m.filename).cloned();
        let user = m.pid as i32 != -1;
        let (build_id, kernel) = match rec {
            Record::Mmap2 { prot, build_id, .. } if prot & PROT_EXEC != 0 => {
                (build_id.clone().or_else(by_path), !user)
            }
            Record::Mmap { misc, .. } if misc & misc::MMAP_DATA == 0 => (
                by_path(),
                !user || misc & misc::CPUMODE_MASK == misc::KERNEL,
            ),
            _ => return None,
        };
        Some(MmapEvent {
            pid: m.pid as i32,
            tid: m.tid as i32,
            time: m.sample_id.time,
            start: m.addr,
            len: m.len,
            pgoff: m.pgoff,
            path: m.filename.to_string(),
            build_id,
            kernel,
        })
    }

    /// How the mapping is named to a person: the kernel as perf names it
    /// (`[kernel.kallsyms]`), anything else by its path.
    pub fn display_name(&self) -> &str {
        if self.kernel && self.path.starts_with("[kernel.kallsyms]") {
            "[kernel.kallsyms]"
        } else {
            &self.path
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadInfo {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// Time of the EXIT record, if the thread ended during the capture.
    pub exit_time: Option<u64>,
}

/// A thread going onto a CPU, from SWITCH / SWITCH_CPU_WIDE /
/// ITRACE_START sideband: it runs there from `time` until the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSwitch {
    pub time: u64,
    pub cpu: u32,
    pub pid: i32,
    pub tid: i32,
}

/// A queue's tid, cpu and buffers while reading.
type QueueParts<'a> = (Option<i32>, Option<u32>, Vec<&'a [u8]>);

#[derive(Debug)]
pub struct Trace<'a> {
    pub params: PtParams,
    pub pt_attr: PerfEventAttr,
    pub attrs: Vec<EventAttr>,
    pub streams: Vec<AuxStream<'a>>,
    pub threads: Vec<ThreadInfo>,
    pub mmaps: Vec<MmapEvent>,
    /// Who runs on which CPU when, sorted by time; what per-CPU queues are
    /// divided among threads by. Empty unless records carry the CPU.
    pub switches: Vec<CpuSwitch>,
    /// Threads leaving a CPU (SWITCH out records of a per-thread-event
    /// per-CPU trace), sorted by time: where a thread's stay on a CPU
    /// ends when the next thread to run there is not one of the traced
    /// process's. (CPU-wide switches name the thread coming in, the idle
    /// task included, so they need none.)
    pub switch_outs: Vec<CpuSwitch>,
    pub features: Features,
    /// First and last sideband timestamps (perf ns), if any.
    pub time_range: Option<(u64, u64)>,
    /// Records the kernel reported as lost.
    pub lost_records: u64,
    /// AUX records flagged TRUNCATED: trace data was lost.
    pub truncated_aux: u64,
}

impl<'a> Trace<'a> {
    pub fn from_perf(file: &PerfDataFile<'a>) -> Result<Trace<'a>, FormatError> {
        let mut params = None;
        let mut chunks: BTreeMap<u32, QueueParts<'a>> = BTreeMap::new();
        let mut threads: BTreeMap<i32, ThreadInfo> = BTreeMap::new();
        let mut mmaps = Vec::new();
        let mut switches = Vec::new();
        let mut switch_outs = Vec::new();
        // Records carry their CPU only when the sample type says so.
        let has_cpu = file
            .attrs
            .first()
            .is_some_and(|a| a.attr.sample_type & crate::perf_data::sample::CPU != 0);
        let mut build_ids_by_path: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
        for b in &file.features.build_ids {
            build_ids_by_path.insert(&b.filename, b.build_id.clone());
        }
        let mut time_range: Option<(u64, u64)> = None;
        let mut lost_records = 0;
        let mut truncated_aux = 0;
        for rec in file.records() {
            let (offset, rec) = rec?;
            if let Some(sid) = rec.sample_id() {
                if sid.time != 0 && sid.time != u64::MAX {
                    let (lo, hi) = time_range.unwrap_or((sid.time, sid.time));
                    time_range = Some((lo.min(sid.time), hi.max(sid.time)));
                }
            }
            match rec {
                Record::AuxtraceInfo(info) => {
                    params = Some(PtParams::from_info(&info).map_err(|e| match e {
                        FormatError::Invalid { what, problem, .. } => FormatError::Invalid {
                            what,
                            offset,
                            problem,
                        },
                        e => e,
                    })?);
                }
                Record::Auxtrace {
                    idx,
                    tid,
                    cpu,
                    data,
                    ..
                } => {
                    let tid = (tid != u32::MAX && tid != 0).then_some(tid as i32);
                    let cpu = (cpu != u32::MAX).then_some(cpu);
                    let e = chunks.entry(idx).or_insert((tid, cpu, Vec::new()));
                    e.2.push(data);
                }
                Record::Comm { pid, tid, comm, .. } => {
                    let t = threads.entry(tid as i32).or_default();
                    t.pid = pid as i32;
                    t.tid = tid as i32;
                    t.comm = comm.to_string();
                }
                Record::Fork { pid, tid, .. } => {
                    let t = threads.entry(tid as i32).or_default();
                    t.pid = pid as i32;
                    t.tid = tid as i32;
                }
                Record::Exit { tid, time, .. } => {
                    if let Some(t) = threads.get_mut(&(tid as i32)) {
                        t.exit_time = Some(time);
                    }
                }
                Record::Mmap { .. } | Record::Mmap2 { .. } => {
                    mmaps.extend(MmapEvent::from_record(&rec, &build_ids_by_path));
                }
                Record::SwitchCpuWide {
                    out,
                    next_prev_pid,
                    next_prev_tid,
                    sample_id,
                    ..
                } if has_cpu => {
                    // A switch-out names who comes in; a switch-in is it.
                    let (pid, tid) = if out {
                        (next_prev_pid as i32, next_prev_tid as i32)
                    } else {
                        (sample_id.pid as i32, sample_id.tid as i32)
                    };
                    switches.push(CpuSwitch {
                        time: sample_id.time,
                        cpu: sample_id.cpu,
                        pid,
                        tid,
                    });
                }
                Record::Switch { out, sample_id, .. } if has_cpu => {
                    let sw = CpuSwitch {
                        time: sample_id.time,
                        cpu: sample_id.cpu,
                        pid: sample_id.pid as i32,
                        tid: sample_id.tid as i32,
                    };
                    if out {
                        switch_outs.push(sw);
                    } else {
                        switches.push(sw);
                    }
                }
                Record::ItraceStart {
                    pid,
                    tid,
                    sample_id,
                } if has_cpu => switches.push(CpuSwitch {
                    time: sample_id.time,
                    cpu: sample_id.cpu,
                    pid: pid as i32,
                    tid: tid as i32,
                }),
                Record::Lost { lost, .. } => lost_records += lost,
                Record::Aux { flags, .. } if flags & crate::perf_data::aux_flag::TRUNCATED != 0 => {
                    truncated_aux += 1;
                }
                _ => {}
            }
        }
        let params = params.ok_or(FormatError::Invalid {
            what: "perf.data",
            offset: 0,
            problem: "it holds no Intel PT trace (no AUXTRACE_INFO record); record with `perf record -e intel_pt//u`".into(),
        })?;
        let pt_attr = file
            .attrs
            .iter()
            .find(|a| a.attr.kind as u64 == params.pmu_type)
            .map(|a| a.attr.clone())
            .ok_or(FormatError::Invalid {
                what: "attr section",
                offset: 0,
                problem: format!("no event has the intel_pt PMU type {}", params.pmu_type),
            })?;
        let streams = chunks
            .into_iter()
            .map(|(idx, (tid, cpu, parts))| AuxStream {
                idx,
                // A queue recorded on a CPU is per CPU, whatever tid its
                // records name: threads migrate, so one thread's trace can
                // be in several CPUs' queues, and one queue holds several
                // threads' (perf's decoder, too, takes the thread from the
                // switches then).
                tid: tid.filter(|_| cpu.is_none()),
                recorded_tid: tid,
                cpu,
                buffers: parts.len(),
                data: if parts.len() == 1 {
                    Cow::Borrowed(parts[0])
                } else {
                    Cow::Owned(parts.concat())
                },
            })
            .collect();
        Ok(Trace {
            params,
            pt_attr,
            attrs: file.attrs.clone(),
            streams,
            threads: threads.into_values().collect(),
            mmaps,
            switch_outs: {
                switch_outs.sort_by_key(|s| s.time);
                switch_outs
            },
            switches: {
                // Stable: records of equal time keep the file's order.
                switches.sort_by_key(|s| s.time);
                switches
            },
            features: file.features.clone(),
            time_range,
            lost_records,
            truncated_aux,
        })
    }

    pub fn thread(&self, tid: i32) -> Option<&ThreadInfo> {
        self.threads.iter().find(|t| t.tid == tid)
    }

    /// Whether the config has return compression on.
    pub fn ret_compression(&self) -> bool {
        self.pt_attr.config & self.params.noretcomp_bit == 0
    }

    /// The CPU family, model and stepping from the CPUID feature.
    pub fn cpu(&self) -> Option<(u32, u32, u32)> {
        let s = self.features.cpuid.as_deref()?;
        let mut it = s.split(',').skip(1).map(|v| v.trim().parse::<u32>().ok());
        Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::{misc, sample, PerfDataWriter, SampleId};
    use std::io::Cursor;

    /// The one intel_pt event (PMU type 8) of a test's perf.data.
    fn pt_attrs(sample_type: u64) -> [EventAttr; 1] {
        [EventAttr {
            attr: PerfEventAttr {
                kind: 8,
                sample_type,
                ..PerfEventAttr::default()
            },
            name: "intel_pt//".into(),
            ids: vec![1],
        }]
    }

    /// A perf.data as `perf record -e intel_pt// CMD` writes it on two
    /// CPUs: AUXTRACE records name the command's pid and their CPU, the
    /// thread ran on both, and perf's MMAP records map the kernel.
    fn per_cpu_perf_data(with_switches: bool) -> Vec<u8> {
        let sample_type = sample::TID | sample::TIME | sample::CPU | sample::IDENTIFIER;
        let params = PtParams {
            pmu_type: 8,
            time_shift: 31,
            time_mult: 1 << 31,
            have_sched_switch: if with_switches { 2 } else { 0 },
            per_cpu_mmaps: true,
            ..PtParams::default()
        };
        let sid = |time, cpu| SampleId {
            pid: 100,
            tid: 100,
            time,
            id: 1,
            cpu,
        };
        let mut w = PerfDataWriter::new(Cursor::new(Vec::new()), sample_type).unwrap();
        w.write(&Record::AuxtraceInfo(params.to_info())).unwrap();
        w.write(&Record::Mmap {
            pid: u32::MAX,
            tid: 0,
            addr: 0xffff_ffff_8100_0000,
            len: 0x100_0000,
            pgoff: 0xffff_ffff_8100_0000,
            misc: misc::KERNEL,
            filename: "[kernel.kallsyms]_text",
            sample_id: SampleId::default(),
        })
        .unwrap();
        w.write(&Record::ItraceStart {
            pid: 100,
            tid: 100,
            sample_id: sid(10, 1),
        })
        .unwrap();
        if with_switches {
            for (time, cpu, out) in [(10, 1, false), (20, 1, true), (30, 0, false)] {
                w.write(&Record::Switch {
                    out,
                    preempt: false,
                    sample_id: sid(time, cpu),
                })
                .unwrap();
            }
        }
        for cpu in [0, 1] {
            w.write(&Record::Auxtrace {
                offset: 0,
                reference: 0,
                idx: cpu,
                tid: 100,
                cpu,
                data: &[0x02, 0x82],
            })
            .unwrap();
        }
        w.finish(&pt_attrs(sample_type), Features::default())
            .unwrap()
            .into_inner()
    }

    #[test]
    fn per_cpu_buffers_are_per_cpu_whatever_tid_they_name() {
        let bytes = per_cpu_perf_data(true);
        let file = PerfDataFile::parse(&bytes).unwrap();
        let trace = Trace::from_perf(&file).unwrap();
        let streams: Vec<_> = trace
            .streams
            .iter()
            .map(|s| (s.tid, s.recorded_tid, s.cpu))
            .collect();
        assert_eq!(
            streams,
            [(None, Some(100), Some(0)), (None, Some(100), Some(1))]
        );
        // Who ran where: the ITRACE_START and the switch-ins.
        let ran: Vec<_> = trace
            .switches
            .iter()
            .map(|s| (s.time, s.cpu, s.tid))
            .collect();
        assert_eq!(ran, [(10, 1, 100), (10, 1, 100), (30, 0, 100)]);
        // perf's MMAP record of the kernel.
        let [k] = &trace.mmaps[..] else {
            panic!("{:?}", trace.mmaps)
        };
        assert!(k.kernel && k.pid == -1);
        assert_eq!(k.display_name(), "[kernel.kallsyms]");
    }

    /// Without switch records, the ITRACE_START still says who ran.
    #[test]
    fn itrace_start_alone_says_who_ran_on_a_cpu() {
        let bytes = per_cpu_perf_data(false);
        let file = PerfDataFile::parse(&bytes).unwrap();
        let trace = Trace::from_perf(&file).unwrap();
        let ran: Vec<_> = trace.switches.iter().map(|s| (s.cpu, s.tid)).collect();
        assert_eq!(ran, [(1, 100)]);
        assert!(trace.streams.iter().all(|s| s.tid.is_none()));
    }

    /// Of MMAP and MMAP2 records, the code mappings become mmaps: an
    /// executable MMAP2 (its build id from the record, else from the
    /// header's list by path) and any MMAP but a data one (the kernel by
    /// pid -1 or its cpumode); not a data or damaged mapping.
    #[test]
    fn code_mappings_of_either_record_become_mmaps() {
        let sample_type = sample::TID | sample::TIME;
        let mut w = PerfDataWriter::new(Cursor::new(Vec::new()), sample_type).unwrap();
        let params = PtParams {
            pmu_type: 8,
            ..PtParams::default()
        };
        w.write(&Record::AuxtraceInfo(params.to_info())).unwrap();
        let sid = |time| SampleId {
            pid: 7,
            tid: 8,
            time,
            ..SampleId::default()
        };
        let mmap2 =
            |addr: u64, prot: u32, build_id: Option<Vec<u8>>, filename, time| Record::Mmap2 {
                pid: 7,
                tid: 8,
                addr,
                len: 0x1000,
                pgoff: 0x2000,
                build_id,
                maj: 0,
                min: 0,
                ino: 0,
                prot,
                flags: 0,
                filename,
                sample_id: sid(time),
            };
        let mmap = |addr: u64, misc: u16, filename, time| Record::Mmap {
            pid: 7,
            tid: 8,
            addr,
            len: 0x1000,
            pgoff: 0,
            misc,
            filename,
            sample_id: sid(time),
        };
        for rec in [
            mmap2(0x40_0000, PROT_EXEC | 1, Some(vec![0xaa; 20]), "/bin/a", 1),
            mmap2(0x50_0000, PROT_EXEC, None, "/lib/b.so", 2),
            mmap2(0x60_0000, 1, None, "/data", 3),
            mmap2(u64::MAX - 0xfff, PROT_EXEC, None, "/bin/damaged", 4),
            mmap(0x70_0000, misc::USER | misc::MMAP_DATA, "/heap", 5),
            mmap(0xffff_8000_0000_0000, misc::KERNEL, "/lib/modules/m.ko", 6),
        ] {
            w.write(&rec).unwrap();
        }
        let features = Features {
            build_ids: vec![crate::perf_data::BuildIdEntry {
                pid: 7,
                build_id: vec![0xbb; 20],
                filename: "/lib/b.so".into(),
                cpumode: misc::USER,
            }],
            ..Features::default()
        };
        let bytes = w
            .finish(&pt_attrs(sample_type), features)
            .unwrap()
            .into_inner();
        let file = PerfDataFile::parse(&bytes).unwrap();
        let trace = Trace::from_perf(&file).unwrap();
        let got: Vec<_> = trace
            .mmaps
            .iter()
            .map(|m| {
                (
                    (m.pid, m.tid, m.time, m.start, m.len, m.pgoff),
                    m.path.as_str(),
                    m.build_id.as_ref().map(|b| b[0]),
                    m.kernel,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    (7, 8, 1, 0x40_0000, 0x1000, 0x2000),
                    "/bin/a",
                    Some(0xaa),
                    false
                ),
                (
                    (7, 8, 2, 0x50_0000, 0x1000, 0x2000),
                    "/lib/b.so",
                    Some(0xbb),
                    false
                ),
                (
                    (7, 8, 6, 0xffff_8000_0000_0000, 0x1000, 0),
                    "/lib/modules/m.ko",
                    None,
                    true
                ),
            ]
        );
    }
}
