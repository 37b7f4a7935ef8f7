//! The part of QEMU's TCG plugin API (`qemu-plugin.h`, API version 1, as
//! QEMU 7.2 ships it) that the plugin uses, declared here rather than
//! through a binding crate. QEMU's executable exports the functions; the
//! plugin looks each one up when it is installed, so a QEMU that lacks
//! one gets a clear refusal instead of a failed load.
//!
//! Everything `unsafe` in the plugin is in this module: the exported
//! symbols QEMU looks for, the calls through the looked-up pointers, and
//! the conversions of the pointers QEMU hands to callbacks.
//!
//! The callbacks QEMU calls are thin trampolines: each converts what QEMU
//! passes and calls the plain, safe function of [`Hooks`] that the crate
//! root's `install` returned. This module thus names none of the modules
//! that handle the callbacks (they use it, to read guest memory or to
//! attach callbacks to a block), and so makes no import cycle with them.
//! It names [`Block`] only, the user data of a block's callback, so that
//! the pointer's conversion stays here.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use crate::blocks::Block;

/// The API version the plugin is written against (QEMU_PLUGIN_VERSION).
/// QEMU refuses to load a plugin whose version it does not support.
#[no_mangle]
pub static qemu_plugin_version: c_int = 1;

/// The plugin's id, as QEMU names it to `qemu_plugin_install`.
pub type PluginId = u64;

/// `qemu_info_t`: what QEMU tells the plugin about itself.
#[repr(C)]
pub struct QemuInfo {
    target_name: *const c_char,
    version_min: c_int,
    version_cur: c_int,
    system_emulation: bool,
    smp_vcpus: c_int,
    max_vcpus: c_int,
}

/// An opaque translation block handle, valid during the translation
/// callback only.
#[repr(C)]
pub struct RawTb {
    _private: [u8; 0],
}

/// An opaque instruction handle, likewise.
#[repr(C)]
pub struct RawInsn {
    _private: [u8; 0],
}

type VcpuUdataCb = extern "C" fn(c_uint, *mut c_void);
type TbTransCb = extern "C" fn(PluginId, *mut RawTb);
type UdataCb = extern "C" fn(PluginId, *mut c_void);
type SyscallCb = extern "C" fn(PluginId, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
type SyscallRetCb = extern "C" fn(PluginId, c_uint, i64, i64);
type SimpleCb = extern "C" fn(PluginId);

/// `QEMU_PLUGIN_CB_NO_REGS`: the callbacks read no registers.
const CB_NO_REGS: c_int = 0;
/// `QEMU_PLUGIN_MEM_R` | `QEMU_PLUGIN_MEM_W`.
const MEM_RW: c_int = 3;

type RegisterTbTrans = extern "C" fn(PluginId, TbTransCb);
type RegisterTbExec = extern "C" fn(*mut RawTb, VcpuUdataCb, c_int, *mut c_void);
type RegisterInsnExec = extern "C" fn(*mut RawInsn, VcpuUdataCb, c_int, *mut c_void);
type RegisterMem = extern "C" fn(*mut RawInsn, MemCb, c_int, c_int, *mut c_void);
type RegisterSyscall = extern "C" fn(PluginId, SyscallCb);
type RegisterSyscallRet = extern "C" fn(PluginId, SyscallRetCb);
type RegisterAtexit = extern "C" fn(PluginId, UdataCb, *mut c_void);
type Reset = extern "C" fn(PluginId, SimpleCb);
type TbNInsns = extern "C" fn(*const RawTb) -> usize;
type TbVaddr = extern "C" fn(*const RawTb) -> u64;
type TbGetInsn = extern "C" fn(*const RawTb, usize) -> *mut RawInsn;
type InsnData = extern "C" fn(*const RawInsn) -> *const c_void;
type InsnSize = extern "C" fn(*const RawInsn) -> usize;
type InsnVaddr = extern "C" fn(*const RawInsn) -> u64;

/// The API functions, looked up in the QEMU executable.
struct Api {
    register_tb_trans: RegisterTbTrans,
    register_tb_exec: RegisterTbExec,
    register_insn_exec: RegisterInsnExec,
    register_mem: RegisterMem,
    register_syscall: RegisterSyscall,
    register_syscall_ret: RegisterSyscallRet,
    register_atexit: RegisterAtexit,
    reset: Reset,
    tb_n_insns: TbNInsns,
    tb_vaddr: TbVaddr,
    tb_get_insn: TbGetInsn,
    insn_data: InsnData,
    insn_size: InsnSize,
    insn_vaddr: InsnVaddr,
}

/// A memory callback: vCPU, `qemu_plugin_meminfo_t`, address, user data.
type MemCb = extern "C" fn(c_uint, u32, u64, *mut c_void);

static API: OnceLock<(PluginId, Api)> = OnceLock::new();

/// What the plugin does at each callback, in safe Rust: the crate root
/// fills it with the modules' functions at install, and the trampolines
/// below call them.
pub struct Hooks {
    /// QEMU translates a block.
    pub translate: fn(&Tb),
    /// A block runs, with the [`Block`] given to [`Tb::on_exec`].
    pub block: fn(&'static Block),
    /// The instruction at an address is about to run ([`Tb::on_insn`]).
    pub insn: fn(u64),
    /// A call or return accessed the stack at an address
    /// ([`Tb::on_memory`]).
    pub stack_access: fn(u64),
    /// A thread enters a system call: its number and six arguments.
    pub syscall: fn(i64, [u64; 6]),
    /// A thread returns from a system call: its number and result.
    pub syscall_ret: fn(i64, i64),
    /// The process is ending.
    pub exit: fn(),
}

/// Set at install, before any callback is registered, and never again.
static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// Looks up `name` in the process (QEMU's executable exports the API).
fn lookup(name: &CStr) -> Result<*mut c_void, String> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only
    // reads the loaded objects' symbol tables.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if p.is_null() {
        Err(format!(
            "this QEMU has no {} in its plugin API",
            name.to_string_lossy()
        ))
    } else {
        Ok(p)
    }
}

