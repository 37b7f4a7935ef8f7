//! Interval arithmetic over address ranges owned by functions: flattening
//! nested ranges into disjoint ones, subtracting one set from another and
//! finding gaps. Symbols, DWARF and unwind tables each give ranges that may
//! overlap; these helpers decide who owns each byte, and are kept apart
//! because they know nothing of ELF or DWARF.

/// An address range owned by `PendingFunc` number `func`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Interval {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) func: u32,
}

/// Turns possibly overlapping intervals into sorted, disjoint ones. Where
/// they nest, the inner one wins while it lasts and the outer one resumes
/// after it (an assembly label symbol inside a function, a DWARF
/// subprogram nested in another).
pub(super) fn flatten(mut intervals: Vec<Interval>) -> Vec<Interval> {
    intervals.retain(|iv| iv.start < iv.end);
    intervals.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut out: Vec<Interval> = Vec::with_capacity(intervals.len());
    let mut open: Vec<Interval> = Vec::new();
    let mut cursor = 0u64;
    for iv in intervals {
        close_until(&mut open, &mut out, &mut cursor, iv.start);
        cursor = iv.start;
        open.push(iv);
    }
    close_until(&mut open, &mut out, &mut cursor, u64::MAX);
    out
}

/// Emits what the open intervals cover from `cursor` up to `upto`.
fn close_until(open: &mut Vec<Interval>, out: &mut Vec<Interval>, cursor: &mut u64, upto: u64) {
    while let Some(top) = open.last().copied() {
        if top.end <= upto {
            if top.end > *cursor {
                emit(out, *cursor, top.end, top.func);
                *cursor = top.end;
            }
            open.pop();
        } else {
            if upto > *cursor {
                emit(out, *cursor, upto, top.func);
                *cursor = upto;
            }
            break;
        }
    }
}

fn emit(out: &mut Vec<Interval>, start: u64, end: u64, func: u32) {
    match out.last_mut() {
        Some(last) if last.func == func && last.end == start => last.end = end,
        _ => out.push(Interval { start, end, func }),
    }
}

/// The parts of `a` (sorted, disjoint) that `b` (sorted, disjoint) does not cover.
pub(super) fn subtract(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::new();
    let mut j = 0;
    for iv in a {
        let mut pos = iv.start;
        while j < b.len() && b[j].end <= pos {
            j += 1;
        }
        let mut k = j;
        while pos < iv.end {
            match b.get(k) {
                Some(cover) if cover.start <= pos => {
                    pos = cover.end;
                    k += 1;
                }
                Some(cover) => {
                    let gap_end = cover.start.min(iv.end);
                    out.push(Interval {
                        start: pos,
                        end: gap_end,
                        func: iv.func,
                    });
                    pos = gap_end;
                }
                None => {
                    out.push(Interval {
                        start: pos,
                        end: iv.end,
                        func: iv.func,
                    });
                    pos = iv.end;
                }
            }
        }
    }
    out
}

/// Whether `[begin, end)` has a stretch of at least `min_gap` bytes that
/// `covered` (sorted, disjoint) leaves out.
pub(super) fn has_gap(covered: &[Interval], begin: u64, end: u64, min_gap: u64) -> bool {
    let mut pos = begin;
    let mut i = covered.partition_point(|c| c.end <= begin);
    while pos < end {
        match covered.get(i) {
            Some(c) if c.start <= pos => {
                pos = c.end;
                i += 1;
            }
            Some(c) => {
                let gap_end = c.start.min(end);
                if gap_end - pos >= min_gap {
                    return true;
                }
                pos = gap_end;
            }
            None => return end - pos >= min_gap,
        }
    }
    false
}
