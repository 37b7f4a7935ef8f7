//! The libipt instruction decoder, called through `libipt-sys` directly.
//!
//! We do not use the `libipt` crate's wrapper: it panics on event types
//! added in libipt 2.1 (CFE/EVD event trace, iflags), drops the partial
//! instruction returned with an error, and truncates TNT-64 payloads. This
//! module is one of the few allowed to hold `unsafe`.

use std::ffi::CString;
use std::mem::{size_of, zeroed};
use std::path::Path;

use libipt_sys as sys;

/// A libipt error code with its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtError(pub i32);

impl PtError {
    pub fn is_eos(self) -> bool {
        self.0 == -(sys::pt_error_code_pte_eos as i32)
    }
}

impl std::fmt::Display for PtError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: pt_errstr returns a static NUL-terminated string for any code.
        let msg =
            unsafe { std::ffi::CStr::from_ptr(sys::pt_errstr((-self.0) as sys::pt_error_code)) };
        write!(f, "{} ({})", msg.to_string_lossy(), self.0)
    }
}

/// CPU and timing parameters for the decoder.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecoderConfig {
    pub family: u16,
    pub model: u8,
    pub stepping: u8,
    pub cpuid_0x15_eax: u32,
    pub cpuid_0x15_ebx: u32,
    pub mtc_freq: u8,
    pub nom_freq: u8,
}

/// One instruction as libipt reports it.
#[derive(Clone, Copy, Debug)]
pub struct DecodedInsn {
    pub ip: u64,
    pub size: u8,
    pub iclass: u32,
}

/// What a walk met besides instructions.
#[derive(Clone, Debug, Default)]
pub struct WalkStats {
    pub instructions: u64,
    /// Decode errors, each with the trace offset where it happened.
    pub errors: Vec<(u64, PtError)>,
    pub syncs: u64,
}

/// An instruction decoder over one PT buffer with its own image.
pub struct InsnDecoder<'a> {
    dec: *mut sys::pt_insn_decoder,
    image: *mut sys::pt_image,
    _buf: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> InsnDecoder<'a> {
    /// A decoder over `trace`; libipt reads the buffer in place.
    pub fn new(trace: &'a [u8], cfg: &DecoderConfig) -> Result<InsnDecoder<'a>, PtError> {
        // SAFETY: pt_config is plain data; we zero it, set size and the
        // buffer bounds (which `trace` keeps alive for 'a), and libipt copies
        // it at allocation.
        unsafe {
            let mut c: sys::pt_config = zeroed();
            c.size = size_of::<sys::pt_config>();
            c.begin = trace.as_ptr() as *mut u8;
            c.end = trace.as_ptr().add(trace.len()) as *mut u8;
            c.cpu.vendor = sys::pt_cpu_vendor_pcv_intel;
            c.cpu.family = cfg.family;
            c.cpu.model = cfg.model;
            c.cpu.stepping = cfg.stepping;
            if cfg.family != 0 {
                sys::pt_cpu_errata(&mut c.errata, &c.cpu);
            }
            c.cpuid_0x15_eax = cfg.cpuid_0x15_eax;
            c.cpuid_0x15_ebx = cfg.cpuid_0x15_ebx;
            c.mtc_freq = cfg.mtc_freq;
            c.nom_freq = cfg.nom_freq;
            let dec = sys::pt_insn_alloc_decoder(&c);
            if dec.is_null() {
                return Err(PtError(-(sys::pt_error_code_pte_nomem as i32)));
            }
            let image = sys::pt_image_alloc(std::ptr::null());
            if image.is_null() {
                sys::pt_insn_free_decoder(dec);
                return Err(PtError(-(sys::pt_error_code_pte_nomem as i32)));
            }
            let d = InsnDecoder {
                dec,
                image,
                _buf: std::marker::PhantomData,
            };
            let rc = sys::pt_insn_set_image(dec, image);
            if rc < 0 {
                return Err(PtError(rc));
            }
            Ok(d)
        }
    }

    /// Maps `size` bytes of `file` from `offset` at `vaddr`.
    pub fn add_file(
        &mut self,
        file: &Path,
        offset: u64,
        size: u64,
        vaddr: u64,
    ) -> Result<(), PtError> {
        let name = CString::new(file.as_os_str().as_encoded_bytes())
            .map_err(|_| PtError(-(sys::pt_error_code_pte_invalid as i32)))?;
        // SAFETY: image is live; name is a valid C string libipt copies.
        let rc = unsafe {
            sys::pt_image_add_file(
                self.image,
                name.as_ptr(),
                offset,
                size,
                std::ptr::null(),
                vaddr,
            )
        };
        if rc < 0 {
            Err(PtError(rc))
        } else {
            Ok(())
        }
    }

    fn offset(&self) -> u64 {
        let mut off = 0u64;
        // SAFETY: dec is live; off is a valid out-pointer.
        unsafe { sys::pt_insn_get_offset(self.dec, &mut off) };
        off
    }

    /// Walks every instruction from the first PSB to the end, resyncing at
    /// the next PSB after an error. Instructions libipt returns together
    /// with an error are kept.
    pub fn walk(&mut self, mut on_insn: impl FnMut(&DecodedInsn)) -> WalkStats {
        let mut stats = WalkStats::default();
        let event_pending = sys::pt_status_flag_pts_event_pending as i32;
        let eos_flag = sys::pt_status_flag_pts_eos as i32;
        let mut last_fail: Option<u64> = None;
        // SAFETY: dec is live for the whole walk; all out-structs are zeroed
        // plain data of the sizes we pass.
        unsafe {
            'sync: loop {
                let mut st = sys::pt_insn_sync_forward(self.dec);
                if st < 0 {
                    if PtError(st).is_eos() {
                        break;
                    }
                    let off = self.offset();
                    stats.errors.push((off, PtError(st)));
                    if last_fail.is_some_and(|l| off <= l) {
                        break;
                    }
                    last_fail = Some(off);
                    continue;
                }
                stats.syncs += 1;
                loop {
                    while st >= 0 && st & event_pending != 0 {
                        let mut ev: sys::pt_event = zeroed();
                        st = sys::pt_insn_event(self.dec, &mut ev, size_of::<sys::pt_event>());
                    }
                    if st < 0 {
                        if !PtError(st).is_eos() {
                            stats.errors.push((self.offset(), PtError(st)));
                            continue 'sync;
                        }
                        break 'sync;
                    }
                    if st & eos_flag != 0 {
                        break 'sync;
                    }
                    let mut insn: sys::pt_insn = zeroed();
                    st = sys::pt_insn_next(self.dec, &mut insn, size_of::<sys::pt_insn>());
                    if st < 0 {
                        if insn.iclass != sys::pt_insn_class_ptic_error {
                            stats.instructions += 1;
                            on_insn(&DecodedInsn {
                                ip: insn.ip,
                                size: insn.size,
                                iclass: insn.iclass,
                            });
                        }
                        if PtError(st).is_eos() {
                            break 'sync;
                        }
                        stats.errors.push((self.offset(), PtError(st)));
                        continue 'sync;
                    }
                    stats.instructions += 1;
                    on_insn(&DecodedInsn {
                        ip: insn.ip,
                        size: insn.size,
                        iclass: insn.iclass,
                    });
                }
            }
        }
        stats
    }
}

impl Drop for InsnDecoder<'_> {
    fn drop(&mut self) {
        // SAFETY: both pointers came from libipt's allocators and are freed
        // once, decoder first since it references the image.
        unsafe {
            sys::pt_insn_free_decoder(self.dec);
            sys::pt_image_free(self.image);
        }
    }
}
