//! Raw PT dumps everywhere: `packets` and `info` read them without
//! binaries, `decode` and `stats` ask for `--raw IMAGE:ADDR` when they
//! are missing, and the window takes the binaries in the dump's tab and
//! opens it again with them. No native dialog opens: paths are typed in.

use ptscope_formats::{pt::write, pt::write::IpCompression, pt::write::IpPacket};
use std::path::Path;

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use ptscope::gui::App;

use crate::support::{ptscope, raw_args, raw_demo};

fn run(args: &[&str], file: &Path) -> (bool, String, String) {
    let out = ptscope().args(args).arg(file).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn packets_and_info_read_a_raw_dump_without_binaries() {
    let dir = tempfile::tempdir().unwrap();
    let (pt, images) = raw_demo(dir.path());
    let (ok, out, err) = run(&["packets", "--limit", "20"], &pt);
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l.ends_with("  psb")), "{out}");
    assert!(out.contains("psbend"), "{out}");
    assert!(out.lines().count() <= 21, "{out}");
    // --raw is taken too, and lists the same packets.
    let mut with = vec!["packets", "--limit", "20"];
    with.extend(raw_args(&images));
    assert_eq!(run(&with, &pt).1, out);
    // A raw dump has no threads.
    let (ok, _, err) = run(&["packets", "--thread", "5"], &pt);
    assert!(
        !ok && err.contains("demo.pt") && err.contains("no threads"),
        "{err}"
    );

    let (ok, out, err) = run(&["info"], &pt);
    assert!(ok, "{err}");
    assert!(out.contains("a raw Intel PT dump"), "{out}");
    assert!(
        out.contains("none given; decode it with --raw IMAGE:ADDR"),
        "{out}"
    );
    let mut with = vec!["info"];
    with.extend(raw_args(&images));
    let (ok, out, err) = run(&with, &pt);
    assert!(ok, "{err}");
    assert_eq!(out.matches("    found ").count(), images.len(), "{out}");
}

#[test]
fn decode_and_stats_ask_for_the_binaries_of_a_raw_dump() {
    let dir = tempfile::tempdir().unwrap();
    let (pt, images) = raw_demo(dir.path());
    for cmd in ["decode", "stats"] {
        let (ok, _, err) = run(&[cmd], &pt);
        assert!(!ok, "{cmd}");
        assert!(
            err.contains(&format!("{}: starts with a PSB packet", pt.display()))
                && err.contains("raw Intel PT dump")
                && err.contains("--raw IMAGE:ADDR")
                && !err.contains("not a valid"),
            "{cmd}: {err}"
        );
    }
    let mut with = vec!["stats"];
    with.extend(raw_args(&images));
    let (ok, out, err) = run(&with, &pt);
    assert!(ok, "{err}");
    assert!(out.lines().count() > 3, "{out}");
}

#[test]
fn the_window_takes_the_binaries_of_a_raw_dump_and_opens_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let (pt, images) = raw_demo(dir.path());
    let mut h = Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.show(ui), App::new(None));
    let ctx = h.ctx.clone();
    h.state_mut().open(&pt, &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    let e = h.state().active_tab().unwrap().error().unwrap().to_string();
    assert!(
        e.contains("demo.pt") && e.contains("--raw IMAGE:ADDR"),
        "{e}"
    );
    h.get_by_label("Cannot open this file");
    // Something that is not IMAGE:ADDR is refused, with the reason.
    h.get_by_label("Raw image (IMAGE:ADDR)").click();
    h.run_steps(2);
    h.get_by_label("Raw image (IMAGE:ADDR)")
        .type_text("nonsense");
    h.run_steps(2);
    h.get_by_label("Add").click();
    h.run_steps(2);
    h.get_by_label_contains("is not FILE:ADDR");
    let form = h
        .state_mut()
        .active_tab_mut()
        .unwrap()
        .raw
        .as_mut()
        .unwrap();
    form.text.clear();
    for img in &images {
        h.get_by_label("Raw image (IMAGE:ADDR)").click();
        h.run_steps(2);
        h.get_by_label("Raw image (IMAGE:ADDR)").type_text(img);
        h.run_steps(2);
        h.get_by_label("Add").click();
        h.run_steps(2);
    }
    let form = h.state().active_tab().unwrap().raw.as_ref().unwrap();
    assert_eq!(form.pending.len(), images.len(), "{:?}", form.error);
    h.get_by_label("Open with these binaries").click();
    h.run_steps(2);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    let tab = h.state().active_tab().unwrap();
    assert!(tab.error().is_none(), "{:?}", tab.error());
    let model = tab.view().expect("a view").model().clone();
    assert!(model.span_count() > 100, "{} spans", model.span_count());
    // The form stays, folded, to change the binaries later.
    h.get_by_label_contains("Raw PT dump decoded with");
}