macro_rules! api_fn {
    ($name:literal as $ty:ty) => {{
        let p = lookup($name)?;
        // SAFETY: the symbol is QEMU's API function of that name, whose C
        // signature (qemu-plugin.h, API version 1) the type spells;
        // function and data pointers have one size on x86-64.
        unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
    }};
}

fn load_api() -> Result<Api, String> {
    Ok(Api {
        register_tb_trans: api_fn!(c"qemu_plugin_register_vcpu_tb_trans_cb" as RegisterTbTrans),
        register_tb_exec: api_fn!(c"qemu_plugin_register_vcpu_tb_exec_cb" as RegisterTbExec),
        register_insn_exec: api_fn!(c"qemu_plugin_register_vcpu_insn_exec_cb" as RegisterInsnExec),
        register_mem: api_fn!(c"qemu_plugin_register_vcpu_mem_cb" as RegisterMem),
        register_syscall: api_fn!(c"qemu_plugin_register_vcpu_syscall_cb" as RegisterSyscall),
        register_syscall_ret: api_fn!(
            c"qemu_plugin_register_vcpu_syscall_ret_cb" as RegisterSyscallRet
        ),
        register_atexit: api_fn!(c"qemu_plugin_register_atexit_cb" as RegisterAtexit),
        reset: api_fn!(c"qemu_plugin_reset" as Reset),
        tb_n_insns: api_fn!(c"qemu_plugin_tb_n_insns" as TbNInsns),
        tb_vaddr: api_fn!(c"qemu_plugin_tb_vaddr" as TbVaddr),
        tb_get_insn: api_fn!(c"qemu_plugin_tb_get_insn" as TbGetInsn),
        insn_data: api_fn!(c"qemu_plugin_insn_data" as InsnData),
        insn_size: api_fn!(c"qemu_plugin_insn_size" as InsnSize),
        insn_vaddr: api_fn!(c"qemu_plugin_insn_vaddr" as InsnVaddr),
    })
}

fn api() -> &'static (PluginId, Api) {
    API.get().expect("the plugin API is looked up at install")
}

fn hooks() -> &'static Hooks {
    HOOKS
        .get()
        .expect("the hooks are set at install, before any callback is registered")
}

/// QEMU's entry point into the plugin: checks the API, reads the
/// arguments and installs the callbacks.
///
/// # Safety
/// Called by QEMU only, with `info` valid for the call and `argv` holding
/// `argc` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    info: *const QemuInfo,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    // SAFETY: QEMU passes a valid qemu_info_t for the duration of the call.
    let info = unsafe { &*info };
    if info.system_emulation {
        eprintln!("ptscope: the plugin traces user-mode emulation (qemu-x86_64) only");
        return 1;
    }
    let mut args = Vec::new();
    for i in 0..argc.max(0) as usize {
        // SAFETY: argv holds argc valid C strings, alive as long as the plugin.
        let arg = unsafe { CStr::from_ptr(*argv.add(i)) };
        args.push(arg.to_string_lossy().into_owned());
    }
    // SAFETY: the target name is a static C string of QEMU's.
    let target = unsafe { CStr::from_ptr(info.target_name) }.to_string_lossy();
    if target != "x86_64" {
        eprintln!("ptscope: the plugin traces x86-64 programs, not {target}");
        return 1;
    }
    let table = match load_api() {
        Ok(table) => table,
        Err(e) => {
            eprintln!("ptscope: {e}: QEMU 7.2 or a later 7.x/8.x is needed");
            return 1;
        }
    };
    if API.set((id, table)).is_err() {
        return 1;
    }
    match crate::install(&args) {
        Ok(callbacks) => {
            if HOOKS.set(callbacks).is_err() {
                return 1;
            }
            let (id, api) = api();
            (api.register_tb_trans)(*id, on_translate);
            (api.register_syscall)(*id, on_syscall);
            (api.register_syscall_ret)(*id, on_syscall_ret);
            (api.register_atexit)(*id, on_atexit, std::ptr::null_mut());
            0
        }
        Err(e) => {
            eprintln!("ptscope: the QEMU plugin cannot start: {e}");
            1
        }
    }
}

