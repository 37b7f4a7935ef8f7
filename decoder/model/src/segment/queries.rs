//! Queries over decoded segments for the views: the line spans of a time
//! window joined across segment boundaries, and the per-address and
//! per-line heat (executions and time) of the instructions in a window.
//! They only read finished [`Segment`]s, so they are kept apart from the
//! code that decodes them.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{Chain, LineFrame, Segment, NO_CHAIN};

/// A line span with its frame, from one or more segments. The frame is
/// the segments': a window of many lines costs no count on its names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowLine<'s> {
    pub start: u64,
    pub end: u64,
    pub depth: u32,
    pub frame: &'s LineFrame,
    pub inlined: bool,
    pub insns: u32,
}

/// A span of a window before it is made a [`WindowLine`]: its first line
/// span's segment and index name its frame.
struct Candidate {
    start: u64,
    end: u64,
    depth: u32,
    insns: u32,
    seg: u32,
    line: u32,
}

/// The indices of the `spans` that overlap `[from, to]`, by start then
/// depth, ties in their order in `spans` (a stable sort's order).
/// `first` is a span's first instruction in its segment.
///
/// Sorting them was most of a window's cost, and they are nearly in
/// order already: a segment's spans are by depth, then by first
/// instruction, and an instruction never starts before the one before it.
/// So each segment's spans are put in order of first instruction (a
/// counting sort, stable, so by depth among those that share one), which
/// orders them by start; then each run of equal starts, across segments
/// too, is put in order of depth. Where starts are not in order after all
/// (a damaged file's checkpoints), they are sorted outright.
fn by_start(
    spans: &[Candidate],
    first: impl Fn(&Candidate) -> u32,
    from: u64,
    to: u64,
) -> Vec<u32> {
    let key = |i: &u32| {
        let c = &spans[*i as usize];
        (c.start, c.depth)
    };
    let mut order: Vec<u32> = Vec::with_capacity(spans.len());
    let mut counts: Vec<u32> = Vec::new();
    let mut k = 0;
    while k < spans.len() {
        // One segment's spans.
        let seg = spans[k].seg;
        let end = k + spans[k..].iter().take_while(|c| c.seg == seg).count();
        let wanted = || (k..end).filter(|&i| spans[i].end >= from && spans[i].start <= to);
        let most = wanted().map(|i| first(&spans[i])).max().unwrap_or(0) as usize;
        counts.clear();
        counts.resize(most + 2, 0);
        for i in wanted() {
            counts[first(&spans[i]) as usize + 1] += 1;
        }
        for f in 1..counts.len() {
            counts[f] += counts[f - 1];
        }
        let base = order.len();
        order.resize(base + counts[most + 1] as usize, 0);
        for i in wanted() {
            let slot = &mut counts[first(&spans[i]) as usize];
            order[base + *slot as usize] = i as u32;
            *slot += 1;
        }
        k = end;
    }
    if !order.is_sorted_by_key(|i| spans[*i as usize].start) {
        order.sort_by_key(key);
        return order;
    }
    let mut a = 0;
    while a < order.len() {
        let start = spans[order[a] as usize].start;
        let b = a + order[a..]
            .iter()
            .take_while(|&&i| spans[i as usize].start == start)
            .count();
        if b - a > 1 {
            order[a..b].sort_by_key(key);
        }
        a = b;
    }
    order
}

