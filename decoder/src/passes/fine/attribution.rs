//! Line attribution: each instruction gets its chain of source frames (the
//! real function and every inlined call, from DWARF, cached by address),
//! and consecutive instructions on one line merge into line spans at each
//! inline level. It is separate from the walk because it needs only the
//! instructions' addresses, depths and times, not the trace.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::line_source::{LineEngine, State};
use super::{Chain, LineFrame, LineSpan, Segment, NO_CHAIN};

// Line frames for the instructions of a segment, from the symbols.
impl LineEngine {
    /// Gives every instruction its chain of source frames.
    pub(super) fn attach_lines(&self, state: &mut State, proc: usize, seg: &mut Segment) {
        let State {
            resolvers,
            frames,
            strings,
            chains,
            ..
        } = state;
        let resolver = &resolvers[proc];
        let mut by_ip: FxHashMap<u64, (u32, u32)> = FxHashMap::default();
        // The segment's index of each chain: the instructions of one line
        // share it, which is what `build_lines` checks first.
        let mut by_chain: FxHashMap<usize, u32> = FxHashMap::default();
        let mut intern = |s: &str| -> Arc<str> {
            if let Some((k, _)) = strings.get_key_value(s) {
                return k.clone();
            }
            let k: Arc<str> = Arc::from(s);
            strings.insert(k.clone(), ());
            k
        };
        for insn in &mut seg.insns {
            if let Some(&(c, a)) = by_ip.get(&insn.ip) {
                insn.chain = c;
                insn.addr = a;
                continue;
            }
            let chain = frames
                .entry((proc, insn.ip))
                .or_insert_with(|| {
                    let (md, svma) = resolver.module_at(insn.ip)?;
                    let raw = md.source_frames(svma);
                    if raw.is_empty() {
                        return None;
                    }
                    let outer = md.function(svma).map(|f| f.name.to_string());
                    let chain: Vec<LineFrame> = raw
                        .into_iter()
                        .rev()
                        .enumerate()
                        .map(|(k, f)| {
                            // The outermost frame is named as its span is
                            // (the symbol perf would pick of the aliases at
                            // that address: `_IO_default_xsputn`, where the
                            // DWARF says `__GI__IO_default_xsputn`).
                            let function = (k == 0)
                                .then(|| outer.clone())
                                .flatten()
                                .or(f.function)
                                .unwrap_or_else(|| "??".to_string());
                            LineFrame {
                                function: intern(&function),
                                file: intern(f.file.as_deref().unwrap_or("??")),
                                line: f.line.unwrap_or(0),
                            }
                        })
                        .collect();
                    // One chain per content, as for the names in it.
                    let chain = Chain::from(chain);
                    if let Some((k, _)) = chains.get_key_value(&chain) {
                        return Some(k.clone());
                    }
                    chains.insert(chain.clone(), ());
                    Some(chain)
                })
                .clone();
            let c = match chain {
                Some(chain) => *by_chain
                    .entry(Arc::as_ptr(&chain) as *const LineFrame as usize)
                    .or_insert_with(|| {
                        seg.chains.push(chain);
                        (seg.chains.len() - 1) as u32
                    }),
                None => NO_CHAIN,
            };
            let a = seg.addrs.len() as u32;
            seg.addrs.push(insn.ip);
            by_ip.insert(insn.ip, (c, a));
            insn.chain = c;
            insn.addr = a;
        }
    }
}

/// Merges instructions into line spans, per inline level.
pub(super) fn build_lines(seg: &mut Segment) {
    struct Open {
        chain: u32,
        start: u64,
        end: u64,
        first: u32,
        count: u32,
    }
    let mut lines: Vec<LineSpan> = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut depth = u32::MAX;
    let close = |open: &mut Vec<Open>, from: usize, depth: u32, lines: &mut Vec<LineSpan>| {
        while open.len() > from {
            let level = open.len() - 1;
            let o = open.pop().expect("len > from");
            lines.push(LineSpan {
                start: o.start,
                end: o.end,
                depth: depth + 1 + level as u32,
                chain: o.chain,
                level: level as u32,
                first: o.first,
                count: o.count,
            });
        }
    };
    let mut prev_end = None;
    // Instructions with the chain of the one before go on every open
    // level and change nothing else: they are counted here, and added to
    // the levels when something else comes (most instructions, in loops).
    let mut same_chain: Option<u32> = None;
    let mut held = 0u32;
    let flush = |open: &mut Vec<Open>, held: &mut u32, end: Option<u64>| {
        if *held > 0 {
            for o in open.iter_mut() {
                o.end = end.expect("held instructions ended");
                o.count += *held;
            }
            *held = 0;
        }
    };
    for (i, insn) in seg.insns.iter().enumerate() {
        let contiguous = prev_end == Some(insn.start) || prev_end.is_some_and(|e| e >= insn.start);
        if contiguous && insn.depth == depth && same_chain == Some(insn.chain) {
            held += 1;
            prev_end = Some(insn.end);
            continue;
        }
        flush(&mut open, &mut held, prev_end);
        same_chain = None;
        if insn.depth != depth || insn.chain == NO_CHAIN || !contiguous {
            close(&mut open, 0, depth, &mut lines);
            depth = insn.depth;
        }
        prev_end = Some(insn.end);
        if insn.chain == NO_CHAIN {
            continue;
        }
        let chain = &seg.chains[insn.chain as usize];
        // The levels whose frame is unchanged stay open.
        let mut same = 0;
        while same < open.len() && same < chain.len() {
            let o = &open[same];
            if o.chain == insn.chain {
                // The same chain: the same frame at every level.
                same += 1;
                continue;
            }
            if !same_frame(&seg.chains[o.chain as usize][same], &chain[same]) {
                break;
            }
            same += 1;
        }
        close(&mut open, same, depth, &mut lines);
        for o in &mut open {
            o.end = insn.end;
            o.count += 1;
        }
        for _ in same..chain.len() {
            open.push(Open {
                chain: insn.chain,
                start: insn.start,
                end: insn.end,
                first: i as u32,
                count: 1,
            });
        }
        // Every open level is now this chain's frame at that level.
        if open.len() == chain.len() {
            same_chain = Some(insn.chain);
        }
    }
    flush(&mut open, &mut held, prev_end);
    close(&mut open, 0, depth, &mut lines);
    seg.set_lines(by_depth(lines));
}

