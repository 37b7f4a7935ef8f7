//! A perf.data of a user+kernel trace as perf writes it, built with the
//! formats crate's writer and hand-encoded packets: perf's MMAP records
//! map the kernel and a module (pid -1), the sideband maps a library that
//! is not at hand. `info` lists the kernel's mappings, and code that
//! cannot be read is named by what is missing: `[kernel]`,
//! `[no binary: path]`, never the decoder's "no memory mapped" for an
//! address the sideband explains.

use std::io::Cursor;
use std::path::Path;

use ptscope_capture::emulated::packets::{self, IpCompression, IpPacket};
use ptscope_formats::perf_data::{
    misc, EventAttr, Features, PerfDataWriter, PerfEventAttr, Record, SampleId,
};
use ptscope_formats::pt_params::PtParams;
use ptscope_formats::snapshot::SAMPLE_TYPE;

use crate::support::*;

const PID: u32 = 100;
const KERNEL: u64 = 0xffff_ffff_8100_0000;
const MODULE: u64 = 0xffff_ffff_c000_0000;
const LIB: u64 = 0x40_0000;

/// A PSB+ with a TSC, then tracing enabled at `ip`.
fn enabled_at(pt: &mut Vec<u8>, tsc: u64, ip: u64) {
    pt.extend_from_slice(&packets::PSB);
    packets::tsc(pt, tsc);
    pt.extend_from_slice(&packets::PSBEND);
    packets::mode_exec_64(pt);
    packets::ip_packet(pt, IpPacket::TipPge, ip, IpCompression::Full);
}

fn write_perf_data(path: &Path) {
    let params = PtParams {
        pmu_type: 8,
        time_shift: 31,
        time_mult: 1 << 31,
        cap_user_time_zero: true,
        tsc_bit: 1 << 10,
        noretcomp_bit: 1 << 11,
        mtc_bit: 1 << 9,
        mtc_freq_bits: 0xf << 14,
        cyc_bit: 1 << 1,
        tsc_ctc_ratio_n: 40,
        tsc_ctc_ratio_d: 1,
        max_nonturbo_ratio: 10,
        ..PtParams::default()
    };
    let pt_attr = PerfEventAttr {
        kind: 8,
        config: 1 << 10,
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        ..PerfEventAttr::default()
    };
    let sid = |time| SampleId {
        pid: PID,
        tid: PID,
        time,
        id: 1,
        cpu: 0,
    };
    let mut pt = Vec::new();
    enabled_at(&mut pt, 1_000, KERNEL + 0x100);
    enabled_at(&mut pt, 2_000, MODULE + 0x10);
    enabled_at(&mut pt, 3_000, LIB + 0x10);
    let mut w = PerfDataWriter::new(Cursor::new(Vec::new()), SAMPLE_TYPE).unwrap();
    w.write(&Record::AuxtraceInfo(params.to_info())).unwrap();
    for (addr, len, name) in [
        (KERNEL, 0x100_0000, "[kernel.kallsyms]_text"),
        (MODULE, 0x1000, "/lib/modules/6.1.0/kernel/drivers/foo.ko"),
    ] {
        w.write(&Record::Mmap {
            pid: u32::MAX,
            tid: 0,
            addr,
            len,
            pgoff: if addr == KERNEL { KERNEL } else { 0 },
            misc: misc::KERNEL,
            filename: name,
            sample_id: SampleId::default(),
        })
        .unwrap();
    }
    w.write(&Record::Comm {
        pid: PID,
        tid: PID,
        exec: true,
        comm: "prog",
        sample_id: sid(500),
    })
    .unwrap();
    w.write(&Record::Mmap2 {
        pid: PID,
        tid: PID,
        addr: LIB,
        len: 0x1000,
        pgoff: 0,
        build_id: None,
        maj: 0,
        min: 0,
        ino: 0,
        prot: 5,
        flags: 2,
        filename: "/nonexistent/libfoo.so",
        sample_id: sid(600),
    })
    .unwrap();
    w.write(&Record::Auxtrace {
        offset: 0,
        reference: 0,
        idx: 0,
        tid: PID,
        cpu: u32::MAX,
        data: &pt,
    })
    .unwrap();
    let attrs = [EventAttr {
        attr: pt_attr,
        name: "intel_pt//".into(),
        ids: vec![1],
    }];
    let bytes = w.finish(&attrs, Features::default()).unwrap().into_inner();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn the_kernel_is_listed_and_unreadable_code_is_named_by_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("perf.data");
    write_perf_data(&file);

    let out = run_ok(ptscope().arg("info").arg(&file), "ptscope info");
    let info = String::from_utf8_lossy(&out.stdout);
    let kernel = info
        .split("  kernel (not decoded, shown as [kernel]):")
        .nth(1)
        .unwrap_or_else(|| panic!("no kernel section: {info}"));
    assert!(kernel.contains("0xffffffff81000000"), "{info}");
    assert!(kernel.contains(" [kernel.kallsyms] "), "{info}");
    assert!(
        kernel.contains("/lib/modules/6.1.0/kernel/drivers/foo.ko"),
        "{info}"
    );
    assert!(info.contains("MISSING"), "{info}");

    let names: Vec<String> = decode_json(&file, &[])
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert!(names.iter().any(|n| n == "[kernel]"), "{names:?}");
    assert!(
        names
            .iter()
            .any(|n| n == "[no binary: /nonexistent/libfoo.so]"),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.contains("no memory mapped")),
        "{names:?}"
    );
}
