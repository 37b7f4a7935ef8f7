//! The source line of an address, found by reading only the unit that holds
//! it: what the coarse pass asks once per function it names.
//!
//! addr2line's index keeps every unit's abbreviations and line program
//! header for as long as it lives: for a distribution's libc or python3,
//! 25-30 MB, which the decode held beside its spans only to say where each
//! function it met begins. This index keeps the units' address ranges
//! alone, found as addr2line finds them, and reads a unit's line program
//! when an address in it is first asked for, keeping its rows (16 bytes
//! each) within a budget. The answer is addr2line's, row for row, which a
//! test holds it to on every function of the machine's libc.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::num::NonZeroU64;

use gimli::Reader as _;
use parking_lot::Mutex;

use super::{DwarfReader, SourceLocation};

/// Rows kept of units read, across units: the oldest unit read is dropped
/// past it. Some 4 MiB, many times a large unit's line program.
const ROW_BUDGET: usize = 1 << 18;

/// One address range of a unit, as addr2line keeps it.
#[derive(Clone, Copy, Debug)]
struct UnitRange {
    begin: u64,
    end: u64,
    /// Which of [`UnitLines::units`].
    unit: u32,
    /// The lowest `begin` of this and every later range in the table.
    min_begin: u64,
}

/// A row of a line program, as addr2line keeps it but for the column,
/// which no caller asks for.
#[derive(Clone, Copy, Debug)]
struct Row {
    address: u64,
    file: u32,
    line: u32,
}

struct Sequence {
    start: u64,
    end: u64,
    rows: Box<[Row]>,
}

/// One unit's rows, and what names its files.
struct Lines {
    /// Which of [`UnitLines::units`].
    unit: u32,
    sequences: Box<[Sequence]>,
    rows: usize,
    /// Its files' paths, by index.
    files: Box<[Box<str>]>,
}

/// What reading a unit's line program takes, from its first entry: a
/// lookup then reads `.debug_line` and the strings alone, never the
/// entries, which a module need not keep inflated for it.
struct UnitSource {
    line_program: Option<gimli::DebugLineOffset<usize>>,
    address_size: u8,
    format: gimli::Format,
    str_offsets_base: gimli::DebugStrOffsetsBase<usize>,
    comp_dir: Option<DwarfReader>,
    name: Option<DwarfReader>,
}

impl UnitSource {
    fn of(unit: &gimli::Unit<DwarfReader>) -> UnitSource {
        UnitSource {
            line_program: unit.line_program.as_ref().map(|p| p.header().offset()),
            address_size: unit.header.address_size(),
            format: unit.header.format(),
            str_offsets_base: unit.str_offsets_base,
            comp_dir: unit.comp_dir.clone(),
            name: unit.name.clone(),
        }
    }

    /// A string attribute of the unit's line program, as gimli's
    /// `attr_string` reads it for the unit.
    fn string(
        &self,
        dwarf: &gimli::Dwarf<DwarfReader>,
        value: gimli::AttributeValue<DwarfReader>,
    ) -> Result<DwarfReader, gimli::Error> {
        match value {
            gimli::AttributeValue::DebugStrOffsetsIndex(index) => {
                let offset = dwarf.debug_str_offsets.get_str_offset(
                    self.format,
                    self.str_offsets_base,
                    index,
                )?;
                dwarf.string(offset)
            }
            other => dwarf.attr_line_string(other),
        }
    }
}

/// The index of a module's units by address.
pub(super) struct UnitLines {
    ranges: Box<[UnitRange]>,
    /// The units that have ranges.
    units: Box<[UnitSource]>,
    /// Units read, the most recent last.
    read: Mutex<VecDeque<Lines>>,
    /// Rows kept at most, but for the last unit read.
    budget: usize,
}

/// The index as it is built, a unit at a time in the order of
/// `.debug_info`: one pass over the units reads both the index and the
/// functions no symbol covers (`dwarf::read_units`), parsing each unit's
/// abbreviations and line program header once.
pub(super) struct UnitLinesBuilder {
    /// Units that .debug_aranges describes, by their offset.
    aranges: Vec<(
        gimli::DebugInfoOffset<usize>,
        gimli::DebugArangesOffset<usize>,
    )>,
    ranges: Vec<UnitRange>,
    sources: Vec<UnitSource>,
    /// As many units as an index can number: later ones are left out.
    full: bool,
}

