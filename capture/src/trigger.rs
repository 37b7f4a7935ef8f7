//! This module defines the triggers, which say when a capture takes its
//! snapshot: at the process's exit, on entry to a function, at the return of
//! a call to a function that took longer than a threshold, after a
//! duration, or only on request. Both backends take the same [`Trigger`]. A symbol
//! trigger is resolved here against the process's mappings by reading the ELF
//! symbols of each mapped file, so that a backend gets a runtime address to
//! break on; the same symbol reading lists a program's functions, for the app
//! to offer as triggers.

use std::collections::HashMap;
use std::path::Path;

use object::{Object, ObjectSymbol};
use ptscope_formats::demangle;

use crate::procfs::Mapping;

/// When to take the snapshot. The same syntax serves both backends.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Trigger {
    /// When the traced process exits (the default for `record`).
    ProcessExit,
    /// The first time the program enters this function (mangled or
    /// demangled name, in the main binary or any loaded library).
    Symbol(String),
    /// When a call to this function returns after more than `slower_than`
    /// ns: the snapshot ends with the whole slow call in it.
    SlowCall { symbol: String, slower_than: u64 },
    /// After this many milliseconds.
    Duration(u64),
    /// Only on Ctrl-C.
    Manual,
}

/// Range capture (`--range START STOP`): tracing starts paused, resumes
/// each time a thread enters `start` and pauses each time one enters
/// `stop` (functions, named as for a symbol trigger). Every trigger works
/// inside it: the snapshot holds the ranges traced before it fired.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Range {
    pub start: String,
    pub stop: String,
}

/// A [`Range`]'s START and STOP, resolved against the process's mappings
/// as they appear; both backends use it.
pub struct RangeSymbols {
    pub start: SymbolTrigger,
    pub stop: SymbolTrigger,
}

impl RangeSymbols {
    pub fn new(r: &Range) -> RangeSymbols {
        RangeSymbols {
            start: SymbolTrigger::new(&r.start),
            stop: SymbolTrigger::new(&r.stop),
        }
    }

    pub fn resolve(&mut self, maps: &[Mapping]) {
        self.start.resolve(maps);
        self.stop.resolve(maps);
    }

    /// Both addresses, once both are found.
    /// What a capture says of its range: a START or STOP never found, or
    /// a START never entered (`entries` times it was), so nothing was
    /// traced.
    pub fn warnings(&self, entries: u64) -> Vec<String> {
        let mut out = Vec::new();
        for s in [&self.start, &self.stop] {
            if s.address().is_none() {
                out.push(format!(
                    "--range: no function `{}` in the program or its libraries",
                    s.name()
                ));
            }
        }
        if self.start.address().is_some() && entries == 0 {
            out.push(format!(
                "--range: `{}` was never entered, so nothing was traced",
                self.start.name()
            ));
        }
        out
    }

    pub fn addresses(&self) -> Option<(u64, u64)> {
        Some((self.start.address()?, self.stop.address()?))
    }
}

/// When a trigger on a function may start firing (`--arm-after`): without
/// it, a trigger on a hot function fires at the first call, and the
/// snapshot holds almost nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ArmAfter {
    /// Once the ring holds this much history (ns).
    History(u64),
    /// Once the ring has filled.
    Full,
}

impl std::fmt::Display for ArmAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArmAfter::History(ns) => write!(f, "{ns} ns of history"),
            ArmAfter::Full => write!(f, "a full ring"),
        }
    }
}

impl Trigger {
    /// The function the trigger watches, if it watches one.
    pub fn symbol(&self) -> Option<&str> {
        match self {
            Trigger::Symbol(s) | Trigger::SlowCall { symbol: s, .. } => Some(s),
            _ => None,
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trigger::ProcessExit => write!(f, "process exit"),
            Trigger::Symbol(s) => write!(f, "symbol {s}"),
            Trigger::SlowCall {
                symbol,
                slower_than,
            } => write!(f, "a call to {symbol} slower than {slower_than} ns"),
            Trigger::Duration(ms) => write!(f, "duration {ms} ms"),
            Trigger::Manual => write!(f, "manual"),
        }
    }
}

/// Whether symbol `raw` (as stored in the ELF) is what the user asked for:
/// its raw name, its demangled name, or a C++ name without its parameters.
pub fn symbol_matches(raw: &str, wanted: &str) -> bool {
    if raw == wanted {
        return true;
    }
    let d = demangle(raw);
    d == wanted || (d.ends_with(')') && d.split('(').next() == Some(wanted))
}

/// What a capture says of the `times` its trigger was reached before
/// `--arm-after` (`wanted`) armed it.
pub fn unarmed_warning(wanted: ArmAfter, times: u64) -> String {
    format!("the trigger was reached {times} time(s) before the ring held {wanted} (--arm-after)")
}

