//! Large genuine PT snapshots: this module grows a short capture to any
//! size, for `ptscope grow`, the scale benchmark and the tests.
//!
//! A short capture of a program in a steady-state loop holds PSB segments
//! that repeat: two PSBs where the program is at the same instruction with
//! the same calls open. The trace between them is one period. A snapshot
//! of any size is that capture with the period repeated, each copy's TSC
//! packets moved on by one period so time keeps running. Every copy
//! decodes exactly as the original period does, because at a PSB the
//! decoder, and the hardware's return compression, start afresh; the
//! binaries are the capture's own.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Result};
use ptscope_decoder::{decode_snapshot, DecodeOptions};
use ptscope_formats::snapshot::{rewrite_aux, Snapshot};
use ptscope_formats::{pt::read::Packet, pt::read::Packets};
use ptscope_model::Model;

/// One period of a thread's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Period {
    /// The AUX queue it is in.
    pub queue: u32,
    /// PSB offsets that start it and the next one.
    pub from: u64,
    pub to: u64,
    /// Its TSC ticks and perf-time span.
    pub ticks: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub instructions: u64,
}

/// What [`grow`] made.
#[derive(Clone, Debug)]
pub struct Grown {
    pub period: Period,
    pub copies: u64,
    /// AUX bytes of the grown queue.
    pub aux_bytes: u64,
    /// Calls per function in the source, and in one period.
    pub source_calls: BTreeMap<String, u64>,
    pub period_calls: BTreeMap<String, u64>,
}

impl Grown {
    /// The calls per function the grown snapshot must decode to.
    pub fn expected_calls(&self) -> BTreeMap<String, u64> {
        let mut out = self.source_calls.clone();
        for (f, n) in &self.period_calls {
            *out.entry(f.clone()).or_default() += n * self.copies;
        }
        out
    }
}

/// Calls per function in a model (pseudo spans such as `[untraced]` left
/// out), counting those that start in `from..to`.
pub fn calls(model: &Model, from: u64, to: u64) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for t in &model.threads {
        for (_, lane) in t.spans.lanes() {
            for s in lane.iter().filter(|s| s.start >= from && s.start < to) {
                let name = model.funcs.name(s.func());
                if !name.starts_with('[') {
                    *out.entry(name.to_string()).or_default() += 1;
                }
            }
        }
    }
    out
}

/// Finds a period: the first two PSBs after the first (which syncs) where
/// the thread is at the same instruction with the same open calls, and no
/// trace enable falls between them.
pub fn find_period(model: &Model) -> Option<Period> {
    for t in &model.threads {
        let Some(queue) = t.stream else { continue };
        let cps = &t.checkpoints;
        let frames = |i: usize| {
            let c = &cps[i];
            let a = c.stack_start as usize;
            t.checkpoint_frames
                .get(a..a + c.stack_len as usize)
                .map(|f| f.iter().map(|o| o.func).collect::<Vec<_>>())
        };
        for i in 1..cps.len() {
            if cps[i].begins {
                continue;
            }
            for j in i + 1..cps.len() {
                if cps[j].begins {
                    break;
                }
                if cps[j].ip == cps[i].ip && frames(i).is_some() && frames(i) == frames(j) {
                    return Some(Period {
                        queue,
                        from: cps[i].offset,
                        to: cps[j].offset,
                        ticks: cps[j].tsc - cps[i].tsc,
                        start_ns: cps[i].time,
                        end_ns: cps[j].time,
                        instructions: cps[j].insn - cps[i].insn,
                    });
                }
            }
        }
    }
    None
}

/// Adds `delta` to every TSC packet in `buf` (which starts at a PSB).
fn shift_tsc(buf: &mut [u8], delta: u64) {
    let at: Vec<usize> = Packets::new(buf)
        .filter_map(|(off, p)| matches!(p, Ok(Packet::Tsc(_))).then_some(off))
        .collect();
    for off in at {
        let mut v = [0u8; 8];
        v[..7].copy_from_slice(&buf[off + 1..off + 8]);
        let tsc = (u64::from_le_bytes(v).wrapping_add(delta)) & ((1 << 56) - 1);
        buf[off + 1..off + 8].copy_from_slice(&tsc.to_le_bytes()[..7]);
    }
}

/// `aux` with `aux[from..to]` repeated `copies` more times after itself.
pub fn replicate(aux: &[u8], from: usize, to: usize, ticks: u64, copies: u64) -> Vec<u8> {
    let seg = &aux[from..to];
    let mut out = Vec::with_capacity(aux.len() + seg.len() * copies as usize);
    out.extend_from_slice(&aux[..to]);
    let mut copy = seg.to_vec();
    for _ in 0..copies {
        shift_tsc(&mut copy, ticks);
        out.extend_from_slice(&copy);
    }
    let mut tail = aux[to..].to_vec();
    shift_tsc(&mut tail, ticks.wrapping_mul(copies));
    out.extend_from_slice(&tail);
    out
}

/// Grows the snapshot `source` into `dst` with at least `min_bytes` of
/// trace in its periodic thread.
pub fn grow(source: &Path, dst: &Path, min_bytes: u64) -> Result<Grown> {
    let snap = Snapshot::open(source)?;
    // The decode error names the file.
    let model = decode_snapshot(&snap, &DecodeOptions::default())?;
    let Some(period) = find_period(&model) else {
        bail!(
            "{}: no period found: it needs a thread in a steady loop with at least three PSBs",
            source.display()
        );
    };
    let trace = snap.trace()?;
    let Some(stream) = trace.streams.iter().find(|s| s.idx == period.queue) else {
        bail!(
            "{}: AUX queue {} is missing",
            source.display(),
            period.queue
        );
    };
    let len = stream.data.len() as u64;
    let seg = period.to - period.from;
    let copies = min_bytes.saturating_sub(len).div_ceil(seg.max(1));
    let shift_ns = (period.end_ns - period.start_ns) * copies;
    let (from, to, ticks, queue) = (
        period.from as usize,
        period.to as usize,
        period.ticks,
        period.queue,
    );
    rewrite_aux(&snap, dst, shift_ns, &|idx, old| {
        if idx == queue {
            replicate(old, from, to, ticks, copies)
        } else {
            old.to_vec()
        }
    })?;
    let (a, b) = model.time_range().unwrap_or((0, u64::MAX));
    Ok(Grown {
        source_calls: calls(&model, a, b.saturating_add(1)),
        period_calls: calls(&model, period.start_ns, period.end_ns),
        aux_bytes: len + seg * copies,
        period,
        copies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_packets_move_and_nothing_else() {
        // PSB, TSC 0x10, PAD, TSC 0xff_ffff_ffff_ffff (wraps at 56 bits).
        use ptscope_formats::pt::write;
        let mut buf = write::PSB.to_vec();
        write::tsc(&mut buf, 0x10);
        write::pad(&mut buf);
        write::tsc(&mut buf, 0xff_ffff_ffff_ffff);
        let orig = buf.clone();
        shift_tsc(&mut buf, 5);
        assert_eq!(buf[17], 0x15);
        assert_eq!(&buf[26..33], &[4, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&buf[..17], &orig[..17]);
        let grown = replicate(&orig, 0, orig.len(), 100, 2);
        assert_eq!(grown.len(), orig.len() * 3);
        assert_eq!(grown[orig.len() + 17], 0x10 + 100);
        assert_eq!(grown[2 * orig.len() + 17], 0x10 + 200);
    }
}
