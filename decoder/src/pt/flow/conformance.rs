//! Hand-encoded traces over a little code image, decoded by both our flow
//! decoder and libipt's block decoder, for the cases Intel's own
//! conformance traces cover: TSX, the end of the trace, errata and such.

use super::tests::joined;
use super::*;
use crate::pt::ffi::{BlockDecoder, Image, SectionCache};
use ptscope_formats::{pt::write, pt::write::IpCompression, pt::write::IpPacket};
use std::sync::Arc;

/// A trace built packet by packet, with the PT format's own encoder
/// (`ptscope_formats::pt::write`), IPs whole.
#[derive(Default)]
pub(super) struct T(pub Vec<u8>);

impl T {
    fn raw(mut self, b: &[u8]) -> T {
        self.0.extend_from_slice(b);
        self
    }
    fn with(mut self, write: impl FnOnce(&mut Vec<u8>)) -> T {
        write(&mut self.0);
        self
    }
    fn ip(self, kind: IpPacket, ip: u64) -> T {
        self.with(|out| write::ip_packet(out, kind, ip, IpCompression::Full))
    }
    pub(super) fn psb(self) -> T {
        self.raw(&write::PSB)
    }
    pub(super) fn psbend(self) -> T {
        self.raw(&write::PSBEND)
    }
    pub(super) fn fup(self, ip: u64) -> T {
        self.ip(IpPacket::Fup, ip)
    }
    pub(super) fn tip(self, ip: u64) -> T {
        self.ip(IpPacket::Tip, ip)
    }
    pub(super) fn pge(self, ip: u64) -> T {
        self.ip(IpPacket::TipPge, ip)
    }
    pub(super) fn pgd(self, ip: u64) -> T {
        self.ip(IpPacket::TipPgd, ip)
    }
    pub(super) fn pgd_noip(self) -> T {
        self.with(|out| write::ip_packet(out, IpPacket::TipPgd, 0, IpCompression::Suppressed))
    }
    pub(super) fn exec64(self) -> T {
        self.with(|out| write::mode_exec(out, 64))
    }
    pub(super) fn exec32(self) -> T {
        self.with(|out| write::mode_exec(out, 32))
    }
    pub(super) fn tsx(self, intx: bool, abort: bool) -> T {
        self.with(|out| write::mode_tsx(out, intx, abort))
    }
    pub(super) fn ovf(self) -> T {
        self.raw(&write::OVF)
    }
    /// A TNT: `t` taken, `n` not, oldest first.
    pub(super) fn tnt(self, bits: &str) -> T {
        self.with(|out| super::tests::tnt(out, bits))
    }
    /// PSB+ with tracing on at `ip` in 64-bit mode.
    pub(super) fn psb_at(self, ip: u64) -> T {
        self.psb().fup(ip).exec64().psbend()
    }
}

/// Our items and libipt's for `trace` over `code` (address, bytes),
/// both joined as the agreement tests compare them.
pub(super) fn both(
    trace: &T,
    code: &[(u64, &[u8])],
    cfg: &DecoderConfig,
) -> (Vec<String>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let mut mem = Memory::default();
    let mut cache = SectionCache::new().unwrap();
    let mut isids = Vec::new();
    for (i, (vaddr, bytes)) in code.iter().enumerate() {
        let path = dir.path().join(format!("code{i}"));
        std::fs::write(&path, bytes).unwrap();
        isids.push(
            cache
                .add_file(&path, 0, bytes.len() as u64, *vaddr)
                .unwrap(),
        );
        mem.map(*vaddr, bytes.len() as u64, Arc::new(bytes.to_vec()), 0);
    }
    let mut image = Image::new(&cache).unwrap();
    for isid in isids {
        image.add(isid).unwrap();
    }
    let mut theirs = Vec::new();
    let mut dec = BlockDecoder::new(&trace.0, cfg).unwrap();
    dec.set_image(&image).unwrap();
    dec.walk(|_, item| {
        theirs.push(item);
        true
    });
    let mut ours = Vec::new();
    let mut dec = FlowDecoder::new(&trace.0, cfg);
    dec.resync_at_psb_only();
    dec.set_image(&mem).unwrap();
    dec.walk(|_, item| {
        ours.push(item);
        true
    });
    (joined(ours), joined(theirs))
}

/// Both decoders agree on `trace`; ours is returned.
fn agreed(trace: &T, code: &[(u64, &[u8])], cfg: &DecoderConfig) -> Vec<String> {
    let (ours, theirs) = both(trace, code, cfg);
    assert_eq!(ours, theirs, "ours (left) and libipt's (right)");
    ours
}

/// 0x1000: eight nops and a hlt; 0x2000: nop, nop, hlt (a handler).
fn nops() -> [(u64, &'static [u8]); 2] {
    const CODE: [u8; 9] = [0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xf4];
    [(0x1000, &CODE), (0x2000, &[0x90, 0x90, 0xf4])]
}

fn count(items: &[String], prefix: &str) -> usize {
    items.iter().filter(|i| i.starts_with(prefix)).count()
}

#[test]
fn mode_tsx_in_psb_plus_binds_no_fup() {
    // PSB+ says tracing is on inside a transaction; then two
    // interrupts, each a FUP and a TIP, and a disable.
    let t = T::default()
        .psb()
        .fup(0x1000)
        .exec64()
        .tsx(true, false)
        .psbend()
        .fup(0x1002)
        .tip(0x2000)
        .fup(0x2001)
        .tip(0x1004)
        .fup(0x1005)
        .pgd_noip();
    let got = agreed(&t, &nops(), &DecoderConfig::default());
    assert_eq!(count(&got, "AsyncBranch"), 2, "{got:#?}");
    assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4101, tsc: None }");
}