/// A translation block being translated: its instructions' addresses and
/// bytes, and the callbacks to attach to it.
pub struct Tb {
    raw: *mut RawTb,
}

impl Tb {
    pub fn vaddr(&self) -> u64 {
        (api().1.tb_vaddr)(self.raw)
    }

    pub fn n_insns(&self) -> usize {
        (api().1.tb_n_insns)(self.raw)
    }

    fn insn(&self, i: usize) -> *mut RawInsn {
        (api().1.tb_get_insn)(self.raw, i)
    }

    /// The address of instruction `i`.
    pub fn insn_vaddr(&self, i: usize) -> u64 {
        (api().1.insn_vaddr)(self.insn(i))
    }

    /// The size QEMU gives instruction `i`: the bytes its translator read.
    pub fn insn_size(&self, i: usize) -> usize {
        (api().1.insn_size)(self.insn(i))
    }

    /// The bytes of instruction `i`, copied out (QEMU's copy lives only
    /// during the callback).
    pub fn insn_bytes(&self, i: usize) -> Vec<u8> {
        let api = &api().1;
        let insn = self.insn(i);
        let len = (api.insn_size)(insn);
        let data = (api.insn_data)(insn) as *const u8;
        if data.is_null() {
            return Vec::new();
        }
        // SAFETY: QEMU's instruction data holds insn_size bytes while the
        // translation callback runs.
        unsafe { std::slice::from_raw_parts(data, len) }.to_vec()
    }

    /// Calls [`Hooks::block`] with `block` each time this block executes.
    pub fn on_exec(&self, block: &'static Block) {
        let udata = block as *const Block as *mut c_void;
        (api().1.register_tb_exec)(self.raw, on_exec, CB_NO_REGS, udata);
    }

    /// Calls [`Hooks::insn`] with the address of instruction `i` each time
    /// it is about to execute.
    pub fn on_insn(&self, i: usize) {
        let vaddr = self.insn_vaddr(i);
        (api().1.register_insn_exec)(self.insn(i), on_insn, CB_NO_REGS, vaddr as *mut c_void);
    }

    /// Calls [`Hooks::stack_access`] with each memory address instruction
    /// `i` accesses (a call's push, a return's pop).
    pub fn on_memory(&self, i: usize) {
        (api().1.register_mem)(
            self.insn(i),
            on_memory,
            CB_NO_REGS,
            MEM_RW,
            std::ptr::null_mut(),
        );
    }
}

/// Removes every callback: the program runs on at QEMU's own speed.
pub fn reset() {
    let (id, api) = api();
    (api.reset)(*id, on_reset);
}

/// Reads `len` bytes of guest memory at `addr`. In user mode a guest
/// address is its host address (QEMU maps the guest without an offset
/// on a 64-bit host), so this is a plain read, through process_vm_readv
/// so that an unmapped address is an error rather than a fault.
pub fn read_guest(addr: u64, buf: &mut [u8]) -> bool {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: process_vm_readv on our own pid writes at most buf.len()
    // bytes into buf and reports a bad remote address as an error.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == buf.len() as isize
}

extern "C" fn on_translate(_id: PluginId, tb: *mut RawTb) {
    (hooks().translate)(&Tb { raw: tb });
}

extern "C" fn on_exec(_vcpu: c_uint, udata: *mut c_void) {
    // SAFETY: the user data is the &'static Block `Tb::on_exec` registered.
    let block: &'static Block = unsafe { &*(udata as *const Block) };
    (hooks().block)(block);
}

extern "C" fn on_insn(_vcpu: c_uint, udata: *mut c_void) {
    (hooks().insn)(udata as u64);
}

extern "C" fn on_memory(_vcpu: c_uint, _info: u32, vaddr: u64, _udata: *mut c_void) {
    (hooks().stack_access)(vaddr);
}

#[allow(clippy::too_many_arguments)]
extern "C" fn on_syscall(
    _id: PluginId,
    _vcpu: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    a6: u64,
    _a7: u64,
    _a8: u64,
) {
    (hooks().syscall)(num, [a1, a2, a3, a4, a5, a6]);
}

extern "C" fn on_syscall_ret(_id: PluginId, _vcpu: c_uint, num: i64, ret: i64) {
    (hooks().syscall_ret)(num, ret);
}

extern "C" fn on_atexit(_id: PluginId, _udata: *mut c_void) {
    (hooks().exit)();
}

extern "C" fn on_reset(_id: PluginId) {}
