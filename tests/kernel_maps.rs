//! A perf.data of a user+kernel trace as perf writes it, built with the
//! formats crate's writer and hand-encoded packets: perf's MMAP records
//! map the kernel and a module (pid -1), the sideband maps a library that
//! is not at hand. `info` lists the kernel's mappings, and code that
//! cannot be read is named by what is missing: `[kernel]`,
//! `[no binary: path]`, never the decoder's "no memory mapped" for an
//! address the sideband explains.

use std::io::Cursor;
use std::path::Path;

use ptscope_formats::pt::write::{self as packets, IpCompression, IpPacket};
use ptscope_formats::pt_params::PtParams;
use ptscope_formats::snapshot::SAMPLE_TYPE;
use ptscope_formats::{
    perf_data::misc, perf_data::EventAttr, perf_data::Features, perf_data::PerfDataWriter,
    perf_data::PerfEventAttr, perf_data::Record, perf_data::SampleId,
};

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

/// The kernel's symbols as `/proc/kallsyms` lists them, and its modules as
/// `/proc/modules` does, for the kernel and module of [`write_perf_data`].
const KALLSYMS: &str = "\
ffffffff81000000 T _text
ffffffff81000000 T _stext
ffffffff81000100 T do_syscall_64
ffffffff81000400 T syscall_exit_to_user_mode
ffffffff81001000 D some_data
ffffffffc0000000 t foo_read\t[foo]
ffffffffc0000800 t foo_write\t[foo]
";
const MODULES: &str = "foo 4096 0 - Live 0xffffffffc0000000\n";

/// The names a decode of `file` gives its spans.
fn span_names(file: &Path, extra: &[&str]) -> Vec<String> {
    decode_json(file, extra)
        .into_iter()
        .map(|s| s.name)
        .collect()
}

#[test]
fn kernel_code_is_named_by_the_kallsyms_given_or_carried() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("perf.data");
    write_perf_data(&file);
    let ks = dir.path().join("kallsyms");
    std::fs::write(&ks, KALLSYMS).unwrap();

    // A plain perf.data: the user gives the kernel's symbols, as to perf.
    let given = span_names(&file, &["--kallsyms", ks.to_str().unwrap()]);
    assert!(given.iter().any(|n| n == "do_syscall_64"), "{given:?}");
    assert!(given.iter().any(|n| n == "foo_read"), "{given:?}");
    assert!(!given.iter().any(|n| n == "[kernel]"), "{given:?}");
    let out = run_ok(
        ptscope().arg("info").arg("--kallsyms").arg(&ks).arg(&file),
        "ptscope info --kallsyms",
    );
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.contains("  kernel symbols: "), "{info}");
    assert!(info.contains(ks.to_str().unwrap()), "{info}");

    // A snapshot that carries them, as a --kernel capture writes it, names
    // the same code with nothing given.
    let perf_data = std::fs::read(&file).unwrap();
    let carried = dir.path().join("carried.ptscope");
    let meta = ptscope_formats::snapshot::Metadata {
        format: ptscope_formats::snapshot::FORMAT_VERSION,
        backend: "intel-pt".into(),
        ..Default::default()
    };
    ptscope_formats::snapshot::write_archive(
        &carried,
        &perf_data,
        &[
            (
                ptscope_formats::snapshot::KALLSYMS_MEMBER.to_string(),
                KALLSYMS.as_bytes(),
            ),
            (
                ptscope_formats::snapshot::MODULES_MEMBER.to_string(),
                MODULES.as_bytes(),
            ),
        ],
        &meta,
    )
    .unwrap();
    assert_eq!(span_names(&carried, &[]), given);

    // One whose capture found kallsyms hidden says why its kernel code is
    // `[kernel]`, in `info` and as a warning of the decode.
    let hidden = dir.path().join("hidden.ptscope");
    let why = "/proc/kallsyms lists every address as 0 (kernel.kptr_restrict is 1)";
    let meta = ptscope_formats::snapshot::Metadata {
        kallsyms_missing: Some(why.into()),
        ..meta
    };
    ptscope_formats::snapshot::write_archive(&hidden, &perf_data, &[], &meta).unwrap();
    let names = span_names(&hidden, &[]);
    assert!(names.iter().any(|n| n == "[kernel]"), "{names:?}");
    let out = run_ok(ptscope().arg("info").arg(&hidden), "ptscope info");
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.contains(why), "{info}");
    let out = ptscope()
        .args(["decode", "--format", "json"])
        .arg(&hidden)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains(why));
}