/// A raw dump whose one decode error goes away on a CPU with erratum
/// SKZ84 (a TMA with reserved bits set, which that CPU writes): FUP, a
/// corrupt TMA, FUP and TIP.PGD over 16 bytes of NOPs at 0x1000.
fn skz84_dump(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let image = dir.join("code.bin");
    std::fs::write(&image, [0x90u8; 16]).unwrap();
    let mut pt = psb_at_0x1000();
    // A TMA with its reserved bits set: no encoder writes one.
    pt.extend([0x02, 0x73, 1, 1, 1, 1, 0, 0]);
    write::ip_packet(&mut pt, IpPacket::Fup, 0x1004, IpCompression::Full);
    write::ip_packet(&mut pt, IpPacket::TipPgd, 0, IpCompression::Suppressed);
    let raw = dir.join("skz84.pt");
    std::fs::write(&raw, &pt).unwrap();
    (raw, image)
}

fn walk_errors(h: &Harness<'_, App>) -> usize {
    let tab = h.state().active_tab().unwrap();
    assert!(tab.error().is_none(), "{:?}", tab.error());
    let model = tab.view().expect("a view").model().clone();
    model.threads.iter().map(|t| t.walk.errors.len()).sum()
}

/// The window decodes as the CPU given (`--cpu`, or the raw dump's form),
/// working around that CPU's errata as `decode --cpu` does; a CPU box that
/// names no CPU says why and opens nothing.
#[test]
fn the_window_decodes_a_raw_dump_as_the_cpu_given() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, image) = skz84_dump(dir.path());
    let harness = |cpu: Option<&str>| {
        let mut app = App::new(None);
        app.decoding.raw_images = vec![(image.clone(), 0x1000)];
        app.decoding.cpu = cpu.map(|c| c.parse().unwrap());
        let mut h = Harness::builder()
            .with_size([1280.0, 800.0])
            .build_ui_state(|ui, app: &mut App| app.show(ui), app);
        let ctx = h.ctx.clone();
        h.state_mut().open(&raw, &ctx);
        h.state_mut().active_tab_mut().unwrap().wait();
        h.run_steps(3);
        h
    };

    // As `ptscope --cpu 6/85 --raw …` opens it: the erratum is known.
    let h = harness(Some("6/85"));
    assert_eq!(walk_errors(&h), 0);
    h.get_by_label_contains("as on CPU 6/0x55/0");
    drop(h);

    // Without a CPU the corrupt TMA is an error, until the form names one.
    let mut h = harness(None);
    assert_eq!(walk_errors(&h), 1);
    h.get_by_label_contains("Raw PT dump decoded with 1 binary")
        .click();
    h.run_steps(3);
    let cpu_box = "CPU (FAMILY/MODEL[/STEPPING])";
    h.get_by_label(cpu_box).click();
    h.run_steps(2);
    h.get_by_label(cpu_box).type_text("skylake");
    h.run_steps(2);
    h.get_by_label("Open with these binaries").click();
    h.run_steps(3);
    h.get_by_label_contains("CPU: ");
    assert!(!h.state().active_tab().unwrap().is_loading());
    h.state_mut()
        .active_tab_mut()
        .unwrap()
        .raw
        .as_mut()
        .unwrap()
        .cpu = "6/85".into();
    h.run_steps(2);
    h.get_by_label("Open with these binaries").click();
    h.run_steps(2);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    assert_eq!(walk_errors(&h), 0);
    h.get_by_label_contains("as on CPU 6/0x55/0");
}

/// The window's `--cpu` is checked as `decode`'s is.
#[test]
fn the_window_refuses_a_cpu_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, _) = skz84_dump(dir.path());
    let (ok, _, err) = run(&["--cpu", "skylake"], &raw);
    assert!(!ok);
    assert!(err.contains("--cpu"), "{err}");
}

/// `decode --level insns --format json` of a raw dump `pt` with `images`
/// (file bytes, load address): each instruction's address.
fn listed(dir: &Path, pt: &[u8], images: &[(&[u8], u64)]) -> Vec<u64> {
    let raw = dir.join("listed.pt");
    std::fs::write(&raw, pt).unwrap();
    let mut cmd = ptscope();
    cmd.args([
        "decode",
        "--no-cache",
        "--level",
        "insns",
        "--format",
        "json",
    ]);
    for (i, (bytes, addr)) in images.iter().enumerate() {
        let file = dir.join(format!("image{i}.bin"));
        std::fs::write(&file, bytes).unwrap();
        cmd.arg("--raw")
            .arg(format!("{}:{addr:#x}", file.display()));
    }
    let out = cmd.arg(&raw).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["ip"].as_u64())
        .collect()
}