/// The line spans of consecutive segments that overlap `[from, to]`, by
/// start then depth. A line that runs across a segment boundary (a PSB)
/// is one span, not two.
pub fn window_lines<'s>(segs: &[&'s Segment], from: u64, to: u64) -> Vec<WindowLine<'s>> {
    let frame_of = |c: &Candidate| {
        let seg = segs[c.seg as usize];
        seg.frame(&seg.lines[c.line as usize])
    };
    let mut out: Vec<Candidate> = Vec::new();
    // Per depth: the last span of the previous segment, if it ran to its
    // last instruction, as an index into `out`.
    let mut open_at_end: FxHashMap<u32, usize> = FxHashMap::default();
    let mut next_open: FxHashMap<u32, usize> = FxHashMap::default();
    for (s, seg) in segs.iter().enumerate() {
        let n = seg.insns.len() as u32;
        next_open.clear();
        for (k, l) in seg.lines.iter().enumerate() {
            let Some(frame) = seg.frame(l) else { continue };
            let to_end = l.first + l.count == n;
            if l.first == 0 {
                if let Some(&i) = open_at_end.get(&l.depth) {
                    if frame_of(&out[i]) == Some(frame) {
                        let o = &mut out[i];
                        o.end = l.end;
                        o.insns += l.count;
                        if to_end {
                            next_open.insert(l.depth, i);
                        }
                        continue;
                    }
                }
            }
            // A span the next segment cannot carry on is whole: outside
            // the window, it is not wanted.
            if !to_end && (l.end < from || l.start > to) {
                continue;
            }
            out.push(Candidate {
                start: l.start,
                end: l.end,
                depth: l.depth,
                insns: l.count,
                seg: s as u32,
                line: k as u32,
            });
            if to_end {
                next_open.insert(l.depth, out.len() - 1);
            }
        }
        std::mem::swap(&mut open_at_end, &mut next_open);
    }
    let order = by_start(
        &out,
        |c| segs[c.seg as usize].lines[c.line as usize].first,
        from,
        to,
    );
    order
        .iter()
        .filter_map(|&i| {
            let c = &out[i as usize];
            let seg = segs[c.seg as usize];
            let first = &seg.lines[c.line as usize];
            Some(WindowLine {
                start: c.start,
                end: c.end,
                depth: c.depth,
                frame: seg.frame(first)?,
                inlined: first.inlined(),
                insns: c.insns,
            })
        })
        .collect()
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
    // Per segment, summed by the instruction's index of its address (no
    // hashing), then added up per address; an instruction whose index
    // does not name its address (a segment not from the fine pass) is
    // summed by hashing.
    let mut per: Vec<(InsnHeat, u32)> = Vec::new();
    for seg in segs {
        per.clear();
        per.resize(seg.addrs.len(), (InsnHeat::default(), NO_CHAIN));
        for i in seg.insns_in(from, to) {
            let slot = i.addr as usize;
            let h = match per.get_mut(slot).filter(|_| seg.addrs[slot] == i.ip) {
                Some((h, chain)) => {
                    *chain = i.chain;
                    h
                }
                None => {
                    &mut out
                        .entry(i.ip)
                        .or_insert_with(|| {
                            let c = seg.chains.get(i.chain as usize).cloned();
                            (InsnHeat::default(), c)
                        })
                        .0
                }
            };
            h.count += 1;
            h.time_ns += i.end - i.start;
            h.bitness = i.bitness;
        }
        for (slot, (h, chain)) in per.iter().enumerate() {
            if h.count == 0 {
                continue;
            }
            let (g, _) = out.entry(seg.addrs[slot]).or_insert_with(|| {
                let c = seg.chains.get(*chain as usize).cloned();
                (InsnHeat::default(), c)
            });
            g.count += h.count;
            g.time_ns += h.time_ns;
            g.bitness = h.bitness;
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
    // Summed by the file's text, borrowed: only the lines found take a
    // count on their file's name.
    let mut sums: FxHashMap<(&Arc<str>, u32), LineHeat> = FxHashMap::default();
    let heat = heat_by_address(segs, from, to);
    for (h, chain) in heat.values() {
        let Some(chain) = chain else { continue };
        for (k, f) in chain.iter().enumerate() {
            // A recursive inline chain names a line once.
            if chain[..k]
                .iter()
                .any(|g| g.file == f.file && g.line == f.line)
            {
                continue;
            }
            let l = sums.entry((&f.file, f.line)).or_default();
            l.count = l.count.max(h.count);
            l.insns += h.count;
            l.time_ns += h.time_ns;
        }
    }
    sums.into_iter()
        .map(|((file, line), l)| ((file.clone(), line), l))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{Insn, LineSpan, NO_CHAIN};

    /// What `window_lines` gave before it skipped what the window cannot
    /// hold: every span of every segment, joined, then filtered and
    /// sorted. The reference it is checked against.
    fn reference<'s>(segs: &[&'s Segment], from: u64, to: u64) -> Vec<WindowLine<'s>> {
        let mut out: Vec<WindowLine> = Vec::new();
        let mut open_at_end: HashMap<u32, usize> = HashMap::new();
        for seg in segs {
            let n = seg.insns.len() as u32;
            let mut next_open = HashMap::new();
            for l in &seg.lines {
                let Some(frame) = seg.frame(l) else { continue };
                if l.first == 0 {
                    if let Some(&i) = open_at_end.get(&l.depth) {
                        let o: &mut WindowLine = &mut out[i];
                        if o.frame == frame {
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
                    frame,
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

    /// A segment of `n` instructions from time `t0`, each 0 or 10 ns after
    /// the one before (instructions that share a nanosecond are common),
    /// whose lines at each of `depths` depths change where `rng` says,
    /// among three frames (and no chain).
    fn segment(t0: u64, n: u32, depths: u32, rng: &mut impl FnMut() -> u32) -> Segment {
        let frames: Vec<Chain> = (0..3)
            .map(|k| {
                Chain::from(vec![
                    LineFrame {
                        function: "f".into(),
                        file: "a.c".into(),
                        line: k,
                    };
                    2
                ])
            })
            .collect();
        let mut seg = Segment {
            chains: frames,
            ..Segment::default()
        };
        let mut t = t0;
        seg.insns = (0..n)
            .map(|i| {
                if i > 0 {
                    t += 10 * u64::from(rng() % 2);
                }
                Insn {
                    ip: 0x1000 + u64::from(i),
                    start: t,
                    end: t + 10,
                    depth: 0,
                    chain: 0,
                    exact: false,
                    bitness: 64,
                    addr: 0,
                }
            })
            .collect();
        let mut lines = Vec::new();
        for depth in 0..depths {
            let mut first = 0;
            while first < n {
                let count = (rng() % 7 + 1).min(n - first);
                let chain = match rng() % 4 {
                    3 => NO_CHAIN,
                    c => c % 3,
                };
                lines.push(LineSpan {
                    start: seg.insns[first as usize].start,
                    end: seg.insns[(first + count - 1) as usize].end,
                    depth: depth + 1,
                    chain,
                    level: depth % 2,
                    first,
                    count,
                });
                first += count;
            }
        }
        seg.set_lines(lines);
        seg
    }

    #[test]
    fn windows_join_segments_and_keep_what_overlaps_them() {
        let mut r = fastrand::Rng::with_seed(0x2545_f491);
        let mut rng = move || r.u32(..);
        for round in 0..400 {
            let nsegs = 1 + rng() % 4;
            let mut t0 = 1000;
            let mut segs: Vec<Segment> = (0..nsegs)
                .map(|_| {
                    let n = 1 + rng() % 40;
                    let s = segment(t0, n, 1 + rng() % 3, &mut rng);
                    // The next starts with this one's last instruction
                    // or after it.
                    t0 = s.insns.last().unwrap().start + 10 * u64::from(rng() % 2);
                    s
                })
                .collect();
            // A damaged file's segments can be out of time order.
            if round % 10 == 0 {
                segs.reverse();
            }
            let refs: Vec<&Segment> = segs.iter().collect();
            let span = t0 - 1000;
            let from = 1000 + u64::from(rng()) % (span + 20);
            let to = from + u64::from(rng()) % (span + 20);
            let got = window_lines(&refs, from, to);
            assert_eq!(
                got,
                reference(&refs, from, to),
                "round {round}: [{from}, {to}]"
            );
        }
    }

    #[test]
    fn a_line_across_a_segment_boundary_is_one_span() {
        let same = |t0: u64| {
            let mut seg = segment(t0, 4, 0, &mut || 0);
            seg.set_lines(vec![LineSpan {
                start: t0,
                end: t0 + 40,
                depth: 1,
                chain: 1,
                level: 0,
                first: 0,
                count: 4,
            }]);
            seg
        };
        let (a, b) = (same(0), same(40));
        // A window inside the second segment still gets the whole line.
        let got = window_lines(&[&a, &b], 50, 60);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].start, got[0].end, got[0].insns), (0, 80, 8));
    }

    #[test]
    fn heat_by_address_index_is_heat_by_hashing() {
        let mut r = fastrand::Rng::with_seed(0x9e37_79b9);
        let mut rng = move || r.u32(..);
        for round in 0..50 {
            // Segments whose instructions come back to a few addresses,
            // indexed as the fine pass indexes them.
            let mut t0 = 1000;
            let segs: Vec<Segment> = (0..1 + rng() % 3)
                .map(|_| {
                    let n = 1 + rng() % 60;
                    let mut s = segment(t0, n, 2, &mut rng);
                    t0 = s.insns.last().unwrap().end;
                    let mut seen: HashMap<u64, u32> = HashMap::new();
                    for insn in &mut s.insns {
                        insn.ip = 0x1000 + u64::from(rng() % 7);
                        insn.chain = rng() % 3;
                        insn.bitness = if insn.ip == 0x1003 { 32 } else { 64 };
                        let next = s.addrs.len() as u32;
                        insn.addr = *seen.entry(insn.ip).or_insert(next);
                        if insn.addr == next {
                            s.addrs.push(insn.ip);
                        }
                    }
                    // Same address, same chain, as attribution gives.
                    let chain_of: HashMap<u64, u32> =
                        s.insns.iter().map(|i| (i.ip, i.chain)).collect();
                    for insn in &mut s.insns {
                        insn.chain = chain_of[&insn.ip];
                    }
                    s
                })
                .collect();
            let hashed: Vec<Segment> = segs
                .iter()
                .map(|s| {
                    let mut h = Segment {
                        insns: s.insns.clone(),
                        chains: s.chains.clone(),
                        ..Segment::default()
                    };
                    h.set_lines(s.lines.clone());
                    h
                })
                .collect();
            let from = 1000 + u64::from(rng() % 300);
            let to = from + u64::from(rng() % 600);
            assert_eq!(
                insn_heat(&segs, from, to),
                insn_heat(&hashed, from, to),
                "round {round}"
            );
            assert_eq!(
                line_heat(&segs, from, to),
                line_heat(&hashed, from, to),
                "round {round}"
            );
        }
    }
}
