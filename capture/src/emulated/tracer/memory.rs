//! The memory module follows the traced process's address space. The
//! tracer reads each instruction from `/proc/PID/mem` (decoded once per
//! address and cached until the mappings change), and a PT decoder needs
//! to know what was mapped where, so every new executable mapping becomes
//! an MMAP2 sideband record and the `[vdso]`, which is in no file, is
//! copied out for the snapshot. An exec replaces all of it.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::Tracer;
use crate::error::CaptureError;
use crate::insn::{classify, ptwrite_operand, Insn, InsnClass};
use crate::procfs::{self, Mapping};
use crate::recording::SidebandEvent;

/// The mappings in `maps` a decoder needs and has not been told of: the
/// executable ones of files and the vDSO that are not in `known`.
fn new_exec_mappings(known: &[Mapping], maps: &[Mapping]) -> Vec<Mapping> {
    maps.iter()
        .filter(|m| m.exec && (m.is_file() || m.is_vdso()) && !known.contains(m))
        .cloned()
        .collect()
}

/// Whether syscall `nr` is one of the memory-management calls after which
/// the mappings are read again.
fn changes_mappings(nr: u64) -> bool {
    const MMAP: u64 = libc::SYS_mmap as u64;
    const MPROTECT: u64 = libc::SYS_mprotect as u64;
    const MUNMAP: u64 = libc::SYS_munmap as u64;
    const MREMAP: u64 = libc::SYS_mremap as u64;
    matches!(nr, MMAP | MPROTECT | MUNMAP | MREMAP)
}

impl Tracer {
    pub(super) fn open_mem(&mut self) {
        self.mem = File::open(format!("/proc/{}/mem", self.pid)).ok();
    }

    pub(super) fn decode_at(&mut self, tid: i32, ip: u64) -> Result<Insn, CaptureError> {
        if let Some(insn) = self.insn_cache.get(&ip) {
            return Ok(*insn);
        }
        let mut buf = [0u8; 16];
        let n = self.read_memory(ip, &mut buf)?;
        let insn = classify(ip, &buf[..n]).ok_or_else(|| {
            CaptureError::Invalid(format!(
                "thread {tid}: undecodable instruction at {ip:#x} ({:02x?})",
                &buf[..n]
            ))
        })?;
        self.insn_cache.insert(ip, insn);
        Ok(insn)
    }

