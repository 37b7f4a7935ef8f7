//! The per-CPU layout (`--per-cpu`, `--system-wide`) of a capture under
//! QEMU.
//!
//! QEMU runs the program's threads truly in parallel, each on its own
//! virtual clock, so no CPU exists to say which thread ran where. The
//! plugin instead cuts each thread's trace into [`Piece`]s where the thread
//! enters the kernel, which is where a real kernel may switch it out. Each
//! piece decodes after anything: it resumes with a TSC, its first IP is
//! whole and its compressed-return stack starts empty
//! ([`ThreadPt::hand_over`](crate::emulated::hardware::ThreadPt::hand_over)),
//! and the kernel's share of the call is [`KERNEL_NS`] of virtual time,
//! room for the switch records.
//!
//! Here the pieces go onto virtual CPUs in time order, as a scheduler would
//! put them: a thread stays on its CPU while that CPU is free, else takes
//! the CPU idle the longest, so threads migrate as on a real machine. When
//! every CPU is busy (more threads ran at once than `--cpus`), a CPU is
//! added and the capture says so. Each CPU's buffer is its pieces end to
//! end, after the PSB+ its unit writes when the CPU's event starts tracing
//! (a piece after the thread's first has none of its own), of which its
//! ring keeps the last `--size` bytes; the sideband gets
//! the ITRACE_START and context-switch records perf's per-CPU events
//! write, and every other record the CPU its thread was on.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::emulated::hardware::{PtSettings, ThreadPt};
use crate::emulated::packets;
use crate::recording::{Capture, CpuTrace, Sideband, SidebandEvent};

/// Virtual time the kernel takes for a system call in per-CPU mode, so
/// that a context switch fits between the pieces around it.
pub const KERNEL_NS: u64 = 200;

/// Virtual time between a piece's end and another thread's start on the
/// same CPU: the switch-out and switch-in records fall strictly between.
const SWITCH_GAP: u64 = 2;

/// One stretch of a thread's trace between two entries to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// Its bytes: `[from, to)` of the thread's stream (AUX head counts).
    pub from: u64,
    pub to: u64,
    /// Virtual time of its first and last packet.
    pub start: u64,
    pub end: u64,
}

/// A thread's pieces, oldest first.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ThreadPieces {
    pub tid: i32,
    pub pieces: Vec<Piece>,
}

/// The layout asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Virtual CPUs to start with.
    pub cpus: u32,
    /// CPU-wide events (`perf record -a`): idle switches are recorded and
    /// ITRACE_START names the idle task.
    pub system_wide: bool,
    /// Each CPU's ring, in bytes.
    pub ring_size: usize,
}

/// A piece on its CPU.
#[derive(Clone, Copy, Debug)]
struct Placed {
    tid: i32,
    piece: Piece,
    cpu: u32,
}

/// Puts `pieces` on CPUs: in order of start, a thread's own CPU if free,
/// else the one idle the longest, else a new one. Returns the pieces in
/// that order and the number of CPUs used.
fn schedule(mut pieces: Vec<(i32, Piece)>, cpus: u32) -> (Vec<Placed>, u32) {
    pieces.sort_by_key(|(tid, p)| (p.start, *tid, p.from));
    // Per CPU: the thread it ran last and when that piece ended.
    let mut last: Vec<Option<(i32, u64)>> = vec![None; cpus.max(1) as usize];
    let mut home: HashMap<i32, u32> = HashMap::new();
    let mut placed = Vec::with_capacity(pieces.len());
    for (tid, piece) in pieces {
        let free = |slot: &Option<(i32, u64)>| match *slot {
            None => true,
            Some((t, end)) => t == tid || end + SWITCH_GAP <= piece.start,
        };
        let own = home.get(&tid).copied().filter(|&c| free(&last[c as usize]));
        let idlest = || {
            (0..last.len())
                .filter(|&c| free(&last[c]))
                .min_by_key(|&c| last[c].map(|(_, end)| end))
                .map(|c| c as u32)
        };
        let cpu = match own.or_else(idlest) {
            Some(c) => c,
            None => {
                last.push(None);
                last.len() as u32 - 1
            }
        };
        last[cpu as usize] = Some((tid, piece.end));
        home.insert(tid, cpu);
        placed.push(Placed { tid, piece, cpu });
    }
    let used = placed.iter().map(|p| p.cpu + 1).max().unwrap_or(0);
    (placed, used)
}