#[test]
fn a_tsx_abort_is_an_asynchronous_branch_and_a_commit_binds_its_fup() {
    // Begin (FUP bound), abort at 0x1002 to the handler, which is
    // then interrupted into a disable.
    let t = T::default()
        .psb_at(0x1000)
        .tsx(true, false)
        .fup(0x1001)
        .tsx(false, true)
        .fup(0x1002)
        .tip(0x2000)
        .fup(0x2001)
        .pgd_noip();
    let got = agreed(&t, &nops(), &DecoderConfig::default());
    assert!(got.contains(&"AsyncBranch { from: 4098, to: 8192, tsc: None }".into()));
    // Begin and commit bind their FUPs: the one after is the disable.
    let t = T::default()
        .psb_at(0x1000)
        .tsx(true, false)
        .fup(0x1001)
        .tsx(false, false)
        .fup(0x1002)
        .fup(0x1003)
        .pgd_noip();
    let got = agreed(&t, &nops(), &DecoderConfig::default());
    assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4099, tsc: None }");
    // An abort that disables tracing: FUP and TIP.PGD.
    let t = T::default()
        .psb_at(0x1000)
        .tsx(false, true)
        .fup(0x1003)
        .pgd_noip();
    let got = agreed(&t, &nops(), &DecoderConfig::default());
    assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4099, tsc: None }");
}

#[test]
fn the_walk_stops_where_the_trace_ends() {
    // Straight code after the last packet runs off its mapping at
    // 0x1008: the trace says nothing of it, so no error either.
    let code: [(u64, &[u8]); 2] = [(0x1000, &[0x90; 8]), (0x3000, &[0xff, 0xe0, 0x74, 0x00])];
    let cfg = DecoderConfig::default();
    // After an indirect jump.
    let got = agreed(&T::default().psb_at(0x3000).tip(0x1000), &code, &cfg);
    assert_eq!(got.last().unwrap(), "block 0x3000..0x3000 1 branch");
    // After an asynchronous branch.
    let t = T::default().psb_at(0x1000).fup(0x1002).tip(0x1004);
    let got = agreed(&t, &code, &cfg);
    assert!(got.last().unwrap().starts_with("AsyncBranch"), "{got:#?}");
    // After a conditional branch not taken (0x3002: jz +0, then the
    // nops are not there).
    let t = T::default().psb_at(0x3002).tnt("n");
    let got = agreed(&t, &code, &cfg);
    assert_eq!(count(&got, "error"), 0, "{got:#?}");
    assert_eq!(got.last().unwrap(), "block 0x3002..0x3002 1 CondJump");
}

/// A trace that ends with a FUP bound to a status event (a TSX begin,
/// a PTWRITE) leaves the flow bound for that FUP's IP: the walk goes
/// there, as libipt walks to bind the event, instead of stopping where
/// the last branch left it; code it cannot read on the way is an
/// error, as libipt's.
#[test]
fn the_walk_goes_on_to_a_status_event_that_ends_the_trace() {
    let code: [(u64, &[u8]); 1] = [(0x1000, &[0x90, 0x90, 0x90, 0x90, 0x90, 0xeb, 0x10])];
    let cfg = DecoderConfig::default();
    let tsx = T::default().psb_at(0x1000).tsx(true, false).fup(0x1004);
    let got = agreed(&tsx, &code, &cfg);
    assert_eq!(
        got.last().unwrap(),
        "block 0x1000..0x1003 4 Other",
        "{got:#?}"
    );
    // PTWRITE (4-byte payload, IP bit) and its FUP.
    let ptw = T::default()
        .psb_at(0x1000)
        .with(|out| write::ptw(out, 0x0403_0201, 4, true))
        .fup(0x1002);
    let got = agreed(&ptw, &code, &cfg);
    assert_eq!(
        got.last().unwrap(),
        "block 0x1000..0x1002 3 Other",
        "{got:#?}"
    );
    // Past the jmp at 0x1005 to 0x1017, which is not mapped.
    let far = T::default().psb_at(0x1000).tsx(true, false).fup(0x1020);
    let got = agreed(&far, &code, &cfg);
    assert_eq!(count(&got, "error"), 1, "{got:#?}");
}

#[test]
fn a_call_to_the_next_instruction_is_not_a_call_that_returns() {
    // 32-bit: 0x1000 call 0x1008; 0x1005 jz 0x100e; 0x1007 hlt;
    // 0x1008 call $+5; 0x100d ret; 0x100e nop; 0x100f hlt. The ret
    // is compressed and returns to 0x1005, not to 0x100d.
    let code: &[u8] = &[
        0xe8, 0x03, 0, 0, 0, 0x74, 0x07, 0xf4, 0xe8, 0, 0, 0, 0, 0xc3, 0x90, 0xf4,
    ];
    let t = T::default()
        .psb()
        .fup(0x1000)
        .exec32()
        .psbend()
        .tnt("tt")
        .fup(0x100f)
        .pgd_noip();
    let got = agreed(&t, &[(0x1000, code)], &DecoderConfig::default());
    assert_eq!(count(&got, "error"), 0, "{got:#?}");
    // The jz taken, joined with the nop it jumped to.
    assert!(
        got.contains(&"block 0x1005..0x100e 2 Other".into()),
        "{got:#?}"
    );
}

