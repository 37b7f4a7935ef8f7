//! libipt, Intel's reference decoder, called through `libipt-sys` directly:
//! its block decoder (the coarse pass's reference engine, beside our own
//! [`crate::FlowDecoder`]), its instruction decoder (the judge the tests hold our
//! decoder to: [`walk_stream`]), and the section cache and images they read
//! the process's code from.
//!
//! We do not use the `libipt` crate's wrapper: it panics on event types
//! added in libipt 2.1 (CFE/EVD event trace, iflags), drops the partial
//! instruction returned with an error, and truncates TNT-64 payloads. This
//! module is one of the few allowed to hold `unsafe`.

use std::ffi::CString;
use std::mem::{size_of, zeroed};
use std::path::Path;

use libipt_sys as sys;

use ptscope_formats::{snapshot::AuxStream, snapshot::Trace};

use crate::names::image::Section;
use crate::pt::block::{decoder_config, Block, BlockEnd, BlockItem, DecoderConfig, PtError};

/// Walks every instruction of `stream` over `sections`.
pub fn walk_stream(
    trace: &Trace,
    stream: &AuxStream,
    sections: &[Section],
    on_insn: impl FnMut(&DecodedInsn),
) -> Result<WalkStats, PtError> {
    let mut dec = InsnDecoder::new(&stream.data, &decoder_config(trace))?;
    for s in sections {
        dec.add_file(&s.file, s.offset, s.size, s.vaddr)?;
    }
    Ok(dec.walk(on_insn))
}

/// A zeroed pt_config over `trace` with the CPU and timing parameters set.
fn raw_config(trace: &[u8], cfg: &DecoderConfig) -> sys::pt_config {
    // SAFETY: pt_config is plain data for which all-zero is the documented
    // default; the begin/end pointers stay valid as long as `trace`, which
    // callers tie to the decoder's lifetime.
    unsafe {
        let mut c: sys::pt_config = zeroed();
        c.size = size_of::<sys::pt_config>();
        c.begin = trace.as_ptr() as *mut u8;
        c.end = trace.as_ptr().add(trace.len()) as *mut u8;
        c.cpu.vendor = sys::pt_cpu_vendor_pcv_intel;
        c.cpu.family = cfg.family;
        c.cpu.model = cfg.model;
        c.cpu.stepping = cfg.stepping;
        // libipt's table, or ours for CPUs newer than it knows.
        c.errata = sys_errata(&crate::pt::errata::of(cfg));
        c.cpuid_0x15_eax = cfg.cpuid_0x15_eax;
        c.cpuid_0x15_ebx = cfg.cpuid_0x15_ebx;
        c.mtc_freq = cfg.mtc_freq;
        c.nom_freq = cfg.nom_freq;
        let f = &mut c.addr_filter;
        let mut addr_cfg = 0u64;
        let slots = [
            (&mut f.addr0_a, &mut f.addr0_b),
            (&mut f.addr1_a, &mut f.addr1_b),
            (&mut f.addr2_a, &mut f.addr2_b),
            (&mut f.addr3_a, &mut f.addr3_b),
        ];
        for (n, (r, (a, b))) in cfg.filter.ranges().iter().zip(slots).enumerate() {
            // ADDRn_CFG: 1 FilterEn, 2 TraceStop, four bits each.
            addr_cfg |= (if r.stop { 2 } else { 1 }) << (4 * n);
            *a = r.first;
            *b = r.last;
        }
        f.config.addr_cfg = addr_cfg;
        c
    }
}

/// `e` as libipt's configuration holds it.
fn sys_errata(e: &crate::pt::errata::Errata) -> sys::pt_errata {
    // SAFETY: pt_errata is plain data (bit fields) for which all-zero is
    // valid.
    let mut s: sys::pt_errata = unsafe { zeroed() };
    s.set_bdm70(e.bdm70 as u32);
    s.set_bdm64(e.bdm64 as u32);
    s.set_skd007(e.skd007 as u32);
    s.set_skd022(e.skd022 as u32);
    s.set_skd010(e.skd010 as u32);
    s.set_skl014(e.skl014 as u32);
    s.set_apl11(e.apl11 as u32);
    s.set_apl12(e.apl12 as u32);
    s.set_skl168(e.skl168 as u32);
    s.set_skz84(e.skz84 as u32);
    s
}

