//! The span store: per thread, one sorted lane of spans per call depth.
//!
//! This is the model the viewer draws, so it is laid out for scanning:
//! each lane is a flat array of spans sorted by start time, 16 bytes a
//! span (built in memory, or mapped from a model cache entry), so finding
//! what is visible in a time window is two binary searches per depth and
//! drawing is a linear walk. Durations that do not fit in 32 bits (over
//! 4.29 s) are rare and live in a side table.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backing::SharedSlice;
use crate::funcs::FuncId;

/// One call (or pseudo-call) on one thread at one depth.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    bytemuck::Pod,
    bytemuck::Zeroable,
)]
#[repr(C)]
pub struct Span {
    /// perf time in ns.
    pub start: u64,
    /// Duration in ns; [`Span::LONG`] means "look it up in the long table".
    dur: u32,
    /// Function id in the low 27 bits, flags in the high 5.
    func_flags: u32,
}

const _: () = assert!(std::mem::size_of::<Span>() == 16);

/// Span flags.
pub mod flag {
    /// The start time was interpolated, not read from a timing packet.
    pub const START_ESTIMATED: u32 = 1 << 31;
    /// The end time was interpolated.
    pub const END_ESTIMATED: u32 = 1 << 30;
    /// The call began before the trace did; its start is back-dated.
    pub const INFERRED_START: u32 = 1 << 29;
    /// The call had not returned when the trace ended.
    pub const OPEN_END: u32 = 1 << 28;
    /// Entered by a jump into the middle of the function, not by a call;
    /// its start is exact (the jump), unlike [`INFERRED_START`].
    pub const MID_ENTRY: u32 = 1 << 27;
    /// The flags that say a time is not exactly known.
    pub const ESTIMATES: u32 = START_ESTIMATED | END_ESTIMATED | INFERRED_START | OPEN_END;
    /// Every flag bit; the rest of `func_flags` is the function id.
    pub const ALL: u32 = ESTIMATES | MID_ENTRY;
}

/// The largest function id a span can hold.
pub const MAX_FUNC: FuncId = !flag::ALL;

impl Span {
    const LONG: u32 = u32::MAX;

    /// The span from `start` to `end`, and its duration if too long for a
    /// span to hold (it then reads `Span::LONG`).
    pub fn closed(start: u64, end: u64, func: FuncId, flags: u32) -> (Span, Option<u64>) {
        let dur = end.saturating_sub(start);
        let long = dur >= Span::LONG as u64;
        let span = Span {
            start,
            dur: if long { Span::LONG } else { dur as u32 },
            func_flags: (func & !flag::ALL) | (flags & flag::ALL),
        };
        (span, long.then_some(dur))
    }

    pub fn func(&self) -> FuncId {
        self.func_flags & !flag::ALL
    }

    /// The same span, of function `func`.
    pub fn with_func(self, func: FuncId) -> Span {
        Span {
            func_flags: (func & !flag::ALL) | self.flags(),
            ..self
        }
    }

    pub fn flags(&self) -> u32 {
        self.func_flags & flag::ALL
    }

    pub fn has(&self, f: u32) -> bool {
        self.func_flags & f != 0
    }

    /// Either end of the span was estimated (or back-dated, or cut off).
    /// An exact mid-function entry is not an estimate.
    pub fn is_estimated(&self) -> bool {
        self.func_flags & flag::ESTIMATES != 0
    }
}

/// Spans per [`Block`].
pub const BLOCK: usize = 256;

/// A summary of [`BLOCK`] consecutive spans of a lane, so that drawing a
/// zoomed-out lane can step over a block whose spans all merge (all
/// narrow, all close together) without reading them.
/// Eight bytes per 256 spans: 0.03 bytes per span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// The longest span, in ns; [`Block::MANY`] if 4.3 s or more.
    pub max_dur: u32,
    /// The longest gap before a span (from the previous span's end, which
    /// may be in the block before); [`Block::MANY`] likewise.
    pub max_gap: u32,
}

impl Block {
    /// Too long to say.
    pub const MANY: u32 = u32::MAX;

    fn clamp(ns: u64) -> u32 {
        ns.min(Self::MANY as u64) as u32
    }
}

/// The spans of one lane: built here (shared, so that a model's copies
/// cost nothing), or read in place from a model cache entry, as the
/// little-endian bytes of [`Span`]s that were checked when it was read.
#[derive(Clone, Debug)]
enum Lane {
    Built(Arc<Vec<Span>>),
    Mapped(SharedSlice),
}

impl Default for Lane {
    fn default() -> Self {
        Lane::Built(Arc::default())
    }
}

impl std::ops::Deref for Lane {
    type Target = [Span];

    #[inline]
    fn deref(&self) -> &[Span] {
        match self {
            Lane::Built(v) => v,
            // Aligned and a whole number of spans: `Lane::mapped` checked.
            Lane::Mapped(m) => bytemuck::cast_slice(m.as_bytes()),
        }
    }
}

impl Lane {
    /// The spans `bytes` hold, if they are aligned and whole.
    fn mapped(bytes: SharedSlice) -> Option<Lane> {
        bytemuck::try_cast_slice::<u8, Span>(bytes.as_bytes()).ok()?;
        Some(Lane::Mapped(bytes))
    }

    /// The spans, to add to: copied first if they are shared or mapped.
    fn spans_mut(&mut self) -> &mut Vec<Span> {
        if let Lane::Mapped(_) = self {
            *self = Lane::Built(Arc::new(self.to_vec()));
        }
        match self {
            Lane::Built(v) => Arc::make_mut(v),
            Lane::Mapped(_) => unreachable!("made a built lane above"),
        }
    }

    /// Bytes it takes: in the heap, or mapped from a cache entry.
    fn bytes(&self) -> usize {
        match self {
            Lane::Built(v) => v.capacity() * std::mem::size_of::<Span>(),
            Lane::Mapped(m) => m.as_bytes().len(),
        }
    }
}