/// An EVD (Event Trace's event data) of `kind`.
fn evd(t: T, kind: u8) -> T {
    t.with(|out| write::evd(out, kind, 0xf00b_baaa))
}

/// A CFE (Event Trace's control-flow event) of `kind`.
fn cfe(t: T, kind: u8, ip: bool, vector: u8) -> T {
    t.with(|out| write::cfe(out, ip, kind, vector))
}

#[test]
fn an_instruction_straddling_two_images_is_read_across_both() {
    // 0x1000: nop; mov eax, imm32 split at 0x1003; jmp rax.
    let a: &[u8] = &[0x90, 0xb8, 1];
    let b: &[u8] = &[2, 3, 4, 0xff, 0xe0];
    let t = T::default().psb_at(0x1000).tip(0x1000);
    let got = agreed(&t, &[(0x1000, a), (0x1003, b)], &DecoderConfig::default());
    assert_eq!(got.last().unwrap(), "block 0x1000..0x1006 3 branch");
}

#[test]
fn maintenance_between_an_overflow_and_its_fup_is_skipped() {
    let t = T::default()
        .psb_at(0x1000)
        .ovf()
        .with(write::pad)
        .with(|out| write::mnt(out, 0xa000))
        .fup(0x1001)
        .fup(0x1002)
        .pgd_noip();
    let got = agreed(&t, &nops(), &DecoderConfig::default());
    assert_eq!(got[2], "Overflow { ip: Some(4097), tsc: None }");
    assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4098, tsc: None }");
}

#[test]
fn a_mode_exec_binds_the_fup_after_it() {
    // Event Trace: MODE.Exec on an IF change comes with a FUP of its
    // own, which is no interrupt.
    let t = T::default()
        .psb()
        .psbend()
        .exec64()
        .pge(0x1000)
        .with(|out| write::mode_exec_if(out, 64, true))
        .fup(0x1002)
        .exec64()
        .fup(0x1004)
        .fup(0x1005)
        .pgd_noip();
    let got = agreed(&t, &nops(), &DecoderConfig::default());
    assert_eq!(count(&got, "error"), 0, "{got:#?}");
    assert_eq!(got.last().unwrap(), "AsyncDisabled { at: 4101, tsc: None }");
}

#[test]
fn event_data_in_an_order_libipt_rejects_is_an_error() {
    // 0x1000 nop; 0x1001 int 42; 0x1003 nop... 0x2000 nop; hlt.
    let code: [(u64, &[u8]); 2] = [
        (0x1000, &[0x90, 0xcd, 0x2a, 0x90, 0x90, 0xf4]),
        (0x2000, &[0x90, 0xf4]),
    ];
    let cfg = DecoderConfig::default();
    let tail = |t: T| t.fup(0x1001).tip(0x2000).fup(0x2001).pgd_noip();
    // A page fault's CR2, then its interrupt: fine.
    let t = tail(cfe(evd(T::default().psb_at(0x1000), 0), 1, true, 14));
    let got = agreed(&t, &code, &cfg);
    assert_eq!(count(&got, "error"), 0, "{got:#?}");
    // A CR2 before an iret, and two CR2s: errors.
    let t = tail(cfe(evd(T::default().psb_at(0x1000), 0), 2, false, 0));
    assert_eq!(count(&agreed(&t, &code, &cfg), "error"), 1);
    let t = T::default().psb_at(0x1000);
    let t = tail(cfe(evd(evd(t, 0), 0), 1, true, 14));
    assert_eq!(count(&agreed(&t, &code, &cfg), "error"), 1);
    // A VM exit's qualification twice.
    let t = T::default().psb_at(0x1000);
    let t = tail(cfe(evd(evd(t, 1), 1), 8, true, 0));
    assert_eq!(count(&agreed(&t, &code, &cfg), "error"), 1);
}

#[test]
fn a_tip_pgd_without_an_ip_binds_to_a_mov_cr3() {
    let code: &[u8] = &[0x0f, 0x22, 0xd8, 0xf4];
    let t = T::default().psb_at(0x1000).pgd_noip();
    let got = agreed(&t, &[(0x1000, code)], &DecoderConfig::default());
    assert_eq!(
        got[2..],
        [
            "block 0x1000..0x1000 1 Other",
            "Disabled { ip: None, tsc: None, status_update: false }"
        ]
    );
}

/// Intel's `pip-pip_mov_cr3-fail`: two PIPs, one MOV CR3 to bind
/// them, then the code runs out. The MOV CR3 ran (libipt binds the
/// first PIP there), and the search for the second's runs into code
/// that is not there; with one PIP, the flow stops at its MOV CR3.
#[test]
fn a_trace_that_ends_after_pips_keeps_their_mov_cr3() {
    // 0x100000: mov cr3, rax; hlt.
    let code: &[u8] = &[0x0f, 0x22, 0xd8, 0xf4];
    let pip = |t: T, cr3: u64| t.with(|out| write::pip(out, cr3, false));
    let want: [&[&str]; 2] = [
        &["block 0x100000..0x100000 1 Other"],
        &["block 0x100000..0x100003 2 Other", "error at None"],
    ];
    for (pips, want) in [1, 2].into_iter().zip(want) {
        let mut t = T::default().psb_at(0x100000);
        for k in 0..pips {
            t = pip(t, 0xa000 + 0x1000 * k);
        }
        let got = agreed(&t, &[(0x100000, code)], &DecoderConfig::default());
        assert_eq!(got[2..], *want, "{pips} PIPs");
    }
}

