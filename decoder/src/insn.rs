//! Instruction-level decoding of one thread's trace with libipt.

use ptscope_capture::snapshot::{AuxStream, Trace};

use crate::ffi::{DecodedInsn, DecoderConfig, InsnDecoder, PtError, WalkStats};
use crate::image::Section;

/// The libipt configuration a trace calls for: its CPU (for errata) and the
/// timing ratios from AUXTRACE_INFO.
pub fn decoder_config(trace: &Trace) -> DecoderConfig {
    let (family, model, stepping) = trace.cpu().unwrap_or((0, 0, 0));
    let p = &trace.params;
    DecoderConfig {
        family: family as u16,
        model: model as u8,
        stepping: stepping as u8,
        cpuid_0x15_eax: p.tsc_ctc_ratio_d as u32,
        cpuid_0x15_ebx: p.tsc_ctc_ratio_n as u32,
        mtc_freq: p.mtc_period(trace.pt_attr.config) as u8,
        nom_freq: p.max_nonturbo_ratio as u8,
    }
}

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
