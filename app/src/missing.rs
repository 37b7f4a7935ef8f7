//! Binaries a trace maps that cannot be found (a perf.data from another
//! machine, say): which, and how to supply them. `ptscope info` and the
//! window say the same remedies ([`remedies`]): `--binaries DIR` for the
//! binaries themselves (their code, and the names they carry),
//! `--debug-dir DIR` and debuginfod for their debug files (names and
//! lines). The window offers them as a folder picker ([`notice_ui`]),
//! decodes again with the folder added to both searches, and on Save as
//! adds what was found there to the snapshot ([`found_members`], in perf's
//! build-id cache layout).

use std::io::Write;
use std::path::{Path, PathBuf};

use eframe::egui;
use ptscope_formats::buildid;
use ptscope_formats::snapshot::Snapshot;

use crate::name_dirs::NameDirs;

/// The ways to supply what is missing, each as (how, what it does): the
/// same words in `info` and in the window.
pub fn remedies() -> Vec<(&'static str, String)> {
    let debuginfod = match std::env::var("DEBUGINFOD_URLS") {
        Ok(urls) if !urls.trim().is_empty() => format!("now {}", urls.trim()),
        _ => "now unset".into(),
    };
    vec![
        (
            "--binaries DIR",
            "a directory holding the binaries, searched by build id \
             (perf's .build-id/xx/yyyy…/elf, as `perf archive` packs them, the vdso too) \
             and by name: their code is decoded"
                .into(),
        ),
        (
            "--debug-dir DIR",
            "a directory of their debug files (.build-id/xx/yyyy….debug): \
             names and lines for the code that is found"
                .into(),
        ),
        (
            "DEBUGINFOD_URLS",
            format!("debuginfod servers to fetch debug files from ({debuginfod})"),
        ),
    ]
}

/// `info`'s account of the missing binaries and the remedies; nothing
/// when none is missing. `debug_dirs` are the ones given already.
pub fn write_remedies(
    out: &mut impl Write,
    missing: &[String],
    debug_dirs: &[PathBuf],
) -> std::io::Result<()> {
    if missing.is_empty() {
        return Ok(());
    }
    let n = missing.len();
    writeln!(
        out,
        "  missing: {n} binar{} in neither the snapshot, perf's build-id cache (~/.debug) \
         nor at {} path{}; {} code is not decoded:",
        if n == 1 { "y is" } else { "ies are" },
        if n == 1 { "its" } else { "their" },
        if n == 1 { "" } else { "s" },
        if n == 1 { "its" } else { "their" },
    )?;
    for m in missing {
        writeln!(out, "    {m}")?;
    }
    writeln!(
        out,
        "  to supply them (decode, stats, info and the window):"
    )?;
    for (how, what) in remedies() {
        writeln!(out, "    {how:<16} {what}")?;
    }
    for d in debug_dirs {
        writeln!(out, "    (searched with --debug-dir {})", d.display())?;
    }
    Ok(())
}

/// What the user supplied for `snap` in `dirs` that it does not carry,
/// as build-id cache members (name, file): each missing binary found in
/// a `--binaries` directory, and the debug file of any mapped binary found
/// in the user's directories. A mapping without a build id has no place
/// in the cache and is told in `notes`.
pub fn found_members(
    snap: &Snapshot,
    dirs: &NameDirs,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, PathBuf)>, ptscope_formats::FileError> {
    let trace = snap.trace()?;
    let search = std::sync::Arc::new(ptscope_debuginfo::Search {
        binary_dirs: dirs.binary_dirs.clone(),
        debug_dirs: dirs.debug_dirs.clone(),
        ..Default::default()
    });
    let lookup = ptscope_decoder::Lookup::new(Some(snap), Some(search.clone()));
    let carried = |name: &str| snap.buildid_dir().is_some_and(|d| d.join(name).is_file());
    let users = |p: &Path| {
        dirs.binary_dirs
            .iter()
            .chain(&dirs.debug_dirs)
            .any(|d| p.starts_with(d))
    };
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for m in trace.mmaps.iter().filter(|m| !m.kernel) {
        let vdso = m.path == "[vdso]";
        if (m.path.starts_with('[') && !vdso) || !seen.insert((m.build_id.clone(), m.path.clone()))
        {
            continue;
        }
        let id = m.build_id.as_deref().filter(|id| !id.is_empty());
        let binary =
            ptscope_decoder::find_binary(snap, &lookup, m.build_id.as_deref(), &m.path, notes);
        let Some(binary) = binary else { continue };
        let Some(id) = id else {
            if users(&binary) {
                notes.push(format!(
                    "{}: recorded without a build id, so the snapshot cannot carry it",
                    m.path
                ));
            }
            continue;
        };
        let elf = buildid::cache_path(id, vdso);
        if users(&binary) && !carried(&elf) {
            out.push((elf, binary.clone()));
        }
        let debug = buildid::debug_cache_path(id);
        if !vdso && !carried(&debug) {
            if let Some(found) = search.debug_file(&binary, &m.path, Some(id), notes) {
                if users(&found.path) {
                    out.push((debug, found.path));
                }
            }
        }
    }
    Ok(out)
}