/// Only ours: libipt 2.1.2 knows no TRIG, JMPABS or FRED. Each case's
/// expected flow is that of Intel's conformance trace of the same name.
fn ours(trace: &T, code: &[(u64, &[u8])]) -> Vec<String> {
    both(trace, code, &DecoderConfig::default()).0
}

#[test]
fn trig_packets_are_read_and_a_trig_with_ip_binds_its_fup() {
    // 0x1000 jle 0x1003; hlt; 0x1003 call rax; hlt; 0x1006 hlt.
    let code: &[u8] = &[0x7e, 0x01, 0xf4, 0xff, 0xd0, 0xf4, 0xf4];
    // TRIG without IP or a count; `mult`: more triggers fired.
    let trig = |t: T, mult: bool, trbv: u8| t.with(|out| write::trig(out, trbv, false, mult, None));
    let t = T::default().psb().exec64().psbend();
    let t = trig(t, false, 1).pge(0x1000);
    let t = trig(t, false, 2).tnt("t");
    let t = trig(t, true, 3).tip(0x1006);
    let t = trig(trig(t, false, 4), true, 5).fup(0x1006).pgd_noip();
    let t = trig(trig(t, false, 6), true, 7);
    let got = ours(&t, &[(0x1000, code)]);
    assert_eq!(
        got[1..],
        [
            "Disabled { ip: None, tsc: None, status_update: true }",
            "Enabled { ip: 4096, status_update: false, tsc: None }",
            "block 0x1000..0x1003 2 Call",
            "AsyncDisabled { at: 4102, tsc: None }",
        ]
    );
    // TRIG.IP with a valid count of 0: the FUP after it is its anchor,
    // no interrupt.
    let t = T::default()
        .psb_at(0x1000)
        .tnt("t")
        .with(|out| write::trig(out, 1, true, false, Some(0)))
        .fup(0x1003)
        .tip(0x1006);
    let got = ours(&t, &[(0x1000, code)]);
    assert_eq!(count(&got, "error"), 0, "{got:#?}");
    assert_eq!(count(&got, "Async"), 0, "{got:#?}");
}

#[test]
fn jmpabs_is_an_indirect_jump_that_takes_a_tip() {
    // 0x1000: jmpabs 0x100d (ignored: the TIP says 0x100b); 0x100b:
    // hlt; 0x100c: nop; 0x100d: hlt.
    let mut code = vec![0xd5u8, 0x00, 0xa1];
    code.extend(0x100du64.to_le_bytes());
    code.extend([0xf4, 0x90, 0xf4]);
    let t = T::default()
        .psb_at(0x1000)
        .tip(0x100c)
        .fup(0x100d)
        .pgd_noip();
    let got = ours(&t, &[(0x1000, &code)]);
    assert_eq!(
        got[2..],
        [
            "block 0x1000..0x1000 1 branch",
            "block 0x100c..0x100c 1 Other",
            "AsyncDisabled { at: 4109, tsc: None }",
        ]
    );
    // A TIP.PGD binds to it.
    let t = T::default().psb_at(0x1000).pgd(0x100d);
    let got = ours(&t, &[(0x1000, &code)]);
    assert_eq!(
        got[2..],
        [
            "block 0x1000..0x1000 1 branch",
            "Disabled { ip: Some(4109), tsc: None, status_update: false }"
        ]
    );
}

#[test]
fn fred_eretu_and_erets_are_far_returns() {
    // 0x1000 nop; int 42; nop; nop; hlt. 0x2000: nop; ERETU (or
    // ERETS); hlt. An interrupt before the int, then the return.
    let code: &[u8] = &[0x90, 0xcd, 0x2a, 0x90, 0x90, 0xf4];
    for eret in [0xf3u8, 0xf2] {
        let handler: &[u8] = &[0x90, eret, 0x0f, 0x01, 0xca, 0xf4];
        let t = T::default()
            .psb_at(0x1000)
            .fup(0x1001)
            .tip(0x2000)
            .tip(0x1003)
            .fup(0x1004)
            .pgd_noip();
        let got = ours(&t, &[(0x1000, code), (0x2000, handler)]);
        assert_eq!(
            got[2..],
            [
                "block 0x1000..0x1000 1 Other",
                "AsyncBranch { from: 4097, to: 8192, tsc: None }",
                "block 0x2000..0x2001 2 branch",
                "block 0x1003..0x1003 1 Other",
                "AsyncDisabled { at: 4100, tsc: None }",
            ]
        );
    }
}

/// Ours as ptscope runs it: resuming after flow errors as perf does.
fn resuming(trace: &T, code: &[(u64, &[u8])]) -> Vec<String> {
    let mut mem = Memory::default();
    for (vaddr, bytes) in code {
        mem.map(*vaddr, bytes.len() as u64, Arc::new(bytes.to_vec()), 0);
    }
    let mut dec = FlowDecoder::new(&trace.0, &DecoderConfig::default());
    dec.set_image(&mem).unwrap();
    let mut out = Vec::new();
    dec.walk(|_, item| {
        out.push(item);
        true
    });
    joined(out)
}