/// One instruction as libipt reports it.
#[derive(Clone, Copy, Debug)]
pub struct DecodedInsn {
    pub ip: u64,
    pub size: u8,
    pub iclass: u32,
    /// The TSC of the last time tracing was enabled before it (0 if that
    /// had no time): in a per-CPU trace, what tells whose it is, as each
    /// thread's run on the CPU starts with a timed TIP.PGE.
    pub enabled_tsc: u64,
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
        let c = raw_config(trace, cfg);
        // SAFETY: `c` points into `trace`, which outlives the decoder ('a);
        // libipt copies the config at allocation.
        unsafe {
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
        let mut idle = Idle::new(MAX_IDLE_INSNS);
        let mut enabled_tsc = 0;
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
                        if st >= 0 && ev.type_ == sys::pt_event_type_ptev_enabled {
                            enabled_tsc = if ev.has_tsc() != 0 { ev.tsc } else { 0 };
                        }
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
                                enabled_tsc,
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
                        enabled_tsc,
                    });
                    if idle.stuck(self.offset()) {
                        stats.errors.push((self.offset(), PtError::BAD_QUERY));
                        continue 'sync;
                    }
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

/// Blocks libipt may return without reading a packet before we call it an
/// endless loop, as our flow decoder does: code that runs on with no TNT or
/// TIP (`jmp .`, or a damaged trace that lands in a cycle of direct jumps)
/// would otherwise be followed forever. Like the flow decoder's limit,
/// small because it can be spent once per PSB.
const MAX_IDLE_BLOCKS: u32 = 1 << 16;

/// The same for the instruction walk, which counts every instruction: a
/// long TNT packet alone can cover that many.
const MAX_IDLE_INSNS: u32 = 1 << 20;

/// Counts steps at one trace offset.
struct Idle {
    limit: u32,
    at: u64,
    steps: u32,
}

impl Idle {
    fn new(limit: u32) -> Idle {
        Idle {
            limit,
            at: 0,
            steps: 0,
        }
    }

    /// Whether the walk is stuck at `offset`; resets when it moves on.
    fn stuck(&mut self, offset: u64) -> bool {
        if offset != self.at {
            self.at = offset;
            self.steps = 0;
            return false;
        }
        self.steps += 1;
        if self.steps > self.limit {
            self.steps = 0;
            return true;
        }
        false
    }
}

fn nomem() -> PtError {
    PtError(-(sys::pt_error_code_pte_nomem as i32))
}

/// libipt's image section cache: each binary section is mapped and
/// block-cached once, however many process images share it.
pub struct SectionCache {
    raw: *mut sys::pt_image_section_cache,
}

// SAFETY: the cache is only touched through &mut self or through images
// and decoders that live on the same thread as their use.
unsafe impl Send for SectionCache {}

impl SectionCache {
    pub fn new() -> Result<SectionCache, PtError> {
        // SAFETY: a NULL name is allowed.
        let raw = unsafe { sys::pt_iscache_alloc(std::ptr::null()) };
        if raw.is_null() {
            return Err(nomem());
        }
        Ok(SectionCache { raw })
    }

    /// Adds `size` bytes of `file` from `offset` to be mapped at `vaddr`;
    /// returns the section id. The same section added twice gets one id.
    pub fn add_file(
        &mut self,
        file: &Path,
        offset: u64,
        size: u64,
        vaddr: u64,
    ) -> Result<i32, PtError> {
        let name = CString::new(file.as_os_str().as_encoded_bytes())
            .map_err(|_| PtError(-(sys::pt_error_code_pte_invalid as i32)))?;
        // SAFETY: raw is live; name is a valid C string that libipt copies.
        let rc = unsafe { sys::pt_iscache_add_file(self.raw, name.as_ptr(), offset, size, vaddr) };
        if rc < 0 {
            Err(PtError(rc))
        } else {
            Ok(rc)
        }
    }
}

impl Drop for SectionCache {
    fn drop(&mut self) {
        // SAFETY: allocated by pt_iscache_alloc; images that reference it
        // must be dropped first, which `Image`'s borrow guarantees.
        unsafe { sys::pt_iscache_free(self.raw) }
    }
}

/// The memory image of one process, built from cached sections.
pub struct Image<'c> {
    raw: *mut sys::pt_image,
    cache: &'c SectionCache,
}