impl UnitLinesBuilder {
    /// A builder that has read `.debug_aranges`; an error if it cannot.
    pub(super) fn new(dwarf: &gimli::Dwarf<DwarfReader>) -> Result<UnitLinesBuilder, gimli::Error> {
        let mut aranges = Vec::new();
        let mut headers = dwarf.debug_aranges.headers();
        while let Some(header) = headers.next()? {
            aranges.push((header.debug_info_offset(), header.offset()));
        }
        aranges.sort_unstable_by_key(|a| a.0);
        Ok(UnitLinesBuilder {
            aranges,
            ranges: Vec::new(),
            sources: Vec::new(),
            full: false,
        })
    }

    /// Whether the index has a use for the unit of `header`: types need no
    /// lines, and partial units have no ranges.
    pub(super) fn wants(&self, header: &gimli::UnitHeader<DwarfReader>) -> bool {
        let kind = header.type_();
        !self.full
            && !matches!(
                kind,
                gimli::UnitType::Type { .. }
                    | gimli::UnitType::SplitType { .. }
                    | gimli::UnitType::Partial
            )
    }

    /// Adds the address ranges of `unit` (one [`wants`](Self::wants)
    /// took); an error if its first entry cannot be read (addr2line's
    /// index fails alike).
    pub(super) fn add(
        &mut self,
        dwarf: &gimli::Dwarf<DwarfReader>,
        unit: &gimli::Unit<DwarfReader>,
    ) -> Result<(), gimli::Error> {
        let Some(offset) = unit.header.debug_info_offset() else {
            return Ok(());
        };
        let source = UnitSource::of(unit);
        let unit = gimli::UnitRef::new(dwarf, unit);
        let Some(found) = RootRanges::read(unit)? else {
            return Ok(());
        };
        // Four billion units cannot fit in a file this reads.
        let Ok(index) = u32::try_from(self.sources.len()) else {
            self.full = true;
            return Ok(());
        };
        let ranges = &mut self.ranges;
        let mut add = |begin: u64, end: u64| {
            ranges.push(UnitRange {
                begin,
                end,
                unit: index,
                min_begin: 0,
            })
        };
        // addr2line's order of preference: DW_AT_ranges, then
        // .debug_aranges, then the low and high pc, then the line
        // program's sequences.
        let mut found_any = false;
        if found.ranges.is_none() {
            let aranges = &self.aranges;
            let first = aranges.partition_point(|a| a.0 < offset);
            for &(_, at) in aranges[first..].iter().take_while(|a| a.0 == offset) {
                let mut entries = dwarf.debug_aranges.header(at)?.entries();
                // Errors are skipped, as addr2line does: the iterator
                // ends after one it cannot step over.
                while let Some(entry) = entries.next().transpose() {
                    if let Ok(entry) = entry {
                        if entry.length() != 0 {
                            let r = entry.range();
                            add(r.begin, r.end);
                            found_any = true;
                        }
                    }
                }
            }
        }
        if !found_any {
            found_any = found.each_range(unit, &mut add)?;
        }
        if !found_any {
            if let Ok(lines) = read_lines(dwarf, &source, index) {
                for s in lines.sequences.iter() {
                    add(s.start, s.end);
                    found_any = true;
                }
            }
        }
        if found_any {
            self.sources.push(source);
        }
        Ok(())
    }

    /// The index of the units added.
    pub(super) fn finish(self) -> UnitLines {
        let mut ranges = self.ranges;
        ranges.sort_unstable_by_key(|r| (r.end, r.unit));
        let mut min = u64::MAX;
        for r in ranges.iter_mut().rev() {
            min = min.min(r.begin);
            r.min_begin = min;
        }
        UnitLines {
            ranges: ranges.into_boxed_slice(),
            units: self.sources.into_boxed_slice(),
            read: Mutex::new(VecDeque::new()),
            budget: ROW_BUDGET,
        }
    }
}

