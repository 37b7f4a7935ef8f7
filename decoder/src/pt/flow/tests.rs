//! Our flow decoder on hand-encoded traces over a little program, each
//! with the blocks and events it must give, and item for item against
//! libipt's block decoder on the demo capture (or any snapshot, on
//! request). The form both decoders are compared in (`joined`) lives here
//! and serves `conformance` too.

use super::*;
use ptscope_formats::{pt::write, pt::write::IpCompression, pt::write::IpPacket};
use std::sync::Arc;

/// A little program at 0x1000:
///   0x1000: call 0x1010
///   0x1005: jmp  0x1005+2+n (to 0x1020)
///   0x1010: test eax,eax ; jz 0x1018 ; ret
fn program() -> Memory {
    let mut code = vec![0x90u8; 0x40];
    // call rel32 to 0x1010
    code[0..5].copy_from_slice(&[0xe8, 0x0b, 0, 0, 0]);
    // jmp rel8 to 0x1020
    code[5..7].copy_from_slice(&[0xeb, 0x19]);
    // 0x1010: test eax,eax; jz +1; nop; ret
    code[0x10..0x15].copy_from_slice(&[0x85, 0xc0, 0x74, 0x01, 0x90]);
    code[0x15] = 0xc3;
    // 0x1020: syscall
    code[0x20..0x22].copy_from_slice(&[0x0f, 0x05]);
    let mut m = Memory::default();
    m.map(0x1000, code.len() as u64, Arc::new(code), 0);
    m
}

fn psb() -> Vec<u8> {
    write::PSB.to_vec()
}

/// PSB+ with tracing on at `ip` (a FUP with the full 64-bit IP).
fn psb_at(ip: u16) -> Vec<u8> {
    let mut t = psb();
    write::ip_packet(&mut t, IpPacket::Fup, ip.into(), IpCompression::Full);
    t.extend(write::PSBEND);
    t
}

/// A TNT: `t` taken, `n` not, oldest first.
pub(super) fn tnt(t: &mut Vec<u8>, bits: &str) {
    let taken = bits.chars().fold(0u64, |b, c| b << 1 | (c == 't') as u64);
    write::tnt(t, taken, bits.len() as u32);
}

/// TIP.PGD with the IP suppressed.
fn pgd(t: &mut Vec<u8>) {
    write::ip_packet(t, IpPacket::TipPgd, 0, IpCompression::Suppressed);
}

/// A FUP or TIP to `ip`, its low 16 bits updating the last IP.
fn ip16(t: &mut Vec<u8>, kind: IpPacket, ip: u64) {
    write::ip_packet(t, kind, ip, IpCompression::Update16);
}

/// Every item of a walk of `trace` over `mem`, as text; with the memo
/// (`memo`) or walking every run.
fn walk_items(trace: &[u8], mem: &Memory, cfg: &DecoderConfig, memo: bool) -> Vec<String> {
    let mut dec = FlowDecoder::new(trace, cfg);
    if !memo {
        dec.without_memo();
    }
    dec.set_image(mem).unwrap();
    let mut out = Vec::new();
    dec.walk(|_, item| {
        out.push(match item {
            BlockItem::Block(b) => {
                format!("block {:#x}..{:#x} {} {:?}", b.ip, b.end_ip, b.ninsn, b.end)
            }
            other => format!("{other:?}"),
        });
        true
    });
    out
}

/// The items of a walk, which the memo's replays must not change: every
/// test here checks that too.
fn items(trace: &[u8], mem: &Memory) -> Vec<String> {
    let cfg = DecoderConfig::default();
    let memo = walk_items(trace, mem, &cfg, true);
    assert_eq!(
        memo,
        walk_items(trace, mem, &cfg, false),
        "memo and plain walk"
    );
    memo
}

