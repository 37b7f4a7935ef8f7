//! What each fuzz target does with one input. Shared by the cargo-fuzz
//! binaries (`fuzz_targets/`) and the regression test
//! (`tests/fuzz_regressions.rs`), which replays every input that ever found
//! a crash, a hang or a blow-up, so they stay fixed on stable Rust.
//!
//! Each target drives a reader as the app does and then uses what it read:
//! an error is a fine answer, a panic, an abort or a runaway allocation is
//! not.

#![allow(dead_code)]

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use ptscope_decoder::Decoded;
use ptscope_decoder::Parallel;
use ptscope_decoder::{decode_snapshot, decode_trace, DecodeOptions, Engine};
use ptscope_formats::perf_data::PerfDataFile;
use ptscope_formats::{snapshot::Snapshot, snapshot::Trace};

/// The repository root, found upward from the crate that includes us.
pub fn root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("assets/demo/demo.ptscope").exists() {
        assert!(dir.pop(), "no assets/demo/demo.ptscope above the crate");
    }
    dir
}

/// The bundled demo, opened once: its binaries are the real image that
/// fuzzed PT runs over.
/// A model of it stays alive so that every decode shares its symbols
/// instead of parsing libc again.
fn demo() -> &'static Snapshot {
    static DEMO: OnceLock<(Snapshot, Decoded)> = OnceLock::new();
    &DEMO
        .get_or_init(|| {
            let snap =
                Snapshot::open(&root().join("assets/demo/demo.ptscope")).expect("the demo opens");
            let model = decode_snapshot(&snap, &DecodeOptions::default()).expect("it decodes");
            (snap, model)
        })
        .0
}

/// Whether every PSB pattern in `pt` starts a packet. A damaged trace can
/// hold one inside another packet: a single walk reads past it as payload,
/// while the chunked pass, which cuts at PSB patterns without parsing, starts
/// a chunk there. Only then may the two differ (ROBUSTNESS.md).
fn psbs_aligned(pt: &[u8]) -> bool {
    use ptscope_formats::{pt::read::psb_offsets, pt::read::Packets};
    let starts: std::collections::HashSet<usize> = Packets::new(pt).map(|(at, _)| at).collect();
    psb_offsets(pt).iter().all(|p| starts.contains(p))
}

static COMPARE: AtomicBool = AtomicBool::new(false);

/// Whether one walk and chunks must agree (as `PTSCOPE_FUZZ_DIFF=1` asks):
/// the replay of the committed inputs checks it, which they all pass.
#[allow(dead_code)] // the fuzz targets take it from the environment
pub fn compare_ways(on: bool) {
    COMPARE.store(on, Ordering::Relaxed);
}

/// Every PSB+ states the core's ratio (a CBR that is not 0), which CYC
/// timing needs along with the nominal one; where either is missing, one
/// walk converts cycles at a rate learned across PSBs, which a chunk
/// cannot know (a known difference).
fn psbs_state_cbr(pt: &[u8]) -> bool {
    use ptscope_formats::{pt::read::Packet, pt::read::Packets};
    // Inside a PSB+: whether it has stated one yet.
    let mut open = None;
    for (_, p) in Packets::new(pt) {
        match p {
            Ok(Packet::Psb | Packet::PsbEnd) if open == Some(false) => return false,
            Ok(Packet::Psb) => open = Some(false),
            Ok(Packet::PsbEnd) => open = None,
            Ok(Packet::Cbr(r)) if r != 0 => {
                if let Some(s) = open.as_mut() {
                    *s = true;
                }
            }
            _ => {}
        }
    }
    open != Some(false)
}