impl UnitLines {
    /// The file and line of `probe`: addr2line's `find_location`, without
    /// the column. `None` where it has none, or where a unit it would read
    /// cannot be. `dwarf` need hold only the line program and string
    /// sections.
    pub(super) fn location(
        &self,
        dwarf: &gimli::Dwarf<DwarfReader>,
        probe: u64,
    ) -> Option<SourceLocation> {
        let end = probe.checked_add(1)?;
        // Ranges ending after the probe, until none later can begin at or
        // before it.
        let first = self.ranges.partition_point(|r| r.end <= probe);
        let units = self.ranges[first..]
            .iter()
            .take_while(|r| end > r.min_begin)
            .filter(|r| probe < r.end && end > r.begin)
            .map(|r| r.unit);
        let mut read = self.read.lock();
        for unit in units {
            let at = match read.iter().position(|l| l.unit == unit) {
                Some(at) => at,
                None => {
                    let source = self.units.get(unit as usize)?;
                    let lines = read_lines(dwarf, source, unit).ok()?;
                    let mut kept: usize = read.iter().map(|l| l.rows).sum();
                    while kept + lines.rows > self.budget && !read.is_empty() {
                        kept -= read.pop_front().map_or(0, |l| l.rows);
                    }
                    read.push_back(lines);
                    read.len() - 1
                }
            };
            let lines = &read[at];
            if let Some(row) = lines.find(probe) {
                // A row naming no file is addr2line's answer too: a
                // location without one, which names nothing.
                let file = lines.files.get(row.file as usize)?;
                return Some(SourceLocation {
                    file: file.to_string(),
                    line: (row.line != 0).then_some(row.line),
                    column: None,
                });
            }
        }
        None
    }
}

impl Lines {
    /// The row `probe` runs under: the last at or before it in the sequence
    /// that holds it.
    fn find(&self, probe: u64) -> Option<Row> {
        let seq = self
            .sequences
            .binary_search_by(|s| {
                if probe < s.start {
                    Ordering::Greater
                } else if probe >= s.end {
                    Ordering::Less
                } else {
                    Ordering::Equal
                }
            })
            .ok()?;
        let rows = &self.sequences[seq].rows;
        match rows.binary_search_by(|r| r.address.cmp(&probe)) {
            Ok(i) => Some(rows[i]),
            Err(0) => None,
            Err(i) => Some(rows[i - 1]),
        }
    }
}

/// A unit's line program as rows, kept as addr2line keeps them: a row at
/// the address of the one before replaces it, and empty sequences go.
fn read_lines(
    dwarf: &gimli::Dwarf<DwarfReader>,
    unit: &UnitSource,
    index: u32,
) -> Result<Lines, gimli::Error> {
    let Some(offset) = unit.line_program else {
        return Ok(Lines {
            unit: index,
            sequences: Box::new([]),
            rows: 0,
            files: Box::new([]),
        });
    };
    // As gimli reads it for the unit (`Unit::new`).
    let program = dwarf.debug_line.program(
        offset,
        unit.address_size,
        unit.comp_dir.clone(),
        unit.name.clone(),
    )?;
    let mut sequences = Vec::new();
    let mut current: Vec<Row> = Vec::new();
    let mut total = 0;
    let mut rows = program.rows();
    while let Some((_, row)) = rows.next_row()? {
        if row.end_sequence() {
            if let Some(start) = current.first().map(|r| r.address) {
                let end = row.address();
                let taken = std::mem::take(&mut current);
                if start < end {
                    total += taken.len();
                    sequences.push(Sequence {
                        start,
                        end,
                        rows: taken.into_boxed_slice(),
                    });
                }
            }
            continue;
        }
        let address = row.address();
        // A file index past u32 names no file this program has.
        let file = u32::try_from(row.file_index()).unwrap_or(u32::MAX);
        let line = row.line().map_or(0, NonZeroU64::get) as u32;
        match current.last_mut() {
            Some(last) if last.address == address => {
                last.file = file;
                last.line = line;
            }
            _ => current.push(Row {
                address,
                file,
                line,
            }),
        }
    }
    sequences.sort_unstable_by_key(|s| s.start);
    // Every file is named now, as addr2line does: one it cannot name
    // fails the unit's lines.
    let header = rows.header();
    let mut files = Vec::new();
    match header.file(0) {
        Some(file) => files.push(file_name(dwarf, unit, file, header)?),
        // DWARF before 5 may have no file 0.
        None => files.push(Box::from("")),
    }
    let mut at = 1;
    while let Some(file) = header.file(at) {
        files.push(file_name(dwarf, unit, file, header)?);
        at += 1;
    }
    Ok(Lines {
        unit: index,
        sequences: sequences.into_boxed_slice(),
        rows: total,
        files: files.into_boxed_slice(),
    })
}

