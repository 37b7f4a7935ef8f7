//! Random event streams for the builder's tests.

use crate::passes::event::{EndReason, Event, EventKind, FuncId, FuncTable, SpanKind, UNKNOWN};

/// A small random program's events: calls, returns (some to where no
/// call was seen), jumps, tail calls, syscalls and interrupts, tracing
/// off and on, times that often do not move (zero-length spans).
pub(super) fn events(seed: u64, n: usize, funcs: &mut FuncTable) -> Vec<Event> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let names = ["main", "a", "b", "c", "d", "k"];
    let ids: Vec<FuncId> = names
        .iter()
        .map(|n| funcs.intern(n, "m", 0, SpanKind::Call))
        .collect();
    let addr = |f: usize, mid: bool| {
        let base = if f == 5 {
            0xffff_ff00_0000_0000
        } else {
            0x1000
        };
        base + 0x1000 * f as u64 + if mid { 0x40 } else { 0 }
    };
    let mut t = 100;
    let mut out = Vec::new();
    let mut cur = 0usize;
    // What the program's stack is, mostly: returns go back to the
    // caller, but now and then somewhere else.
    let mut calls: Vec<usize> = Vec::new();
    for _ in 0..n {
        t += [0, 0, 1, 3][next(4) as usize];
        let mut dest = 1 + next(4) as usize;
        let kind = match next(40) {
            0..=16 => EventKind::Call,
            17..=32 => EventKind::Return,
            33..=35 => EventKind::Jump,
            36 => EventKind::Syscall,
            37 => EventKind::KernelReturn,
            38 => EventKind::TraceEnd(EndReason::Other),
            _ => EventKind::TraceBegin,
        };
        match kind {
            EventKind::Call => calls.push(cur),
            EventKind::Return => {
                if let Some(c) = calls.pop() {
                    if next(8) != 0 {
                        dest = c;
                    }
                } else if next(2) == 0 {
                    dest = 0;
                }
            }
            _ => {}
        }
        let mid = kind != EventKind::Call && next(4) == 0;
        let (from, from_fn, to, to_fn, entry) = match kind {
            EventKind::Syscall => (addr(cur, true), ids[cur], addr(5, false), ids[5], true),
            EventKind::KernelReturn => (addr(5, true), ids[5], addr(dest, true), ids[dest], false),
            EventKind::TraceEnd(_) => (addr(cur, true), ids[cur], 0, UNKNOWN, false),
            EventKind::TraceBegin => (0, UNKNOWN, addr(dest, mid), ids[dest], !mid),
            EventKind::Return => (
                addr(cur, true),
                ids[cur],
                addr(dest, true),
                ids[dest],
                false,
            ),
            _ => (addr(cur, true), ids[cur], addr(dest, mid), ids[dest], !mid),
        };
        if !matches!(kind, EventKind::TraceEnd(_)) {
            cur = dest;
        }
        out.push(Event {
            time: t,
            kind,
            from,
            to,
            from_fn,
            to_fn,
            to_is_entry: entry,
            estimated: next(3) == 0,
        });
    }
    out
}