/// PSB+ with tracing on at 0x1000 in 64-bit mode.
fn psb_at_0x1000() -> Vec<u8> {
    psb_at(0x1000, 64)
}

/// PSB+ with tracing on at `ip` in `bits`-bit mode.
fn psb_at(ip: u64, bits: u32) -> Vec<u8> {
    let mut pt = write::PSB.to_vec();
    write::ip_packet(&mut pt, IpPacket::Fup, ip, IpCompression::Full);
    write::mode_exec(&mut pt, bits);
    pt.extend(write::PSBEND);
    pt
}

/// FUP `ip` (a 16-bit update) and TIP.PGD without an IP: tracing stops at
/// `ip`.
fn fup_and_pgd(pt: &mut Vec<u8>, ip: u64) {
    write::ip_packet(pt, IpPacket::Fup, ip, IpCompression::Update16);
    write::ip_packet(pt, IpPacket::TipPgd, 0, IpCompression::Suppressed);
}

/// The instruction listing reads what the walk reads: APX's JMPABS, which
/// the disassembler does not know, and an instruction whose bytes lie in
/// two raw images mapped back to back. Each was missing from the listing
/// while the walk went on past it.
#[test]
fn the_listing_has_jmpabs_and_an_instruction_across_two_images() {
    let dir = tempfile::tempdir().unwrap();
    // nop; jmpabs 0x1010; ...; 0x1010: nop. TIP 0x1010, then FUP 0x1011
    // and TIP.PGD: tracing stops after the second nop.
    let mut code = vec![0x90, 0xd5, 0x00, 0xa1];
    code.extend(0x1010u64.to_le_bytes());
    code.resize(0x10, 0xcc);
    code.push(0x90);
    let mut pt = psb_at_0x1000();
    write::ip_packet(&mut pt, IpPacket::Tip, 0x1010, IpCompression::Update32);
    fup_and_pgd(&mut pt, 0x1011);
    assert_eq!(
        listed(dir.path(), &pt, &[(&code, 0x1000)]),
        [0x1000, 0x1001, 0x1010]
    );
    let out = ptscope()
        .args(["decode", "--no-cache", "--level", "insns", "--raw"])
        .arg(format!(
            "{}:0x1000",
            dir.path().join("image0.bin").display()
        ))
        .arg(dir.path().join("listed.pt"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("jmpabs 0000000000001010h"), "{text}");

    // nop; jmp short 0x1004 (eb | 01: its displacement in the second
    // image); int3; 0x1004: nop. Then FUP 0x1005 and TIP.PGD.
    let mut pt = psb_at_0x1000();
    fup_and_pgd(&mut pt, 0x1005);
    assert_eq!(
        listed(
            dir.path(),
            &pt,
            &[(&[0x90, 0xeb], 0x1000), (&[0x01, 0xcc, 0x90], 0x1002)]
        ),
        [0x1000, 0x1001, 0x1004]
    );
}

/// Code that runs in 32-bit mode (MODE.Exec with CS.D set, CS.L clear) is
/// decoded as 32-bit code everywhere: `48 89 e5` is `dec eax; mov ebp,esp`
/// there (two instructions, as libipt decodes it), where 64-bit mode reads
/// one `mov rbp,rsp`. The instruction listing, its disassembly and both
/// engines' coarse pass (counting instructions: the dump has no timing)
/// agree on five instructions.
#[test]
fn code_run_in_32_bit_mode_is_decoded_as_32_bit_code() {
    let dir = tempfile::tempdir().unwrap();
    let code = [0x48, 0x89, 0xe5, 0x48, 0x89, 0xe5, 0x90];
    // PSB+ at 0x1000 in 32-bit mode, then FUP 0x1007 and TIP.PGD: tracing
    // stops after the nop.
    let mut pt = psb_at(0x1000, 32);
    fup_and_pgd(&mut pt, 0x1007);
    assert_eq!(
        listed(dir.path(), &pt, &[(&code, 0x1000)]),
        [0x1000, 0x1001, 0x1003, 0x1004, 0x1006]
    );
    let image = format!("{}:0x1000", dir.path().join("image0.bin").display());
    let dump = dir.path().join("listed.pt");
    let out = ptscope()
        .args(["decode", "--no-cache", "--level", "insns", "--raw", &image])
        .arg(&dump)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("dec eax") && text.contains("mov ebp,esp") && !text.contains("rbp"),
        "{text}"
    );
    for engine in ["ptscope", "libipt"] {
        let spans = crate::support::decode_json(&dump, &["--raw", &image, "--decoder", engine]);
        let end = spans.iter().map(|s| s.end).max();
        assert_eq!(end, Some(5), "{engine}: {spans:?}");
    }
}