/// Both engines, the flow engine cut into tiny chunks so that small
/// inputs still cross seams, walked in order and on two threads, which
/// must always give the same model. The flow engine's two ways must also agree
/// where the replay asks ([`compare_ways`]) or `PTSCOPE_FUZZ_DIFF=1`: they
/// do on every sound trace and every committed input, but fuzzing still
/// finds damaged traces where they do not (ROBUSTNESS.md), so crash
/// hunting runs without it. `PTSCOPE_FUZZ_DIFF_DIR` names where to write
/// both models whole when they differ.
fn decode_all_ways(snap: &Snapshot, trace: Option<&Trace>) {
    let compare = COMPARE.load(Ordering::Relaxed)
        || std::env::var_os("PTSCOPE_FUZZ_DIFF").is_some_and(|v| v == "1");
    // Two known differences (ROBUSTNESS.md): a PSB pattern inside another
    // packet, and CYC timing by a rate learned across PSBs, which only a
    // trace without the core's nominal ratio, or a PSB+ without its
    // current one, needs.
    let comparable_trace = |t: &Trace| {
        ptscope_decoder::decoder_config(t).nom_freq != 0
            && t.streams
                .iter()
                .all(|s| psbs_aligned(&s.data) && psbs_state_cbr(&s.data))
    };
    let comparable = compare
        && match trace {
            Some(t) => comparable_trace(t),
            None => snap.trace().is_ok_and(|t| comparable_trace(&t)),
        };
    let decode = |engine, parallel| {
        let opts = DecodeOptions {
            engine,
            parallel,
            ..DecodeOptions::default()
        };
        match trace {
            Some(t) => decode_trace(snap, t, &opts),
            None => decode_snapshot(snap, &opts),
        }
    };
    let one = decode(Engine::Flow, Parallel::sequential());
    // The plain walk, every run walked, is the memo's reference: the two
    // agree on every input, sound or damaged.
    let plain = match trace {
        Some(t) => decode_trace(snap, t, &plain_walk()),
        None => decode_snapshot(snap, &plain_walk()),
    };
    agree(("the memo's replays", "the plain walk"), &one, &plain);
    // 64-byte chunks, so that small inputs still cross seams.
    let tiny_chunks = |in_order| Parallel {
        workers: 2,
        chunk_bytes: 64,
        first_chunk_bytes: 64,
        in_order,
    };
    // In order on this thread: no thread timing in the fuzzer's coverage.
    let chunked = decode(Engine::Flow, tiny_chunks(true));
    if comparable {
        agree(("one walk", "chunks"), &one, &chunked);
    }
    // The same chunks walked on two threads give the very same model by
    // construction, damaged trace or not: only the order they finish in
    // differs, and the replay takes them in trace order.
    let threaded = decode(Engine::Flow, tiny_chunks(false));
    agree(
        ("chunks in order", "chunks on threads"),
        &chunked,
        &threaded,
    );
    let _ = decode(Engine::Libipt, Parallel::sequential());
    if let Ok(model) = one {
        fine_pass(&model);
    }
}

/// One walk of our engine without the memo (`--no-memo`).
fn plain_walk() -> DecodeOptions {
    DecodeOptions {
        parallel: Parallel::sequential(),
        no_memo: true,
        ..DecodeOptions::default()
    }
}

/// How far the reader targets take what they read. Fuzzing them stops at
/// one walk of our engine for most inputs, which covers what the sideband
/// and the archive steer (threads, CPUs, mappings, missing binaries): the
/// rest of the pipeline (chunks, libipt, the fine pass) is mostly
/// `pt_decode`'s, and running it for every input made the readers'
/// targets four times slower to explore. One input in eight still goes
/// all the ways, as only these targets feed it fuzzed sideband (a time
/// conversion, say). The regression test replays every input all the
/// ways, as that is where some of them found their bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    OneWalk,
    AllWays,
    /// All the ways for one input in eight (chosen by its bytes, so that a
    /// replay does the same), one walk for the rest.
    Sampled,
}

impl Depth {
    fn for_input(self, data: &[u8]) -> Depth {
        // Mixed, so that a change to any bit of any byte can move it.
        let hash = data.iter().fold(data.len() as u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        });
        match self {
            Depth::Sampled if hash >> 61 == 0 => Depth::AllWays,
            Depth::Sampled => Depth::OneWalk,
            d => d,
        }
    }
}

fn decode_to(depth: Depth, snap: &Snapshot, trace: Option<&Trace>) {
    match depth {
        Depth::AllWays => decode_all_ways(snap, trace),
        Depth::OneWalk | Depth::Sampled => {
            let opts = DecodeOptions {
                parallel: Parallel::sequential(),
                ..DecodeOptions::default()
            };
            let _ = match trace {
                Some(t) => decode_trace(snap, t, &opts),
                None => decode_snapshot(snap, &opts),
            };
        }
    }
}