impl<'c> Image<'c> {
    pub fn new(cache: &'c SectionCache) -> Result<Image<'c>, PtError> {
        // SAFETY: a NULL name is allowed.
        let raw = unsafe { sys::pt_image_alloc(std::ptr::null()) };
        if raw.is_null() {
            return Err(nomem());
        }
        Ok(Image { raw, cache })
    }

    pub fn add(&mut self, isid: i32) -> Result<(), PtError> {
        // SAFETY: both pointers are live; a NULL asid means "any".
        let rc =
            unsafe { sys::pt_image_add_cached(self.raw, self.cache.raw, isid, std::ptr::null()) };
        if rc < 0 {
            Err(PtError(rc))
        } else {
            Ok(())
        }
    }
}

impl Drop for Image<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by pt_image_alloc; decoders using it borrow it.
        unsafe { sys::pt_image_free(self.raw) }
    }
}

/// A block decoder over one PT buffer.
pub struct BlockDecoder<'a> {
    dec: *mut sys::pt_block_decoder,
    _buf: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> BlockDecoder<'a> {
    /// A decoder over `trace` that ends blocks at every call and jump (so
    /// every function change is seen) and reports tick events (so times
    /// bind to the exact branch that carried them).
    pub fn new(trace: &'a [u8], cfg: &DecoderConfig) -> Result<BlockDecoder<'a>, PtError> {
        let mut c = raw_config(trace, cfg);
        // SAFETY: the block variant of the flags union is the one the
        // block decoder reads.
        unsafe {
            let f = &mut c.flags.variant.block;
            f.set_end_on_call(1);
            f.set_end_on_jump(1);
            f.set_enable_tick_events(1);
            f.set_keep_tcal_on_ovf(1);
        }
        // SAFETY: `c` points into `trace`, which outlives the decoder.
        let dec = unsafe { sys::pt_blk_alloc_decoder(&c) };
        if dec.is_null() {
            return Err(nomem());
        }
        Ok(BlockDecoder {
            dec,
            _buf: std::marker::PhantomData,
        })
    }

    /// Decodes against `image` from now on (e.g. after a context switch).
    pub fn set_image(&mut self, image: &'a Image<'_>) -> Result<(), PtError> {
        // SAFETY: both are live; `image` outlives the decoder's use by 'a.
        let rc = unsafe { sys::pt_blk_set_image(self.dec, image.raw) };
        if rc < 0 {
            Err(PtError(rc))
        } else {
            Ok(())
        }
    }

    pub fn offset(&self) -> u64 {
        let mut off = 0u64;
        // SAFETY: dec is live; off is a valid out-pointer.
        unsafe { sys::pt_blk_get_offset(self.dec, &mut off) };
        off
    }

    /// Walks the whole buffer. `on_item` returns false to stop early; it
    /// may call [`BlockDecoder::set_image`] through the decoder it is
    /// given.
    pub fn walk(&mut self, mut on_item: impl FnMut(&mut Self, BlockItem) -> bool) {
        let event_pending = sys::pt_status_flag_pts_event_pending as i32;
        let eos_flag = sys::pt_status_flag_pts_eos as i32;
        let mut last_fail: Option<u64> = None;
        let mut idle = Idle::new(MAX_IDLE_BLOCKS);
        macro_rules! emit {
            ($item:expr) => {
                if !on_item(self, $item) {
                    return;
                }
            };
        }
        'sync: loop {
            // SAFETY: dec is live.
            let mut st = unsafe { sys::pt_blk_sync_forward(self.dec) };
            if st < 0 {
                if PtError(st).is_eos() {
                    return;
                }
                let off = self.offset();
                emit!(BlockItem::Error {
                    offset: off,
                    error: PtError(st),
                    ip: None
                });
                if last_fail.is_some_and(|l| off <= l) {
                    return;
                }
                last_fail = Some(off);
                continue;
            }
            emit!(BlockItem::Sync {
                offset: self.offset()
            });
            loop {
                while st >= 0 && st & event_pending != 0 {
                    // SAFETY: zeroed plain data of the size we pass.
                    let mut ev: sys::pt_event = unsafe { zeroed() };
                    // SAFETY: dec is live; ev is a valid out-struct.
                    st =
                        unsafe { sys::pt_blk_event(self.dec, &mut ev, size_of::<sys::pt_event>()) };
                    if st < 0 {
                        break;
                    }
                    if let Some(item) = event_item(&ev) {
                        emit!(item);
                    }
                }
                if st < 0 {
                    if PtError(st).is_eos() {
                        return;
                    }
                    let off = self.offset();
                    emit!(BlockItem::Error {
                        offset: off,
                        error: PtError(st),
                        ip: None
                    });
                    continue 'sync;
                }
                if st & eos_flag != 0 {
                    return;
                }
                // SAFETY: zeroed plain data of the size we pass.
                let mut b: sys::pt_block = unsafe { zeroed() };
                // SAFETY: dec is live; b is a valid out-struct.
                st = unsafe { sys::pt_blk_next(self.dec, &mut b, size_of::<sys::pt_block>()) };
                if st >= 0 && idle.stuck(self.offset()) {
                    emit!(BlockItem::Error {
                        offset: self.offset(),
                        error: PtError::BAD_QUERY,
                        ip: None
                    });
                    continue 'sync;
                }
                // A block that comes back with an error still ran.
                if b.ninsn > 0 {
                    emit!(BlockItem::Block(Block {
                        ip: b.ip,
                        end_ip: b.end_ip,
                        ninsn: b.ninsn as u32,
                        end: block_end(b.iclass),
                        bitness: bitness_of(b.mode),
                    }));
                }
                if st < 0 {
                    if PtError(st).is_eos() {
                        return;
                    }
                    let off = self.offset();
                    // Where decoding stopped: past the partial block, or
                    // where the failed block would have started.
                    let ip = if b.ninsn > 0 {
                        None
                    } else {
                        (b.ip != 0).then_some(b.ip)
                    };
                    emit!(BlockItem::Error {
                        offset: off,
                        error: PtError(st),
                        ip
                    });
                    continue 'sync;
                }
            }
        }
    }
}