/// Saves the file at `src` as the snapshot `dest` with what the user
/// supplied in `dirs` added to it; `Ok(false)` when there is nothing to
/// add (the caller copies the file as it is).
pub fn save_with_found(
    src: &Path,
    dest: &Path,
    dirs: &NameDirs,
    notes: &mut Vec<String>,
) -> Result<bool, ptscope_formats::FileError> {
    let snap = Snapshot::open(src)?;
    let members = found_members(&snap, dirs, notes)?;
    if members.is_empty() {
        return Ok(false);
    }
    let meta = ptscope_formats::snapshot::Metadata {
        format: ptscope_formats::snapshot::FORMAT_VERSION,
        backend: "perf.data".into(),
        trigger: "none".into(),
        stop: format!(
            "saved from {} with the binaries and debug files supplied",
            src.display()
        ),
        ..Default::default()
    };
    ptscope_formats::snapshot::rewrite_members(&snap, dest, &members, &meta)?;
    Ok(true)
}

/// The window's notice of missing binaries: which, the remedies, and a
/// button to choose a folder to search. `dirs` are the folders searched
/// so far; true when the user asks to choose one.
pub fn notice_ui(ui: &mut egui::Ui, missing: &[String], dirs: &NameDirs) -> bool {
    let n = missing.len();
    let mut pick = false;
    egui::CollapsingHeader::new(
        egui::RichText::new(format!(
            "{n} binar{} not found: {} code is not decoded",
            if n == 1 { "y" } else { "ies" },
            if n == 1 { "its" } else { "their" },
        ))
        .color(ui.visuals().warn_fg_color),
    )
    .id_salt("ptscope-missing-binaries")
    .default_open(true)
    .show(ui, |ui| {
        for m in missing {
            ui.monospace(m);
        }
        ui.add_space(4.0);
        ui.label("To supply them:");
        for (how, what) in remedies() {
            ui.horizontal_wrapped(|ui| {
                ui.monospace(how);
                ui.label(what);
            });
        }
        for d in &dirs.binary_dirs {
            ui.label(egui::RichText::new(format!("searched: {}", d.display())).weak());
        }
        pick = ui
            .button("Choose a folder of binaries or debug files…")
            .on_hover_text("Searched as --binaries and --debug-dir are; the file is decoded again")
            .clicked();
    });
    pick
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_names_each_missing_binary_and_every_remedy() {
        let mut out = Vec::new();
        write_remedies(&mut out, &[], &[]).unwrap();
        assert!(out.is_empty());
        write_remedies(&mut out, &["/gone/prog".into()], &[]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("missing: 1 binary"), "{text}");
        assert!(text.contains("    /gone/prog\n"), "{text}");
        for how in ["--binaries DIR", "--debug-dir DIR", "DEBUGINFOD_URLS"] {
            assert!(text.contains(how), "{text}");
        }
    }

    #[test]
    fn a_chosen_folder_is_searched_for_both_kinds_once() {
        let mut d = NameDirs::default();
        assert!(d.is_empty());
        d.add_folder(Path::new("/x"));
        d.add_folder(Path::new("/x"));
        assert_eq!(d.binary_dirs, [PathBuf::from("/x")]);
        assert_eq!(d.debug_dirs, [PathBuf::from("/x")]);
    }
}