#[test]
fn follows_calls_conditional_branches_compressed_returns_and_a_syscall() {
    let mem = program();
    let mut t = psb_at(0x1000);
    // TNT: jz not taken (0), ret compressed (1).
    tnt(&mut t, "nt");
    // TIP.PGD, IP suppressed: binds to the syscall.
    pgd(&mut t);
    let got = items(&t, &mem);
    assert_eq!(
        got,
        [
            "Sync { offset: 0 }",
            "Enabled { ip: 4096, status_update: true, tsc: None }",
            "block 0x1000..0x1000 1 Call",
            "block 0x1010..0x1015 4 Return",
            "block 0x1005..0x1005 1 Jump",
            "block 0x1020..0x1020 1 FarCall",
            "Disabled { ip: None, tsc: None, status_update: false }",
        ]
    );
}

#[test]
fn instructions_before_a_psbs_address_are_reported_before_its_status() {
    let mem = program();
    // Tracing on at 0x1010; the next PSB+ says the flow is at 0x1012:
    // the `test` between ran before it (a fine pass's segment that
    // ends at that PSB keeps it; the next starts at 0x1012). Then the
    // jz is taken.
    let mut t = psb_at(0x1010);
    t.extend(psb_at(0x1012));
    tnt(&mut t, "t");
    let got = items(&t, &mem);
    assert_eq!(
        got[..5],
        [
            "Sync { offset: 0 }",
            "Enabled { ip: 4112, status_update: true, tsc: None }",
            "block 0x1010..0x1010 1 Other",
            "Enabled { ip: 4114, status_update: true, tsc: None }",
            "block 0x1012..0x1012 1 CondJump",
        ],
        "{got:#?}"
    );
}

/// A PSB+ cut short by another PSB (no hardware writes one): the walk
/// goes on from the second as a decoder that syncs there does, keeping
/// nothing the first restated (its TSC, its 32-bit mode), so that the
/// parallel pass, whose chunk starts there, gives the same.
#[test]
fn a_psb_inside_psb_plus_starts_afresh() {
    let mem = program();
    let mut tail = psb_at(0x1000);
    // TNT "01", then TIP.PGD with the IP suppressed.
    tnt(&mut tail, "nt");
    pgd(&mut tail);
    let mut t = psb();
    // TSC, MODE.Exec 32-bit; no FUP, no PSBEND.
    write::tsc(&mut t, 0x05_0403_0201);
    write::mode_exec(&mut t, 32);
    t.extend(&tail);
    let got = items(&t, &mem);
    let want = items(&tail, &mem);
    assert_eq!(got[1..], want[1..]);
    assert!(want[1].contains("tsc: None"), "{want:#?}");
    assert!(want.iter().any(|i| i.contains("4 Return")), "{want:#?}");
}

#[test]
fn a_fup_left_unbound_by_a_psb_is_dropped() {
    let mem = program();
    let mut tail = psb_at(0x1000);
    // TNT "01", then TIP.PGD with the IP suppressed.
    tnt(&mut tail, "nt");
    pgd(&mut tail);
    // Tracing stops, then a FUP (IP 0x1000) whose TIP never comes.
    let mut t = tail.clone();
    ip16(&mut t, IpPacket::Fup, 0x1000);
    t.extend(&tail);
    let got = items(&t, &mem);
    let want = items(&tail, &mem);
    let from = got
        .iter()
        .rposition(|i| i.starts_with("Enabled"))
        .expect("the second PSB+");
    assert!(got.iter().all(|i| !i.starts_with("Error")), "{got:#?}");
    assert_eq!(got[from..], want[1..]);
}

#[test]
fn a_flow_error_found_on_a_psb_read_ahead_resyncs_at_that_psb() {
    let mem = program();
    // Tracing on in the callee, whose call came before: its ret cannot
    // be compressed, yet TNT "01" says so (a damaged trace). Reading
    // that last bit reads the PSB+ after it.
    let mut t = psb_at(0x1010);
    tnt(&mut t, "nt");
    let psb = t.len();
    let mut tail = psb_at(0x1000);
    tnt(&mut tail, "nt");
    pgd(&mut tail);
    t.extend(&tail);
    let got = items(&t, &mem);
    // The error is the ret's, this side of the PSB, and the walk syncs
    // there, as a chunk ending there and one starting there do.
    let err = got
        .iter()
        .position(|i| i.starts_with("Error"))
        .expect("the bad ret");
    assert!(got[err].contains(&format!("offset: {psb},")), "{got:#?}");
    let want = items(&tail, &mem);
    assert_eq!(got[err + 1], format!("Sync {{ offset: {psb} }}"));
    assert_eq!(got[err + 2..], want[1..], "{got:#?}");
}