/// `cap`, a per-thread capture from the plugin, laid out per CPU from
/// `pieces`: its CPUs' buffers, and its sideband with the records a
/// per-CPU capture has.
/// `settings` is the PT unit's, for the PSB+ that starts a CPU's buffer.
pub fn onto_cpus(
    mut cap: Capture,
    pieces: &[ThreadPieces],
    layout: &Layout,
    settings: &PtSettings,
) -> Capture {
    // The pieces whose bytes the threads' buffers still hold; older ones
    // are gone, as they would be from a CPU's ring.
    let mut available = Vec::new();
    for tp in pieces {
        let Some(t) = cap.threads.iter().find(|t| t.tid == tp.tid) else {
            continue;
        };
        let kept_from = t.aux_head - t.aux.len() as u64;
        available.extend(
            tp.pieces
                .iter()
                .filter(|p| p.to > p.from && p.from >= kept_from && p.to <= t.aux_head)
                .map(|&p| (tp.tid, p)),
        );
    }
    let (placed, used) = schedule(available, layout.cpus);
    if used > layout.cpus {
        cap.warnings.push(format!(
            "{used} threads ran at once in virtual time, more than --cpus {}: the snapshot has {used} CPUs",
            layout.cpus
        ));
    }
    let mut per_cpu: Vec<Vec<Placed>> = vec![Vec::new(); used as usize];
    for p in &placed {
        per_cpu[p.cpu as usize].push(*p);
    }

    let mut sideband = std::mem::take(&mut cap.sideband);
    // A thread's ITRACE_START is its CPU's now.
    sideband.retain(|s| !matches!(s.event, SidebandEvent::ItraceStart { .. }));
    let stays = stays(&placed);
    for s in &mut sideband {
        let tid = match s.event {
            SidebandEvent::Comm { tid, .. }
            | SidebandEvent::Mmap { tid, .. }
            | SidebandEvent::Exit { tid, .. } => tid,
            SidebandEvent::Fork { ptid, .. } => ptid,
            SidebandEvent::ItraceStart { tid, .. } | SidebandEvent::Switch { tid, .. } => tid,
        };
        s.cpu = cpu_at(&stays, tid, s.time);
    }
    for (cpu, run) in per_cpu.iter().enumerate() {
        switches(
            cap.pid,
            cpu as u32,
            run,
            &placed,
            layout.system_wide,
            &mut sideband,
        );
    }
    // Stable: records at one time keep the order they were made in.
    sideband.sort_by_key(|s| s.time);
    cap.sideband = sideband;

    cap.cpus = per_cpu
        .iter()
        .enumerate()
        .filter(|(_, run)| !run.is_empty())
        .map(|(cpu, run)| cpu_trace(&cap, cpu as u32, run, layout.ring_size, settings))
        .collect();
    for t in &mut cap.threads {
        t.aux = Vec::new();
    }
    cap.inherit = !layout.system_wide;
    cap
}

/// Per thread, the start and CPU of each of its pieces, in time order.
type Stays = HashMap<i32, Vec<(u64, u32)>>;

fn stays(placed: &[Placed]) -> Stays {
    let mut out = Stays::new();
    for p in placed {
        out.entry(p.tid).or_default().push((p.piece.start, p.cpu));
    }
    out
}

/// The CPU thread `tid` was on at `time`: that of its last piece started
/// by then, else of its first.
fn cpu_at(stays: &Stays, tid: i32, time: u64) -> u32 {
    let Some(mine) = stays.get(&tid) else {
        return 0;
    };
    let after = mine.partition_point(|&(start, _)| start <= time);
    mine[after.saturating_sub(1)].1
}

/// The records of `cpu`, whose pieces are `run`: its event starts with its
/// first thread, and each change of thread is a switch out and a switch
/// in. A thread that goes on elsewhere and leaves the CPU with nothing
/// to run switches out to idle.
fn switches(
    pid: i32,
    cpu: u32,
    run: &[Placed],
    placed: &[Placed],
    system_wide: bool,
    out: &mut Vec<Sideband>,
) {
    let mut emit = |time: u64, event: SidebandEvent| out.push(Sideband { time, cpu, event });
    let switch = |tid: i32, leaves: bool, other: i32| SidebandEvent::Switch {
        pid: if tid == 0 { 0 } else { pid },
        tid,
        out: leaves,
        preempt: false,
        next_prev: if other == 0 { (0, 0) } else { (pid, other) },
    };
    let Some(first) = run.first() else { return };
    let at = first.piece.start.saturating_sub(1);
    let (ipid, itid) = if system_wide {
        (0, 0)
    } else {
        (pid, first.tid)
    };
    emit(
        at,
        SidebandEvent::ItraceStart {
            pid: ipid,
            tid: itid,
        },
    );
    if system_wide {
        emit(at, switch(0, true, first.tid));
    }
    emit(at, switch(first.tid, false, 0));
    for w in run.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.tid == b.tid {
            continue;
        }
        emit(a.piece.end + 1, switch(a.tid, true, b.tid));
        emit(b.piece.start - 1, switch(b.tid, false, a.tid));
    }
    let Some(last) = run.last() else { return };
    let goes_on = placed
        .iter()
        .any(|p| p.tid == last.tid && p.piece.start > last.piece.end);
    if goes_on {
        emit(last.piece.end + 1, switch(last.tid, true, 0));
        if system_wide {
            emit(last.piece.end + 1, switch(0, false, last.tid));
        }
    }
}

