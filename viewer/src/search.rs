//! Function search: the toolbar's search box finds functions by name, as a
//! substring or fuzzily ([`crate::fuzzy`]), and the timeline dims the calls
//! of every other function.
//!
//! Matching runs once per function when the query changes, into a mask
//! indexed by `FuncId`, so drawing tests a span with one index instead of
//! a string comparison: a trace holds millions of spans but far fewer
//! functions.

use ptscope_decoder::event::FuncTable;

use crate::fuzzy::fuzzy_match;

/// How the query matches names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MatchMode {
    /// Case-insensitive substring.
    #[default]
    Substring,
    /// Case-insensitive subsequence: `pkt` finds `parse_packet`.
    Fuzzy,
}

/// Case-insensitive substring test; `needle` is already lowercase.
pub fn substring_match(name: &str, needle: &str) -> bool {
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
pub struct Search {
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
    pub fn active(&self) -> bool {
        !self.text.trim().is_empty()
    }

    /// Recomputes the mask if the query or the table changed.
    /// Returns whether it did.
    pub fn update(&mut self, funcs: &FuncTable) -> bool {
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
    pub fn mask(&self) -> Option<&[bool]> {
        (self.active() && !self.mask.is_empty()).then_some(self.mask.as_slice())
    }

    /// Does `func` match? Everything matches when no search is active.
    pub fn matches(&self, func: u32) -> bool {
        self.mask()
            .is_none_or(|m| m.get(func as usize).copied().unwrap_or(false))
    }

    /// Number of calls that match, given calls per function.
    pub fn matched_calls(&self, calls_per_func: &[u64]) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_decoder::event::SpanKind;

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
        assert!(s.matches(a) && s.matches(b) && !s.matches(c));
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
        assert!(s.mask().is_none() && s.matches(c));
    }
}