#[test]
fn after_unmapped_code_the_walk_resumes_at_the_next_ip_as_perf_does() {
    // 0x3000: jmp rax; 0x3002: jmp rax. The first jumps into code
    // that is not there; its TNTs say nothing without the flow; the
    // TIP after them does: the walk resumes there, not at the PSB.
    let code: [(u64, &[u8]); 2] = [(0x1000, &[0x90; 8]), (0x3000, &[0xff, 0xe0, 0xff, 0xe0])];
    let t = T::default()
        .psb_at(0x3000)
        .tip(0x9000)
        .tnt("tn")
        .tip(0x3002)
        .tip(0x1000)
        .fup(0x1002)
        .pgd_noip();
    let second = t.0.len();
    let t = t.psb_at(0x1000).fup(0x1003).pgd_noip();
    let got = resuming(&t, &code);
    assert_eq!(
        got[2..],
        [
            "block 0x3000..0x3000 1 branch",
            "error at Some(9000)",
            "Enabled { ip: 12290, status_update: false, tsc: None }",
            "block 0x3002..0x3002 1 branch",
            "block 0x1000..0x1001 2 Other",
            "AsyncDisabled { at: 4098, tsc: None }",
            // The PSB, reached in the flow (no resync).
            "Enabled { ip: 4096, status_update: true, tsc: None }",
            "block 0x1000..0x1002 3 Other",
            "AsyncDisabled { at: 4099, tsc: None }",
        ],
        "{got:#?}"
    );
    // libipt, and ours when asked, resync at the PSB.
    let (ours, theirs) = both(&t, &code, &DecoderConfig::default());
    assert_eq!(ours, theirs);
    assert_eq!(ours[4], "sync", "the PSB at {second}: {ours:#?}");
    // A FUP resumes too: at its IP, the branch from there.
    let t = T::default()
        .psb_at(0x3000)
        .tip(0x9000)
        .fup(0x1001)
        .tip(0x1004)
        .fup(0x1006)
        .pgd_noip();
    let got = resuming(&t, &code);
    assert_eq!(
        got[3..],
        [
            "error at Some(9000)",
            "Enabled { ip: 4097, status_update: false, tsc: None }",
            "AsyncBranch { from: 4097, to: 4100, tsc: None }",
            "block 0x1004..0x1005 2 Other",
            "AsyncDisabled { at: 4102, tsc: None }",
        ],
        "{got:#?}"
    );
}

/// A FUP bound to a status event gives the flow back after an error
/// too, at its IP, as libipt 2.2's resync takes it: right after the
/// failing TIP (a MODE.Exec's FUP), or after TNTs that mean nothing
/// without the flow (a PTWRITE's, whose instruction then runs).
#[test]
fn after_unmapped_code_the_walk_resumes_at_a_bound_fup() {
    // 0x3000: jmp rax (to nowhere); 0x1000: nops.
    let code: [(u64, &[u8]); 2] = [(0x1000, &[0x90; 8]), (0x3000, &[0xff, 0xe0])];
    let exec = T::default()
        .psb_at(0x3000)
        .tip(0x9000)
        .exec64()
        .fup(0x1002)
        .fup(0x1005)
        .pgd_noip();
    let got = resuming(&exec, &code);
    assert_eq!(
        got[3..],
        [
            "error at Some(9000)",
            "Enabled { ip: 4098, status_update: false, tsc: None }",
            "block 0x1002..0x1004 3 Other",
            "AsyncDisabled { at: 4101, tsc: None }",
        ],
        "{got:#?}"
    );
    let ptw = T::default()
        .psb_at(0x3000)
        .tip(0x9000)
        .tnt("tnt")
        .with(|out| write::ptw(out, 0x0403_0201, 4, true))
        .fup(0x1003)
        .fup(0x1005)
        .pgd_noip();
    let got = resuming(&ptw, &code);
    assert_eq!(
        got[4..],
        [
            "Enabled { ip: 4099, status_update: false, tsc: None }",
            "block 0x1003..0x1004 2 Other",
            "AsyncDisabled { at: 4101, tsc: None }",
        ],
        "{got:#?}"
    );
}

fn on(cpu: &str) -> DecoderConfig {
    DecoderConfig::default().with_cpu(cpu.parse().unwrap())
}

/// `trace` decodes as `want` (after its sync) on `cpu`, the same as
/// libipt; without the erratum, it does not.
fn erratum(cpu: &str, trace: &T, code: &[(u64, &[u8])], want: &[&str]) {
    let got = agreed(trace, code, &on(cpu));
    assert_eq!(got[1..], *want, "{got:#?}");
    let (without, _) = both(trace, code, &DecoderConfig::default());
    assert_ne!(without[1..], *want, "{without:#?}");
}

#[test]
fn bdm70_a_psb_fup_before_a_tip_pge_is_not_tracing_on() {
    let t = T::default()
        .psb()
        .exec64()
        .fup(0x1000)
        .tsx(true, false)
        .psbend()
        .pge(0x1000)
        .fup(0x1001)
        .pgd_noip();
    let want = [
        "Disabled { ip: None, tsc: None, status_update: true }",
        "Enabled { ip: 4096, status_update: false, tsc: None }",
        "block 0x1000..0x1000 1 Other",
        "AsyncDisabled { at: 4097, tsc: None }",
    ];
    erratum("6/0x3d", &t, &nops(), &want);
}

