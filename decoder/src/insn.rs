//! Instruction-level decoding of one thread's trace with libipt.

use ptscope_formats::snapshot::{AuxStream, Trace};

use crate::block::{DecoderConfig, PtError};
use crate::ffi::{DecodedInsn, InsnDecoder, WalkStats};
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
        // A value too wide for its field is damaged: unknown, not its low
        // bits.
        cpuid_0x15_eax: u32::try_from(p.tsc_ctc_ratio_d).unwrap_or(0),
        cpuid_0x15_ebx: u32::try_from(p.tsc_ctc_ratio_n).unwrap_or(0),
        mtc_freq: u8::try_from(p.mtc_period(trace.pt_attr.config)).unwrap_or(0),
        nom_freq: u8::try_from(p.max_nonturbo_ratio).unwrap_or(0),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_too_wide_for_its_field_is_unknown_not_its_low_bits() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo.ptscope");
        let snap = ptscope_formats::snapshot::Snapshot::open(&path).unwrap();
        let mut trace = snap.trace().unwrap();
        assert_ne!(decoder_config(&trace).nom_freq, 0);
        // Its low byte is a plausible ratio.
        trace.params.max_nonturbo_ratio = 0x1_0000_0020;
        trace.params.tsc_ctc_ratio_n = 1 << 40 | 2;
        let cfg = decoder_config(&trace);
        assert_eq!((cfg.nom_freq, cfg.cpuid_0x15_ebx), (0, 0));
    }
}
