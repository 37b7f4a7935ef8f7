//! The driver's tests: whole decodes of the demo and of hand-made traces,
//! one walk against chunks, and the warnings a decode gives.
use std::path::Path;

use super::*;
use crate::pt::block::DecoderConfig;
use ptscope_formats::pt::write::{self, IpCompression, IpPacket, OVF, PSB, PSBEND};
use ptscope_model::Model;

fn demo() -> Snapshot {
    crate::testing::demo_snapshot()
}

/// The first line where two canonical models differ, with context.
pub(crate) fn assert_same(a: &[String], b: &[String]) {
    if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
        let ctx = |v: &[String]| v[i.saturating_sub(3)..(i + 3).min(v.len())].join("\n");
        panic!(
            "differ at line {i} of {}/{}:\n-- one walk:\n{}\n-- chunks:\n{}",
            a.len(),
            b.len(),
            ctx(a),
            ctx(b)
        );
    }
}

/// Tracing off at a PSB, then on: the first block's checkpoint is that
/// PSB's alone, even when the block ends in a TIP right before the next
/// PSB (the decoder has consumed the trace up to that PSB, not past
/// it). It also took the next PSB's, at the wrong instruction, and the
/// next PSB's own status was then skipped. (libipt's engine still
/// does: its decoder reads the next PSB+ with the TIP, so it cannot
/// tell.)
#[test]
fn a_block_ending_right_before_a_psb_does_not_take_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("code");
    // 0x1000: jmp rax. 0x1010: nop; nop; jmp rax.
    let mut code = vec![0x90u8; 0x20];
    code[0..2].copy_from_slice(&[0xff, 0xe0]);
    code[0x12..0x14].copy_from_slice(&[0xff, 0xe0]);
    std::fs::write(&image, code).unwrap();
    let ip = |pt: &mut Vec<u8>, kind: IpPacket, ip: u64| {
        write::ip_packet(pt, kind, ip, IpCompression::Full);
    };
    // PSB+ with tracing off; TIP.PGE 0x1000; TIP 0x1010.
    let mut pt = PSB.to_vec();
    pt.extend(PSBEND);
    ip(&mut pt, IpPacket::TipPge, 0x1000);
    ip(&mut pt, IpPacket::Tip, 0x1010);
    let second = pt.len() as u64;
    // PSB+ at 0x1010; TIP.PGD, IP suppressed, binds to the jmp.
    pt.extend(PSB);
    ip(&mut pt, IpPacket::Fup, 0x1010);
    pt.extend(PSBEND);
    write::ip_packet(&mut pt, IpPacket::TipPgd, 0, IpCompression::Suppressed);
    let m = decode_raw(
        Path::new("raw.pt"),
        pt.clone().into(),
        &[(image.clone(), 0x1000)],
        &DecoderConfig::default(),
        Engine::Flow,
    )
    .unwrap();
    let cps: Vec<_> = m.threads[0]
        .checkpoints
        .iter()
        .map(|c| (c.offset, c.ip, c.insn))
        .collect();
    assert_eq!(cps, [(0, 0x1000, 0), (second, 0x1010, 1)]);
}

/// The span lines of a canonical model.
fn span_lines(m: &Model) -> Vec<String> {
    m.canonical()
        .into_iter()
        .filter(|l| !l.starts_with("cp ") && !l.starts_with("thread "))
        .collect()
}

/// A queue recorded on a CPU is per CPU even when its AUXTRACE records
/// name a thread, as `perf record CMD` writes them: with no switch
/// record the thread they name ran there (it was an error: no switch
/// records), and with only an ITRACE_START, the thread that names.
#[test]
fn a_per_cpu_queue_without_switches_is_its_named_or_started_threads() {
    let snap = demo();
    let per_thread = decode_snapshot(&snap, &DecodeOptions::default()).unwrap();
    let mut trace = snap.trace().unwrap();
    let tid = trace.streams[0].tid.unwrap();
    let pid = trace.thread(tid).unwrap().pid;
    trace.streams[0].tid = None;
    trace.streams[0].recorded_tid = Some(tid);
    trace.streams[0].cpu = Some(3);
    trace.switches.clear();
    let check = |trace: &Trace| {
        let m = decode_trace(&snap, trace, &DecodeOptions::default()).unwrap();
        let tids: Vec<i32> = m.threads.iter().map(|t| t.spans.tid).collect();
        assert_eq!(tids, [tid]);
        assert_same(&span_lines(&per_thread), &span_lines(&m));
    };
    check(&trace);
    trace.streams[0].recorded_tid = None;
    trace.switches = vec![ptscope_formats::snapshot::CpuSwitch {
        time: 0,
        cpu: 3,
        pid,
        tid,
    }];
    check(&trace);
    // Neither: nothing says whose trace it is.
    trace.switches.clear();
    let err = decode_trace(&snap, &trace, &DecodeOptions::default())
        .err()
        .expect("an error");
    assert!(err.to_string().contains("context-switch"), "{err}");
}

