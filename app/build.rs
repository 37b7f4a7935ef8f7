//! Builds ptscope's QEMU plugin (`capture/qemu-plugin`, a shared library
//! QEMU loads) and hands its path to the app, which embeds it, so that an
//! installed `ptscope` carries its plugin as it carries the demo.
//!
//! Cargo cannot make one crate's cdylib an input of another's build, so
//! this runs a second cargo on the plugin's package, always optimized (the
//! plugin runs once per executed block of the traced program), in a target
//! directory of its own beside the outer build's, where its own
//! incremental state makes a rebuild with nothing changed take a second.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest_dir.parent().unwrap().to_path_buf();
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let target_dir = plugin_target_dir(&out_dir);
    for watched in ["capture", "Cargo.lock", "Cargo.toml"] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--locked")
        .arg("--package")
        .arg("ptscope-qemu-plugin")
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's settings are not the plugin's: a wrapper (clippy,
    // a coverage tool) or flags for the app must not apply to it, and it
    // is built for the host as QEMU is.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let outer = key.starts_with("CARGO_")
            && !matches!(
                &*key,
                "CARGO_HOME" | "CARGO_NET_OFFLINE" | "CARGO_INCREMENTAL"
            );
        if outer
            || matches!(
                &*key,
                "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER" | "RUSTFLAGS" | "RUSTDOCFLAGS"
            )
        {
            cmd.env_remove(&*key);
        }
    }
    // The workspace's release profile (Cargo.toml) gives it one codegen
    // unit with link-time optimisation: the plugin's hot path (a callback
    // per executed block) crosses into the capture crate's PT unit on
    // every call, and only LTO inlines across crates.
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the QEMU plugin: {e}"));
    assert!(status.success(), "building the QEMU plugin failed (above)");
    let lib = target_dir.join("release/libptscope_qemu_plugin.so");
    assert!(
        lib.exists(),
        "the QEMU plugin was not built at {}",
        lib.display()
    );
    println!("cargo:rustc-env=PTSCOPE_QEMU_PLUGIN={}", lib.display());
}

/// `<target>/qemu-plugin`, beside the outer build's profiles: the target
/// directory is the nearest ancestor of OUT_DIR that cargo marked with
/// CACHEDIR.TAG. Else a directory inside OUT_DIR.
fn plugin_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|d| d.join("CACHEDIR.TAG").exists())
        .map(|t| t.join("qemu-plugin"))
        .unwrap_or_else(|| out_dir.join("qemu-plugin"))
}