/// A file's path, rendered as addr2line renders it.
fn file_name(
    dwarf: &gimli::Dwarf<DwarfReader>,
    unit: &UnitSource,
    file: &gimli::FileEntry<DwarfReader>,
    header: &gimli::LineProgramHeader<DwarfReader>,
) -> Result<Box<str>, gimli::Error> {
    let mut path = match unit.comp_dir {
        Some(ref dir) => dir.to_string_lossy()?.into_owned(),
        None => String::new(),
    };
    // Directory 0 is the unit's own directory.
    if file.directory_index() != 0 {
        if let Some(dir) = file.directory(header) {
            path_push(&mut path, &unit.string(dwarf, dir)?.to_string_lossy()?);
        }
    }
    path_push(
        &mut path,
        &unit.string(dwarf, file.path_name())?.to_string_lossy()?,
    );
    Ok(path.into_boxed_str())
}

/// Joins `p` to `path` as addr2line does: a rooted `p` replaces it.
fn path_push(path: &mut String, p: &str) {
    let slash_root = |s: &str| s.starts_with('/') || s.get(1..3) == Some(":/");
    let backslash_root = |s: &str| s.starts_with('\\') || s.get(1..3) == Some(":\\");
    if slash_root(p) || backslash_root(p) {
        *path = p.to_string();
    } else {
        let sep = if backslash_root(path) { '\\' } else { '/' };
        if !path.is_empty() && !path.ends_with(sep) {
            path.push(sep);
        }
        path.push_str(p);
    }
}

/// The range attributes of a unit's first entry.
#[derive(Default)]
struct RootRanges {
    low_pc: Option<u64>,
    high_pc: Option<u64>,
    size: Option<u64>,
    ranges: Option<gimli::RangeListsOffset<usize>>,
}