#[test]
fn skd007_a_cyc_cut_by_an_overflow_is_the_overflow() {
    // CYC(0x3e) whose second byte OVF overwrote: f7 02 f3, then a PAD.
    // The cut CYC's first byte is raw on purpose: no encoder writes it.
    let t = T::default()
        .psb()
        .exec64()
        .fup(0x1000)
        .raw(&[0xf7])
        .ovf()
        .with(write::pad)
        .fup(0x1001)
        .fup(0x1002)
        .pgd_noip();
    let want = [
        "Enabled { ip: 4096, status_update: true, tsc: None }",
        "Overflow { ip: Some(4097), tsc: None }",
        "block 0x1001..0x1001 1 Other",
        "AsyncDisabled { at: 4098, tsc: None }",
    ];
    erratum("6/0x8e", &t, &nops(), &want);
}

#[test]
fn skz84_a_tma_with_reserved_bits_and_its_bogus_byte_are_skipped() {
    let t = T::default()
        .psb_at(0x1000)
        // Reserved bits set and a bogus byte after, raw on purpose: the
        // encoder writes only well-formed TMAs.
        .raw(&[0x02, 0x73, 1, 1, 1, 1, 0, 0])
        .fup(0x1001)
        .pgd_noip();
    let want = [
        "Enabled { ip: 4096, status_update: true, tsc: None }",
        "block 0x1000..0x1000 1 Other",
        "AsyncDisabled { at: 4097, tsc: None }",
    ];
    erratum("6/0x55", &t, &nops(), &want);
}

#[test]
fn apl11_a_tip_pgd_after_an_overflow_is_dropped() {
    let t = T::default()
        .psb_at(0x1000)
        .ovf()
        .pgd(0x1001)
        .exec64()
        .pge(0x1002)
        .fup(0x1003)
        .pgd_noip();
    let want = [
        "Enabled { ip: 4096, status_update: true, tsc: None }",
        "Overflow { ip: None, tsc: None }",
        "Enabled { ip: 4098, status_update: false, tsc: None }",
        "block 0x1002..0x1002 1 Other",
        "AsyncDisabled { at: 4099, tsc: None }",
    ];
    erratum("6/0x5c", &t, &nops(), &want);
}

#[test]
fn apl12_a_fup_after_an_overflow_that_tracing_off_follows_is_dropped() {
    // The FUP, then a TIP.PGE: tracing was off.
    let tail = |t: T| t.fup(0x1001).exec64().pge(0x1002).fup(0x1003).pgd_noip();
    let t = tail(T::default().psb_at(0x1000).ovf());
    let want = [
        "Enabled { ip: 4096, status_update: true, tsc: None }",
        "Overflow { ip: None, tsc: None }",
        "Enabled { ip: 4098, status_update: false, tsc: None }",
        "block 0x1002..0x1002 1 Other",
        "AsyncDisabled { at: 4099, tsc: None }",
    ];
    erratum("6/0x5c", &t, &nops(), &want);
    // The FUP, then a PSB+ without FUP.
    let t = T::default().psb_at(0x1000).ovf().fup(0x1001);
    let t = t.psb().exec64().psbend().pge(0x1002).fup(0x1003).pgd_noip();
    let got = agreed(&t, &nops(), &on("6/0x5c"));
    assert_eq!(got[2], "Overflow { ip: None, tsc: None }", "{got:#?}");
}

#[test]
fn skd022_an_asynchronous_disable_at_vmlaunch_is_synchronous() {
    // 0x1000: vmlaunch; 0x1003: hlt; 0x1004: nop; 0x1005: vmresume.
    let code: &[u8] = &[0x0f, 0x01, 0xc2, 0xf4, 0x90, 0x0f, 0x01, 0xc3, 0xf4];
    let t = T::default()
        .psb_at(0x1000)
        .fup(0x1000)
        .pgd_noip()
        .pge(0x1004)
        .fup(0x1005)
        .pgd_noip();
    let got = agreed(&t, &[(0x1000, code)], &on("6/0x8e"));
    assert_eq!(count(&got, "AsyncDisabled"), 0, "{got:#?}");
    assert_eq!(count(&got, "Disabled"), 2, "{got:#?}");
    let (without, _) = both(&t, &[(0x1000, code)], &DecoderConfig::default());
    assert_eq!(count(&without, "AsyncDisabled"), 2, "{without:#?}");
}

#[test]
fn skd010_an_overflow_whose_fup_was_dropped_resumes_later() {
    let cpu = "6/0x8e";
    // 0x1000 nop; 0x1001 nop; 0x1002 hlt.
    let base = || T::default().psb().exec64().psbend().ovf();
    // Sync at a TIP.
    let t = base().tip(0x1000).fup(0x1001).pgd_noip();
    let want = [
        "Disabled { ip: None, tsc: None, status_update: true }",
        "Overflow { ip: Some(4096), tsc: None }",
        "block 0x1000..0x1000 1 Other",
        "AsyncDisabled { at: 4097, tsc: None }",
    ];
    erratum(cpu, &t, &nops(), &want);
    // Sync at MODE.TSX and its FUP.
    let t = base().tsx(true, false).fup(0x1000).fup(0x1001).pgd_noip();
    erratum(cpu, &t, &nops(), &want);
    // A TIP.PGD: tracing went off.
    let t = base().pgd(0x1001).pge(0x1001).fup(0x1002).pgd_noip();
    let got = agreed(&t, &nops(), &on(cpu));
    assert_eq!(got[2], "Overflow { ip: None, tsc: None }", "{got:#?}");
    assert_eq!(count(&got, "error"), 0, "{got:#?}");
    // A PSB+ with a FUP.
    let t = base().psb_at(0x1000).fup(0x1001).pgd_noip();
    let got = agreed(&t, &nops(), &on(cpu));
    assert_eq!(got[2], "Overflow { ip: Some(4096), tsc: None }", "{got:#?}");
}