/// The buffer of `cpu`: its pieces end to end, after a PSB+ if the first
/// lacks one, of which the ring keeps the last `ring_size` bytes.
fn cpu_trace(
    cap: &Capture,
    cpu: u32,
    run: &[Placed],
    ring_size: usize,
    settings: &PtSettings,
) -> CpuTrace {
    let bytes = |p: &Placed| -> &[u8] {
        let t = cap
            .threads
            .iter()
            .find(|t| t.tid == p.tid)
            .expect("pieces are of threads in the capture");
        let kept_from = t.aux_head - t.aux.len() as u64;
        &t.aux[(p.piece.from - kept_from) as usize..(p.piece.to - kept_from) as usize]
    };
    // The CPU's event starts tracing with the first piece: TraceEn 0→1
    // writes a PSB+, which the decoders sync at.
    let start = run.first().map_or(&[][..], bytes);
    let psb = match start.starts_with(&packets::PSB) {
        true => Vec::new(),
        false => {
            let unit = ThreadPt::new(settings.clone(), run[0].piece.start);
            unit.ring().snapshot().to_vec()
        }
    };
    let total: u64 = psb.len() as u64 + run.iter().map(|p| p.piece.to - p.piece.from).sum::<u64>();
    // The newest pieces that fill the ring, the oldest of them in part.
    let mut tail: Vec<&[u8]> = Vec::new();
    let mut kept = 0usize;
    let pieces = run.iter().map(bytes);
    for b in pieces.rev().chain([&psb[..]]) {
        let take = b.len().min(ring_size - kept);
        tail.push(&b[b.len() - take..]);
        kept += take;
        if kept == ring_size {
            break;
        }
    }
    let aux: Vec<u8> = tail.into_iter().rev().flatten().copied().collect();
    CpuTrace {
        cpu,
        aux,
        aux_head: total,
        wrapped: total > ring_size as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulated::settings;
    use crate::recording::ThreadTrace;

    fn piece(from: u64, to: u64, start: u64, end: u64) -> Piece {
        Piece {
            from,
            to,
            start,
            end,
        }
    }

    #[test]
    fn a_thread_keeps_its_cpu_and_threads_at_once_take_others() {
        let pieces = vec![
            (1, piece(0, 10, 0, 100)),
            (1, piece(10, 20, 300, 400)),
            (2, piece(0, 10, 50, 350)),
            (3, piece(0, 10, 360, 500)),
        ];
        let (placed, used) = schedule(pieces, 2);
        let on: Vec<(i32, u32)> = placed.iter().map(|p| (p.tid, p.cpu)).collect();
        // 2 starts while 1 runs; 1 comes back to CPU 0 while 2 still runs
        // on CPU 1; 3 starts when 2 has left CPU 1 but 1 still holds 0.
        assert_eq!(on, vec![(1, 0), (2, 1), (1, 0), (3, 1)]);
        assert_eq!(used, 2);
    }

    #[test]
    fn a_busy_cpu_sends_a_thread_to_the_idlest_one_and_too_many_add_a_cpu() {
        let pieces = vec![
            (1, piece(0, 10, 0, 100)),
            (2, piece(0, 10, 10, 20)),
            (2, piece(10, 20, 30, 40)),
            (3, piece(0, 10, 45, 90)),
            // 2 again, while 1 and 3 hold both CPUs.
            (2, piece(20, 30, 50, 60)),
        ];
        let (placed, used) = schedule(pieces, 2);
        let on: Vec<(i32, u32)> = placed.iter().map(|p| (p.tid, p.cpu)).collect();
        assert_eq!(on, vec![(1, 0), (2, 1), (2, 1), (3, 1), (2, 2)]);
        assert_eq!(used, 3);
    }

    fn thread(tid: i32, aux: &[u8], head: u64) -> ThreadTrace {
        ThreadTrace {
            pid: 10,
            tid,
            comm: "t".into(),
            aux: aux.to_vec(),
            aux_head: head,
            wrapped: head > aux.len() as u64,
            instructions: 0,
        }
    }

    fn unit() -> PtSettings {
        let cfg = settings::emulated_config(None).unwrap();
        settings::pt_settings(&cfg, 1 << 20, std::sync::Arc::from([]))
    }

    /// The PSB+ a CPU's unit writes as it starts tracing at `time`.
    fn psb_at(time: u64) -> Vec<u8> {
        ThreadPt::new(unit(), time).ring().snapshot().to_vec()
    }

    fn capture(threads: Vec<ThreadTrace>) -> Capture {
        Capture {
            pid: 10,
            threads,
            cpus: Vec::new(),
            sideband: vec![Sideband {
                time: 5,
                cpu: 0,
                event: SidebandEvent::ItraceStart { pid: 10, tid: 10 },
            }],
            vdso: None,
            start_time: 0,
            end_time: 1000,
            stop: crate::recording::StopReason::ProcessExit,
            cmdline: Vec::new(),
            ip_log: Vec::new(),
            wall: std::time::Duration::ZERO,
            exit_code: None,
            child: None,
            pt: settings::pt_setup(&settings::emulated_config(None).unwrap()),
            inherit: false,
            trigger_registers: Vec::new(),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn buffers_are_pieces_end_to_end_and_switches_fall_between() {
        // Thread 10 wrote "aaaabb" (its first 2 bytes are gone), thread 11
        // wrote "ccdd".
        let cap = capture(vec![thread(10, b"aabb", 6), thread(11, b"ccdd", 4)]);
        let pieces = [
            ThreadPieces {
                tid: 10,
                pieces: vec![piece(0, 4, 0, 10), piece(4, 6, 300, 310)],
            },
            ThreadPieces {
                tid: 11,
                pieces: vec![piece(0, 2, 100, 150), piece(2, 4, 400, 450)],
            },
        ];
        let layout = Layout {
            cpus: 1,
            system_wide: false,
            ring_size: 3,
        };
        let cap = onto_cpus(cap, &pieces, &layout, &unit());
        // 10's first piece is lost; CPU 0 ran cc, bb, dd after its PSB+,
        // and keeps "bdd".
        assert_eq!(cap.cpus.len(), 1);
        assert_eq!(cap.cpus[0].aux, b"bdd");
        assert_eq!(cap.cpus[0].aux_head, psb_at(100).len() as u64 + 6);
        assert!(cap.cpus[0].wrapped);
        assert!(cap.inherit);
        assert!(cap.threads.iter().all(|t| t.aux.is_empty()));
        let records: Vec<(u64, String)> = cap
            .sideband
            .iter()
            .map(|s| (s.time, format!("{:?}", s.event)))
            .collect();
        let names: Vec<&str> = records
            .iter()
            .map(|(_, e)| e.split(' ').next().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "ItraceStart",
                "Switch",
                "Switch",
                "Switch",
                "Switch",
                "Switch"
            ],
            "{records:?}"
        );
        let times: Vec<u64> = records.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, [99, 99, 151, 299, 311, 399]);
    }

    #[test]
    fn system_wide_cpus_switch_from_and_to_idle() {
        let cap = capture(vec![thread(10, b"ab", 2)]);
        let pieces = [ThreadPieces {
            tid: 10,
            pieces: vec![piece(0, 1, 0, 10), piece(1, 2, 300, 310)],
        }];
        let layout = Layout {
            cpus: 2,
            system_wide: true,
            ring_size: 4096,
        };
        let cap = onto_cpus(cap, &pieces, &layout, &unit());
        // One thread alone stays on its CPU.
        assert_eq!(cap.cpus.len(), 1);
        let mut want = psb_at(0);
        want.extend_from_slice(b"ab");
        assert_eq!(cap.cpus[0].aux, want);
        assert!(!cap.inherit);
        let first = &cap.sideband[0];
        assert_eq!(first.event, SidebandEvent::ItraceStart { pid: 0, tid: 0 });
        assert!(matches!(
            cap.sideband[1].event,
            SidebandEvent::Switch {
                tid: 0,
                out: true,
                next_prev: (10, 10),
                ..
            }
        ));
    }
}