/// What a capture says of the `times` slow calls to `name` (slower than
/// `threshold` ns, the longest `longest` ns) that returned after the ring
/// had overwritten their start.
pub fn missed_slow_calls_warning(times: u64, name: &str, threshold: u64, longest: u64) -> String {
    format!(
        "{times} call(s) to {name} slower than {threshold} ns returned after the ring had \
         overwritten their start (the longest took {longest} ns): a larger --size keeps them"
    )
}

/// A symbol trigger resolved against the process's mappings.
#[derive(Debug)]
pub struct SymbolTrigger {
    name: String,
    address: Option<u64>,
    /// Files already searched, by path: the symbol's file offset if found.
    searched: HashMap<String, Option<u64>>,
}

impl SymbolTrigger {
    pub fn new(name: &str) -> SymbolTrigger {
        SymbolTrigger {
            name: name.to_string(),
            address: None,
            searched: HashMap::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn address(&self) -> Option<u64> {
        self.address
    }

    /// Places the symbol at `address` without looking for it.
    #[cfg(test)]
    pub(crate) fn set_address_for_tests(&mut self, address: u64) {
        self.address = Some(address);
    }

    /// Looks for the symbol in every mapped file not searched yet.
    pub fn resolve(&mut self, maps: &[Mapping]) {
        if self.address.is_some() {
            return;
        }
        for m in maps.iter().filter(|m| m.exec && m.is_file()) {
            let offset = *self
                .searched
                .entry(m.path.clone())
                .or_insert_with(|| symbol_file_offset(Path::new(&m.path), &self.name));
            if let Some(off) = offset {
                if off >= m.offset && off < m.offset + m.len() {
                    self.address = Some(m.start + (off - m.offset));
                    return;
                }
            }
        }
    }
}

/// The file offset of the function `name` in the ELF file at `path`.
pub fn symbol_file_offset(path: &Path, name: &str) -> Option<u64> {
    crate::filter::symbol_in_file(path, name)
        .ok()
        .flatten()
        .map(|(offset, _)| offset)
}

/// A function a trigger can name: as the user reads it (demangled) and
/// the module it is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSymbol {
    pub name: String,
    pub module: String,
}

/// The demangled names of the functions defined in the ELF file at `path`
/// (unreadable or non-ELF files have none).
pub fn functions_in(path: &Path) -> Vec<FunctionSymbol> {
    let Ok(data) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(file) = object::File::parse(&*data) else {
        return Vec::new();
    };
    let module = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut names: Vec<String> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0 && s.is_definition())
        .filter_map(|s| s.name().ok().map(|n| demangle(n).into_owned()))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| FunctionSymbol {
            name,
            module: module.clone(),
        })
        .collect()
}

/// Functions of a running process: its executable and every loaded library.
pub fn functions_of_process(pid: i32) -> Vec<FunctionSymbol> {
    let Ok(maps) = crate::procfs::read_maps(pid) else {
        return Vec::new();
    };
    let mut paths: Vec<&str> = maps
        .iter()
        .filter(|m| m.exec && m.is_file())
        .map(|m| m.path.as_str())
        .collect();
    paths.dedup();
    paths
        .into_iter()
        .flat_map(|p| functions_in(Path::new(p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_functions_demangled() {
        let me = std::env::current_exe().unwrap();
        let funcs = functions_in(&me);
        assert!(
            funcs.iter().any(|f| f.name.ends_with("symbol_matches")),
            "{}",
            funcs.len()
        );
        // Every listed name resolves back through the trigger's own matcher.
        let f = funcs
            .iter()
            .find(|f| f.name.ends_with("symbol_matches"))
            .unwrap();
        assert!(symbol_file_offset(&me, &f.name).is_some());
        assert!(functions_in(Path::new("/nonexistent")).is_empty());
    }

    #[test]
    fn matches_mangled_and_demangled() {
        assert!(symbol_matches("work", "work"));
        assert!(!symbol_matches("worker", "work"));
        assert!(symbol_matches(
            "_ZN3foo3bar17h0123456789abcdefE",
            "foo::bar"
        ));
        assert!(symbol_matches("_ZN2ns6Widget4drawEv", "ns::Widget::draw"));
        assert!(symbol_matches("_ZN2ns6Widget4drawEv", "ns::Widget::draw()"));
        assert!(!symbol_matches("_ZN2ns6Widget4drawEv", "ns::Widget"));
        // The names the viewer shows, OCaml's too, are names a trigger takes.
        assert!(symbol_matches(
            "camlRaise_test__raise_after_265",
            "Raise_test.raise_after_265"
        ));
    }
}