#[test]
fn resuming_after_errors_reports_a_disable_and_errors_again_at_unmapped_tips() {
    // Intel's ptxed-resync-nomap-tip_pgd: 0x3000 call rax, to nowhere;
    // TNTs; a TIP to nowhere again; a TNT; TIP.PGD.
    let code: [(u64, &[u8]); 1] = [(0x3000, &[0xff, 0xd0, 0xf4])];
    let t = T::default()
        .psb_at(0x3000)
        .tip(0x9000)
        .tnt("ntt")
        .tnt("ntt")
        .tip(0x9100)
        .tnt("ntt")
        .pgd(0x3002);
    let got = resuming(&t, &code);
    assert_eq!(
        got[2..],
        [
            "block 0x3000..0x3000 1 Call",
            "error at Some(9000)",
            "Enabled { ip: 37120, status_update: false, tsc: None }",
            "error at Some(9100)",
            "Disabled { ip: Some(12290), tsc: None, status_update: false }",
        ],
        "{got:#?}"
    );
}

#[test]
fn a_mode_tsx_while_tracing_is_off_binds_no_fup() {
    // Intel's tip_pgd-tsx: begin before TIP.PGE, a FUP and TIP.PGD;
    // an abort while off, TIP.PGE, a FUP and TIP.PGD.
    let t = T::default()
        .psb()
        .exec64()
        .psbend()
        .tsx(true, false)
        .pge(0x1000)
        .fup(0x1001)
        .pgd_noip()
        .tsx(false, true)
        .pge(0x1003)
        .fup(0x1004)
        .pgd_noip();
    let got = agreed(&t, &nops(), &DecoderConfig::default());
    assert_eq!(count(&got, "AsyncDisabled"), 2, "{got:#?}");
    assert_eq!(count(&got, "error"), 0, "{got:#?}");
}

#[test]
fn bdm64_a_tsx_abort_right_after_a_branch_is_where_the_branch_led() {
    // 0x1000 test [rax], rbx; 0x1003 je 0x1008; 0x1005 nop;
    // 0x1006 je 0x100c; 0x1008 hlt; hlt; 0x100a nop; nop; 0x100c hlt.
    // The first je's bit says not taken, but the abort is at 0x1008.
    let code: &[u8] = &[
        0x48, 0x85, 0x18, 0x74, 0x03, 0x90, 0x74, 0x04, 0xf4, 0xf4, 0x90, 0x90, 0xf4,
    ];
    let t = T::default()
        .psb()
        .exec64()
        .tsx(true, false)
        .fup(0x1000)
        .psbend()
        .tnt("n")
        .tsx(false, true)
        .fup(0x1008)
        .tip(0x100a)
        .fup(0x100b)
        .pgd_noip();
    let want = [
        "Enabled { ip: 4096, status_update: true, tsc: None }",
        "block 0x1000..0x1003 2 CondJump",
        "AsyncBranch { from: 4104, to: 4106, tsc: None }",
        "block 0x100a..0x100a 1 Other",
        "AsyncDisabled { at: 4107, tsc: None }",
    ];
    erratum("6/0x3d", &t, &[(0x1000, code)], &want);
}

#[test]
fn a_trig_with_ip_binds_its_fup_while_tracing_is_off_too() {
    // Intel's trig-fup: 0x1000 jle 0x1003; hlt; 0x1003 call 0x1009;
    // hlt; 0x1009 nop; nop. Each TRIG.IP's FUP is its anchor, never
    // an interrupt, with tracing on or off.
    let code: &[u8] = &[0x7e, 0x01, 0xf4, 0xe8, 0x01, 0, 0, 0, 0xf4, 0x90, 0x90];
    // TRIG.IP with a valid count of 0.
    let trig = |t: T| t.with(|out| write::trig(out, 0x1a, true, false, Some(0)));
    let t = T::default().psb_at(0x1000).tnt("t");
    let t = trig(t).fup(0x1003).pgd(0x1009);
    let t = trig(trig(t).fup(0x1009)).fup(0x100a);
    let got = ours(&t, &[(0x1000, code)]);
    assert_eq!(
        got[2..],
        [
            "block 0x1000..0x1003 2 Call",
            "Disabled { ip: Some(4105), tsc: None, status_update: false }",
        ],
        "{got:#?}"
    );
}

/// libipt's instruction decoder's instructions for `trace` over
/// `code`: the reference for flows libipt's block decoder gets wrong.
fn libipt_insns(trace: &T, code: &[(u64, &[u8])], cfg: &DecoderConfig) -> Vec<u64> {
    let dir = tempfile::tempdir().unwrap();
    let mut dec = crate::pt::ffi::InsnDecoder::new(&trace.0, cfg).unwrap();
    for (i, (vaddr, bytes)) in code.iter().enumerate() {
        let path = dir.path().join(format!("code{i}"));
        std::fs::write(&path, bytes).unwrap();
        dec.add_file(&path, 0, bytes.len() as u64, *vaddr).unwrap();
    }
    let mut ips = Vec::new();
    dec.walk(|i| ips.push(i.ip));
    ips
}

