//! Function search: the toolbar's search box finds functions by name, as a
//! substring or fuzzily ([`crate::fuzzy`]), and the timeline dims the calls
//! of every other function.
//!
//! Matching runs once per function when the query changes, into a mask
//! indexed by `FuncId`, so drawing tests a span with one index instead of
//! a string comparison: a trace holds millions of spans but far fewer
//! functions.

use ptscope_model::FuncTable;

use crate::fuzzy::fuzzy_match;

/// How the query matches names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum MatchMode {
    /// Case-insensitive substring.
    #[default]
    Substring,
    /// Case-insensitive subsequence: `pkt` finds `parse_packet`.
    Fuzzy,
}

/// Case-insensitive substring test; `needle` is already lowercase.
pub(crate) fn substring_match(name: &str, needle: &str) -> bool {
    if name.is_ascii() && needle.is_ascii() {
        // Common case without allocating.
        let (h, n) = (name.as_bytes(), needle.as_bytes());
        return n.is_empty()
            || h.windows(n.len())
                .any(|w| w.iter().zip(n).all(|(a, b)| a.to_ascii_lowercase() == *b));
    }
    name.to_lowercase().contains(needle)
}

/// The search box's state and its per-function result.
#[derive(Clone, Debug, Default)]
pub(crate) struct Search {
    pub text: String,
    pub mode: MatchMode,
    /// `mask[func]`: the function matches. Empty when no search is active.
    mask: Vec<bool>,
    /// The (text, mode, table size) the mask was computed for.
    computed: Option<(String, MatchMode, usize)>,
    /// Functions that match.
    pub matched_funcs: usize,
}

impl Search {
    /// A search is active when the box holds more than blanks.
    pub(crate) fn active(&self) -> bool {
        !self.text.trim().is_empty()
    }

    /// Recomputes the mask if the query or the table changed.
    /// Returns whether it did.
    pub(crate) fn update(&mut self, funcs: &FuncTable) -> bool {
        let key = (self.text.clone(), self.mode, funcs.len());
        if self.computed.as_ref() == Some(&key) {
            return false;
        }
        self.computed = Some(key);
        self.mask.clear();
        self.matched_funcs = 0;
        if !self.active() {
            return true;
        }
        let needle = self.text.trim().to_lowercase();
        self.mask.reserve(funcs.len());
        for (_, f) in funcs.iter() {
            let m = match self.mode {
                MatchMode::Substring => substring_match(&f.name, &needle),
                MatchMode::Fuzzy => fuzzy_match(&f.name, &needle),
            };
            self.matched_funcs += m as usize;
            self.mask.push(m);
        }
        true
    }

    /// The per-function mask, or `None` when nothing is searched.
    pub(crate) fn mask(&self) -> Option<&[bool]> {
        (self.active() && !self.mask.is_empty()).then_some(self.mask.as_slice())
    }

    /// Number of calls that match, given calls per function.
    pub(crate) fn matched_calls(&self, calls_per_func: &[u64]) -> u64 {
        match self.mask() {
            None => 0,
            Some(m) => m
                .iter()
                .zip(calls_per_func)
                .filter(|(m, _)| **m)
                .map(|(_, c)| *c)
                .sum(),
        }
    }
}

/// The PTWRITEs whose text (`ptwrite = 0x…`, as the hover gives it)
/// holds the query, as (thread, time) in time order: a query that names
/// no function can name a value the program wrote.
pub(crate) fn ptwrite_hits(model: &ptscope_model::Model, query: &str) -> Vec<(u32, u64)> {
    use std::fmt::Write;
    let needle = query.trim().to_lowercase();
    // Only a query that can name a value (`ptwrite…` or `0x…`) looks at
    // the PTWRITEs: a function search stays one pass over the functions.
    if !(needle.contains("ptwrite") || needle.contains("0x")) {
        return Vec::new();
    }
    let mut hits = Vec::new();
    let mut text = String::new();
    for (ti, t) in model.threads.iter().enumerate() {
        for (m, payload) in t.marks.ptwrites() {
            text.clear();
            let _ = write!(text, "ptwrite = {payload:#x}");
            if substring_match(&text, &needle) {
                hits.push((ti as u32, m.time));
            }
        }
    }
    hits.sort_by_key(|h| (h.1, h.0));
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_model::SpanKind;

    /// Does `func` match? Everything matches when no search is active.
    fn matches(s: &Search, func: u32) -> bool {
        s.mask()
            .is_none_or(|m| m.get(func as usize).copied().unwrap_or(false))
    }

    #[test]
    fn ptwrites_match_by_their_value() {
        use ptscope_model::{Mark, MarkKind, Marks};
        use ptscope_model::{Model, ThreadModel};
        let mut t = ThreadModel::from_spans(Default::default());
        let ptw = |time, payload| Mark {
            time,
            ip: None,
            kind: MarkKind::PtWrite { payload, bytes: 8 },
        };
        t.marks = Marks::new(vec![ptw(30, 0x1005), ptw(10, 0xbeef), ptw(20, 0x10050)]);
        let m = Model {
            threads: vec![t],
            ..Model::default()
        };
        assert_eq!(ptwrite_hits(&m, "ptwrite = 0x1005"), [(0, 20), (0, 30)]);
        assert_eq!(ptwrite_hits(&m, "0xBEEF"), [(0, 10)]);
        assert!(ptwrite_hits(&m, "beef").is_empty(), "not a value query");
        assert_eq!(ptwrite_hits(&m, "ptwrite").len(), 3);
        assert!(ptwrite_hits(&m, "main").is_empty());
    }

    #[test]
    fn substring_ignores_case() {
        assert!(substring_match("parse_Packet", "packet"));
        assert!(substring_match("x", ""));
        assert!(!substring_match("parse", "parsex"));
        assert!(substring_match("Größe::Zähler", "zähler"));
    }

    #[test]
    fn mask_counts_functions_and_calls() {
        let mut t = FuncTable::default(); // 3 pseudo-functions first
        let a = t.intern("read_block", "", 0, SpanKind::Call);
        let b = t.intern("write_block", "", 0, SpanKind::Call);
        let c = t.intern("main", "", 0, SpanKind::Call);
        let mut s = Search {
            text: "block".into(),
            ..Search::default()
        };
        assert!(s.update(&t));
        assert!(!s.update(&t));
        assert_eq!(s.matched_funcs, 2);
        assert!(matches(&s, a) && matches(&s, b) && !matches(&s, c));
        let mut calls = vec![0u64; t.len()];
        calls[a as usize] = 3;
        calls[b as usize] = 4;
        calls[c as usize] = 100;
        assert_eq!(s.matched_calls(&calls), 7);
        s.text = "rdb".into();
        s.mode = MatchMode::Fuzzy;
        s.update(&t);
        assert_eq!(s.matched_funcs, 1);
        s.text = "  ".into();
        s.update(&t);
        assert!(s.mask().is_none() && matches(&s, c));
    }
}