#[test]
fn code_is_decoded_in_the_mode_it_runs_in_whatever_ran_there_before() {
    // 0x2000: 48 ff c0 c3 is `inc rax; ret` in 64-bit mode but
    // `dec eax; inc eax; ret` in 32-bit mode.
    let mut m = Memory::default();
    m.map(0x2000, 4, Arc::new(vec![0x48, 0xff, 0xc0, 0xc3]), 0);
    let psb_in = |bits: u32| {
        let mut t = psb();
        write::mode_exec(&mut t, bits);
        write::ip_packet(&mut t, IpPacket::Fup, 0x2000, IpCompression::Full);
        t.extend(write::PSBEND);
        // TIP.PGD, IP suppressed: binds to the ret.
        pgd(&mut t);
        t
    };
    let mut t = psb_in(32);
    t.extend(psb_in(64));
    let blocks: Vec<String> = items(&t, &m)
        .into_iter()
        .filter(|i| i.starts_with("block"))
        .collect();
    assert_eq!(
        blocks,
        [
            "block 0x2000..0x2003 3 Return",
            "block 0x2000..0x2003 2 Return"
        ]
    );
}

#[test]
fn a_psb_forgets_the_calls_before_it() {
    let mem = program();
    // The call at 0x1000, the callee's jz not taken (0), then a PSB+
    // at its ret: the ret cannot be compressed against a call from
    // before the PSB, so a compressed-ret bit (1) is an error.
    let mut t = psb_at(0x1000);
    tnt(&mut t, "n");
    t.extend(psb_at(0x1015));
    tnt(&mut t, "t");
    let got = items(&t, &mem);
    let after = got
        .iter()
        .position(|i| i.starts_with("Enabled { ip: 4117"))
        .expect("the second PSB+");
    assert!(
        got[after..].iter().all(|i| !i.starts_with("block 0x1005")),
        "{got:#?}"
    );
    assert!(
        got[after..].iter().any(|i| i.starts_with("Error")),
        "{got:#?}"
    );
}

#[test]
fn a_return_compressed_just_before_a_psb_still_pops_its_call() {
    let mem = program();
    // jz not taken (0), ret compressed (1): the TNT's last bit, so the
    // reader meets the PSB+ that follows before the ret is popped.
    let mut t = psb_at(0x1000);
    tnt(&mut t, "nt");
    t.extend(psb_at(0x1005));
    pgd(&mut t);
    let got = items(&t, &mem);
    assert!(got.iter().all(|i| !i.starts_with("Error")), "{got:#?}");
    let ret = got
        .iter()
        .position(|i| i == "block 0x1010..0x1015 4 Return")
        .expect("the ret");
    assert!(got[ret + 1].starts_with("Enabled { ip: 4101"), "{got:#?}");
}

#[test]
fn a_taken_branch_ends_the_block_and_a_missing_bit_is_an_error() {
    let mem = program();
    let mut t = psb_at(0x1010);
    // jz taken: "1" + stop bit; then a TIP where the ret wants a bit
    // is fine (uncompressed); then the trace ends, and so does the
    // walk (the jmp after the ret needs no trace, but libipt stops too).
    tnt(&mut t, "t");
    // TIP 0x1005 (16-bit update of last IP 0x1010).
    ip16(&mut t, IpPacket::Tip, 0x1005);
    let got = items(&t, &mem);
    assert_eq!(
        got,
        [
            "Sync { offset: 0 }",
            "Enabled { ip: 4112, status_update: true, tsc: None }",
            "block 0x1010..0x1012 2 CondJump",
            "block 0x1015..0x1015 1 Return",
        ]
    );
}