/// Where a lane's spans are in a model cache entry's data: `count` spans
/// from byte `offset`, with the CRC-32 of their bytes.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct LaneRef {
    pub offset: u64,
    pub count: u64,
    pub crc: u32,
}

impl LaneRef {
    /// Where `spans`, put at `offset`, are.
    pub fn of(offset: u64, spans: &[Span]) -> LaneRef {
        LaneRef {
            offset,
            count: spans.len() as u64,
            crc: crc32fast::hash(bytemuck::cast_slice(spans)),
        }
    }
}

/// The spans of one thread.
#[derive(Clone, Debug, Default)]
pub struct ThreadSpans {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    lanes: Vec<Lane>,
    /// Per lane, a [`Block`] for every [`BLOCK`] spans (the last partial).
    blocks: Vec<Vec<Block>>,
    /// Durations of spans longer than `u32::MAX - 1` ns, by (depth, index).
    long: HashMap<(u32, u32), u64>,
    /// Per lane, parents that times alone do not tell, as (index, parent)
    /// sorted by index: see [`ThreadSpans::parent`]. Eight bytes each,
    /// where timing is coarse and many calls share an instant.
    tie_parents: Vec<Vec<(u32, u32)>>,
}

/// A thread's spans as the model cache writes them: where its lanes are
/// (their spans go as they are, after the entry's directory), durations
/// too long for a span beside them; block summaries are not kept, as they
/// follow from the spans.
#[derive(serde::Serialize)]
pub struct SpanPartsRef<'a> {
    pid: i32,
    tid: i32,
    comm: &'a str,
    lanes: Vec<LaneRef>,
    long: Vec<(u32, u32, u64)>,
    tie_parents: &'a [Vec<(u32, u32)>],
}

/// [`SpanPartsRef`] as the model cache reads it back, not yet trusted:
/// [`ThreadSpans::from_parts`] checks it.
#[derive(serde::Deserialize)]
pub struct SpanParts {
    pid: i32,
    tid: i32,
    comm: String,
    lanes: Vec<LaneRef>,
    long: Vec<(u32, u32, u64)>,
    tie_parents: Vec<Vec<(u32, u32)>>,
}

impl SpanParts {
    /// How many lanes (depths) it holds.
    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }

    /// The shallowest lanes, as many as hold at most `budget` spans (the
    /// first one whatever it holds), with what belongs to them: what a
    /// re-open shows while it checks the rest. Deeper lanes are left out
    /// whole, so that each lane kept is still checked against its CRC.
    pub fn top(&self, budget: u64) -> SpanParts {
        let mut spans = 0u64;
        let keep = self
            .lanes
            .iter()
            .take_while(|l| {
                let first = spans == 0;
                spans = spans.saturating_add(l.count);
                first || spans <= budget
            })
            .count();
        SpanParts {
            pid: self.pid,
            tid: self.tid,
            comm: self.comm.clone(),
            lanes: self.lanes[..keep].to_vec(),
            long: self
                .long
                .iter()
                .copied()
                .filter(|&(d, ..)| (d as usize) < keep)
                .collect(),
            tie_parents: self.tie_parents.iter().take(keep).cloned().collect(),
        }
    }
}