/// A trace whose config has no TSC (`tsc=0`) is placed by instruction
/// count, by both engines, in one walk and in chunks: every span
/// within the instructions walked, and the model says so.
#[test]
fn a_trace_without_tsc_counts_instructions() {
    let snap = demo();
    let timed = decode_snapshot(&snap, &DecodeOptions::default()).unwrap();
    assert_eq!(timed.unit, TimeUnit::Ns);
    let mut trace = snap.trace().unwrap();
    trace.pt_attr.config &= !trace.params.tsc_bit;
    assert_eq!(time_unit(&trace), TimeUnit::Insns);
    let mut canon = Vec::new();
    for (engine, parallel) in [
        (Engine::Flow, Parallel::sequential()),
        (Engine::Flow, Parallel::default()),
        #[cfg(feature = "libipt")]
        (Engine::Libipt, Parallel::sequential()),
    ] {
        let opts = DecodeOptions {
            engine,
            parallel,
            ..DecodeOptions::default()
        };
        let m = decode_trace(&snap, &trace, &opts).unwrap();
        assert_eq!(m.unit, TimeUnit::Insns);
        assert_eq!(m.span_count(), timed.span_count());
        let t = &m.threads[0];
        let (lo, hi) = m.time_range().unwrap();
        assert!(lo < 10 && hi > t.walk.instructions / 2, "{lo}..{hi}");
        assert!(hi <= t.walk.instructions, "{hi} > {}", t.walk.instructions);
        // The fine pass counts the same instructions.
        let lines = m.lines.as_ref().unwrap();
        let seg = lines.decode_segment(t, 1, None).unwrap();
        let first = seg.insns.first().unwrap();
        let last = seg.insns.last().unwrap();
        assert_eq!(first.start, t.checkpoints[1].time);
        assert_eq!(last.start - first.start, seg.insns.len() as u64 - 1);
        canon.push(m.canonical());
    }
    assert_same(&canon[0], &canon[1]);
}

#[test]
fn a_queue_without_a_psb_is_a_warning() {
    let snap = demo();
    assert!(decode_snapshot(&snap, &DecodeOptions::default())
        .unwrap()
        .warnings
        .is_empty());
    let mut trace = snap.trace().unwrap();
    let bytes = trace.streams[0].data.len();
    trace.streams[0].data = vec![0u8; bytes].into();
    let m = decode_trace(&snap, &trace, &DecodeOptions::default()).unwrap();
    assert_eq!(m.span_count(), 0);
    assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
    assert!(m.warnings[0].contains("hold no PSB"), "{:?}", m.warnings);
    // Not a thread we were asked about: not our business.
    let opts = DecodeOptions {
        threads: Some(vec![-5]),
        ..DecodeOptions::default()
    };
    assert!(decode_trace(&snap, &trace, &opts)
        .unwrap()
        .warnings
        .is_empty());
}

#[test]
fn chunks_on_two_cores_give_what_one_walk_gives() {
    let snap = demo();
    let one = decode_snapshot(
        &snap,
        &DecodeOptions {
            parallel: Parallel::sequential(),
            ..DecodeOptions::default()
        },
    )
    .unwrap();
    assert!(one.threads.iter().all(|t| t.checkpoints.len() > 3));
    // A chunk per PSB: every seam there is; on threads, and in order on
    // this one.
    for in_order in [false, true] {
        let progress = DecodeProgress::counting();
        let many = decode_snapshot(
            &snap,
            &DecodeOptions {
                parallel: Parallel {
                    workers: 2,
                    chunk_bytes: 1,
                    first_chunk_bytes: 1,
                    in_order,
                },
                progress: Some(progress.clone()),
                ..DecodeOptions::default()
            },
        )
        .unwrap();
        assert_same(&one.canonical(), &many.canonical());
        // Most chunks built their own stacks (any that did not fit the
        // stack before them were walked again), and the whole is still
        // one walk's.
        let c = progress.chunks();
        assert!(c.stitched > c.gave_up + c.refused, "{c:?}");
        for (a, b) in one.threads.iter().zip(&many.threads) {
            assert_eq!(a.checkpoints, b.checkpoints);
            assert_eq!(a.checkpoint_frames, b.checkpoint_frames);
        }
    }
}