#[test]
fn an_asynchronous_branch_binds_to_the_fup_address() {
    let mem = program();
    let mut t = psb_at(0x1010);
    // FUP 0x1012 (the jz), TIP 0x1020: an interrupt before the jz.
    ip16(&mut t, IpPacket::Fup, 0x1012);
    ip16(&mut t, IpPacket::Tip, 0x1020);
    let got = items(&t, &mem);
    assert_eq!(
        got,
        [
            "Sync { offset: 0 }",
            "Enabled { ip: 4112, status_update: true, tsc: None }",
            "block 0x1010..0x1010 1 Other",
            "AsyncBranch { from: 4114, to: 4128, tsc: None }",
        ]
    );
}

#[test]
fn unmapped_code_is_a_nomap_error_and_the_walk_resyncs_at_the_next_psb() {
    let mem = program();
    let mut t = psb_at(0x9000);
    tnt(&mut t, "t");
    let second = t.len();
    t.extend(psb());
    t.extend(write::PSBEND);
    let got = items(&t, &mem);
    assert_eq!(got[0], "Sync { offset: 0 }");
    assert!(got[2].starts_with("Error"), "{got:?}");
    assert!(got[2].contains("ip: Some(36864)"), "{got:?}");
    assert_eq!(got[3], format!("Sync {{ offset: {second} }}"));
}

#[test]
fn a_timing_packet_before_a_tnt_gives_a_tick_after_its_first_branch() {
    let mem = program();
    let mut t = psb();
    write::tsc(&mut t, 100);
    write::ip_packet(&mut t, IpPacket::Fup, 0x1010, IpCompression::Full);
    t.extend(write::PSBEND);
    write::tsc(&mut t, 200);
    tnt(&mut t, "nt"); // jz not taken, ret compressed (empty stack!)
    let got = items(&t, &mem);
    assert_eq!(
        got[1],
        "Enabled { ip: 4112, status_update: true, tsc: Some(100) }"
    );
    assert_eq!(got[2], "block 0x1010..0x1012 2 CondJump");
    assert_eq!(got[3], "Tick { ip: Some(4114), tsc: 200 }");
    // The return has nothing to pop: the trace and the code disagree.
    assert!(got[5].starts_with("Error"), "{got:?}");
}

/// A loop at 0x1000 that calls a function at 0x1100, whose own loop runs
/// a conditional branch and a call of a leaf at 0x1200:
///   0x1000: call 0x1100 ; dec ecx ; jnz 0x1000 ; jmp [rax]
///   0x1100: call 0x1200 ; test eax,eax ; jz 0x1100 ; ret
///   0x1200: nop ; ret
fn loops() -> Memory {
    let mut code = vec![0x90u8; 0x300];
    // 0x1000: call rel32 0x1100; dec ecx; jnz rel8 0x1000; jmp [rax]
    code[0..5].copy_from_slice(&[0xe8, 0xfb, 0x00, 0, 0]);
    code[5..7].copy_from_slice(&[0xff, 0xc9]);
    code[7..9].copy_from_slice(&[0x75, 0xf7]);
    code[9..11].copy_from_slice(&[0xff, 0x20]);
    // 0x1100: call rel32 0x1200; test eax,eax; jz rel8 0x1100; ret
    code[0x100..0x105].copy_from_slice(&[0xe8, 0xfb, 0x00, 0, 0]);
    code[0x105..0x107].copy_from_slice(&[0x85, 0xc0]);
    code[0x107..0x109].copy_from_slice(&[0x74, 0xf7]);
    code[0x109] = 0xc3;
    // 0x1200: nop; ret
    code[0x201] = 0xc3;
    let mut m = Memory::default();
    m.map(0x1000, code.len() as u64, Arc::new(code), 0);
    m
}

