//! Binaries a trace maps that are not at their paths (a perf.data from
//! another machine): `info` names them with the remedies, `--binaries DIR`
//! supplies them so that the file decodes exactly as with them in place,
//! and the window offers the same as a folder picker, decodes again, and
//! saves a snapshot that carries what was found.

use std::path::{Path, PathBuf};

use crate::support::{build, extract, ptscope, record, run_ok};
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use ptscope::gui::App;

/// A plain perf.data of calls.c, recorded with the emulated backend.
struct Recorded {
    data: PathBuf,
    /// The program, at its recorded path.
    exe: PathBuf,
    /// The snapshot the perf.data comes from.
    snap: PathBuf,
    /// The snapshot untarred: its build-id cache, in perf's layout.
    cache: PathBuf,
}

fn plain_perf_data(dir: &Path) -> Recorded {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = build(&bin, "calls.c");
    let (snap, _) = record(dir, "calls", &[], &[exe.to_str().unwrap()]);
    let data = dir.join("calls.data");
    let cache = extract(&snap, dir);
    std::fs::copy(cache.join("perf.data"), &data).unwrap();
    Recorded {
        data,
        exe,
        snap,
        cache,
    }
}

/// `ptscope ARGS` with a `$HOME` of its own, whose empty `~/.debug` finds
/// nothing: only the paths and the directories given count. Its stdout.
fn run(home: &Path, args: &[&str]) -> String {
    let mut cmd = ptscope();
    cmd.env("HOME", home)
        .env_remove("DEBUGINFOD_URLS")
        .args(args);
    let out = run_ok(&mut cmd, &format!("ptscope {args:?}"));
    String::from_utf8(out.stdout).unwrap()
}

fn decode(home: &Path, data: &Path, extra: &[&str]) -> String {
    let mut args = vec!["decode", "--format", "json"];
    args.extend(extra);
    args.push(data.to_str().unwrap());
    run(home, &args)
}

#[test]
fn binaries_supplied_by_directory_decode_as_at_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let Recorded {
        data,
        exe,
        snap,
        cache,
    } = plain_perf_data(dir.path());
    let exe_s = exe.to_str().unwrap();
    let data_s = data.to_str().unwrap();

    let in_place = decode(&home, &data, &[]);
    assert!(in_place.contains("\"name\":\"fib\""), "{in_place}");
    let listed = |info: &str| {
        info.split_once("  missing: ")
            .is_some_and(|(_, m)| m.contains(&format!("\n    {exe_s}\n")))
    };
    let info = run(&home, &["info", data_s]);
    assert!(!listed(&info), "{info}");

    // The program moves away, a few directories down, as copied from
    // another machine.
    let supplied = dir.path().join("from-the-other-machine");
    let moved = supplied.join("usr/local/bin/calls");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&exe, &moved).unwrap();

    let info = run(&home, &["info", data_s]);
    assert!(listed(&info), "{info}");
    let missing = info.split_once("  missing: ").unwrap().1;
    for how in ["--binaries DIR", "--debug-dir DIR", "DEBUGINFOD_URLS"] {
        assert!(missing.contains(how), "{how} not offered:\n{info}");
    }
    let without = decode(&home, &data, &[]);
    assert_ne!(
        without, in_place,
        "the program's code was decoded without it"
    );
    assert!(!without.contains("\"name\":\"fib\""));

    let supplied_s = supplied.to_str().unwrap();
    let with = decode(&home, &data, &["--binaries", supplied_s]);
    assert_eq!(
        with, in_place,
        "decoded otherwise than with the program in place"
    );
    // Found by name at its path under the directory, as under a sysroot.
    let info = run(&home, &["info", "--binaries", supplied_s, data_s]);
    assert!(
        info.contains(&format!("-> {}", moved.display())),
        "not found where it was moved:\n{info}"
    );
    assert!(!listed(&info), "{info}");
    // The snapshot's own build-id cache, untarred (perf's layout, as
    // `perf archive` packs it): the program and the vdso by build id, so
    // the perf.data decodes as the snapshot does.
    let with_cache = decode(&home, &data, &["--binaries", cache.to_str().unwrap()]);
    assert!(
        with_cache == decode(&home, &snap, &[]),
        "decoded otherwise than the snapshot"
    );
    let info = run(
        &home,
        &["info", "--binaries", cache.to_str().unwrap(), data_s],
    );
    assert!(!info.contains("  missing: "), "{info}");
}