/// `trace` decoded in one walk, and in chunks cut at every PSB.
fn one_walk_and_chunks(snap: &Snapshot, trace: &Trace) -> (Model, Model) {
    let decode = |parallel| {
        let opts = DecodeOptions {
            parallel,
            ..DecodeOptions::default()
        };
        decode_trace(snap, trace, &opts).unwrap().model
    };
    let chunks = Parallel {
        workers: 2,
        chunk_bytes: 1,
        first_chunk_bytes: 1,
        in_order: false,
    };
    (decode(Parallel::sequential()), decode(chunks))
}

/// Timing or padding packets between the last branch and a PSB leave
/// the decoder short of the PSB when it reports the PSB+ status: the
/// PSB must still count as reached there, or checkpoints come a
/// segment late and a chunk walks on into the next chunk.
#[test]
fn packets_before_a_psb_neither_delay_its_checkpoint_nor_blur_a_seam() {
    let snap = demo();
    let mut trace = snap.trace().unwrap();
    let mut psbs_total = 0;
    for s in &mut trace.streams {
        let psbs = psb_offsets(&s.data);
        psbs_total += psbs.len();
        let mut padded = Vec::with_capacity(s.data.len() + psbs.len() * 4);
        let mut from = 0;
        for &p in &psbs {
            padded.extend_from_slice(&s.data[from..p]);
            padded.extend_from_slice(&[0; 4]); // PAD packets
            from = p;
        }
        padded.extend_from_slice(&s.data[from..]);
        s.data = padded.into();
    }
    let (one, many) = one_walk_and_chunks(&snap, &trace);
    let checkpoints: usize = one.threads.iter().map(|t| t.checkpoints.len()).sum();
    assert_eq!(checkpoints, psbs_total, "a checkpoint at every PSB");
    assert_same(&one.canonical(), &many.canonical());
}

/// An overflow inside a PSB+ where a chunk starts: the chunk before
/// stops there, and the overflow is reported once, by the next, as
/// one walk reports it (it was reported by both).
#[test]
fn an_overflow_inside_psb_plus_at_a_seam_is_reported_once() {
    let snap = demo();
    let mut trace = snap.trace().unwrap();
    let s = &mut trace.streams[0];
    let psbs = psb_offsets(&s.data);
    assert!(psbs.len() > 4);
    let at = psbs[psbs.len() / 2] + PSB.len();
    let (ovf_psb, next_psb) = (psbs[psbs.len() / 2], psbs[psbs.len() / 2 + 1] + 2);
    let mut data = s.data[..at].to_vec();
    data.extend_from_slice(&OVF);
    data.extend_from_slice(&s.data[at..]);
    s.data = data.into();
    let (one, many) = one_walk_and_chunks(&snap, &trace);
    let overflows: u64 = one.threads.iter().map(|t| t.walk.overflows).sum();
    assert_eq!(overflows, 1);
    // That PSB's segment starts where tracing resumed, not at the next.
    let cps = &one.threads[0].checkpoints;
    let insn = |off| cps.iter().find(|c| c.offset == off).unwrap().insn;
    assert!(insn(ovf_psb as u64) < insn(next_psb as u64));
    assert_same(&one.canonical(), &many.canonical());
}

/// A PSB+ cut short by the next PSB (damaged, or the buffer wrapped)
/// with tracing on: one walk reads both as one PSB+ and checkpoints
/// both at once, owing no trace-begin. A chunk that starts at the
/// first owes the begin its sync asks for at both, and mended only
/// its first checkpoint; a chunk that holds that PSB alone told the
/// next that tracing was off.
#[test]
fn a_psb_plus_cut_short_by_a_psb_at_a_seam_begins_nothing() {
    let snap = demo();
    let mut trace = snap.trace().unwrap();
    let s = &mut trace.streams[0];
    let psbs = psb_offsets(&s.data);
    assert!(psbs.len() > 4);
    let at = psbs[psbs.len() / 2];
    let mut data = s.data[..at].to_vec();
    // PSB, PAD (a PSB right after a PSB is where the pattern ends).
    data.extend_from_slice(&PSB);
    write::pad(&mut data);
    let real = data.len();
    data.extend_from_slice(&s.data[at..]);
    s.data = data.into();
    let (cut, real) = (at as u64, real as u64);
    let decode = |parallel| {
        let opts = DecodeOptions {
            parallel,
            ..DecodeOptions::default()
        };
        decode_trace(&snap, &trace, &opts).unwrap()
    };
    let one = decode(Parallel::sequential());
    let begins = |m: &Model, off| {
        let c = m.threads.iter().flat_map(|t| &t.checkpoints);
        let c = c.filter(|c| c.queue == 0).find(|c| c.offset == off);
        c.expect("a checkpoint at each PSB").begins
    };
    assert!(!begins(&one, cut) && !begins(&one, real));
    // Chunks cut at both PSBs, and at the first alone.
    for bytes in [1, (real - cut + 1) as usize] {
        let many = decode(Parallel {
            workers: 2,
            chunk_bytes: bytes,
            first_chunk_bytes: bytes,
            in_order: true,
        });
        assert_same(&one.canonical(), &many.canonical());
    }
}