/// The loops' trace: `iterations` of the outer loop, each taking the
/// inner one `inner` times, its TNT bits cut into packets of `per_packet`
/// with a TSC (new time) before every one when `cyc`; a TIP at the end.
fn loops_trace(iterations: usize, inner: usize, per_packet: usize, cyc: bool) -> Vec<u8> {
    let mut t = psb();
    write::tsc(&mut t, 100);
    write::ip_packet(&mut t, IpPacket::Fup, 0x1000, IpCompression::Full);
    t.extend(write::PSBEND);
    // Oldest first: the leaf's return, the inner jz, … then the callee's
    // return and the outer jnz.
    let mut bits = String::new();
    for i in 0..iterations {
        for j in 0..inner {
            bits.push('t'); // the leaf's ret
            bits.push(if j + 1 < inner { 't' } else { 'n' }); // jz
        }
        bits.push('t'); // ret to the loop
        bits.push(if i + 1 < iterations { 't' } else { 'n' }); // jnz
    }
    let chars: Vec<char> = bits.chars().collect();
    for (i, chunk) in chars.chunks(per_packet).enumerate() {
        if cyc {
            write::tsc(&mut t, 1000 + 10 * i as u64);
        }
        tnt(&mut t, &chunk.iter().collect::<String>());
    }
    write::ip_packet(&mut t, IpPacket::Tip, 0x1000, IpCompression::Full);
    t
}

#[test]
fn the_memo_replays_the_walk_exactly_and_hits_on_repeats() {
    let mem = loops();
    for per_packet in [1, 2, 3, 5, 6, 47] {
        for cyc in [false, true] {
            for inner in [1, 2, 3] {
                let t = loops_trace(40, inner, per_packet, cyc);
                let got = items(&t, &mem);
                assert!(got.len() > 40, "{got:?}");
                assert!(!got.iter().any(|i| i.starts_with("Error")), "{got:?}");
                if cyc {
                    assert!(got.iter().any(|i| i.starts_with("Tick")), "{got:?}");
                }
            }
        }
    }
    // With six bits a packet, most blocks come from entries recorded once.
    let t = loops_trace(200, 2, 6, true);
    let mut dec = FlowDecoder::new(&t, &DecoderConfig::default());
    dec.set_image(&mem).unwrap();
    let mut blocks = 0u64;
    dec.walk(|_, item| {
        blocks += matches!(item, BlockItem::Block(_)) as u64;
        true
    });
    let f = dec.memo_figures();
    assert!(f.hits * 10 > f.lookups * 9, "{f:?}");
    assert!(f.blocks * 2 > blocks, "{f:?}, {blocks} blocks");
    assert!(f.peak_bytes > 0);
}

#[test]
fn a_return_into_frames_older_than_the_entry_is_walked_not_replayed() {
    // The walk starts inside the callee: its return pops nothing pushed
    // since, so the trace and the code disagree there, memo or not.
    let mem = loops();
    // From the callee's loop, and from its `ret` itself.
    for (at, bits) in [(0x1105, "tntntnt"), (0x1109, "tt")] {
        let mut t = psb_at(at);
        tnt(&mut t, bits);
        let got = items(&t, &mem);
        assert!(got.iter().any(|i| i.starts_with("Error")), "{got:?}");
    }
}

#[test]
fn another_image_at_the_same_address_is_never_replayed_from_the_first() {
    // The same trace over two programs at the same address: an entry
    // recorded over one must not stand for the other's code.
    let a = loops();
    let mut b_code = vec![0x90u8; 0x300];
    // 0x1000: four nops, then call 0x1100 …: the blocks are longer.
    b_code[4..9].copy_from_slice(&[0xe8, 0xf7, 0x00, 0, 0]);
    b_code[9..11].copy_from_slice(&[0xff, 0xc9]);
    b_code[11..13].copy_from_slice(&[0x75, 0xf3]);
    b_code[0x100..0x10a].copy_from_slice(&[0xe8, 0xfb, 0x00, 0, 0, 0x85, 0xc0, 0x74, 0xf7, 0xc3]);
    b_code[0x201] = 0xc3;
    let mut b = Memory::default();
    b.map(0x1000, b_code.len() as u64, Arc::new(b_code), 0);
    let t = loops_trace(20, 2, 6, false);
    let cfg = DecoderConfig::default();
    // The other program is switched in after item `at` (a context switch,
    // which may fall inside an entry being replayed).
    let walk = |at: usize, memo: bool| {
        let mut dec = FlowDecoder::new(&t, &cfg);
        if !memo {
            dec.without_memo();
        }
        dec.set_image(&a).unwrap();
        let mut out = Vec::new();
        dec.walk(|dec, item| {
            out.push(format!("{item:?}"));
            if out.len() == at {
                dec.set_image(&b).unwrap();
            }
            true
        });
        out
    };
    for at in 1..80 {
        let memo = walk(at, true);
        assert_eq!(memo, walk(at, false), "switched after item {at}");
        assert!(memo.iter().any(|i| i.contains("ninsn: 5")), "{memo:?}");
    }
    assert_ne!(
        walk_items(&t, &a, &cfg, false),
        walk_items(&t, &b, &cfg, false)
    );
}