/// The window names the missing program with the remedies; a folder
/// chosen (injected here: no native dialog opens in a test) is searched,
/// the file decodes again with its names, and Save as writes a snapshot
/// that carries the program, so that it opens with names where the
/// program is nowhere.
#[test]
fn the_window_lists_missing_binaries_and_takes_a_folder_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let Recorded { data, exe, .. } = plain_perf_data(dir.path());
    let supplied = dir.path().join("supplied");
    std::fs::create_dir_all(&supplied).unwrap();
    let moved = supplied.join("calls");
    std::fs::rename(&exe, &moved).unwrap();

    let mut h = Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.show(ui), App::new(None));
    let ctx = h.ctx.clone();
    h.state_mut().open(&data, &ctx);
    h.state_mut().active_tab_mut().unwrap().wait();
    h.run_steps(3);
    fn view<'h>(h: &'h Harness<'_, App>) -> &'h ptscope_viewer::TraceView {
        h.state().active_tab().unwrap().view().expect("a view")
    }
    let model = view(&h).model().clone();
    let exe_s = exe.to_str().unwrap().to_string();
    assert!(
        model.missing_binaries.contains(&exe_s),
        "{:?}",
        model.missing_binaries
    );
    assert!(view(&h).find_span("fib").is_none());
    h.get_by_label_contains("not found: ");
    h.get_by_label(&exe_s);
    h.get_by_label("--binaries DIR");
    h.get_by_label("--debug-dir DIR");
    h.get_by_label("DEBUGINFOD_URLS");

    let chosen = supplied.clone();
    h.state_mut().pick_folder = Box::new(move || Some(chosen.clone()));
    h.get_by_label("Choose a folder of binaries or debug files…")
        .click();
    h.run_steps(2);
    let tab = h.state_mut().active_tab_mut().unwrap();
    assert_eq!(tab.names.binary_dirs, std::slice::from_ref(&supplied));
    tab.wait();
    h.run_steps(3);
    let model = view(&h).model().clone();
    assert!(
        !model.missing_binaries.contains(&exe_s),
        "{:?}",
        model.missing_binaries
    );
    assert!(view(&h).find_span("fib").is_some(), "fib is not named");
    assert!(
        h.query_by_label(&exe_s).is_none(),
        "still listed as missing"
    );

    // Save as carries the program, at its build id.
    let saved = dir.path().join("saved.ptscope");
    let notes = h.state().save_active_as(&saved).unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    let snap = ptscope_formats::snapshot::Snapshot::open(&saved).unwrap();
    let trace = snap.trace().unwrap();
    let id = trace
        .mmaps
        .iter()
        .find(|m| m.path == exe_s)
        .and_then(|m| m.build_id.clone())
        .expect("the program's mapping has a build id");
    let carried = snap
        .buildid_dir()
        .unwrap()
        .join(ptscope_formats::buildid::cache_path(&id, false));
    assert_eq!(
        std::fs::read(&carried).unwrap(),
        std::fs::read(&moved).unwrap()
    );
    // Opened with the program nowhere, it decodes as the window did.
    std::fs::remove_file(&moved).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let from_snapshot = decode(&home, &saved, &[]);
    assert!(
        from_snapshot.contains("\"name\":\"fib\""),
        "{from_snapshot}"
    );
    let info = run(&home, &["info", saved.to_str().unwrap()]);
    assert!(info.contains("(in snapshot)"), "{info}");
}
