//! Two calls side by side at line level: both are re-decoded by the fine
//! pass, and every source line that ran under either is counted in each.
//! This is what only an instruction trace can tell: not "it was slower"
//! but "it ran the branch at line 41, which the typical call skipped, and
//! the loop at line 52 ran 40 times instead of 3".

use std::collections::HashMap;
use std::sync::Arc;

use super::Call;
use crate::model::Model;
use crate::segment::{line_heat, FineError, LineHeat, Segment};

/// What decodes a segment for a comparison: thread index in the model and
/// checkpoint index in, the segment out. The decoder's fine pass is one.
pub type DecodeSegment<'a> = dyn Fn(usize, usize) -> Result<Segment, FineError> + 'a;

/// One source line in both calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineRow {
    pub file: Arc<str>,
    pub line: u32,
    /// The function the line is in (the innermost frame that names it).
    pub function: Arc<str>,
    /// Its runs (a loop body's trips), instructions and time in each call;
    /// all zero where it did not run.
    pub a: LineHeat,
    pub b: LineHeat,
}

impl LineRow {
    /// Time in `a` less that in `b`.
    pub fn time_diff(&self) -> i128 {
        self.a.time_ns as i128 - self.b.time_ns as i128
    }

    /// Whether it ran in `a` only, or in `b` only.
    pub fn only_in_a(&self) -> bool {
        self.a.insns > 0 && self.b.insns == 0
    }

    pub fn only_in_b(&self) -> bool {
        self.b.insns > 0 && self.a.insns == 0
    }

    /// Whether it ran in both, a different number of times: a loop whose
    /// trip count differs, or a line reached more often.
    pub fn runs_differ(&self) -> bool {
        self.a.insns > 0 && self.b.insns > 0 && self.a.count != self.b.count
    }
}

/// The ways a line tells two calls apart, in the order the command line
/// and the window list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difference {
    /// It ran in `a` only: the branch the slow call took.
    OnlyInA,
    /// It ran in `b` only.
    OnlyInB,
    /// It ran in both, a different number of times: a loop's trips.
    RunsDiffer,
}

impl Difference {
    pub const ALL: [Difference; 3] = [
        Difference::OnlyInA,
        Difference::OnlyInB,
        Difference::RunsDiffer,
    ];

    /// Whether `row` differs this way.
    pub fn holds(self, row: &LineRow) -> bool {
        match self {
            Difference::OnlyInA => row.only_in_a(),
            Difference::OnlyInB => row.only_in_b(),
            Difference::RunsDiffer => row.runs_differ(),
        }
    }
}

/// The line-level comparison of two calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineComparison {
    /// Every line that ran under either call, the one whose time differs
    /// most (in the direction of the whole difference) first.
    pub rows: Vec<LineRow>,
    /// What the re-decode could not do in full (a segment cut at its
    /// instruction limit, decode errors inside a call).
    pub warnings: Vec<String>,
}

/// The segments that cover `call`, decoded.
fn segments(
    decode: &DecodeSegment<'_>,
    model: &Model,
    call: &Call,
) -> Result<Vec<Segment>, FineError> {
    let t = call.span.thread as usize;
    let Some(thread) = model.threads.get(t) else {
        return Ok(Vec::new());
    };
    let end = call.start.saturating_add(call.duration);
    thread
        .segments_in(call.start, end)
        .map(|i| decode(t, i))
        .collect()
}

/// The lines of `call` with their heat, and what the re-decode missed.
fn heat(
    decode: &DecodeSegment<'_>,
    model: &Model,
    call: &Call,
    names: &mut HashMap<(Arc<str>, u32), Arc<str>>,
    warnings: &mut Vec<String>,
) -> Result<HashMap<(Arc<str>, u32), LineHeat>, FineError> {
    let segs = segments(decode, model, call)?;
    let end = call.start.saturating_add(call.duration);
    for s in &segs {
        if s.cut {
            warnings.push(format!(
                "a segment of the call at {} was cut at the fine pass's instruction limit",
                call.start
            ));
        }
        for (at, e) in &s.errors {
            if (call.start..end).contains(at) {
                warnings.push(format!("decode error in the call at {}: {e}", call.start));
            }
        }
        for chain in &s.chains {
            for f in chain.iter() {
                names
                    .entry((f.file.clone(), f.line))
                    .or_insert_with(|| f.function.clone());
            }
        }
    }
    Ok(line_heat(&segs, call.start, end))
}

/// Re-decodes calls `a` and `b` with `decode` and counts every line that
/// ran under each.
pub fn compare_lines(
    decode: &DecodeSegment<'_>,
    model: &Model,
    a: &Call,
    b: &Call,
) -> Result<LineComparison, FineError> {
    let mut names = HashMap::new();
    let mut warnings = Vec::new();
    let ha = heat(decode, model, a, &mut names, &mut warnings)?;
    let hb = heat(decode, model, b, &mut names, &mut warnings)?;
    let mut rows: HashMap<(Arc<str>, u32), LineRow> = HashMap::new();
    for (side, h) in [(0, ha), (1, hb)] {
        for (key, heat) in h {
            let row = rows.entry(key.clone()).or_insert_with(|| LineRow {
                function: names.get(&key).cloned().unwrap_or_else(|| "".into()),
                file: key.0,
                line: key.1,
                a: LineHeat::default(),
                b: LineHeat::default(),
            });
            *(if side == 0 { &mut row.a } else { &mut row.b }) = heat;
        }
    }
    let sign = if (a.duration as i128) < b.duration as i128 {
        -1
    } else {
        1
    };
    let mut rows: Vec<LineRow> = rows.into_values().collect();
    rows.sort_by(|x, y| {
        (y.time_diff() * sign)
            .cmp(&(x.time_diff() * sign))
            .then_with(|| (&x.file, x.line).cmp(&(&y.file, y.line)))
    });
    warnings.dedup();
    Ok(LineComparison { rows, warnings })
}