/// A listing with no code to read says why, on stderr and in the text,
/// instead of printing a thread's header over nothing.
#[test]
fn a_listing_without_readable_code_says_why() {
    let dir = tempfile::tempdir().unwrap();
    // The code is mapped where the trace never goes: tracing is on at
    // 0x1000 until a FUP at 0x1007 and TIP.PGD.
    let code = [0x90; 8];
    let mut pt = psb_at_0x1000();
    fup_and_pgd(&mut pt, 0x1007);
    listed(dir.path(), &pt, &[(&code, 0x1000)]);
    let image = format!("{}:0x9000", dir.path().join("image0.bin").display());
    let out = ptscope()
        .args(["decode", "--no-cache", "--level", "insns", "--raw", &image])
        .arg(dir.path().join("listed.pt"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        text.contains("# no instruction could be listed: no memory mapped"),
        "{text}"
    );
    assert!(
        err.contains("listed.pt: thread 0: no instruction could be listed"),
        "{err}"
    );
}

/// `packets --cpu F/M` lists a raw dump as that CPU wrote it: SKZ84's
/// corrupt TMA is named and skipped, where without the CPU it is an
/// unknown packet and the listing resyncs past everything after it. A
/// CPU number picks a per-CPU buffer, which a raw dump has none of.
#[test]
fn packets_of_a_raw_dump_work_around_the_cpu_given() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, _) = skz84_dump(dir.path());
    let (ok, plain, err) = run(&["packets"], &raw);
    assert!(ok, "{err}");
    assert!(plain.contains("error: unknown packet"), "{plain}");
    assert!(!plain.contains("tip.pgd"), "{plain}");
    let (ok, out, err) = run(&["packets", "--cpu", "6/85"], &raw);
    assert!(ok, "{err}");
    assert!(
        out.contains("[SKZ84: 8 corrupted byte(s) skipped]") && out.contains("tip.pgd"),
        "{out}"
    );
    let (ok, _, err) = run(&["packets", "--cpu", "2"], &raw);
    assert!(!ok && err.contains("no CPU buffers"), "{err}");
}

/// A raw dump decoded without `--cpu` whose errors an erratum explains
/// says to give the CPU, with either engine (and the libipt engine says
/// where libipt resumes after an error); given the CPU, the errors and
/// the advice are gone.
#[test]
fn decode_errors_of_a_raw_dump_without_a_cpu_say_to_give_one() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, image) = skz84_dump(dir.path());
    let image = format!("{}:0x1000", image.display());
    for engine in ["ptscope", "libipt"] {
        let (ok, _, err) = run(&["decode", "--decoder", engine, "--raw", &image], &raw);
        assert!(ok, "{err}");
        assert!(
            err.contains("1 decode error(s), and the dump records no CPU")
                && err.contains("--cpu FAMILY/MODEL"),
            "{engine}: {err}"
        );
        // libipt resumes only at a PSB, and the libipt engine says so.
        assert_eq!(
            err.contains("libipt resumes only at the next PSB"),
            engine == "libipt",
            "{engine}: {err}"
        );
        let (ok, _, err) = run(
            &[
                "decode",
                "--decoder",
                engine,
                "--cpu",
                "6/85",
                "--raw",
                &image,
            ],
            &raw,
        );
        assert!(ok && !err.contains("records no CPU"), "{engine}: {err}");
    }
}

/// A raw dump without timing opens in the window on the instruction axis:
/// the toolbar says so and the model counts instructions, as the CLI's.
#[test]
fn the_window_lays_an_untimed_raw_dump_on_the_instruction_axis() {
    let dir = tempfile::tempdir().unwrap();
    let code = [0x48, 0x89, 0xe5, 0x48, 0x89, 0xe5, 0x90];
    let mut pt = psb_at_0x1000();
    fup_and_pgd(&mut pt, 0x1007);
    listed(dir.path(), &pt, &[(&code, 0x1000)]);
    let mut app = App::new(None);
    app.decoding.raw_images = vec![(dir.path().join("image0.bin"), 0x1000)];
    let mut h = Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.show(ui), app);
    let ctx = h.ctx.clone();
    h.state_mut().open(&dir.path().join("listed.pt"), &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    let tab = h.state().active_tab().unwrap();
    assert!(tab.error().is_none(), "{:?}", tab.error());
    let model = tab.view().expect("a view").model().clone();
    assert_eq!(model.unit, ptscope_model::TimeUnit::Insns);
    assert_eq!(model.time_range().map(|r| r.1 - r.0), Some(3));
    h.get_by_label_contains(ptscope_viewer::UNTIMED_LABEL);
}