/// Every block and event of `trace`, in a form both decoders share:
/// libipt reports indirect jumps and far transfers alike.
#[cfg(feature = "libipt")]
fn normalized(item: BlockItem) -> String {
    use crate::pt::block::BlockEnd;
    match item {
        BlockItem::Block(b) => {
            let end = match b.end {
                BlockEnd::Indirect
                | BlockEnd::Jump
                | BlockEnd::FarCall
                | BlockEnd::FarJump
                | BlockEnd::FarReturn => "branch".to_string(),
                e => format!("{e:?}"),
            };
            format!("block {:#x}..{:#x} {} {end}", b.ip, b.end_ip, b.ninsn)
        }
        BlockItem::Error { ip, .. } => format!("error at {ip:x?}"),
        // libipt reports where decoding starts, after PSB+.
        BlockItem::Sync { .. } => "sync".into(),
        // libipt's tick address is the branch or the one after it.
        BlockItem::Tick { tsc, .. } => format!("tick {tsc}"),
        other => format!("{other:?}"),
    }
}

/// Joins a block that ends at a conditional branch (or at no branch)
/// with the block right after it: libipt's block cache ends blocks at
/// every conditional branch, taken or not, and wherever a cache entry
/// ends; we only where the decoding needs to. The coarse pass treats
/// both alike (a conditional branch never leaves the function).
#[cfg(feature = "libipt")]
pub(super) fn joined(items: Vec<BlockItem>) -> Vec<String> {
    use crate::pt::block::BlockEnd;
    let mut out: Vec<BlockItem> = Vec::new();
    for item in items {
        if let (Some(BlockItem::Block(prev)), BlockItem::Block(b)) = (out.last_mut(), &item) {
            if matches!(prev.end, BlockEnd::CondJump | BlockEnd::Other) {
                prev.ninsn += b.ninsn;
                prev.end_ip = b.end_ip;
                prev.end = b.end;
                continue;
            }
        }
        out.push(item);
    }
    out.into_iter().map(normalized).collect()
}

