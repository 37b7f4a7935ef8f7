//! ptscope's QEMU plugin: on a machine without Intel PT, QEMU's user-mode
//! emulator (`qemu-x86_64`) runs the program, and this plugin, loaded into
//! it, writes the Intel PT packets a CPU would have written for the same
//! run, into one ring per thread, with the emulated backend's own PT unit
//! ([`ptscope_capture::emulated::hardware`]). QEMU runs the program at
//! hundreds of millions of instructions per second, where single-stepping
//! with ptrace manages tens of thousands.
//!
//! QEMU tells the plugin of every translation block it makes and, through
//! a callback registered on each, of every time one runs. A block ends at
//! every change of flow, so the address of the block that runs next says
//! how the last instruction of the one before went: taken or not, and
//! where to. That is all PT encodes.
//!
//! The modules, each after the ones it uses (only `api` and `blocks`, and
//! `process` and `thread`, name each other):
//! - `api` declares the part of QEMU's plugin API used, and holds the
//!   plugin's only `unsafe` code. Its callbacks call the `api::Hooks`
//!   that `install` hands it, so that it names none of the modules
//!   that handle them.
//! - `blocks` turns each translation block into what the PT unit needs,
//!   by what `blocks::Wanted` says to look for.
//! - `process` keeps what the threads share: mappings, sideband, the
//!   trigger's address, the snapshots being gathered.
//! - `thread` keeps each thread's PT unit and virtual clock, and retires
//!   each block as it runs. It asks for snapshots through the
//!   `thread::Snapshots` that `install` fills with the coordinator's
//!   functions.
//! - `coordinator` takes snapshots across threads and talks to ptscope
//!   through the capture directory ([`ptscope_capture::qemu::wire`]).
//! - `syscalls` follows system calls: trips into the kernel, new and
//!   ending threads, mappings, futex wake-ups, `execve` and the exit.
//!
//! This file wires them together: what a module would otherwise reach
//! up for is handed to it here, where naming every module makes no
//! cycle.

#[allow(unsafe_code)]
mod api;
mod blocks;
mod coordinator;
mod process;
mod syscalls;
mod thread;

/// Sets the plugin up from its arguments (`dir=DIRECTORY`, the capture
/// directory ptscope made), and returns the hooks for QEMU's callbacks,
/// which `api` registers once this succeeds.
fn install(args: &[String]) -> Result<api::Hooks, String> {
    let dir = args
        .iter()
        .find_map(|a| a.strip_prefix("dir="))
        .ok_or("no dir= argument names the capture directory")?;
    let snapshots = thread::Snapshots {
        answer: coordinator::answer,
        request: coordinator::request,
        reset_once: coordinator::reset_once,
    };
    process::start(std::path::Path::new(dir), snapshots)?;
    // The coordinator's threads read the shared state that `start` set up.
    coordinator::spawn()?;
    Ok(api::Hooks {
        translate,
        block: thread::on_block,
        insn: thread::on_insn,
        stack_access: thread::on_stack_access,
        syscall: syscalls::on_entry,
        syscall_ret: syscalls::on_return,
        exit: coordinator::on_exit,
    })
}

/// QEMU translates `tb`: its block is made by what the plugin looks for,
/// once the plugin is installed.
fn translate(tb: &api::Tb) {
    if let Some(plugin) = process::plugin() {
        blocks::translate(tb, &plugin.wanted());
    }
}
