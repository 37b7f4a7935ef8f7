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
//! - `api` declares the part of QEMU's plugin API used, and holds the
//!   plugin's only `unsafe` code.
//! - `blocks` turns each translation block into what the PT unit needs.
//! - `thread` keeps each thread's PT unit and virtual clock, and retires
//!   each block as it runs.
//! - `syscalls` follows system calls: trips into the kernel, new and
//!   ending threads, mappings, futex wake-ups, `execve` and the exit.
//! - `process` keeps what the threads share: mappings, sideband, the
//!   trigger's address.
//! - `coordinator` takes snapshots across threads and talks to ptscope
//!   through the capture directory ([`ptscope_capture::qemu::wire`]).

#[allow(unsafe_code)]
mod api;
mod blocks;
mod coordinator;
mod process;
mod syscalls;
mod thread;

/// Sets the plugin up from its arguments (`dir=DIRECTORY`, the capture
/// directory ptscope made).
fn install(args: &[String]) -> Result<(), String> {
    let dir = args
        .iter()
        .find_map(|a| a.strip_prefix("dir="))
        .ok_or("no dir= argument names the capture directory")?;
    process::start(std::path::Path::new(dir))
}