impl ThreadSpans {
    /// The spans as the model cache writes them; `place` puts each lane's
    /// spans in the entry's data and says where.
    pub fn parts<'a>(&'a self, place: &mut dyn FnMut(&'a [Span]) -> LaneRef) -> SpanPartsRef<'a> {
        let mut long: Vec<(u32, u32, u64)> = self
            .long
            .iter()
            .map(|(&(d, i), &dur)| (d, i, dur))
            .collect();
        long.sort_unstable();
        SpanPartsRef {
            pid: self.pid,
            tid: self.tid,
            comm: &self.comm,
            lanes: self.lanes.iter().map(|l| place(l)).collect(),
            long,
            tie_parents: &self.tie_parents,
        }
    }

    /// The spans [`parts`](Self::parts) gave, read back from a file that
    /// may have been damaged, their lanes in place in `data`: every lane
    /// where it says and as its checksum says, in start order, every
    /// function id below `funcs`, every long duration and recorded parent
    /// where its span is. The block summaries are built again on the way.
    pub fn from_parts(
        p: SpanParts,
        funcs: usize,
        data: &SharedSlice,
    ) -> Result<ThreadSpans, String> {
        let long: HashMap<(u32, u32), u64> = p
            .long
            .into_iter()
            .map(|(d, i, dur)| ((d, i), dur))
            .collect();
        let mut t = ThreadSpans::new(p.pid, p.tid, p.comm);
        t.long = long;
        t.ensure_lanes(p.lanes.len());
        let mut lanes = Vec::with_capacity(p.lanes.len());
        for (d, r) in p.lanes.iter().enumerate() {
            let bytes = r
                .count
                .checked_mul(std::mem::size_of::<Span>() as u64)
                .and_then(|n| data.slice(r.offset, n))
                .ok_or_else(|| format!("lane {d} is not in the entry"))?;
            let lane = Lane::mapped(bytes).ok_or_else(|| format!("lane {d} is not aligned"))?;
            lanes.push((lane, r.crc));
        }
        // Lanes are checked and summarized in pieces of whole blocks, on
        // every core when there are enough spans to be worth it.
        let long = &t.long;
        let mut pieces: Vec<(usize, usize, usize)> = Vec::new();
        for (d, (lane, _)) in lanes.iter().enumerate() {
            let mut from = 0;
            loop {
                let to = (from + PIECE).min(lane.len());
                pieces.push((d, from, to));
                if to == lane.len() {
                    break;
                }
                from = to;
            }
        }
        let check = |k: usize| -> Result<(crc32fast::Hasher, Vec<Block>, usize), String> {
            let (d, from, to) = pieces[k];
            let lane: &[Span] = &lanes[d].0;
            let mut crc = crc32fast::Hasher::new();
            let mut blocks = Vec::new();
            let mut last = from.checked_sub(1).map_or(0, |i| lane[i].start);
            let mut longs = 0;
            // A stretch at a time, checksummed, checked and summarized
            // while it is in cache.
            for at in (from..to).step_by(STRETCH) {
                let end = (at + STRETCH).min(to);
                crc.update(bytemuck::cast_slice(&lane[at..end]));
                for (i, s) in lane.iter().enumerate().take(end).skip(at) {
                    if s.start < last {
                        return Err(format!("lane {d} is out of order at span {i}"));
                    }
                    last = s.start;
                    if s.func() as usize >= funcs {
                        return Err(format!("span {i} of lane {d} names no function"));
                    }
                    let dur = if s.dur == Span::LONG {
                        longs += 1;
                        *long
                            .get(&(d as u32, i as u32))
                            .ok_or_else(|| format!("span {i} of lane {d} has no duration"))?
                    } else {
                        s.dur as u64
                    };
                    if s.start.checked_add(dur).is_none() {
                        return Err(format!("span {i} of lane {d} ends after time does"));
                    }
                }
                summarize(&lane[..end], d, long, &mut blocks, at);
            }
            Ok((crc, blocks, longs))
        };
        let spans: usize = lanes.iter().map(|(l, _)| l.len()).sum();
        let workers = match spans {
            0..PIECE => 1,
            _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let checked = crate::parallel::map_indexed(pieces.len(), workers, check);
        let mut crcs: Vec<Option<crc32fast::Hasher>> = vec![None; lanes.len()];
        let mut longs = 0;
        for (&(d, ..), c) in pieces.iter().zip(checked) {
            let (crc, blocks, n) = c?;
            longs += n;
            match &mut crcs[d] {
                Some(all) => all.combine(&crc),
                none => *none = Some(crc),
            }
            t.blocks[d].extend(blocks);
        }
        for (d, ((lane, crc), all)) in lanes.into_iter().zip(crcs).enumerate() {
            if all.map(|h| h.finalize()) != Some(crc) {
                return Err(format!("lane {d} does not match its checksum"));
            }
            t.lanes[d] = lane;
        }
        if longs != t.long.len() {
            return Err("long durations of no span".into());
        }
        for (d, ties) in p.tie_parents.iter().enumerate() {
            let ok = ties.windows(2).all(|w| w[0].0 < w[1].0)
                && ties.iter().all(|&(i, parent)| {
                    d > 0
                        && (i as usize) < t.lane(d).len()
                        && (parent as usize) < t.lane(d - 1).len()
                });
            if !ok {
                return Err(format!(
                    "the recorded parents of lane {d} are not its spans'"
                ));
            }
        }
        t.tie_parents = p.tie_parents;
        Ok(t)
    }

    pub fn new(pid: i32, tid: i32, comm: String) -> ThreadSpans {
        ThreadSpans {
            pid,
            tid,
            comm,
            ..ThreadSpans::default()
        }
    }

    /// Appends a span at `depth`. Spans of one depth must arrive in start
    /// order and must not overlap, which call nesting guarantees.
    pub fn push(&mut self, depth: usize, start: u64, end: u64, func: FuncId, flags: u32) {
        debug_assert!(func <= MAX_FUNC);
        self.ensure_lanes(depth + 1);
        let lane = self.lanes[depth].spans_mut();
        debug_assert!(lane.last().is_none_or(|l| l.start <= start));
        let (span, long) = Span::closed(start, end, func, flags);
        if let Some(dur) = long {
            self.long.insert((depth as u32, lane.len() as u32), dur);
        }
        lane.push(span);
        let last = lane.len() - 1;
        self.summarize(depth, last);
    }

    /// Appends a lane's worth of spans at `depth`, in start order and after
    /// those already there: a builder's closed segment. `long` gives the
    /// durations of its `Span::LONG` spans by index into `spans`. An
    /// empty lane takes `spans` as it is, without copying a span.
    pub fn append_lane(
        &mut self,
        depth: usize,
        spans: Vec<Span>,
        long: impl Iterator<Item = (usize, u64)>,
    ) {
        self.append_lane_on(depth, spans, long, 1);
    }

    /// [`append_lane`](Self::append_lane), its spans summarized on up to
    /// `workers` threads: a decode on several cores files a thread's
    /// segment of millions of spans at its end, when the other cores are
    /// done.
    pub fn append_lane_on(
        &mut self,
        depth: usize,
        spans: Vec<Span>,
        long: impl Iterator<Item = (usize, u64)>,
        workers: usize,
    ) {
        self.ensure_lanes(depth + 1);
        let lane = self.lanes[depth].spans_mut();
        let from = lane.len();
        debug_assert!(match (lane.last(), spans.first()) {
            (Some(l), Some(s)) => l.start <= s.start,
            _ => true,
        });
        if from == 0 {
            *lane = spans;
        } else {
            lane.extend_from_slice(&spans);
        }
        for (i, dur) in long {
            self.long.insert((depth as u32, (from + i) as u32), dur);
        }
        self.summarize_on(depth, from, workers);
    }

    /// [`summarize`](Self::summarize) on up to `workers` threads: the
    /// block `from` lies in on this one, then the whole blocks after it in
    /// pieces, each summarized apart and filed in order.
    fn summarize_on(&mut self, depth: usize, from: usize, workers: usize) {
        let lane: &[Span] = &self.lanes[depth];
        let split = from.next_multiple_of(BLOCK).min(lane.len());
        if workers <= 1 || lane.len() - split < 4 * SUMMARY_PIECE {
            return self.summarize(depth, from);
        }
        let blocks = &mut self.blocks[depth];
        summarize(&lane[..split], depth, &self.long, blocks, from);
        let pieces: Vec<usize> = (split..lane.len()).step_by(SUMMARY_PIECE).collect();
        let done = crate::parallel::map_indexed(pieces.len(), workers, |k| {
            let at = pieces[k];
            let end = (at + SUMMARY_PIECE).min(lane.len());
            let mut piece = Vec::with_capacity(SUMMARY_PIECE / BLOCK);
            summarize(&lane[..end], depth, &self.long, &mut piece, at);
            piece
        });
        for piece in done {
            blocks.extend(piece);
        }
    }

    fn ensure_lanes(&mut self, n: usize) {
        if self.lanes.len() < n {
            self.lanes.resize_with(n, Lane::default);
            self.blocks.resize_with(n, Vec::new);
        }
    }

    /// Folds the spans of lane `depth` from `from` on into their blocks'
    /// summaries.
    fn summarize(&mut self, depth: usize, from: usize) {
        summarize(
            &self.lanes[depth],
            depth,
            &self.long,
            &mut self.blocks[depth],
            from,
        );
    }

    pub fn depth(&self) -> usize {
        self.lanes.len()
    }

    pub fn lane(&self, depth: usize) -> &[Span] {
        self.lanes.get(depth).map_or(&[], |l| l)
    }

    /// The block summaries of lane `depth`: block `b` covers spans
    /// `b * BLOCK..(b + 1) * BLOCK`.
    pub fn blocks(&self, depth: usize) -> &[Block] {
        self.blocks.get(depth).map_or(&[], |b| b.as_slice())
    }

    pub fn lanes(&self) -> impl Iterator<Item = (usize, &[Span])> {
        self.lanes.iter().enumerate().map(|(d, l)| (d, &l[..]))
    }

    /// The duration of the span at `index` of lane `depth`.
    #[inline]
    pub fn duration(&self, depth: usize, index: usize) -> u64 {
        self.duration_of(depth, index, &self.lanes[depth][index])
    }

    /// The duration of `s`, the span at `index` of lane `depth`: for loops
    /// that hold the lane already.
    #[inline]
    pub fn duration_of(&self, depth: usize, index: usize, s: &Span) -> u64 {
        span_duration(&self.long, depth, index, s)
    }

    pub fn end(&self, depth: usize, index: usize) -> u64 {
        self.lanes[depth][index].start + self.duration(depth, index)
    }

    pub fn span_count(&self) -> usize {
        self.lanes.iter().map(|l| l.len()).sum()
    }

    /// First start and last end over all spans.
    pub fn time_range(&self) -> Option<(u64, u64)> {
        let mut r: Option<(u64, u64)> = None;
        for (d, lane) in self.lanes.iter().enumerate() {
            if lane.is_empty() {
                continue;
            }
            let lo = lane[0].start;
            // Ends are not sorted in a lane only if spans overlap, which
            // they do not; the last span ends last.
            let hi = self.end(d, lane.len() - 1);
            r = Some(r.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        }
        r
    }

    /// Index range of the spans in lane `depth` that overlap `[from, to)`.
    pub fn visible(&self, depth: usize, from: u64, to: u64) -> std::ops::Range<usize> {
        let lane = self.lane(depth);
        let hi = lane.partition_point(|s| s.start < to);
        // Spans of a lane do not overlap, so their ends are sorted too.
        let lo = first_index(0, hi, |i| self.end(depth, i) > from);
        lo..hi
    }

    /// The spans of lane `depth - 1` that contain span `index` of lane
    /// `depth`, as (first, last); None if none does (a top-level span, or
    /// inconsistent input). Spans of a lane do not overlap, so only a
    /// zero-length span can have more than one: at an instant where spans
    /// above end, sit (zero-length too) and begin.
    fn containing(&self, depth: usize, index: usize) -> Option<(usize, usize)> {
        if depth == 0 || index >= self.lane(depth).len() {
            return None;
        }
        let (start, end) = (self.lanes[depth][index].start, self.end(depth, index));
        let up = self.lane(depth - 1);
        let last = up.partition_point(|p| p.start <= start).checked_sub(1)?;
        if self.end(depth - 1, last) < end {
            return None;
        }
        if start < end {
            return Some((last, last));
        }
        // The first span above that has not ended before `start`.
        let first = first_index(0, last, |i| self.end(depth - 1, i) >= start);
        Some((first, last))
    }

    /// Index (in lane `depth - 1`) of the parent of span `index` of lane
    /// `depth`: the span above that contains it. Times are whole ns and
    /// perf stamps runs of branches with one time, so a zero-length call
    /// can lie in several spans above; the builder, which knew which was
    /// open, records the parent of such a call with
    /// [`file_under`](Self::file_under) where it is not the earliest.
    /// None for top-level spans and for spans nothing contains
    /// (inconsistent input).
    pub fn parent(&self, depth: usize, index: usize) -> Option<usize> {
        let (first, last) = self.containing(depth, index)?;
        if first == last {
            return Some(first);
        }
        let ties = self
            .tie_parents
            .get(depth)
            .map_or(&[][..], |t| t.as_slice());
        let recorded = ties
            .binary_search_by_key(&(index as u32), |&(i, _)| i)
            .map(|k| ties[k].1 as usize);
        Some(recorded.unwrap_or(first))
    }

    /// Records that span `index` of lane `depth` was made inside span
    /// `parent` of the lane above, once both are in the store. Kept only
    /// where [`parent`](Self::parent) would not find it from times alone,
    /// and only if `parent` does contain it.
    pub fn file_under(&mut self, depth: usize, index: usize, parent: usize) {
        let Some((first, last)) = self.containing(depth, index) else {
            return;
        };
        if parent != first && (first..=last).contains(&parent) {
            if self.tie_parents.len() <= depth {
                self.tie_parents.resize_with(depth + 1, Vec::new);
            }
            // The builder files spans in index order: this is an append.
            let ties = &mut self.tie_parents[depth];
            let entry = (index as u32, parent as u32);
            match ties.binary_search_by_key(&entry.0, |&(i, _)| i) {
                Ok(k) => ties[k] = entry,
                Err(k) => ties.insert(k, entry),
            }
        }
    }

    /// Indices (in lane `depth + 1`) of the children of span `index` of
    /// lane `depth`: those whose [`parent`](Self::parent) it is.
    pub fn children(&self, depth: usize, index: usize) -> std::ops::Range<usize> {
        if index >= self.lane(depth).len() {
            return 0..0;
        }
        let (start, end) = (self.lanes[depth][index].start, self.end(depth, index));
        let below = self.lane(depth + 1);
        let lo = below.partition_point(|c| c.start < start);
        let mut hi = below.partition_point(|c| c.start <= end);
        // The last can stick out past `end` (inconsistent input): no
        // span above contains it.
        if hi > lo && self.end(depth + 1, hi - 1) > end {
            hi -= 1;
        }
        // Only zero-length spans at either end can be another span's: at
        // `start`, of spans above that end or sit there; at `end`, of
        // spans that sit or begin there. Parents rise with the index, so
        // each end is a binary search, however many calls share an instant.
        let of = |c: usize| self.parent(depth + 1, c);
        let lo = first_index(lo, hi, |c| {
            !(below[c].start == start && self.duration(depth + 1, c) == 0 && of(c) < Some(index))
        });
        let hi = first_index(lo, hi, |c| below[c].start == end && of(c) != Some(index));
        lo..hi
    }

    /// Every span in tree order (parents before children, siblings by
    /// time), as (depth, index), by [`parent`](Self::parent): one pass
    /// over each lane, as children of consecutive parents are consecutive.
    pub fn tree_order(&self) -> Vec<(usize, usize)> {
        let n = self.lanes.len();
        let mut out = Vec::with_capacity(self.span_count());
        // Per lane, the next span not yet placed; spans a cursor passes
        // without placing (no parent claims them: inconsistent input)
        // still appear, at the end.
        let mut cur = vec![0usize; n];
        let mut orphans = Vec::new();
        // The open ancestors, as indices into their lanes.
        let mut open: Vec<usize> = Vec::new();
        while n > 0 && cur[0] < self.lanes[0].len() {
            out.push((0, cur[0]));
            open.push(cur[0]);
            cur[0] += 1;
            while let Some(&p) = open.last() {
                let d = open.len();
                let mut next = None;
                while d < n && cur[d] < self.lanes[d].len() {
                    match self.parent(d, cur[d]) {
                        Some(q) if q == p => {
                            next = Some(cur[d]);
                            break;
                        }
                        Some(q) if q > p => break,
                        _ => {
                            orphans.push((d, cur[d]));
                            cur[d] += 1;
                        }
                    }
                }
                match next {
                    Some(i) => {
                        out.push((d, i));
                        open.push(i);
                        cur[d] += 1;
                    }
                    None => {
                        open.pop();
                    }
                }
            }
        }
        out.extend(orphans);
        for (d, &c) in cur.iter().enumerate() {
            out.extend((c..self.lanes[d].len()).map(|i| (d, i)));
        }
        out
    }

    /// Gives back the lanes' spare capacity once building is done, so the
    /// store holds 16 bytes per span (and 16 per block of 256).
    pub fn shrink_to_fit(&mut self) {
        for l in &mut self.lanes {
            if let Lane::Built(v) = l {
                if let Some(v) = Arc::get_mut(v) {
                    v.shrink_to_fit();
                }
            }
        }
        for b in &mut self.blocks {
            b.shrink_to_fit();
        }
        for t in &mut self.tie_parents {
            t.shrink_to_fit();
        }
        self.lanes.shrink_to_fit();
    }

    /// Bytes of memory the spans take.
    pub fn memory_bytes(&self) -> usize {
        self.lanes.iter().map(Lane::bytes).sum::<usize>()
            + self
                .blocks
                .iter()
                .map(|b| b.capacity() * std::mem::size_of::<Block>())
                .sum::<usize>()
            + self.long.len() * 24
            + self
                .tie_parents
                .iter()
                .map(|t| t.capacity() * 8)
                .sum::<usize>()
    }
}

/// Spans a piece of a lane that the model cache checks on one core at a
/// time: whole blocks, so that pieces summarize apart.
const PIECE: usize = BLOCK * 4096;

/// Spans a thread summarizes at a time when a lane is filed on several
/// (whole blocks, so that pieces summarize apart).
const SUMMARY_PIECE: usize = BLOCK * 1024;

/// What a piece is read in at a time: 64 KiB of spans, whole blocks.
const STRETCH: usize = BLOCK * 16;

/// Folds the spans of `lane` (lane `depth`) from `from` on into their
/// blocks' summaries, `blocks`; spans are summarized in order, from a
/// block's first.
fn summarize(
    lane: &[Span],
    depth: usize,
    long: &HashMap<(u32, u32), u64>,
    blocks: &mut Vec<Block>,
    from: usize,
) {
    let dur = |i: usize| span_duration(long, depth, i, &lane[i]);
    // The end of the span before; the first span of a lane has none, and
    // its gap counts as 0 (its own start).
    let mut prev_end = match from {
        0 => lane.first().map_or(0, |s| s.start),
        i => lane[i - 1].start.saturating_add(dur(i - 1)),
    };
    let mut i = from;
    while i < lane.len() {
        // The rest of this span's block, folded in one go, without a
        // branch but for the rare long span: this runs over every span of
        // a decode, at its end.
        let end = ((i / BLOCK + 1) * BLOCK).min(lane.len());
        let (mut max_dur, mut max_gap) = (0u64, 0u64);
        for (k, s) in lane[i..end].iter().enumerate() {
            let d = match s.dur {
                Span::LONG => span_duration(long, depth, i + k, s),
                d => d as u64,
            };
            max_dur = max_dur.max(d);
            max_gap = max_gap.max(s.start.saturating_sub(prev_end));
            prev_end = s.start.saturating_add(d);
        }
        let (bd, bg) = (Block::clamp(max_dur), Block::clamp(max_gap));
        if i.is_multiple_of(BLOCK) {
            blocks.push(Block {
                max_dur: bd,
                max_gap: bg,
            });
        } else if let Some(b) = blocks.last_mut() {
            b.max_dur = b.max_dur.max(bd);
            b.max_gap = b.max_gap.max(bg);
        }
        i = end;
    }
}

#[inline]
fn span_duration(long: &HashMap<(u32, u32), u64>, depth: usize, index: usize, s: &Span) -> u64 {
    if s.dur == Span::LONG {
        long.get(&(depth as u32, index as u32))
            .copied()
            .unwrap_or(0)
    } else {
        s.dur as u64
    }
}

/// The first index in `lo..hi` where `pred` holds, given that it holds
/// from some index on (`hi` if nowhere).
fn first_index(mut lo: usize, mut hi: usize, pred: impl Fn(usize) -> bool) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// Per-function figures over a set of threads (pseudo-spans included): what `ptscope stats` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuncStats {
    /// Its spans. Those of a pseudo-function (`[untraced]`, …; see
    /// [`crate::funcs::FuncTable::is_call`]) are not calls, and whoever
    /// shows these figures must not call them so.
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

impl FuncStats {
    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.calls).unwrap_or(0)
    }
}

/// Calls, total, self, min and max per function, over the spans of
/// `threads` that lie in `[from, to)` (by start time). Self time is the
/// duration less the time of direct children.
pub fn function_stats<'a>(
    threads: impl IntoIterator<Item = &'a ThreadSpans>,
    from: u64,
    to: u64,
) -> HashMap<FuncId, FuncStats> {
    // By function id, which is dense: a hash lookup per span was most of
    // the time `stats` took on a big model (20 s for 180 M spans).
    let mut by_id: Vec<FuncStats> = Vec::new();
    for t in threads {
        for d in 0..t.depth() {
            let lane = t.lane(d);
            let child = t.lane(d + 1);
            // Children of consecutive parents are consecutive: sweep.
            let mut c = 0usize;
            for (i, s) in lane.iter().enumerate() {
                let dur = t.duration_of(d, i, s);
                let end = s.start + dur;
                let mut child_ns = 0u64;
                while c < child.len() && child[c].start < s.start {
                    c += 1;
                }
                while c < child.len() && child[c].start < end.max(s.start + 1) {
                    let ce = (child[c].start + t.duration_of(d + 1, c, &child[c])).min(end);
                    child_ns += ce.saturating_sub(child[c].start);
                    c += 1;
                }
                if s.start < from || s.start >= to {
                    continue;
                }
                let f = s.func() as usize;
                if f >= by_id.len() {
                    by_id.resize(
                        f + 1,
                        FuncStats {
                            min_ns: u64::MAX,
                            ..FuncStats::default()
                        },
                    );
                }
                let e = &mut by_id[f];
                e.calls += 1;
                e.total_ns += dur;
                e.self_ns += dur.saturating_sub(child_ns);
                e.min_ns = e.min_ns.min(dur);
                e.max_ns = e.max_ns.max(dur);
            }
        }
    }
    by_id
        .into_iter()
        .enumerate()
        .filter(|(_, e)| e.calls > 0)
        .map(|(f, e)| (f as FuncId, e))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::funcs::{FuncTable, SpanKind};

    fn roundtrip(t: &ThreadSpans, funcs: usize) -> Result<ThreadSpans, String> {
        let mut data = Vec::new();
        let parts = t.parts(&mut |spans| {
            let r = LaneRef::of(data.len() as u64, spans);
            data.extend_from_slice(bytemuck::cast_slice(spans));
            r
        });
        let bytes = postcard::to_allocvec(&parts).unwrap();
        let data = SharedSlice::new(crate::backing::Backing::Memory(
            crate::backing::Aligned::copy_of(&data),
        ));
        ThreadSpans::from_parts(postcard::from_bytes(&bytes).unwrap(), funcs, &data)
    }

    #[test]
    fn the_top_of_a_threads_parts_is_its_shallowest_whole_lanes() {
        let mut t = ThreadSpans::new(1, 2, "prog".into());
        t.push(0, 0, 1000, 3, 0);
        for i in 0..3 {
            t.push(1, 10 + i * 100, 50 + i * 100, 4, 0);
        }
        t.push(2, 20, 20 + (1 << 40), 5, 0);
        t.push(2, 20, 20, 5, 0);
        let parts = t.parts(&mut |spans| LaneRef::of(0, spans));
        let parts: SpanParts =
            postcard::from_bytes(&postcard::to_allocvec(&parts).unwrap()).unwrap();
        let lanes = |p: &SpanParts| p.lanes.iter().map(|l| l.count).collect::<Vec<_>>();
        assert_eq!(lanes(&parts.top(u64::MAX)), [1, 3, 2]);
        assert_eq!(lanes(&parts.top(4)), [1, 3]);
        assert_eq!(lanes(&parts.top(5)), [1, 3]);
        // The first lane whatever it holds; never part of a lane.
        assert_eq!(lanes(&parts.top(0)), [1]);
        assert_eq!(lanes(&parts.top(2)), [1]);
        // What belongs to a lane left out goes with it.
        assert_eq!(parts.top(u64::MAX).long.len(), 1);
        assert!(parts.top(4).long.is_empty());
        assert_eq!(
            parts.top(u64::MAX).tie_parents.len(),
            parts.tie_parents.len()
        );
        assert!(parts.top(4).tie_parents.len() <= 2);
    }

    #[test]
    fn spans_come_back_from_their_parts_as_they_were() {
        let mut t = ThreadSpans::new(1, 2, "prog".into());
        t.push(0, 10, 100, 3, flag::INFERRED_START);
        t.push(1, 20, 20, 4, 0);
        t.push(1, 20, 30, 5, 0);
        t.push(0, 200, 200 + (1 << 40), 6, flag::OPEN_END);
        t.push(3, 300, 301, 4, 0);
        let back = roundtrip(&t, 7).unwrap();
        assert_eq!(back.depth(), t.depth());
        for (d, lane) in t.lanes() {
            assert_eq!(back.lane(d), lane);
            assert_eq!(back.blocks(d), t.blocks(d));
            for i in 0..lane.len() {
                assert_eq!(back.end(d, i), t.end(d, i));
            }
        }
        assert_eq!(back.end(0, 1), 200 + (1 << 40));
        assert_eq!((back.pid, back.tid, back.comm.as_str()), (1, 2, "prog"));
    }

    #[test]
    fn damaged_parts_are_refused() {
        let mut t = ThreadSpans::new(1, 2, "prog".into());
        t.push(0, 10, 100, 3, 0);
        t.push(0, 200, 300, 4, 0);
        // A function the table does not have.
        assert!(roundtrip(&t, 4).unwrap_err().contains("names no function"));
        // Out of order.
        t.lanes[0].spans_mut().swap(0, 1);
        assert!(roundtrip(&t, 5).unwrap_err().contains("out of order"));
        // A span that would end after the last instant there is (fuzzing,
        // round 15: its end overflowed).
        t.lanes[0].spans_mut()[..2].copy_from_slice(&[
            Span::closed(10, 100, 3, 0).0,
            Span::closed(u64::MAX - 1, u64::MAX, 4, 0).0,
        ]);
        t.lanes[0].spans_mut()[1].dur = 100;
        assert!(roundtrip(&t, 5)
            .unwrap_err()
            .contains("ends after time does"));
    }

    #[test]
    fn spans_are_16_bytes_and_keep_flags() {
        let mut t = ThreadSpans::new(1, 1, "x".into());
        t.push(0, 100, 250, 7, flag::INFERRED_START);
        let s = t.lane(0)[0];
        assert_eq!(s.func(), 7);
        assert!(s.has(flag::INFERRED_START));
        assert!(!s.has(flag::OPEN_END));
        assert_eq!(t.duration(0, 0), 150);
    }

    #[test]
    fn mid_entry_is_a_flag_bit_but_not_an_estimate() {
        assert_eq!(flag::ALL, 0xF800_0000);
        assert_eq!(MAX_FUNC, (1 << 27) - 1);
        let mut t = ThreadSpans::new(1, 1, "x".into());
        t.push(0, 100, 250, MAX_FUNC, flag::MID_ENTRY);
        t.push(0, 300, 400, 9, flag::MID_ENTRY | flag::END_ESTIMATED);
        let (a, b) = (t.lane(0)[0], t.lane(0)[1]);
        assert_eq!(a.func(), MAX_FUNC);
        assert_eq!(a.flags(), flag::MID_ENTRY);
        assert!(!a.is_estimated());
        assert!(!a.has(flag::INFERRED_START));
        assert_eq!(b.func(), 9);
        assert!(b.is_estimated());
    }

    #[test]
    fn a_finished_store_holds_16_bytes_per_span() {
        let mut t = ThreadSpans::new(1, 1, "x".into());
        for i in 0..1000u64 {
            t.push((i % 3) as usize, i * 10, i * 10 + 5, 1, 0);
        }
        assert!(t.memory_bytes() > 16 * 1000, "growth leaves spare room");
        t.shrink_to_fit();
        // And a block summary per 256 spans of a lane (here 2 per lane).
        assert_eq!(t.memory_bytes(), 16 * 1000 + 3 * 2 * 8);
    }

    #[test]
    fn a_lane_filed_on_several_threads_is_summarized_as_on_one() {
        // Gaps and durations that vary (some long), so that every block's
        // summary differs, appended where blocks are whole and mid-block.
        let mut rng = fastrand::Rng::with_seed(41);
        let lane = |n: usize, start: u64, rng: &mut fastrand::Rng| {
            let mut spans = Vec::with_capacity(n);
            let mut long = Vec::new();
            let mut t = start;
            for i in 0..n {
                t += rng.u64(0..1000);
                let dur = match rng.u32(0..100_000) {
                    0 => 10_000_000_000 + rng.u64(..1000),
                    _ => rng.u64(1..5000),
                };
                let (span, l) = Span::closed(t, t + dur, 1 + rng.u32(0..50), 0);
                if let Some(ns) = l {
                    long.push((i, ns));
                }
                spans.push(span);
                t += dur;
            }
            (spans, long, t)
        };
        for first in [0, BLOCK * 3, BLOCK * 3 + 17] {
            let n = 5 * SUMMARY_PIECE + 1234;
            let (a, long_a, end) = lane(first, 0, &mut rng);
            let (b, long_b, _) = lane(n, end, &mut rng);
            let mut one = ThreadSpans::new(1, 1, "x".into());
            let mut two = ThreadSpans::new(1, 1, "x".into());
            for (t, workers) in [(&mut one, 1), (&mut two, 2)] {
                t.append_lane(0, a.clone(), long_a.iter().copied());
                t.append_lane_on(0, b.clone(), long_b.iter().copied(), workers);
            }
            assert_eq!(one.blocks(0).len(), (first + n).div_ceil(BLOCK));
            assert!(one.blocks(0) == two.blocks(0), "appended after {first}");
        }
    }

    #[test]
    fn long_durations_go_to_the_side_table() {
        let mut t = ThreadSpans::new(1, 1, "x".into());
        let ten_s = 10_000_000_000u64;
        t.push(0, 5, 5 + ten_s, 3, 0);
        t.push(0, 5 + ten_s, 6 + ten_s, 3, 0);
        assert_eq!(t.duration(0, 0), ten_s);
        assert_eq!(t.duration(0, 1), 1);
        assert_eq!(t.time_range(), Some((5, 6 + ten_s)));
        assert_eq!(t.visible(0, 6, 7), 0..1);
        assert_eq!(t.visible(0, 5 + ten_s, 5 + ten_s + 1), 1..2);
    }

    #[test]
    fn visible_finds_overlapping_spans() {
        let mut t = ThreadSpans::new(1, 1, "x".into());
        for i in 0..10u64 {
            t.push(0, i * 10, i * 10 + 5, 1, 0);
        }
        assert_eq!(t.visible(0, 12, 31), 1..4);
        assert_eq!(t.visible(0, 16, 19), 2..2);
        assert_eq!(t.visible(0, 0, 1000), 0..10);
        assert_eq!(t.visible(3, 0, 1000), 0..0);
    }

    #[test]
    fn tree_order_puts_boundary_children_under_the_right_parent() {
        let mut t = ThreadSpans::new(1, 1, "x".into());
        // a (10-20) tail-calls b (20-30); c (20-25) is b's child, and the
        // zero-length d (20-20) is a's last child.
        t.push(0, 10, 20, 1, 0);
        t.push(0, 20, 30, 2, 0);
        t.push(1, 20, 20, 4, 0);
        t.push(1, 20, 25, 3, 0);
        assert_eq!(funcs_in_tree_order(&t), [1, 4, 2, 3]);
    }

    fn funcs_in_tree_order(t: &ThreadSpans) -> Vec<u32> {
        t.tree_order()
            .into_iter()
            .map(|(d, i)| t.lane(d)[i].func())
            .collect()
    }

    #[test]
    fn a_recorded_parent_files_a_zero_length_child_under_the_span_that_begins() {
        let mut t = ThreadSpans::new(1, 1, "x".into());
        // A stub a (10-20) tail-calls b (20-30) at 20; b at once makes the
        // zero-length call d (20-20), then c (22-25). Both a and b contain
        // the instant 20: the builder says b was open.
        t.push(0, 10, 20, 1, 0);
        t.push(0, 20, 30, 2, 0);
        t.push(1, 20, 20, 4, 0);
        t.push(1, 22, 25, 3, 0);
        assert_eq!(t.parent(1, 0), Some(0), "from times alone: the earliest");
        t.file_under(1, 0, 1);
        t.file_under(1, 1, 1);
        assert_eq!(funcs_in_tree_order(&t), [1, 2, 4, 3]);
        assert_eq!(t.parent(1, 0), Some(1));
        assert!(t.children(0, 0).is_empty());
        assert_eq!(t.children(0, 1), 0..2);
        // Only the ambiguous span needed an entry, and a parent that does
        // not contain the span is not believed.
        assert_eq!(t.tie_parents.iter().map(Vec::len).sum::<usize>(), 1);
        t.file_under(1, 1, 0);
        assert_eq!(t.parent(1, 1), Some(1));
    }

    #[test]
    fn zero_length_calls_sharing_an_instant_keep_each_its_parent() {
        // main calls f then g three times within one ns: f1 g1 f2 g2 f3
        // g3, all at 10, under main (0-100). Five spans contain the
        // instant on the lane of f, so one bit could not say which.
        let mut t = ThreadSpans::new(1, 1, "x".into());
        t.push(0, 0, 100, 1, 0);
        for _ in 0..3 {
            t.push(1, 10, 10, 2, 0);
        }
        for i in 0..3 {
            t.push(2, 10, 10, 3, 0);
            t.file_under(2, i, i);
        }
        assert_eq!(funcs_in_tree_order(&t), [1, 2, 3, 2, 3, 2, 3]);
        for i in 0..3 {
            assert_eq!(t.parent(2, i), Some(i));
            assert_eq!(t.children(1, i), i..i + 1);
        }
        assert_eq!(t.children(0, 0), 0..3);
    }

    #[test]
    fn many_calls_at_one_instant_are_placed_without_quadratic_work() {
        // perf stamps a whole run of branches with one time: n zero-length
        // callers with a zero-length callee each, at one instant. Scanning
        // every candidate for each caller would take n^2 parent lookups
        // (minutes); binary searches take moments.
        let n = 20_000;
        let mut t = ThreadSpans::new(1, 1, "x".into());
        t.push(0, 0, 100, 1, 0);
        for _ in 0..n {
            t.push(1, 50, 50, 2, 0);
        }
        for i in 0..n {
            t.push(2, 50, 50, 3, 0);
            t.file_under(2, i, i);
        }
        let order = t.tree_order();
        assert_eq!(order.len(), 1 + 2 * n);
        for (k, i) in (0..n).enumerate() {
            assert_eq!(order[1 + 2 * k], (1, i));
            assert_eq!(order[2 + 2 * k], (2, i));
            assert_eq!(t.children(1, i), i..i + 1);
        }
    }

    #[test]
    fn parent_and_children_agree_and_skip_what_nothing_contains() {
        let mut t = ThreadSpans::new(1, 1, "x".into());
        t.push(0, 0, 10, 1, 0);
        t.push(0, 10, 10, 2, 0);
        t.push(0, 10, 40, 3, 0);
        // Under 1 (earliest at 10), under 3, and one that sticks out of
        // everything above.
        t.push(1, 10, 10, 4, 0);
        t.push(1, 12, 20, 5, 0);
        t.push(1, 35, 50, 6, 0);
        assert_eq!(t.parent(1, 0), Some(0));
        assert_eq!(t.parent(1, 1), Some(2));
        assert_eq!(t.parent(1, 2), None);
        assert_eq!(t.parent(0, 0), None);
        assert_eq!(t.children(0, 0), 0..1);
        assert!(t.children(0, 1).is_empty());
        assert_eq!(t.children(0, 2), 1..2);
        assert_eq!(funcs_in_tree_order(&t), [1, 4, 2, 3, 5, 6]);
    }

    #[test]
    fn stats_count_self_time() {
        let mut funcs = FuncTable::default();
        let a = funcs.intern("a", "", 0, SpanKind::Call);
        let b = funcs.intern("b", "", 0, SpanKind::Call);
        let mut t = ThreadSpans::new(1, 1, "x".into());
        t.push(0, 0, 100, a, 0);
        t.push(1, 10, 30, b, 0);
        t.push(1, 50, 60, b, 0);
        t.push(0, 200, 210, a, 0);
        let s = function_stats([&t], 0, u64::MAX);
        assert_eq!(
            s[&a],
            FuncStats {
                calls: 2,
                total_ns: 110,
                self_ns: 80,
                min_ns: 10,
                max_ns: 100
            }
        );
        assert_eq!(s[&b].calls, 2);
        assert_eq!(s[&b].self_ns, 30);
    }
}