/// Two decodes of one input that must give the same model, or the same
/// error: `names` says which two, for the panic (and, with
/// `PTSCOPE_FUZZ_DIFF_DIR`, the files both models are written to whole,
/// `one_walk.txt` and `chunks.txt` say).
fn agree(
    names: (&str, &str),
    a: &Result<Decoded, ptscope_decoder::DecodeError>,
    b: &Result<Decoded, ptscope_decoder::DecodeError>,
) {
    let (x, y) = names;
    match (a, b) {
        (Ok(a), Ok(b)) => {
            let (a, b) = (a.canonical(), b.canonical());
            if let Some(diff) = first_difference(names, &a, &b) {
                // Both whole, to compare with `diff`.
                if let Some(dir) = std::env::var_os("PTSCOPE_FUZZ_DIFF_DIR") {
                    let dir = std::path::Path::new(&dir);
                    let file = |n: &str| dir.join(format!("{}.txt", n.replace(' ', "_")));
                    let _ = std::fs::write(file(x), a.join("\n"));
                    let _ = std::fs::write(file(y), b.join("\n"));
                }
                panic!("{x} and {y} disagree:\n{diff}");
            }
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!(
            "{x} and {y} disagree: {:?} vs {:?}",
            a.as_ref().err(),
            b.as_ref().err()
        ),
    }
}

/// Where two canonical models (or walks) first differ, with a little
/// context; `names` says whose each is.
fn first_difference(names: (&str, &str), a: &[String], b: &[String]) -> Option<String> {
    let i = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let around = |v: &[String]| {
        let lo = i.saturating_sub(2).min(v.len());
        let hi = (i + 3).min(v.len());
        v[lo..hi].join("\n")
    };
    Some(format!(
        "line {i} of {}/{}\n-- {}:\n{}\n-- {}:\n{}",
        a.len(),
        b.len(),
        names.0,
        around(a),
        names.1,
        around(b)
    ))
}

/// Re-decodes the first segments of every thread down to lines, as a
/// zoom would, and disassembles where they went.
fn fine_pass(model: &Decoded) {
    let Some(src) = &model.lines else { return };
    for t in &model.threads {
        for i in 0..t.checkpoints.len().min(2) {
            if let Ok(seg) = src.decode_segment(t, i, None) {
                // What one zoom may hold in memory is bounded.
                assert!(seg.insns.len() as u64 <= ptscope_model::MAX_SEGMENT_INSNS);
                let _ = seg.time_range();
                for l in seg.lines.iter().take(4) {
                    let _ = seg.frame(l);
                }
            }
            let _ = src.disassemble(t.spans.pid, t.checkpoints[i].ip, 64);
        }
    }
}

/// A perf.data file from anywhere: header, attrs, features, every record,
/// the trace model, then a decode with whatever binaries it names (none
/// are on hand, so all are missing).
pub fn perf_data(data: &[u8]) {
    perf_data_to(data, Depth::AllWays)
}

pub fn perf_data_to(data: &[u8], depth: Depth) {
    let Ok(file) = PerfDataFile::parse(data) else {
        return;
    };
    for rec in file.records() {
        if rec.is_err() {
            break;
        }
    }
    if Trace::from_perf(&file).is_err() {
        return;
    }
    let snap = Snapshot::from_perf_data(Path::new("fuzz.perf.data"), data.to_vec());
    decode_to(depth.for_input(data), &snap, None);
}

/// A `.ptscope` archive (or perf.data) from a colleague: written to a file
/// because that is what the reader opens, then opened, its metadata read
/// and the whole thing decoded.
pub fn snapshot(data: &[u8]) {
    snapshot_to(data, Depth::AllWays)
}

pub fn snapshot_to(data: &[u8], depth: Depth) {
    let dir = tempdir();
    let path = dir.join("input.ptscope");
    std::fs::write(&path, data).expect("write the input");
    let _ = Snapshot::read_metadata(&path);
    if let Ok(snap) = Snapshot::open(&path) {
        // What a re-open reads in the archive is what the unpack wrote.
        for f in snap.carried_files() {
            let bytes = snap.carried_bytes(f).expect("a carried file's bytes");
            let copy = std::fs::read(f).expect("a carried file unpacked");
            assert!(
                bytes[..] == copy[..],
                "{} differs from its copy",
                f.display()
            );
        }
        if let Ok(trace) = snap.trace() {
            for s in &trace.streams {
                let _ = ptscope_formats::pt::read::psb_offsets(&s.data);
            }
            decode_to(depth.for_input(data), &snap, Some(&trace));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// How many bytes of a `pt_decode` input configure the decoder.
pub const PT_CONFIG_BYTES: usize = 4;

/// The configuration prefix that decodes as the demo was captured: MTC
/// period 3, its CPU, a max non-turbo ratio of 10 and TSC:CTC 40/1.
pub const DEMO_PT_CONFIG: [u8; PT_CONFIG_BYTES] = [0x03, 10, 40, 1];

/// Sets what a trace tells the decoder about timing and the CPU from a
/// `pt_decode` input's first bytes, so that fuzzing reaches every timing
/// path (MTC periods, CYC without a nominal ratio, TSC:CTC ratios) and
/// libipt's errata for other CPUs, not only the demo's:
/// - byte 0, bits 0-3: the MTC period; bits 4-5: the CPU (the demo's
///   Skylake-SP, none stated, a Broadwell, a Goldmont); bit 6: an IP
///   filter recorded over the start of the first mapping's code (since
///   round 13, so that SKL014's binding is reached); bit 7: and a TraceStop
///   range inside it;
/// - byte 1: the max non-turbo ratio (0: not stated);
/// - bytes 2 and 3: TSC:CTC numerator and denominator (0: not stated).
pub fn configure_pt(trace: &mut Trace, cfg: [u8; PT_CONFIG_BYTES]) {
    let [flags, nom, ctc_n, ctc_d] = cfg;
    let p = &mut trace.params;
    // Where perf's intel_pt PMU keeps the MTC period in the config.
    p.mtc_freq_bits = 0xf << 14;
    trace.pt_attr.config =
        (trace.pt_attr.config & !p.mtc_freq_bits) | (u64::from(flags & 0xf) << 14);
    p.max_nonturbo_ratio = nom.into();
    p.tsc_ctc_ratio_n = ctc_n.into();
    p.tsc_ctc_ratio_d = ctc_d.into();
    trace.features.cpuid = match (flags >> 4) & 3 {
        0 => Some("GenuineIntel,6,85,4".into()),
        1 => None,
        2 => Some("GenuineIntel,6,61,4".into()),
        _ => Some("GenuineIntel,6,92,9".into()),
    };
    p.filter.clear();
    if let Some(m) = trace.mmaps.iter().find(|m| !m.kernel) {
        if flags & 0x40 != 0 {
            p.filter = format!("filter {:#x}/0x800@{}", m.pgoff, m.path);
        }
        if flags & 0x80 != 0 {
            p.filter += &format!(",stop {:#x}/0x100@{}", m.pgoff + 0x400, m.path);
        }
    }
}

/// Random and mutated PT over the demo's real image: the first bytes
/// configure the decoder ([`configure_pt`]), the rest replace the first
/// queue's trace (the others are emptied) and go through our packet
/// parser, both engines, the chunked pass and the fine pass.
pub fn pt_decode(input: &[u8]) {
    let Some((cfg, data)) = input.split_first_chunk::<PT_CONFIG_BYTES>() else {
        return;
    };
    for (_, p) in ptscope_formats::pt::read::Packets::new(data) {
        let _ = p.map(|p| format!("{p:?}"));
    }
    let snap = demo();
    let mut trace = snap.trace().expect("the demo's trace");
    configure_pt(&mut trace, *cfg);
    for (i, s) in trace.streams.iter_mut().enumerate() {
        s.data = Cow::Borrowed(if i == 0 { data } else { &[] });
    }
    decode_all_ways(snap, Some(&trace));
}

/// The demo's first thread's code, mapped once, for [`memo_walk`].
fn demo_image() -> &'static ptscope_decoder::Memory {
    use ptscope_decoder::{sections, FileCache, Memory};
    static IMAGE: OnceLock<Memory> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let snap = demo();
        let trace = snap.trace().expect("the demo's trace");
        let pid = trace.streams[0]
            .tid
            .and_then(|t| trace.thread(t))
            .map(|t| t.pid);
        let (secs, _) = sections(snap, &trace, pid);
        Memory::new(&secs, &mut FileCache::default()).expect("the demo's code maps")
    })
}

/// Random and mutated PT over the demo's real code, walked by our flow
/// decoder three times: replaying what its memo recorded, the same with
/// the entries it replays reported whole (as the coarse pass's walker
/// asks), each expanded here into its blocks and ticks, and walking every
/// run (`--no-memo`). Every item the three report must be the same, in
/// the same order, with the same decoder state the caller can see (the
/// offset consumed). The first bytes configure the decoder
/// ([`configure_pt`]); the walk is also started at every PSB, as a chunk
/// would start it.
pub fn memo_walk(input: &[u8]) {
    use ptscope_decoder::{decoder_config, BlockItem, FlowDecoder};
    let Some((cfg, data)) = input.split_first_chunk::<PT_CONFIG_BYTES>() else {
        return;
    };
    let mut trace = demo().trace().expect("the demo's trace");
    configure_pt(&mut trace, *cfg);
    let dc = decoder_config(&trace);
    let image = demo_image();
    let walk = |from: usize, memo: bool, entries: bool| {
        let mut dec = FlowDecoder::new(&data[from..], &dc);
        if !memo {
            dec.without_memo();
        }
        dec.report_entries(entries);
        dec.set_image(image).expect("an image");
        let mut out = Vec::new();
        let mut blocks = Vec::new();
        dec.walk(|dec, item| {
            let at = format!("@{}/{}", dec.offset(), dec.status_offset());
            let BlockItem::Entry(e) = item else {
                out.push(format!("{item:?} {at}"));
                // Long walks of a short input loop: enough to compare.
                return out.len() < 1 << 16;
            };
            // What the entry stands for: its blocks, each with the tick
            // that may follow it, at its end.
            blocks.clear();
            blocks.push((e.first, e.first_ticks));
            dec.entry_blocks(&e, &mut blocks);
            for &(b, ticks) in &blocks {
                out.push(format!("{:?} {at}", BlockItem::Block(b)));
                if ticks {
                    let tsc = e.tsc.expect("an entry that ticks has a time");
                    let tick = BlockItem::Tick {
                        ip: Some(b.end_ip),
                        tsc,
                    };
                    out.push(format!("{tick:?} {at}"));
                }
            }
            out.len() < 1 << 16
        });
        // An entry may have taken the walk past the bound: as far as the
        // others go.
        out.truncate(1 << 16);
        out
    };
    let starts = ptscope_formats::pt::read::psb_offsets(data);
    for from in std::iter::once(0).chain(starts.into_iter().skip(1).take(4)) {
        let (memo, plain) = (walk(from, true, false), walk(from, false, false));
        if let Some(diff) = first_difference(("the memo", "the plain walk"), &memo, &plain) {
            panic!("from offset {from}, the memo's replays and the plain walk disagree:\n{diff}");
        }
        let whole = walk(from, true, true);
        if let Some(diff) = first_difference(("entries whole", "the plain walk"), &whole, &plain) {
            panic!("from offset {from}, the memo's entries and the plain walk disagree:\n{diff}");
        }
    }
}

/// Any bytes as a trace's marks ([`ptscope_decoder::scan_marks`]): the packet
/// scan under the configuration the first bytes pick ([`configure_pt`]'s
/// timing bytes), held to the full scan its quick path stands in for, then
/// everything the window and `decode --level marks`
/// derive from them: frequency steps, sleeps, windows and descriptions.
pub fn marks(input: &[u8]) {
    use ptscope_decoder::scan_marks;
    use ptscope_decoder::DecoderConfig;
    use ptscope_model::Marks;
    let Some((cfg, data)) = input.split_first_chunk::<PT_CONFIG_BYTES>() else {
        return;
    };
    let [flags, nom, ctc_n, ctc_d] = *cfg;
    let dc = DecoderConfig {
        mtc_freq: flags & 0xf,
        nom_freq: nom,
        cpuid_0x15_eax: ctc_d.into(),
        cpuid_0x15_ebx: ctc_n.into(),
        ..DecoderConfig::default()
    };
    let s = scan_marks(data, &dc, &ptscope_decoder::ToNs::IDENTITY);
    // Its quick path, where it reads a trace to the end, is the full scan.
    let full = ptscope_decoder::scan_marks_full(data, &dc, &ptscope_decoder::ToNs::IDENTITY);
    assert_eq!(s, full, "the quick scan and the full scan differ");
    let m = Marks::new(s.marks);
    let (first, last) = match (m.all().first(), m.all().last()) {
        (Some(a), Some(b)) => (a.time, b.time),
        _ => (0, 0),
    };
    let mid = last / 2 + first / 2;
    let _ = (m.frequency(), m.sleeps(), m.ptwrites().count());
    let _ = (m.between(first, mid), m.frequency_between(mid, last));
    let _ = m.sleeps_between(first, mid);
    for k in m.all().iter().take(64) {
        let _ = k.describe(100.0);
    }
}

/// An ELF file as a binary in a snapshot: symbols, segments, lines and
/// inlined frames at every function and at addresses the input picks.
pub fn symbols(data: &[u8]) {
    use ptscope_decoder::ModuleSymbols;
    use ptscope_formats::demangle;
    let _ = ptscope_formats::buildid::elf_build_id(data);
    let Ok(m) = ModuleSymbols::from_bytes(Path::new("fuzz.elf"), data) else {
        return;
    };
    let _ = (m.has_symbols(), m.has_debug_info(), m.debug_info_problem());
    let mut addrs: Vec<u64> = m.functions().take(64).map(|f| f.entry).collect();
    addrs.extend(
        data.chunks_exact(8)
            .take(16)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
    );
    for a in addrs {
        if let Some(f) = m.function(a) {
            let _ = demangle(f.name);
        }
        // A function's line, read from its unit alone, is addr2line's.
        let line = m.location(a).map(|l| (l.file, l.line));
        let entry = m.entry_location(a).map(|l| (l.file, l.line));
        assert_eq!(
            entry, line,
            "the line of {a:#x} from its unit is not addr2line's"
        );
        let _ = m.source_frames(a);
        let _ = m.inline_frames(a);
        let _ = m.svma_to_file_offset(a);
        let _ = m.file_offset_to_svma(a);
    }
}

/// `perf script` branch text: every line parsed, the whole imported, and
/// its spans rebuilt.
pub fn perf_script(data: &[u8]) {
    use ptscope_decoder::{import_perf_script, parse_script_line};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        let _ = parse_script_line(line);
    }
    if let Ok(script) = import_perf_script(text, Path::new("fuzz.perf-script")) {
        let model = ptscope_decoder::from_script(script);
        let _ = (model.time_range(), model.span_count());
    }
}