/// Runs both decoders over every stream of a snapshot and returns the
/// first difference, if any, and how many items agreed.
#[cfg(feature = "libipt")]
pub(crate) fn compare_with_libipt(snap_path: &std::path::Path) -> (usize, Option<String>) {
    use crate::names::image::sections;
    use crate::pt::block::decoder_config;
    use crate::pt::ffi::{BlockDecoder, Image, SectionCache};
    use crate::pt::memory::FileCache;
    let snap = ptscope_formats::snapshot::Snapshot::open(snap_path).unwrap();
    let trace = snap.trace().unwrap();
    let cfg = decoder_config(&trace);
    let mut agreed = 0;
    for s in &trace.streams {
        let pid = s.tid.and_then(|t| trace.thread(t)).map(|t| t.pid);
        let (secs, _) = sections(&snap, &trace, pid);
        let mut cache = SectionCache::new().unwrap();
        let isids: Vec<i32> = secs
            .iter()
            .map(|sec| {
                cache
                    .add_file(&sec.file, sec.offset, sec.size, sec.vaddr)
                    .unwrap()
            })
            .collect();
        let mut image = Image::new(&cache).unwrap();
        for isid in isids {
            image.add(isid).unwrap();
        }
        let mem = Memory::new(&secs, &mut FileCache::default()).unwrap();
        let mut theirs = Vec::new();
        let mut dec = BlockDecoder::new(&s.data, &cfg).unwrap();
        dec.set_image(&image).unwrap();
        dec.walk(|_, item| {
            theirs.push(item);
            true
        });
        let theirs = joined(theirs);
        let mut ours = Vec::new();
        let mut dec = FlowDecoder::new(&s.data, &cfg);
        dec.resync_at_psb_only();
        dec.set_image(&mem).unwrap();
        dec.walk(|_, item| {
            ours.push(item);
            true
        });
        let ours = joined(ours);
        for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
            if a != b {
                let from = i.saturating_sub(3);
                return (
                    agreed,
                    Some(format!(
                        "stream {}: item {i} differs\nlibipt: {:#?}\nours:   {:#?}",
                        s.idx,
                        &theirs[from..(i + 3).min(theirs.len())],
                        &ours[from..(i + 3).min(ours.len())]
                    )),
                );
            }
            agreed += 1;
        }
        if theirs.len() != ours.len() {
            return (
                agreed,
                Some(format!(
                    "stream {}: libipt has {} items, ours {}; tails {:?} / {:?}",
                    s.idx,
                    theirs.len(),
                    ours.len(),
                    theirs.get(agreed..),
                    ours.get(agreed..)
                )),
            );
        }
    }
    (agreed, None)
}

#[cfg(feature = "libipt")]
#[test]
fn agrees_with_libipt_on_the_demo_item_for_item() {
    let demo = crate::testing::demo_path();
    let (agreed, diff) = compare_with_libipt(&demo);
    assert!(diff.is_none(), "{}", diff.unwrap());
    assert!(agreed > 1000, "{agreed}");
}

/// `PTSCOPE_COMPARE_FILE=snapshot cargo test -p ptscope-decoder
/// compare_file -- --ignored` compares both decoders on any snapshot.
#[cfg(feature = "libipt")]
#[test]
#[ignore]
fn compare_file() {
    let path = std::env::var_os("PTSCOPE_COMPARE_FILE").expect("PTSCOPE_COMPARE_FILE");
    let (agreed, diff) = compare_with_libipt(std::path::Path::new(&path));
    assert!(diff.is_none(), "after {agreed} items: {}", diff.unwrap());
    println!("{agreed} items agree");
}

#[test]
fn garbage_never_panics() {
    let mem = program();
    let mut rng = fastrand::Rng::with_seed(0x1234_5678);
    for _ in 0..200 {
        let mut t = psb();
        for _ in 0..64 {
            t.push(rng.u8(..));
        }
        let _ = items(&t, &mem);
    }
}

/// A decoder recycled for the next chunk walks it as a fresh one does:
/// with its image set again, it gives the same items (from its cached
/// runs and memo); with none set, it reads no code, rather than the last
/// chunk's image.
#[test]
fn a_recycled_decoder_walks_the_next_chunk_as_a_fresh_one() {
    let mem = program();
    let mut t = psb_at(0x1000);
    tnt(&mut t, "nt");
    pgd(&mut t);
    let cfg = DecoderConfig::default();
    fn walk<'a>(dec: &mut FlowDecoder<'a>, image: Option<&'a Memory>) -> Vec<String> {
        if let Some(m) = image {
            dec.set_image(m).unwrap();
        }
        let mut out = Vec::new();
        dec.walk(|_, item| {
            out.push(format!("{item:?}"));
            true
        });
        out
    }
    let fresh = walk(&mut FlowDecoder::new(&t, &cfg), Some(&mem));
    assert!(fresh.iter().any(|i| i.contains("Block")), "{fresh:?}");
    for image in [Some(&mem), None] {
        let mut used = FlowDecoder::new(&t, &cfg);
        walk(&mut used, Some(&mem));
        let got = walk(&mut used.recycle(&t), image);
        let want = walk(&mut FlowDecoder::new(&t, &cfg), image);
        assert_eq!(got, want, "image set: {}", image.is_some());
    }
}