impl RootRanges {
    /// `None` for a unit with no entries.
    fn read(unit: gimli::UnitRef<'_, DwarfReader>) -> Result<Option<RootRanges>, gimli::Error> {
        let mut entries = unit.entries_raw(None)?;
        let Some(abbrev) = entries.read_abbreviation()? else {
            return Ok(None);
        };
        let mut found = RootRanges::default();
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec)?;
            match (attr.name(), attr.value()) {
                (gimli::DW_AT_low_pc, gimli::AttributeValue::Addr(v)) => found.low_pc = Some(v),
                (gimli::DW_AT_low_pc, gimli::AttributeValue::DebugAddrIndex(i)) => {
                    found.low_pc = Some(unit.address(i)?)
                }
                (gimli::DW_AT_high_pc, gimli::AttributeValue::Addr(v)) => found.high_pc = Some(v),
                (gimli::DW_AT_high_pc, gimli::AttributeValue::DebugAddrIndex(i)) => {
                    found.high_pc = Some(unit.address(i)?)
                }
                (gimli::DW_AT_high_pc, gimli::AttributeValue::Udata(v)) => found.size = Some(v),
                (gimli::DW_AT_ranges, v) => found.ranges = unit.attr_ranges_offset(v)?,
                _ => {}
            }
        }
        Ok(Some(found))
    }

    /// Calls `add` with each non-empty range; whether there was one.
    fn each_range(
        &self,
        unit: gimli::UnitRef<'_, DwarfReader>,
        add: &mut impl FnMut(u64, u64),
    ) -> Result<bool, gimli::Error> {
        let mut any = false;
        let mut one = |begin: u64, end: u64| {
            if begin < end {
                add(begin, end);
                any = true;
            }
        };
        if let Some(offset) = self.ranges {
            let mut list = unit.ranges(offset)?;
            while let Some(r) = list.next()? {
                one(r.begin, r.end);
            }
        } else if let (Some(begin), Some(end)) = (self.low_pc, self.high_pc) {
            one(begin, end);
        } else if let (Some(begin), Some(size)) = (self.low_pc, self.size) {
            // A -1 tombstone wraps, and is then empty.
            one(begin, begin.wrapping_add(size));
        }
        Ok(any)
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use crate::names::symbols::testutil::{compile, run, tempdir};
    use crate::names::symbols::ModuleSymbols;

    /// addr2line's answer without the column: what `entry_location` must
    /// give.
    fn expected(syms: &ModuleSymbols, a: u64) -> Option<(String, Option<u32>)> {
        syms.location(a).map(|l| (l.file, l.line))
    }

    fn got(syms: &ModuleSymbols, a: u64) -> Option<(String, Option<u32>)> {
        syms.entry_location(a).map(|l| (l.file, l.line))
    }

    /// Every function's entry, and addresses inside the first `inside`
    /// functions, looked up both ways; how many had a line.
    fn compare(syms: &ModuleSymbols, inside: usize) -> usize {
        let mut lines = 0;
        for (i, f) in syms.functions().enumerate() {
            let mut addrs = vec![f.entry];
            if i < inside {
                addrs.extend((f.entry..f.end).step_by(3));
            }
            for a in addrs {
                let want = expected(syms, a);
                assert_eq!(got(syms, a), want, "{} at {a:#x}", f.name);
                lines += usize::from(want.is_some());
            }
        }
        lines
    }

    #[test]
    fn lines_are_addr2lines_in_our_test_programs() {
        let dir = tempdir();
        for (name, flags) in [
            ("v5", &["-gdwarf-5"][..]),
            ("v4", &["-gdwarf-4"][..]),
            // Compressed: the entries are packed, the lines read without.
            ("v5-gz", &["-gdwarf-5", "-gz=zlib"][..]),
        ] {
            let bin = compile(dir.path(), name, flags);
            let mut syms = ModuleSymbols::load(&bin).unwrap();
            let (dwarf, _) = syms.dwarf.as_mut().unwrap().parts_mut();
            let packed = gimli::Section::reader(&dwarf.debug_info).is_empty();
            assert_eq!(packed, name.ends_with("gz"), "{name}: entries packed");
            let lines = compare(&syms, usize::MAX);
            assert!(lines > 20, "{name}: only {lines} addresses had lines");
        }
    }

    /// The machine's libc with its debug file (libc6-dbg, which the test
    /// set-up installs): thousands of units, compressed sections, partial
    /// units. Every function entry is asked, with the budget of units
    /// kept overrun many times, and some functions' every third byte.
    #[test]
    fn lines_are_addr2lines_in_the_systems_libc() {
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let notes = run(Command::new("readelf").arg("-n").arg(libc));
        let id = notes
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .expect("libc has a build id");
        let debug = PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &id[..2],
            &id[2..]
        ));
        assert!(debug.exists(), "{}: install libc6-dbg", debug.display());
        let (file, dfile) = (
            std::fs::File::open(libc).unwrap(),
            std::fs::File::open(&debug).unwrap(),
        );
        let syms = ModuleSymbols::load_split(libc, &file, Some((&debug, &dfile))).unwrap();
        assert!(syms.has_debug_info(), "{:?}", syms.debug_info_problem());
        let lines = compare(&syms, 200);
        assert!(lines > 1000, "only {lines} addresses had lines");

        // Again with room for a few units only: units are dropped and read
        // again, with the same answers.
        let mut small = ModuleSymbols::load_split(libc, &file, Some((&debug, &dfile))).unwrap();
        let (dwarf, units) = small.dwarf.as_mut().unwrap().parts_mut();
        // libc's debug file compresses its sections: the entries are kept
        // packed, and lines are read without them.
        assert!(gimli::Section::reader(&dwarf.debug_info).is_empty());
        assert!(!gimli::Section::reader(&dwarf.debug_line).is_empty());
        let units = units.unwrap();
        units.budget = 2000;
        let mut dropped = 0;
        for f in syms.functions() {
            let (before, last) = {
                let read = units.read.lock();
                (read.len(), read.back().map(|l| l.unit))
            };
            let loc = units.location(dwarf, f.entry).map(|l| (l.file, l.line));
            assert_eq!(
                loc,
                expected(&syms, f.entry),
                "{} at {:#x}",
                f.name,
                f.entry
            );
            let read = units.read.lock();
            // A unit read now is the last: the others kept lost what it
            // pushed out.
            if read.back().map(|l| l.unit) != last {
                dropped += (before + 1).saturating_sub(read.len());
            }
            let kept: usize = read.iter().map(|l| l.rows).sum();
            assert!(kept <= 2000 || read.len() == 1, "{kept} rows kept");
        }
        assert!(dropped > 100, "only {dropped} units dropped");
    }
}
