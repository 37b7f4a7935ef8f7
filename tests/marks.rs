//! End to end: marks, what a trace says besides the flow. A program that
//! executes PTWRITE runs under the emulated backend on a CPU without it;
//! its values and their order equal perf's `--itrace=w`, and the trace
//! decodes exactly (the instructions libipt and perf see equal the ptrace
//! log). Power and frequency packets are read as perf reads them: inserted
//! into a real capture recorded with `pwr_evt`, equal to perf's
//! `--itrace=p` events; hand-encoded in a perf.data of their own, equal to
//! perf's packet decoder field by field.

use std::io::Cursor;
use std::path::Path;

use serde_json::Value;

use ptscope_formats::pt::write::{self as packets, IpCompression, IpPacket};
use ptscope_formats::pt_params::term;
use ptscope_formats::snapshot::SAMPLE_TYPE;
use ptscope_formats::{
    perf_data::flag, perf_data::EventAttr, perf_data::Features, perf_data::PerfDataWriter,
    perf_data::PerfEventAttr, perf_data::Record, perf_data::SampleId,
};

use crate::support::*;

/// `ptscope decode FILE --level marks --format json`, one object a line.
fn marks_of(file: &Path) -> Vec<Value> {
    let out = run_ok(
        ptscope()
            .args(["decode", "--level", "marks", "--format", "json"])
            .arg(file),
        "decode --level marks",
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s}"))
}

/// What the program writes: per request, its id then its result.
fn expected_ptwrites(n: u64) -> Vec<u64> {
    (0..n)
        .flat_map(|id| {
            let result: u64 = (0..=id).map(|i| (i * 7) as u32 as u64).sum::<u64>() & 0xffff_ffff;
            [0x1000 + id, result]
        })
        .collect()
}