/// Whether two frames are the same: by the line first, which differs most
/// often, then by the names, which are interned (one `Arc` per text), so
/// that equal ones are one pointer and the texts are compared only where
/// they differ.
#[inline]
fn same_frame(a: &LineFrame, b: &LineFrame) -> bool {
    let same = |x: &Arc<str>, y: &Arc<str>| Arc::ptr_eq(x, y) || x == y;
    a.line == b.line && same(&a.function, &b.function) && same(&a.file, &b.file)
}

/// `lines` ordered by depth, then start, then first instruction. At one
/// depth at most one line span is open at a time, so each depth's spans
/// are closed, and pushed, in that order already: a stable counting sort
/// by depth orders the whole. Checked, and sorted outright where it does
/// not hold, so the result is the same either way.
fn by_depth(lines: Vec<LineSpan>) -> Vec<LineSpan> {
    let key = |l: &LineSpan| (l.depth, l.start, l.first);
    let Some(deepest) = lines.iter().map(|l| l.depth).max() else {
        return lines;
    };
    let mut at = vec![0usize; deepest as usize + 2];
    for l in &lines {
        at[l.depth as usize + 1] += 1;
    }
    for d in 1..at.len() {
        at[d] += at[d - 1];
    }
    let mut sorted = lines.clone();
    for l in &lines {
        let slot = &mut at[l.depth as usize];
        sorted[*slot] = *l;
        *slot += 1;
    }
    if !sorted.is_sorted_by_key(key) {
        sorted.sort_by_key(key);
    }
    sorted
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::build_lines;
    use ptscope_model::{line_heat, Chain, Insn, LineFrame, LineSpan, Segment, NO_CHAIN};

    fn frame(f: &str, file: &str, line: u32) -> LineFrame {
        LineFrame {
            function: f.into(),
            file: file.into(),
            line,
        }
    }

    fn insn(ip: u64, t: u64, depth: u32, chain: u32) -> Insn {
        Insn {
            ip,
            start: t,
            end: t + 1,
            depth,
            chain,
            exact: false,
            bitness: 64,
            addr: 0,
        }
    }

    #[test]
    fn consecutive_instructions_on_a_line_merge_per_inline_level() {
        let mut seg = Segment::default();
        seg.chains = vec![
            Arc::from(vec![frame("loop", "a.c", 10)]),
            Arc::from(vec![frame("loop", "a.c", 11)]),
            Arc::from(vec![frame("loop", "a.c", 11), frame("push", "v.h", 3)]),
            Arc::from(vec![frame("loop", "a.c", 11), frame("push", "v.h", 4)]),
        ];
        seg.insns = vec![
            insn(1, 0, 2, 0),
            insn(2, 1, 2, 0),
            insn(3, 2, 2, 1),
            insn(4, 3, 2, 2),
            insn(5, 4, 2, 3),
            insn(6, 5, 2, 3),
            insn(1, 6, 2, 0),
        ];
        build_lines(&mut seg);
        let row = |d: u32| -> Vec<(u64, u64, u32, u32)> {
            seg.lines_at(d)
                .iter()
                .map(|l| (l.start, l.end, seg.frame(l).unwrap().line, l.count))
                .collect()
        };
        // Line 11 covers its own instruction and the inlined push.
        assert_eq!(row(3), vec![(0, 2, 10, 2), (2, 6, 11, 4), (6, 7, 10, 1)]);
        assert_eq!(row(4), vec![(3, 4, 3, 1), (4, 6, 4, 2)]);
        assert!(seg.lines_at(4).iter().all(|l| l.inlined()));
        assert_eq!(seg.max_depth(), Some(4));
        let heat = line_heat([&seg], 0, 100);
        // Address 1 ran twice: line 10 ran twice.
        assert_eq!(heat[&(Arc::from("a.c"), 10)].count, 2);
        assert_eq!(heat[&(Arc::from("a.c"), 10)].insns, 3);
        assert_eq!(heat[&(Arc::from("a.c"), 11)].insns, 4);
        assert_eq!(heat[&(Arc::from("v.h"), 4)].time_ns, 2);
    }

    #[test]
    fn a_new_function_or_a_gap_ends_a_line() {
        let mut seg = Segment::default();
        seg.chains = vec![Arc::from(vec![frame("f", "a.c", 1)])];
        seg.insns = vec![
            insn(1, 0, 0, 0),
            insn(2, 1, 1, 0),
            insn(3, 10, 1, 0),
            insn(4, 11, 1, NO_CHAIN),
            insn(5, 12, 1, 0),
        ];
        build_lines(&mut seg);
        assert_eq!(seg.lines_at(1).len(), 1);
        let at2: Vec<(u64, u64)> = seg.lines_at(2).iter().map(|l| (l.start, l.end)).collect();
        assert_eq!(at2, vec![(1, 2), (10, 11), (12, 13)]);
        assert_eq!(seg.insns_in(10, 12).len(), 2);
    }

    /// `build_lines` as it was before it ordered by depth without a sort
    /// and held instructions of an unchanged chain: the reference.
    fn reference(seg: &mut Segment) {
        struct Open {
            chain: u32,
            start: u64,
            end: u64,
            first: u32,
            count: u32,
        }
        let mut lines: Vec<LineSpan> = Vec::new();
        let mut open: Vec<Open> = Vec::new();
        let mut depth = u32::MAX;
        let close = |open: &mut Vec<Open>, from: usize, depth: u32, lines: &mut Vec<LineSpan>| {
            while open.len() > from {
                let level = open.len() - 1;
                let o = open.pop().expect("len > from");
                lines.push(LineSpan {
                    start: o.start,
                    end: o.end,
                    depth: depth + 1 + level as u32,
                    chain: o.chain,
                    level: level as u32,
                    first: o.first,
                    count: o.count,
                });
            }
        };
        let mut prev_end = None;
        for (i, insn) in seg.insns.iter().enumerate() {
            let contiguous =
                prev_end == Some(insn.start) || prev_end.is_some_and(|e| e >= insn.start);
            if insn.depth != depth || insn.chain == NO_CHAIN || !contiguous {
                close(&mut open, 0, depth, &mut lines);
                depth = insn.depth;
            }
            prev_end = Some(insn.end);
            if insn.chain == NO_CHAIN {
                continue;
            }
            let chain = &seg.chains[insn.chain as usize];
            // The levels whose frame is unchanged stay open.
            let mut same = 0;
            while same < open.len() && same < chain.len() {
                let o = &open[same];
                if o.chain == insn.chain {
                    // The same chain: the same frame at every level.
                    same += 1;
                    continue;
                }
                let of = &seg.chains[o.chain as usize][same];
                if of != &chain[same] {
                    break;
                }
                same += 1;
            }
            close(&mut open, same, depth, &mut lines);
            for o in &mut open {
                o.end = insn.end;
                o.count += 1;
            }
            for _ in same..chain.len() {
                open.push(Open {
                    chain: insn.chain,
                    start: insn.start,
                    end: insn.end,
                    first: i as u32,
                    count: 1,
                });
            }
        }
        close(&mut open, 0, depth, &mut lines);
        lines.sort_by_key(|l| (l.depth, l.start, l.first));
        seg.set_lines(lines);
    }

    #[test]
    fn lines_are_what_the_reference_gives() {
        let mut r = fastrand::Rng::with_seed(0x1234_5678);
        let mut rng = move || r.u32(..);
        // Chains that share their outer frames, some of one level.
        let f = |name: &str, line: u32| frame(name, "a.c", line);
        let chains: Vec<Chain> = vec![
            Arc::from(vec![f("main", 1)]),
            Arc::from(vec![f("main", 1), f("g", 10)]),
            Arc::from(vec![f("main", 1), f("g", 11)]),
            Arc::from(vec![f("main", 2), f("g", 11)]),
            Arc::from(vec![f("main", 2)]),
        ];
        for round in 0..500 {
            let n = 1 + rng() % 80;
            let mut t = 100;
            let mut depth = 3;
            let insns: Vec<Insn> = (0..n)
                .map(|k| {
                    match rng() % 16 {
                        0 => depth += 1,
                        1 if depth > 0 => depth -= 1,
                        // A gap: trace stopped between two instructions.
                        2 => t += 50,
                        _ => {}
                    }
                    let chain = match rng() % 8 {
                        0 => NO_CHAIN,
                        c => c % 5,
                    };
                    let mut i = insn(0x1000 + u64::from(k), t, depth, chain);
                    t += u64::from(rng() % 2);
                    i.end = t;
                    i
                })
                .collect();
            let make = || {
                let mut s = Segment::default();
                s.insns = insns.clone();
                s.chains = chains.clone();
                s
            };
            let (mut got, mut want) = (make(), make());
            build_lines(&mut got);
            reference(&mut want);
            assert_eq!(got.lines, want.lines, "round {round}");
        }
    }
}