#[test]
fn progress_counts_every_segment_and_publishes_the_model_so_far() {
    let progress = DecodeProgress::new();
    let opts = DecodeOptions {
        threads: None,
        progress: Some(progress.clone()),
        ..DecodeOptions::default()
    };
    let model = decode_snapshot(&demo(), &opts).unwrap();
    let (done, total) = progress.segments();
    assert!(total > 0);
    assert_eq!(done, total);
    let partial = progress.take_partial().expect("a partial model");
    assert!(partial.span_count() > 0);
    assert!(partial.span_count() <= model.span_count());
}

#[test]
fn a_cancelled_decode_stops_with_an_error() {
    let progress = DecodeProgress::new();
    progress.cancel();
    let opts = DecodeOptions {
        threads: None,
        progress: Some(progress.clone()),
        ..DecodeOptions::default()
    };
    let err = decode_snapshot(&demo(), &opts).err().expect("cancelled");
    assert!(matches!(err, DecodeError::Cancelled { .. }), "{err}");
    assert!(err.to_string().contains("demo.ptscope"));
    // It stopped at the first block, not at the end.
    let (done, total) = progress.segments();
    assert!(done < total, "{done} of {total}");
}

/// After a flow error the walk resumes at the next TIP, not at the
/// next PSB (as perf does), and chunks still give what one walk gives.
#[test]
fn chunks_resume_after_flow_errors_as_one_walk_does() {
    use crate::pt::packet::{IpKind, Packet, Packets};
    let snap = demo();
    let mut trace = snap.trace().unwrap();
    let mut damaged = 0;
    for s in &mut trace.streams {
        let mut data = s.data.to_vec();
        let tips: Vec<(usize, u8)> = Packets::new(&s.data)
            .filter_map(|(at, p)| match p {
                Ok(Packet::Tip {
                    kind: IpKind::Tip,
                    ipb: ipb @ (2 | 3 | 4 | 6),
                    ..
                }) => Some((at, ipb)),
                _ => None,
            })
            .collect();
        // Every third far TIP goes to 0x10, where nothing is mapped.
        for &(at, ipb) in tips.iter().step_by(3) {
            let len = [0, 2, 4, 6, 6, 0, 8][ipb as usize];
            data[at + 1..at + 1 + len].fill(0);
            data[at + 1] = 0x10;
            damaged += 1;
        }
        s.data = data.into();
    }
    assert!(damaged > 3, "{damaged}");
    let (one, many) = one_walk_and_chunks(&snap, &trace);
    let errors: usize = one.threads.iter().map(|t| t.walk.errors.len()).sum();
    assert!(errors >= damaged, "{errors} errors for {damaged} bad TIPs");
    assert_same(&one.canonical(), &many.canonical());
}

/// Decoded for real: a raw dump whose code lies outside the one image
/// given decodes to no call, and the thread says why.
#[test]
#[cfg_attr(not(feature = "libipt"), allow(clippy::single_element_loop))]
fn a_decode_that_finds_no_code_says_why() {
    use crate::pt::block::DecoderConfig;
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("code");
    std::fs::write(&image, [0x90u8; 0x20]).unwrap();
    // PSB+, then TIP.PGE to 0x5000, where no image is, and a TIP
    // that only decoding the code there could bind.
    let mut pt = PSB.to_vec();
    pt.extend(PSBEND);
    write::ip_packet(&mut pt, IpPacket::TipPge, 0x5000, IpCompression::Full);
    write::ip_packet(&mut pt, IpPacket::Tip, 0x5010, IpCompression::Full);
    write::pad(&mut pt);
    for engine in [
        Engine::Flow,
        #[cfg(feature = "libipt")]
        Engine::Libipt,
    ] {
        let m = decode_raw(
            std::path::Path::new("raw.pt"),
            pt.clone().into(),
            &[(image.clone(), 0x1000)],
            &DecoderConfig::default(),
            engine,
        )
        .unwrap();
        let why = m.threads[0].diagnosis(&m.funcs).unwrap_or_default();
        assert!(
            why.starts_with("0 calls: ") && why.contains("decode error"),
            "{engine:?}: {why} {:?}",
            m.canonical()
        );
    }
}