#[test]
fn ptwrite_values_equal_perfs_and_the_program_runs_on_a_cpu_without_ptwrite() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "ptwrite.c");
    const N: u64 = 6;
    // The trace decodes exactly: libipt and perf see every instruction
    // the ptrace log saw, PTWRITEs included, so PTW and FUP packets sit
    // where the hardware puts them.
    let truth = crate::capture::check_exact_with(
        dir.path(),
        "ptwrite",
        &["--backend", "emulated"],
        &[exe.to_str().unwrap(), "6"],
    );
    let snap = dir.path().join("ptwrite.ptscope");

    let ours: Vec<(u64, u64)> = marks_of(&snap)
        .iter()
        .filter(|m| m["mark"] == "ptwrite")
        .map(|m| (m["payload"].as_u64().unwrap(), m["ip"].as_u64().unwrap()))
        .collect();
    let values: Vec<u64> = ours.iter().map(|m| m.0).collect();
    assert_eq!(values, expected_ptwrites(N));

    let extracted = extract(&snap, dir.path());
    let out = perf_script(&extracted, &["--itrace=w", "-F", "ip,synth"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let perf: Vec<(u64, u64)> = text
        .lines()
        .filter_map(|l| {
            // `IP: 1 payload: 0x… <ip>`: the IP bit, the value, the
            // address of the PTWRITE its FUP gave.
            let words: Vec<&str> = l.split_whitespace().collect();
            let payload = words.iter().position(|w| *w == "payload:")?;
            Some((hex(words[payload + 1]), hex(words.last()?)))
        })
        .collect();
    assert_eq!(
        perf.len(),
        ours.len(),
        "perf's ptwrites:\n{text}\nours: {ours:x?}"
    );
    assert_eq!(perf, ours, "perf's ptwrites:\n{text}");

    // Each value is bound to its PTWRITE: two distinct instructions the
    // program ran, each once a request.
    let ran: std::collections::HashSet<u64> = truth.values().flatten().copied().collect();
    let mut ips: Vec<u64> = ours.iter().map(|m| m.1).collect();
    assert!(ips.iter().all(|ip| ran.contains(ip)), "{ips:x?}");
    assert!(ips.chunks(2).all(|pair| pair == [ips[0], ips[1]]));
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 2);

    // The text form says the same.
    let out = run_ok(
        ptscope().args(["decode", "--level", "marks"]).arg(&snap),
        "decode --level marks",
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ptwrite = 0x1005"));

    // Turned off, the unit writes no PTW packet; the program still runs.
    let (off, _) = record(
        dir.path(),
        "ptwrite-off",
        &[
            "--backend",
            "emulated",
            "--timing",
            "cyc=1,mtc=0,psb_period=1,ptw=0",
        ],
        &[exe.to_str().unwrap(), "2"],
    );
    assert!(marks_of(&off).iter().all(|m| m["mark"] != "ptwrite"));
}

const PID: u32 = 300;
const CODE: u64 = 0x40_1000;

/// The power trace both this test and the marks fuzz seeds start from:
/// PSB+ at TSC 1000 (CBR 10), tracing on at [`CODE`] in 64-bit mode; then,
/// each after a TSC: CBR 24; an MWAIT, a PWRE and an EXSTOP bound to its
/// FUP; a PWRX and CBR 12; then tracing off.
pub(crate) fn power_events_pt() -> Vec<u8> {
    let mut pt = Vec::new();
    pt.extend_from_slice(&packets::PSB);
    packets::tsc(&mut pt, 1_000);
    packets::cbr(&mut pt, 10);
    pt.extend_from_slice(&packets::PSBEND);
    packets::mode_exec_64(&mut pt);
    packets::ip_packet(&mut pt, IpPacket::TipPge, CODE, IpCompression::Full);
    packets::tsc(&mut pt, 2_000);
    packets::cbr(&mut pt, 24);
    packets::tsc(&mut pt, 3_000);
    // MWAIT hints 0x20 (C3), extensions 1.
    packets::mwait(&mut pt, 0x20, 1);
    // PWRE: C3.0, not by hardware.
    packets::pwre(&mut pt, false, 3, 0);
    // EXSTOP with its IP, then the FUP.
    packets::exstop(&mut pt, true);
    packets::ip_packet(&mut pt, IpPacket::Fup, CODE, IpCompression::Full);
    packets::tsc(&mut pt, 9_000);
    // PWRX: deepest C6, last C3, woken by an interrupt.
    packets::pwrx(&mut pt, 6, 3, 1);
    packets::cbr(&mut pt, 12);
    packets::ip_packet(&mut pt, IpPacket::TipPgd, 0, IpCompression::Suppressed);
    pt
}

/// A perf.data of one thread whose trace holds power and frequency
/// packets as a CPU with power event trace writes them: CBR changes, an
/// MWAIT, a PWRE, an EXSTOP bound to its IP, a PWRX, each after a TSC.
fn write_power_perf_data(path: &Path) {
    let params = ptscope_capture::emulated::settings::emulated_params();
    let pt = power_events_pt();

    let pt_attr = PerfEventAttr {
        kind: 8,
        config: term::TSC | term::PWR_EVT,
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        read_format: 4,
        flags: flag::SAMPLE_ID_ALL,
        ..PerfEventAttr::default()
    };
    let mut w = PerfDataWriter::new(Cursor::new(Vec::new()), SAMPLE_TYPE).unwrap();
    w.write(&Record::AuxtraceInfo(params.to_info())).unwrap();
    w.write(&Record::Comm {
        pid: PID,
        tid: PID,
        exec: true,
        comm: "sleeper",
        sample_id: SampleId {
            pid: PID,
            tid: PID,
            time: 500,
            id: 1,
            cpu: 0,
        },
    })
    .unwrap();
    w.write(&Record::ItraceStart {
        pid: PID,
        tid: PID,
        sample_id: SampleId {
            pid: PID,
            tid: PID,
            time: 600,
            id: 1,
            cpu: 0,
        },
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
    let features = Features {
        arch: Some("x86_64".into()),
        nrcpus: Some((1, 1)),
        cpuid: Some("GenuineIntel,6,85,4".into()),
        ..Features::default()
    };
    let bytes = w.finish(&attrs, features).unwrap().into_inner();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn power_and_frequency_packets_read_as_perf_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("perf.data");
    write_power_perf_data(&file);

    let ours = marks_of(&file);
    let kinds: Vec<&str> = ours.iter().map(|m| m["mark"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["cbr", "cbr", "mwait", "pwre", "exstop", "pwrx", "cbr"],
        "{ours:#?}"
    );
    // Frequencies as perf computes them: ratio × TSC Hz / max non-turbo.
    let mhz: Vec<u64> = ours
        .iter()
        .filter(|m| m["mark"] == "cbr")
        .map(|m| m["mhz"].as_f64().unwrap() as u64)
        .collect();
    assert_eq!(mhz, [1000, 2400, 1200]);
    assert_eq!(ours[4]["ip"].as_u64(), Some(CODE));

    // perf's own packet decoder (`perf report -D`), field by field. Its
    // `--itrace=p` synthesizes nothing from a hand-made perf.data without
    // a recorded process to walk, so the packet dump is the judge here.
    let out = std::process::Command::new("perf")
        .args(["report", "-D", "-i"])
        .arg(&file)
        .output()
        .expect("perf is installed (see README)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut perf: Vec<String> = Vec::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let after = |key: &str| w.iter().position(|x| *x == key).map(|i| w[i + 1]);
        if let Some(i) = w.iter().position(|x| *x == "CBR") {
            perf.push(format!("cbr {}", hex(w[i + 1])));
        } else if w.contains(&"MWAIT") {
            perf.push(format!(
                "mwait {} {}",
                hex(after("Hints").unwrap()),
                hex(after("Extensions").unwrap())
            ));
        } else if w.contains(&"PWRE") {
            let cstate = l
                .split("CState:")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            let sub = l.split("Sub-CState:").nth(1).unwrap().trim();
            perf.push(format!("pwre {cstate} {sub}"));
        } else if w.contains(&"PWRX") {
            let field = |k: &str| {
                l.split(k)
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .to_string()
            };
            perf.push(format!(
                "pwrx {} {} {}",
                field("Deepest CState:"),
                field("Last CState:"),
                hex(&field("Reason"))
            ));
        } else if w.contains(&"EXSTOP") {
            perf.push("exstop".into());
        }
    }
    let mine: Vec<String> = ours
        .iter()
        .map(|m| match m["mark"].as_str().unwrap() {
            "cbr" => format!("cbr {}", m["ratio"]),
            "mwait" => format!("mwait {} {}", m["hints"], m["extensions"]),
            "pwre" => format!("pwre {} {}", m["cstate"], m["sub_cstate"]),
            "pwrx" => format!(
                "pwrx {} {} {}",
                m["deepest_cstate"], m["last_cstate"], m["wake_reason"]
            ),
            other => other.to_string(),
        })
        .collect();
    assert_eq!(mine, perf, "perf printed:\n{text}");
}

/// Power packets in a real emulated capture, as perf's `--itrace=p`
/// synthesizes them: the demo's trace with a stay in C3 inserted after its
/// first PSB+ (CBR up to 24, MWAIT, PWRE, EXSTOP, PWRX, CBR back to 10),
/// and the PT event's config with `pwr_evt` set, as a CPU with power event
/// trace records it. perf's events and ptscope's marks agree, field by
/// field, each kind in the same order.
#[test]
fn power_events_in_a_capture_equal_perfs_itrace_p() {
    use ptscope_formats::snapshot::{rewrite_aux, Snapshot};
    let dir = tempfile::tempdir().unwrap();
    let snap = Snapshot::open(&demo_snapshot()).unwrap();
    let mut power = Vec::new();
    packets::cbr(&mut power, 24);
    packets::mwait(&mut power, 0x20, 1);
    packets::pwre(&mut power, false, 2, 0);
    packets::exstop(&mut power, false);
    packets::pwrx(&mut power, 5, 2, 1);
    packets::cbr(&mut power, 10);
    let out = dir.path().join("power.ptscope");
    rewrite_aux(&snap, &out, 0, &|_, old| {
        // After the first PSBEND: between PSB+ and the flow.
        let at = old
            .windows(2)
            .position(|w| w == packets::PSBEND)
            .map_or(0, |p| p + 2);
        [&old[..at], &power, &old[at..]].concat()
    })
    .unwrap();
    let extracted = extract(&out, dir.path());
    // The PT event (the first attr) recorded with pwr_evt (config bit 4).
    let perf_data = extracted.join("perf.data");
    let mut bytes = std::fs::read(&perf_data).unwrap();
    let attrs = u64::from_le_bytes(bytes[24..32].try_into().unwrap()) as usize;
    let config = attrs + 8;
    let v = u64::from_le_bytes(bytes[config..config + 8].try_into().unwrap()) | term::PWR_EVT;
    bytes[config..config + 8].copy_from_slice(&v.to_le_bytes());
    std::fs::write(&perf_data, bytes).unwrap();

    let text = perf_script(&extracted, &["--itrace=p", "-F", "synth"]);
    let text = String::from_utf8_lossy(&text.stdout);
    let mut perf: Vec<String> = Vec::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let after = |key: &str| w.iter().position(|x| *x == key).map(|i| w[i + 1]);
        if let Some(cbr) = after("cbr:") {
            perf.push(format!("cbr {cbr} {}", after("freq:").unwrap()));
        } else if let Some(h) = after("hints:") {
            perf.push(format!(
                "mwait {} {}",
                hex(h),
                hex(after("extensions:").unwrap())
            ));
        } else if l.contains("sub-cstate:") {
            perf.push(format!(
                "pwre {} {} {}",
                after("hw:").unwrap(),
                after("cstate:").unwrap(),
                after("sub-cstate:").unwrap()
            ));
        } else if l.contains("deepest cstate:") {
            let n = |k: &str| w[w.iter().position(|x| *x == k).unwrap() + 2];
            perf.push(format!(
                "pwrx {} {} {}",
                n("deepest"),
                n("last"),
                hex(after("reason:").unwrap())
            ));
        } else if l.contains("IP:") {
            perf.push("exstop".into());
        }
    }
    let ours: Vec<String> = marks_of(&out)
        .iter()
        .filter(|m| m.get("tid").is_some())
        .map(|m| match m["mark"].as_str().unwrap() {
            "cbr" => format!("cbr {} {}", m["ratio"], m["mhz"]),
            "mwait" => format!("mwait {} {}", m["hints"], m["extensions"]),
            "pwre" => format!("pwre {} {} {}", m["hw"], m["cstate"], m["sub_cstate"]),
            "pwrx" => format!(
                "pwrx {} {} {}",
                m["deepest_cstate"], m["last_cstate"], m["wake_reason"]
            ),
            other => other.to_string(),
        })
        .collect();
    assert!(ours.iter().any(|m| m.starts_with("pwrx")), "{ours:?}");
    // perf delivers MWAIT and PWRE with the next instruction sample it
    // makes, later than the packets' place in the trace: the same events,
    // and each kind in the same order.
    let kinds = |v: &[String], kind: &str| -> Vec<String> {
        v.iter().filter(|m| m.starts_with(kind)).cloned().collect()
    };
    for kind in ["cbr", "mwait", "pwre", "exstop", "pwrx"] {
        assert_eq!(
            kinds(&ours, kind),
            kinds(&perf, kind),
            "{kind}; perf printed:\n{text}"
        );
    }
    assert_eq!(ours.len(), perf.len(), "perf printed:\n{text}");
}
