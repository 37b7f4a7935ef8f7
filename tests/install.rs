//! `scripts/install`, as a user runs it, and the installed binary on its
//! own: with the checkout hidden from it, it still opens the bundled demo.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{check_png, run_ok, which, Xvfb};

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// Installs the binary under test with `scripts/install --binary`, as the
/// script installs a freshly built one.
fn install(prefix: &Path) -> String {
    let out = run_ok(
        Command::new(checkout().join("scripts/install"))
            .arg("--prefix")
            .arg(prefix)
            .arg("--binary")
            .arg(env!("CARGO_BIN_EXE_ptscope")),
        "scripts/install",
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn install_puts_the_binary_desktop_entry_icon_and_mime_type_under_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    // A prefix with a space, as a user's may have.
    let prefix = dir.path().join("my prefix");
    let said = install(&prefix);
    let bin = prefix.join("bin/ptscope");
    assert!(said.contains(&bin.display().to_string()), "{said}");
    let mode = std::os::unix::fs::PermissionsExt::mode(&bin.metadata().unwrap().permissions());
    assert_eq!(mode & 0o111, 0o111, "the binary is executable");
    let share = prefix.join("share");
    let desktop = std::fs::read_to_string(share.join("applications/ptscope.desktop")).unwrap();
    assert!(
        desktop.contains(&format!("\nExec=\"{}\" %F\n", bin.display())),
        "the entry runs the installed binary: {desktop}"
    );
    assert!(desktop.contains("\nMimeType=application/x-ptscope;\n"));
    assert!(desktop.contains("\nIcon=ptscope\n"));
    // The desktop's own validator judges the entry.
    let validate = which("desktop-file-validate").expect("desktop-file-utils is installed");
    run_ok(
        Command::new(validate).arg(share.join("applications/ptscope.desktop")),
        "desktop-file-validate",
    );
    let icon =
        std::fs::read_to_string(share.join("icons/hicolor/scalable/apps/ptscope.svg")).unwrap();
    assert!(icon.contains("<svg"));
    // update-mime-database (shared-mime-info) compiled the type: a .ptscope
    // file is now known by its glob.
    let compiled = std::fs::read_to_string(share.join("mime/application/x-ptscope.xml"))
        .expect("update-mime-database compiled the MIME type");
    assert!(compiled.contains("*.ptscope"), "{compiled}");
    let globs = std::fs::read_to_string(share.join("mime/globs2")).unwrap();
    assert!(
        globs
            .lines()
            .any(|l| l.ends_with(":application/x-ptscope:*.ptscope")),
        "{globs}"
    );
    // Installing again over it is fine.
    install(&prefix);
}

#[test]
fn install_refuses_an_unknown_argument() {
    let out = Command::new(checkout().join("scripts/install"))
        .arg("--prefx")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--prefx"));
}

/// The installed binary with the checkout out of its sight (an empty
/// tmpfs mounted over it in a mount namespace of its own) opens the demo,
/// draws it and takes a screenshot: the demo comes from the binary itself.
#[test]
fn the_installed_binary_opens_the_demo_with_the_checkout_moved_away() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    install(&prefix);
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let shot = dir.path().join("demo.png");
    let xvfb = Xvfb::start();
    let checkout = checkout();
    // The checkout's own path must still be hidden after the mount: the
    // prefix and the home are outside it.
    assert!(!prefix.starts_with(&checkout) && !home.starts_with(&checkout));
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs none \"$1\" && test -z \"$(ls -A \"$1\")\" && shift && exec \"$@\"")
        .arg("sh")
        .arg(&checkout)
        .arg(prefix.join("bin/ptscope"))
        .arg("--screenshot")
        .arg(&shot)
        .current_dir(dir.path())
        .env("HOME", &home)
        .env_remove("XDG_CACHE_HOME");
    xvfb.display_for(&mut cmd, dir.path());
    run_ok(&mut cmd, "the installed ptscope, with the checkout hidden");
    drop(xvfb);
    check_png(&shot);
    // It unpacked the demo into the user's cache, source and all, and kept
    // its decoded model there.
    let cache = home.join(".cache/ptscope");
    let models = cache.join("models");
    assert!(
        std::fs::read_dir(&models).is_ok_and(|mut d| d.next().is_some()),
        "no model kept in {}",
        models.display()
    );
    let unpacked: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| *p != models)
        .collect();
    assert_eq!(unpacked.len(), 1, "{unpacked:?}");
    assert!(unpacked[0].join("demo.ptscope").is_file());
    assert!(unpacked[0].join("demo.c").is_file());
}

/// The installed binary captures under QEMU with the checkout hidden: its
/// plugin comes from the binary, unpacked into the user's cache.
#[test]
fn the_installed_binary_captures_under_qemu_with_the_checkout_moved_away() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    install(&prefix);
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let snap = dir.path().join("true.ptscope");
    let checkout = checkout();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs none \"$1\" && shift && exec \"$@\"")
        .arg("sh")
        .arg(&checkout)
        .arg(prefix.join("bin/ptscope"))
        .args(["record", "-q", "--backend", "qemu", "-o"])
        .arg(&snap)
        .args(["--", "/bin/true"])
        .current_dir(dir.path())
        .env("HOME", &home)
        .env_remove("XDG_CACHE_HOME");
    run_ok(&mut cmd, "the installed ptscope recording under QEMU");
    let meta = ptscope_formats::snapshot::Snapshot::read_metadata(&snap)
        .unwrap()
        .unwrap();
    assert_eq!(meta.backend, "qemu");
    assert!(meta.instructions > 10_000, "{}", meta.instructions);
    let plugins: Vec<_> = std::fs::read_dir(home.join(".cache/ptscope"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("qemu-plugin-"))
        .collect();
    assert_eq!(plugins.len(), 1, "{plugins:?}");
}