impl Drop for BlockDecoder<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by pt_blk_alloc_decoder and freed once.
        unsafe { sys::pt_blk_free_decoder(self.dec) }
    }
}

/// The bits of libipt's execution mode; an unknown mode is decoded as
/// 64-bit, as libipt decodes it.
fn bitness_of(mode: sys::pt_exec_mode) -> u8 {
    #[allow(non_upper_case_globals)]
    match mode {
        sys::pt_exec_mode_ptem_16bit => 16,
        sys::pt_exec_mode_ptem_32bit => 32,
        _ => 64,
    }
}

fn block_end(iclass: sys::pt_insn_class) -> BlockEnd {
    #[allow(non_upper_case_globals)]
    match iclass {
        sys::pt_insn_class_ptic_call => BlockEnd::Call,
        sys::pt_insn_class_ptic_return => BlockEnd::Return,
        sys::pt_insn_class_ptic_jump => BlockEnd::Jump,
        sys::pt_insn_class_ptic_cond_jump => BlockEnd::CondJump,
        sys::pt_insn_class_ptic_far_call => BlockEnd::FarCall,
        sys::pt_insn_class_ptic_far_return => BlockEnd::FarReturn,
        sys::pt_insn_class_ptic_far_jump => BlockEnd::FarJump,
        sys::pt_insn_class_ptic_indirect => BlockEnd::Indirect,
        _ => BlockEnd::Other,
    }
}

