//! Queries over decoded segments for the views: the line spans of a time
//! window joined across segment boundaries, and the per-address and
//! per-line heat (executions and time) of the instructions in a window.
//! They only read finished [`Segment`]s, so they are kept apart from the
//! code that decodes them.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{Chain, LineFrame, Segment};

/// A line span with its frame, from one or more segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowLine {
    pub start: u64,
    pub end: u64,
    pub depth: u32,
    pub frame: LineFrame,
    pub inlined: bool,
    pub insns: u32,
}

/// The line spans of consecutive segments that overlap `[from, to]`, by
/// start then depth. A line that runs across a segment boundary (a PSB)
/// is one span, not two.
pub fn window_lines(segs: &[&Segment], from: u64, to: u64) -> Vec<WindowLine> {
    let mut out: Vec<WindowLine> = Vec::new();
    // Per depth: the last span of the previous segment, if it ran to its
    // last instruction, as an index into `out`.
    let mut open_at_end: FxHashMap<u32, usize> = FxHashMap::default();
    for seg in segs {
        let n = seg.insns.len() as u32;
        let mut next_open = FxHashMap::default();
        for l in &seg.lines {
            let Some(frame) = seg.frame(l) else { continue };
            if l.first == 0 {
                if let Some(&i) = open_at_end.get(&l.depth) {
                    let o: &mut WindowLine = &mut out[i];
                    if o.frame == *frame {
                        o.end = l.end;
                        o.insns += l.count;
                        if l.first + l.count == n {
                            next_open.insert(l.depth, i);
                        }
                        continue;
                    }
                }
            }
            out.push(WindowLine {
                start: l.start,
                end: l.end,
                depth: l.depth,
                frame: frame.clone(),
                inlined: l.inlined(),
                insns: l.count,
            });
            if l.first + l.count == n {
                next_open.insert(l.depth, out.len() - 1);
            }
        }
        open_at_end = next_open;
    }
    out.retain(|l| l.end >= from && l.start <= to);
    out.sort_by_key(|l| (l.start, l.depth));
    out
}

/// Per-address totals: the disassembly view's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsnHeat {
    pub count: u64,
    pub time_ns: u64,
    /// The execution mode it ran in (16, 32 or 64-bit), to disassemble it.
    pub bitness: u8,
}

/// Executions and time of every instruction address in `[from, to)`, with
/// its source frames.
pub fn insn_heat<'s>(
    segs: impl IntoIterator<Item = &'s Segment>,
    from: u64,
    to: u64,
) -> HashMap<u64, (InsnHeat, Option<Chain>)> {
    heat_by_address(segs, from, to).into_iter().collect()
}

/// [`insn_heat`] in a table hashed for speed: one lookup per instruction
/// retired, which SipHash made the bulk of a zoom's heat.
fn heat_by_address<'s>(
    segs: impl IntoIterator<Item = &'s Segment>,
    from: u64,
    to: u64,
) -> FxHashMap<u64, (InsnHeat, Option<Chain>)> {
    let mut out: FxHashMap<u64, (InsnHeat, Option<Chain>)> = FxHashMap::default();
    for seg in segs {
        for i in seg.insns_in(from, to) {
            let (h, _) = out.entry(i.ip).or_insert_with(|| {
                let c = seg.chains.get(i.chain as usize).cloned();
                (InsnHeat::default(), c)
            });
            h.count += 1;
            h.time_ns += i.end - i.start;
            h.bitness = i.bitness;
        }
    }
    out
}

/// Per-line totals: what the source pane's heat column shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineHeat {
    /// Times the line ran: the most any of its instructions ran, so a
    /// loop body's line counts the loop's trips.
    pub count: u64,
    /// Instructions retired on it, and the time they took (ns).
    pub insns: u64,
    pub time_ns: u64,
}

/// Heat of every (file, line) over the instructions of `segs` that ran in
/// `[from, to)`. An instruction counts for its line at every inline level:
/// an inlined call's line includes the inlined code.
pub fn line_heat<'s>(
    segs: impl IntoIterator<Item = &'s Segment>,
    from: u64,
    to: u64,
) -> HashMap<(Arc<str>, u32), LineHeat> {
    let mut out: HashMap<(Arc<str>, u32), LineHeat> = HashMap::new();
    for (_, (h, chain)) in heat_by_address(segs, from, to) {
        let Some(chain) = chain else { continue };
        for (k, f) in chain.iter().enumerate() {
            // A recursive inline chain names a line once.
            if chain[..k]
                .iter()
                .any(|g| g.file == f.file && g.line == f.line)
            {
                continue;
            }
            let l = out.entry((f.file.clone(), f.line)).or_default();
            l.count = l.count.max(h.count);
            l.insns += h.count;
            l.time_ns += h.time_ns;
        }
    }
    out
}