    /// Reads the tracee's memory at `addr` into `buf`; how much was there
    /// (a read may stop at the end of a mapping).
    pub(super) fn read_memory(&self, addr: u64, buf: &mut [u8]) -> Result<usize, CaptureError> {
        let mem = self.mem.as_ref().ok_or_else(|| {
            CaptureError::Invalid(format!("cannot read the memory of process {}", self.pid))
        })?;
        let mut n = 0;
        while n < buf.len() {
            match mem.read_at(&mut buf[n..], addr + n as u64) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        Ok(n)
    }

    /// The PTWRITE `insn` at `ip` of thread `tid` with its operand read
    /// from the thread's registers and memory, as it is about to run.
    pub(super) fn with_ptwrite_operand(
        &self,
        tid: i32,
        ip: u64,
        mut insn: Insn,
    ) -> Result<Insn, CaptureError> {
        let InsnClass::PtWrite { bytes, .. } = insn.class else {
            return Ok(insn);
        };
        let regs = crate::emulated::ptrace::regs(tid)?;
        let mut code = [0u8; 16];
        let n = self.read_memory(ip, &mut code)?;
        let payload = ptwrite_operand(
            ip,
            &code[..n],
            |r| register(&regs, r),
            |addr, len| {
                let mut v = [0u8; 8];
                (self.read_memory(addr, &mut v[..len]).ok()? == len).then(|| u64::from_le_bytes(v))
            },
        )
        .ok_or_else(|| {
            CaptureError::Invalid(format!(
                "thread {tid}: cannot read the operand of the PTWRITE at {ip:#x}"
            ))
        })?;
        insn.class = InsnClass::PtWrite { payload, bytes };
        Ok(insn)
    }

    /// Re-reads the mappings and emits MMAP2 events for new executable ones.
    pub(super) fn refresh_maps(&mut self, tid: i32) {
        let Ok(maps) = procfs::read_maps(self.pid) else {
            return;
        };
        self.update_maps(tid, maps);
    }

    /// Takes `maps` as the process's mappings, seen by thread `tid`.
    fn update_maps(&mut self, tid: i32, maps: Vec<Mapping>) {
        let new = new_exec_mappings(&self.maps, &maps);
        if maps != self.maps {
            self.insn_cache.clear();
        }
        for m in new {
            if m.is_vdso() && self.vdso.is_none() {
                let mut buf = vec![0u8; m.len() as usize];
                if let Some(mem) = &self.mem {
                    if mem.read_exact_at(&mut buf, m.start).is_ok() {
                        self.vdso = Some((m.start, buf));
                    }
                }
            }
            self.emit(SidebandEvent::Mmap {
                pid: self.pid,
                tid,
                mapping: m,
            });
        }
        self.maps = maps;
        self.resolve_symbol();
        self.resolve_filter();
    }

    /// After an exec: the new image's memory, name and mappings.
    pub(super) fn exec_sideband(&mut self, tid: i32) {
        self.maps.clear();
        self.insn_cache.clear();
        self.vdso = None;
        self.open_mem();
        let comm = procfs::comm(self.pid, tid);
        self.emit(SidebandEvent::Comm {
            pid: self.pid,
            tid,
            comm,
            exec: true,
        });
        self.refresh_maps(tid);
    }

    /// After a syscall retired (the thread is out of traced code): pick up
    /// mapping changes. `orig_rax` is the syscall number.
    pub(super) fn after_syscall(&mut self, tid: i32, orig_rax: u64) {
        if !self.threads.contains_key(&tid) || self.thread_tracing(tid) {
            return;
        }
        // Only re-read the maps after memory-management calls.
        if changes_mappings(orig_rax) {
            self.refresh_maps(tid);
        }
    }
}

/// A 64-bit register's value in `regs`, as an instruction operand (or an
/// address's base or index) reads it; FS and GS give their bases.
fn register(regs: &libc::user_regs_struct, r: iced_x86::Register) -> Option<u64> {
    use iced_x86::Register as R;
    Some(match r {
        R::RAX => regs.rax,
        R::RBX => regs.rbx,
        R::RCX => regs.rcx,
        R::RDX => regs.rdx,
        R::RSI => regs.rsi,
        R::RDI => regs.rdi,
        R::RBP => regs.rbp,
        R::RSP => regs.rsp,
        R::R8 => regs.r8,
        R::R9 => regs.r9,
        R::R10 => regs.r10,
        R::R11 => regs.r11,
        R::R12 => regs.r12,
        R::R13 => regs.r13,
        R::R14 => regs.r14,
        R::R15 => regs.r15,
        R::RIP => regs.rip,
        R::FS => regs.fs_base,
        R::GS => regs.gs_base,
        R::None => 0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::InsnClass;

    /// `syscall`, then `nop`s, so that a 16-byte read stays inside.
    static CODE: [u8; 16] = [
        0x0f, 0x05, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
        0x90,
    ];
    /// `0x06` (push es) is not an instruction in 64-bit mode.
    static BAD: [u8; 16] = [0x06; 16];

    fn mapping(start: u64, exec: bool, path: &str) -> Mapping {
        Mapping {
            start,
            end: start + 0x1000,
            read: true,
            write: false,
            exec,
            offset: 0,
            dev_major: 8,
            dev_minor: 1,
            inode: 42,
            path: path.into(),
        }
    }

    fn mmaps(tr: &Tracer) -> Vec<u64> {
        tr.sideband
            .iter()
            .filter_map(|s| match &s.event {
                SidebandEvent::Mmap { mapping, .. } => Some(mapping.start),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_new_executable_file_and_vdso_mappings_are_announced() {
        let known = [mapping(0x1000, true, "/bin/a")];
        let maps = [
            mapping(0x1000, true, "/bin/a"),
            mapping(0x2000, true, "/lib/b.so"),
            mapping(0x3000, false, "/lib/b.so"),
            mapping(0x4000, true, "[vdso]"),
            mapping(0x5000, true, ""),
            mapping(0x6000, true, "[stack]"),
        ];
        let new: Vec<u64> = new_exec_mappings(&known, &maps)
            .iter()
            .map(|m| m.start)
            .collect();
        assert_eq!(new, [0x2000, 0x4000]);
    }

    #[test]
    fn memory_calls_are_the_ones_that_change_mappings() {
        for nr in [
            libc::SYS_mmap,
            libc::SYS_mprotect,
            libc::SYS_munmap,
            libc::SYS_mremap,
        ] {
            assert!(changes_mappings(nr as u64), "{nr}");
        }
        for nr in [libc::SYS_read, libc::SYS_futex, libc::SYS_brk] {
            assert!(!changes_mappings(nr as u64), "{nr}");
        }
    }

    #[test]
    fn new_mappings_become_mmap_records_and_drop_the_decoded_code() {
        let mut tr = Tracer::for_tests(false);
        tr.insn_cache
            .insert(0x1000, classify(0x1000, &[0x90]).unwrap());
        tr.update_maps(1, vec![mapping(0x1000, true, "/bin/a")]);
        assert_eq!(mmaps(&tr), [0x1000]);
        assert!(tr.insn_cache.is_empty());
        // The same mappings again: nothing new, the cache stays.
        tr.insn_cache
            .insert(0x1000, classify(0x1000, &[0x90]).unwrap());
        tr.update_maps(1, vec![mapping(0x1000, true, "/bin/a")]);
        assert_eq!(mmaps(&tr), [0x1000]);
        assert_eq!(tr.insn_cache.len(), 1);
        // A mapping going away changes the code but announces nothing.
        tr.update_maps(1, vec![]);
        assert_eq!(mmaps(&tr), [0x1000]);
        assert!(tr.insn_cache.is_empty());
        assert!(tr.maps.is_empty());
    }

    #[test]
    fn the_vdso_is_copied_out_once() {
        let mut tr = Tracer::for_tests(false);
        tr.mem = File::open("/proc/self/mem").ok();
        let start = CODE.as_ptr() as u64;
        let mut vdso = mapping(start, true, "[vdso]");
        vdso.end = start + CODE.len() as u64;
        tr.update_maps(1, vec![vdso]);
        assert_eq!(tr.vdso, Some((start, CODE.to_vec())));
        assert_eq!(mmaps(&tr), [start]);
    }

    #[test]
    fn instructions_are_read_from_memory_once() {
        let mut tr = Tracer::for_tests(false);
        let ip = CODE.as_ptr() as u64;
        let err = tr.decode_at(1, ip).unwrap_err().to_string();
        assert!(err.contains("cannot read the memory"), "{err}");
        tr.mem = File::open("/proc/self/mem").ok();
        let insn = tr.decode_at(1, ip).unwrap();
        assert_eq!((insn.class, insn.len), (InsnClass::KernelEntry, 2));
        assert_eq!(tr.decode_at(1, ip + 2).unwrap().class, InsnClass::Other);
        // Cached: no read needed the second time.
        tr.mem = None;
        assert_eq!(tr.decode_at(1, ip).unwrap().len, 2);
        tr.mem = File::open("/proc/self/mem").ok();
        let err = tr
            .decode_at(7, BAD.as_ptr() as u64)
            .unwrap_err()
            .to_string();
        assert!(err.contains("thread 7: undecodable instruction"), "{err}");
    }
}