/// The events the coarse pass needs; the rest (paging, mode changes, power,
/// ptwrite, event trace) are skipped, whatever libipt version adds.
fn event_item(ev: &sys::pt_event) -> Option<BlockItem> {
    let tsc = (ev.has_tsc() != 0).then_some(ev.tsc);
    let ip = |suppressed: bool, ip: u64| (!suppressed).then_some(ip);
    let supp = ev.ip_suppressed() != 0;
    // SAFETY: each arm reads the union member that `type_` selects.
    unsafe {
        #[allow(non_upper_case_globals)]
        match ev.type_ {
            sys::pt_event_type_ptev_enabled => Some(BlockItem::Enabled {
                ip: ev.variant.enabled.ip,
                status_update: ev.status_update() != 0,
                tsc,
            }),
            sys::pt_event_type_ptev_disabled => Some(BlockItem::Disabled {
                ip: ip(supp, ev.variant.disabled.ip),
                tsc,
                status_update: ev.status_update() != 0,
            }),
            sys::pt_event_type_ptev_async_disabled => Some(BlockItem::AsyncDisabled {
                at: ev.variant.async_disabled.at,
                tsc,
            }),
            sys::pt_event_type_ptev_async_branch => Some(BlockItem::AsyncBranch {
                from: ev.variant.async_branch.from,
                to: ev.variant.async_branch.to,
                tsc,
            }),
            sys::pt_event_type_ptev_overflow => Some(BlockItem::Overflow {
                ip: ip(supp, ev.variant.overflow.ip),
                tsc,
            }),
            sys::pt_event_type_ptev_tick => tsc.map(|tsc| BlockItem::Tick {
                ip: ip(supp, ev.variant.tick.ip),
                tsc,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::zeroed;

    use libipt_sys as sys;

    use crate::pt::block::PtError;

    // libipt's own answers, to hold the ported tables to.
    /// libipt's message for error `code` (negative, as libipt returns it),
    /// without the code.
    fn error_message(code: i32) -> String {
        // SAFETY: pt_errstr returns a static NUL-terminated string for any code.
        let msg =
            unsafe { std::ffi::CStr::from_ptr(sys::pt_errstr((-code) as sys::pt_error_code)) };
        msg.to_string_lossy().into_owned()
    }

    /// libipt's errata for a CPU; `None` for one it does not know.
    fn cpu_errata(family: u16, model: u8, stepping: u8) -> Option<crate::pt::errata::Errata> {
        // SAFETY: pt_cpu and pt_errata are plain data for which all-zero is
        // valid; pt_cpu_errata only writes the errata it is given.
        let e = unsafe {
            let mut cpu: sys::pt_cpu = zeroed();
            cpu.vendor = sys::pt_cpu_vendor_pcv_intel;
            cpu.family = family;
            cpu.model = model;
            cpu.stepping = stepping;
            let mut e: sys::pt_errata = zeroed();
            if sys::pt_cpu_errata(&mut e, &cpu) < 0 {
                return None;
            }
            e
        };
        Some(crate::pt::errata::Errata {
            bdm70: e.bdm70() != 0,
            bdm64: e.bdm64() != 0,
            skd007: e.skd007() != 0,
            skd022: e.skd022() != 0,
            skd010: e.skd010() != 0,
            skl014: e.skl014() != 0,
            apl11: e.apl11() != 0,
            apl12: e.apl12() != 0,
            skl168: e.skl168() != 0,
            skz84: e.skz84() != 0,
        })
    }

    #[test]
    fn error_codes_and_messages_are_libipts() {
        for code in 0..40 {
            assert_eq!(
                PtError(-code).message(),
                error_message(-code),
                "code {code}"
            );
        }
        assert_eq!(PtError::EOS.0, -(sys::pt_error_code_pte_eos as i32));
        assert_eq!(PtError::NOMAP.0, -(sys::pt_error_code_pte_nomap as i32));
        assert_eq!(
            PtError::BAD_RETCOMP.0,
            -(sys::pt_error_code_pte_bad_retcomp as i32)
        );
        assert_eq!(PtError::BAD_OPC.0, -(sys::pt_error_code_pte_bad_opc as i32));
        assert_eq!(PtError::NOIP.0, -(sys::pt_error_code_pte_noip as i32));
    }

    #[test]
    fn every_cpus_errata_are_libipts() {
        for family in [0x6u16, 0x12, 0x13, 0xf] {
            for model in 0..=255u8 {
                assert_eq!(
                    crate::pt::errata::Errata::known(family, model),
                    cpu_errata(family, model, 0),
                    "{family:#x}/{model:#x}"
                );
            }
        }
    }
    use crate::pt::block::DecoderConfig;

    /// libipt's decoders are given the errata of CPUs newer than its own
    /// table knows, as ours are.
    #[test]
    fn libipt_is_given_the_errata_of_cpus_newer_than_it_knows() {
        let cfg = DecoderConfig::default().with_cpu("0x12/1".parse().unwrap());
        let c = super::raw_config(&[], &cfg);
        let e = c.errata;
        assert_eq!((e.bdm70(), e.skd022(), e.apl11(), e.skz84()), (1, 1, 1, 0));
        let kbl = super::raw_config(
            &[],
            &DecoderConfig::default().with_cpu("6/0x8e".parse().unwrap()),
        );
        assert_eq!(kbl.errata.skl014(), 1);
        assert_eq!(
            super::raw_config(&[], &DecoderConfig::default())
                .errata
                .bdm70(),
            0
        );
    }
}