/// A model cache entry's payload, framed with a true header and checksum
/// (so that mutations reach the payload's decoding, not just the CRC),
/// then read and checked as a re-open does; a model that passes is used
/// as the window uses one.
pub fn model_cache(data: &[u8]) {
    let entry = ptscope_decoder::frame_cache_entry(data);
    if let Ok(model) = ptscope_decoder::read_cache_entry(&entry) {
        let _ = (model.canonical(), model.time_range(), model.span_count());
        for t in &model.threads {
            let _ = t.spans.tree_order();
            let _ = t.diagnosis(&model.funcs);
        }
    }
}

/// A fresh directory per input, under the temporary directory.
fn tempdir() -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ptscope-fuzz-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("make a temporary directory");
    dir
}

/// What a target does with one input.
pub type Target = fn(&[u8]);

/// Every target as its fuzzer runs it (the readers mostly stop at one
/// walk), for replaying the corpus those runs built.
pub const AS_FUZZED: &[(&str, Target)] = &[
    ("perf_data", |d| perf_data_to(d, Depth::Sampled)),
    ("snapshot", |d| snapshot_to(d, Depth::Sampled)),
    ("pt_decode", pt_decode),
    ("symbols", symbols),
    ("perf_script", perf_script),
    ("model_cache", model_cache),
    ("marks", marks),
    ("memo_walk", memo_walk),
];

/// Every target by name, going all the ways, for the regression test.
pub const TARGETS: &[(&str, Target)] = &[
    ("perf_data", perf_data),
    ("snapshot", snapshot),
    ("pt_decode", pt_decode),
    ("symbols", symbols),
    ("perf_script", perf_script),
    ("model_cache", model_cache),
    ("marks", marks),
    ("memo_walk", memo_walk),
];