/// Our blocks cover exactly `insns`, in order (instruction by
/// instruction where a block's ends fall).
fn blocks_cover(items: &[String], insns: &[u64]) {
    let mut at = 0;
    for item in items.iter().filter(|i| i.starts_with("block ")) {
        let mut words = item.split_whitespace().skip(1);
        let (first, last) = words.next().unwrap().split_once("..").unwrap();
        let hex = |s: &str| u64::from_str_radix(&s[2..], 16).unwrap();
        let n: usize = words.next().unwrap().parse().unwrap();
        assert_eq!(insns.get(at), Some(&hex(first)), "{item} in {insns:x?}");
        assert_eq!(
            insns.get(at + n - 1),
            Some(&hex(last)),
            "{item} in {insns:x?}"
        );
        at += n;
    }
    assert_eq!(at, insns.len(), "{items:#?} against {insns:x?}");
}

/// The filter of the SKL014 cases: 0x1000..=0x10ff traced.
fn skl014_cpu() -> DecoderConfig {
    on("6/0x4e").with_filter("0x1000-0x10ff".parse().unwrap())
}

#[test]
fn skl014_a_jump_out_of_the_filter_takes_the_disable_without_an_ip() {
    // 0x1000 nop; jmp 0x3000 (out of the filter); 0x3000 nop; nop; hlt.
    // A Skylake writes the TIP.PGD of that jump without its IP; the
    // jump is where tracing stopped, and the flow went to 0x3000.
    let code: &[u8] = &[0x90, 0xe9, 0xfa, 0x1f, 0, 0];
    let out: &[u8] = &[0x90, 0x90, 0xf4];
    let image = [(0x1000, code), (0x3000, out)];
    let t = T::default().psb_at(0x1000).pgd_noip();
    let (got, libipt) = both(&t, &image, &skl014_cpu());
    let want = [
        "sync",
        "Enabled { ip: 4096, status_update: true, tsc: None }",
        "block 0x1000..0x1001 2 branch",
        "Disabled { ip: Some(12288), tsc: None, status_update: false }",
    ];
    assert_eq!(got, want, "{got:#?}");
    // libipt binds it at the same jump, without naming the target.
    assert_eq!(libipt[..3], want[..3], "{libipt:#?}");
    assert!(libipt[3].starts_with("Disabled { ip: None"), "{libipt:#?}");
    blocks_cover(&got, &libipt_insns(&t, &image, &skl014_cpu()));
    // Without the erratum (or without a filter) the flow runs on out
    // of the filter to the hlt, where it needs trace.
    for cfg in [
        on("6/0x4e"),
        DecoderConfig::default().with_filter(skl014_cpu().filter),
    ] {
        let (without, _) = both(&t, &image, &cfg);
        assert_ne!(without, want, "{without:#?}");
    }
}

#[test]
fn skl014_a_call_inside_the_filter_does_not_take_the_disable() {
    // 0x1000 call 0x1010 (inside); 0x1005 hlt; 0x1010 nop; call 0x3000
    // (out of the filter): the second call is where tracing stopped.
    // libipt's instruction decoder agrees; its block decoder, asked to
    // end blocks at calls as ptscope's libipt engine asks it, binds
    // the disable at the first direct call (ROBUSTNESS.md).
    let mut code = [0x90u8; 0x20];
    code[..6].copy_from_slice(&[0xe8, 0x0b, 0, 0, 0, 0xf4]);
    code[0x10] = 0x90;
    code[0x11..0x16].copy_from_slice(&[0xe8, 0xea, 0x1f, 0, 0]);
    let out: &[u8] = &[0x90, 0xc3];
    let image = [(0x1000, &code[..]), (0x3000, out)];
    let t = T::default().psb_at(0x1000).pgd_noip();
    let got = ours(&t, &image);
    let got_skl = {
        let mut dec = FlowDecoder::new(&t.0, &skl014_cpu());
        let mut mem = Memory::default();
        for (vaddr, bytes) in image {
            mem.map(vaddr, bytes.len() as u64, Arc::new(bytes.to_vec()), 0);
        }
        dec.set_image(&mem).unwrap();
        let mut items = Vec::new();
        dec.walk(|_, item| {
            items.push(item);
            true
        });
        joined(items)
    };
    assert_eq!(
        got_skl[2..],
        [
            "block 0x1000..0x1000 1 Call",
            "block 0x1010..0x1011 2 Call",
            "Disabled { ip: Some(12288), tsc: None, status_update: false }",
        ],
        "{got_skl:#?}"
    );
    blocks_cover(&got_skl, &libipt_insns(&t, &image, &skl014_cpu()));
    let (_, block_decoder) = both(&t, &image, &skl014_cpu());
    assert_eq!(
        block_decoder[2..],
        [
            "block 0x1000..0x1000 1 Call",
            "Disabled { ip: None, tsc: None, status_update: false }",
        ],
        "{block_decoder:#?}"
    );
    // Without the erratum the flow runs into the callee.
    assert_ne!(got[1..], got_skl[1..], "{got:#?}");
}
