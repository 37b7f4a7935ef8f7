//! DWARF, for what symbols do not say: functions a stripped symbol table
//! lost (`DW_TAG_subprogram` ranges), and the source lines and inlined calls
//! of an address through `addr2line`. It is separate because it reads other
//! sections with another library (`gimli`), and only the views that show
//! source need its lookups.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};

use gimli::Reader as _;
use object::read::elf::{ElfFile, FileHeader, SectionHeader};
use object::Endianness;
use ptscope_formats::demangle;

use super::elf::region_containing;
use super::intervals::{has_gap, Interval};
use super::unit_lines::{UnitLines, UnitLinesBuilder};
use super::{
    DwarfReader, InlineFrame, ModuleSymbols, PendingFunc, SourceFrame, SourceLocation, SymbolSource,
};
use crate::names::resolve::{file_id, FileId};

/// The last byte of the address space, where no code can start; addr2line
/// overflows probing it.
const NO_CODE: u64 = u64::MAX;

/// Guards against hostile range lists and inline chains.
const MAX_RANGES_PER_DIE: usize = 4096;
const MAX_INLINE_DEPTH: usize = 256;
const MAX_NAME_INDIRECTIONS: usize = 8;

/// A module's DWARF and two indexes of it:
/// - the units' address ranges ([`UnitLines`]), built at load, for the
///   line of each function the coarse pass names. A lookup reads the unit's
///   line program and strings alone, so the decode holds no more than
///   those sections beside its spans;
/// - addr2line's, for the fine pass's lines and inlined calls, built when
///   a lookup first needs it. Building it parses every unit's
///   abbreviations and line program header, and keeps them: for a
///   distribution's libpython, some 20 MB.
///
/// The sections only addr2line reads (the entries, their abbreviations
/// and ranges) are not kept when the file compresses them, as
/// distributions' debug files do: the coarse pass never reads them, and
/// they are read from the file (held open) and inflated again for
/// addr2line. Some 7 MB of libc's, which took 2.5 MB even compressed.
pub(super) struct SourceIndex {
    /// gimli's view of the inflated sections (the packed ones empty in
    /// it), which a function's line is read from.
    lines: gimli::Dwarf<DwarfReader>,
    units: Result<UnitLines, String>,
    /// Every section but the packed ones, inflated.
    inflated: Vec<(gimli::SectionId, DwarfReader)>,
    /// The sections only addr2line reads, as the file held them; taken
    /// when its index is built.
    packed: Mutex<Vec<Packed>>,
    endian: gimli::RunTimeEndian,
    /// addr2line's context caches parsed units in cells that are not
    /// `Sync`; the mutex lets one module be shared by decoding threads.
    context: OnceLock<Result<Mutex<addr2line::Context<DwarfReader>>, String>>,
}

/// Sections a function's line is read from ([`UnitLines::location`]):
/// never packed.
const LINE_SECTIONS: [gimli::SectionId; 4] = [
    gimli::SectionId::DebugLine,
    gimli::SectionId::DebugLineStr,
    gimli::SectionId::DebugStr,
    gimli::SectionId::DebugStrOffsets,
];

impl SourceIndex {
    /// The index of `loaded`'s units ([`read_units`]), with what only
    /// addr2line reads packed.
    pub(super) fn new(loaded: LoadedDwarf, units: Result<UnitLines, gimli::Error>) -> SourceIndex {
        let units = units.map_err(|e| format!("reading DWARF units: {e}"));
        let LoadedDwarf {
            mut sections,
            packed,
            endian,
        } = loaded;
        // The packed sections' inflated bytes go now.
        sections.retain(|(id, _)| packed.iter().all(|p| p.id != *id));
        let inflated = sections;
        SourceIndex {
            lines: build(&inflated, endian, |_| None),
            units,
            inflated,
            packed: Mutex::new(packed),
            endian,
            context: OnceLock::new(),
        }
    }

    /// The index, built now if it is not yet (its packed sections
    /// inflated again); `None` if its units could not be read.
    fn context(&self) -> Option<MutexGuard<'_, addr2line::Context<DwarfReader>>> {
        self.index().as_ref().ok().map(|c| c.lock())
    }

    /// addr2line's index, built now if it is not yet (its packed sections
    /// inflated again), or why it could not be.
    fn index(&self) -> &Result<Mutex<addr2line::Context<DwarfReader>>, String> {
        self.context.get_or_init(|| {
            let packed = std::mem::take(&mut *self.packed.lock());
            let mut unpacked = Vec::with_capacity(packed.len());
            for p in &packed {
                let bytes = p
                    .inflate(self.endian)
                    .map_err(|e| format!("{}: {e}", p.id.name()))?;
                unpacked.push((p.id, bytes));
            }
            let dwarf = build(&self.inflated, self.endian, |id| {
                unpacked
                    .iter()
                    .find(|(u, _)| *u == id)
                    .map(|(_, b)| b.clone())
            });
            addr2line::Context::from_arc_dwarf(Arc::new(dwarf))
                .map(Mutex::new)
                .map_err(|e| format!("reading DWARF units: {e}"))
        })
    }

    /// Builds addr2line's index now, unless it is built (or was tried):
    /// what the first lookup that needs it would otherwise wait for.
    pub(super) fn build_index(&self) {
        // Not locked: a lookup in the module meanwhile need not wait.
        let _ = self.index();
    }

    /// Whether addr2line's index is built, or was tried and failed: a
    /// lookup waits for nothing.
    pub(super) fn index_built(&self) -> bool {
        self.context.get().is_some()
    }

    /// The units' ranges; `None` if the units could not be read.
    fn units(&self) -> Option<&UnitLines> {
        self.units.as_ref().ok()
    }

    /// The sections lines are read from, and the units' index.
    #[cfg(test)]
    pub(super) fn parts_mut(&mut self) -> (&gimli::Dwarf<DwarfReader>, Option<&mut UnitLines>) {
        (&self.lines, self.units.as_mut().ok())
    }

    /// Why an index could not be built, if one was tried and failed.
    pub(super) fn failed(&self) -> Option<&str> {
        let context = self.context.get().and_then(|r| r.as_ref().err());
        let units = self.units.as_ref().err();
        context.or(units).map(String::as_str)
    }
}

/// A `gimli::Dwarf` over `sections`, and what `more` gives for the others
/// (empty if nothing).
fn build(
    sections: &[(gimli::SectionId, DwarfReader)],
    endian: gimli::RunTimeEndian,
    more: impl Fn(gimli::SectionId) -> Option<DwarfReader>,
) -> gimli::Dwarf<DwarfReader> {
    let found = |id| {
        let known = sections
            .iter()
            .find(|(s, _)| *s == id)
            .map(|(_, b)| b.clone());
        Ok::<_, std::convert::Infallible>(
            known
                .or_else(|| more(id))
                .unwrap_or_else(|| gimli::EndianArcSlice::new(Arc::from(&[][..]), endian)),
        )
    };
    match gimli::Dwarf::load(found) {
        Ok(dwarf) => dwarf,
        Err(never) => match never {},
    }
}

// The source lookups of `ModuleSymbols`, through addr2line's context; the
// function and file-offset lookups are in `mod.rs`.
impl ModuleSymbols {
    /// addr2line's index of the module's DWARF, to look `svma` up in.
    fn source_index(&self, svma: u64) -> Option<MutexGuard<'_, addr2line::Context<DwarfReader>>> {
        self.dwarf.as_ref().filter(|_| svma < NO_CODE)?.context()
    }

    /// Source file and line of a function's entry `svma`: what
    /// [`location`](Self::location) says, without its column, found by
    /// reading only the unit that holds it (not building addr2line's index
    /// of every unit, which a decode would hold to the end).
    pub fn entry_location(&self, svma: u64) -> Option<SourceLocation> {
        let index = self.dwarf.as_ref().filter(|_| svma < NO_CODE)?;
        index.units()?.location(&index.lines, svma)
    }

    /// Source file and line of `svma` (DWARF), if any.
    pub fn location(&self, svma: u64) -> Option<SourceLocation> {
        let ctx = self.source_index(svma)?;
        let loc = ctx.find_location(svma).ok()??;
        Some(SourceLocation {
            file: loc.file?.to_string(),
            line: loc.line,
            column: loc.column,
        })
    }

    /// The source position of `svma` with every inlined call around it,
    /// innermost first: the last frame is the real function, at the line
    /// that contains the inlined calls. Empty without line info.
    pub fn source_frames(&self, svma: u64) -> Vec<SourceFrame> {
        let Some(ctx) = self.source_index(svma) else {
            return Vec::new();
        };
        let Ok(mut iter) = ctx.find_frames(svma).skip_all_loads() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while let Ok(Some(frame)) = iter.next() {
            let function = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(|raw| demangle(&raw).into_owned());
            let (file, line) = match frame.location {
                Some(l) => (l.file.map(str::to_string), l.line),
                None => (None, None),
            };
            out.push(SourceFrame {
                function,
                file,
                line,
            });
            if out.len() >= MAX_INLINE_DEPTH {
                break;
            }
        }
        out
    }

    /// Inline chain at `svma`, innermost first: each inlined function with
    /// where it was inlined. Empty outside inlined code. The outermost
    /// (real) function is not included: that is [`function`](Self::function).
    pub fn inline_frames(&self, svma: u64) -> Vec<InlineFrame> {
        let Some(ctx) = self.source_index(svma) else {
            return Vec::new();
        };
        let Ok(mut iter) = ctx.find_frames(svma).skip_all_loads() else {
            return Vec::new();
        };
        // (function name, file and line in that function) from innermost out.
        type Frame = (Option<String>, Option<(String, Option<u32>)>);
        let mut frames: Vec<Frame> = Vec::new();
        while let Ok(Some(frame)) = iter.next() {
            let name = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(|raw| demangle(&raw).into_owned());
            let loc = frame
                .location
                .and_then(|l| Some((l.file?.to_string(), l.line)));
            frames.push((name, loc));
            if frames.len() >= MAX_INLINE_DEPTH {
                break;
            }
        }
        // Frame k's call site is frame k+1's location.
        let mut out = Vec::with_capacity(frames.len().saturating_sub(1));
        for pair in frames.windows(2) {
            let (call_file, call_line) = match &pair[1].1 {
                Some((file, line)) => (Some(file.clone()), *line),
                None => (None, None),
            };
            out.push(InlineFrame {
                function: pair[0].0.clone().unwrap_or_else(|| "??".to_string()),
                call_file,
                call_line,
            });
        }
        out
    }
}

/// A module's DWARF sections as loaded: each inflated, and those only
/// addr2line reads also as the file holds them, if it compresses them.
pub(super) struct LoadedDwarf {
    sections: Vec<(gimli::SectionId, DwarfReader)>,
    packed: Vec<Packed>,
    endian: gimli::RunTimeEndian,
}

impl LoadedDwarf {
    /// gimli's view of every section.
    pub(super) fn dwarf(&self) -> gimli::Dwarf<DwarfReader> {
        build(&self.sections, self.endian, |_| None)
    }
}

/// A section the file compresses, to be inflated again.
struct Packed {
    id: gimli::SectionId,
    format: object::CompressionFormat,
    bytes: PackedBytes,
    size: u64,
}

/// Where a packed section's bytes are.
enum PackedBytes {
    /// Copied out of bytes that no file stands behind.
    Held(Box<[u8]>),
    /// In the file they were mapped from: `len` bytes at `offset`.
    InFile {
        origin: Origin,
        offset: u64,
        len: usize,
    },
}

impl Packed {
    fn inflate(&self, endian: gimli::RunTimeEndian) -> Result<DwarfReader, String> {
        let read;
        let bytes: &[u8] = match &self.bytes {
            PackedBytes::Held(bytes) => bytes,
            PackedBytes::InFile {
                origin,
                offset,
                len,
            } => {
                read = origin.read(*offset, *len)?;
                &read
            }
        };
        let data = object::CompressedData {
            format: self.format,
            data: bytes,
            uncompressed_size: self.size,
        };
        let bytes = data.decompress().map_err(|e| e.to_string())?;
        Ok(gimli::EndianArcSlice::new(Arc::from(bytes), endian))
    }
}

/// The open file a module's bytes were mapped from, to read some of them
/// again: held open, so that it is the same inode whatever its path names
/// later (a snapshot's unpacked copy removed, a package upgraded), with
/// the length and modification time it had, to tell that it is unchanged.
/// A module keeps one only if its file compresses its DWARF: one open
/// file per such module, for as long as its symbols live.
#[derive(Clone)]
pub(super) struct Origin {
    file: Arc<std::fs::File>,
    path: Arc<std::path::Path>,
    id: FileId,
}

/// An open file and its name, which a module's bytes were mapped from.
pub(super) type Opened<'a> = (&'a std::fs::File, &'a std::path::Path);

impl Origin {
    /// `file` (named `path`), as it is now; `None` if it cannot be told.
    fn of((file, path): Opened<'_>) -> Option<Origin> {
        Some(Origin {
            id: file_id(file)?,
            file: Arc::new(file.try_clone().ok()?),
            path: path.into(),
        })
    }

    /// `len` bytes at `offset`, if the file is as it was.
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        use std::os::unix::fs::FileExt;
        let problem = |e: &dyn std::fmt::Display| format!("{}: {e}", self.path.display());
        match file_id(&self.file) {
            Some(id) if id == self.id => {}
            Some(_) => return Err(problem(&"it changed after its symbols were read")),
            None => return Err(problem(&"its metadata cannot be read")),
        }
        let mut bytes = vec![0; len];
        self.file
            .read_exact_at(&mut bytes, offset)
            .map_err(|e| problem(&e))?;
        Ok(bytes)
    }
}

/// The DWARF sections, copied out of the file `data` (mapped from
/// `opened`, if a file): the map does not outlive `load`, and owned
/// sections keep `ModuleSymbols` free of borrows. Their size in memory is
/// the price, which [`SourceIndex`] lowers: the sections it packs are
/// read from the file again when needed, and copied as compressed only
/// when no file stands behind `data`. `Ok(None)` without `.debug_info`.
pub(super) fn load_dwarf<'d, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
    sections: &object::read::elf::SectionTable<'d, Elf, &'d [u8]>,
    (opened, data): (Option<Opened<'_>>, &'d [u8]),
) -> Result<Option<LoadedDwarf>, String> {
    use gimli::SectionId as S;
    use object::CompressionFormat;
    let endian = file.endian();
    let gimli_endian = if file.elf_header().is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let has_info = sections
        .section_by_name(endian, b".debug_info")
        .is_some_and(|(_, s)| s.sh_size(endian).into() > 0);
    if !has_info {
        return Ok(None);
    }
    // What lines, functions and inlines need; not the variable locations,
    // macros or type units, which can be as large.
    let needed = [
        S::DebugAbbrev,
        S::DebugAddr,
        S::DebugAranges,
        S::DebugInfo,
        S::DebugLine,
        S::DebugLineStr,
        S::DebugRanges,
        S::DebugRngLists,
        S::DebugStr,
        S::DebugStrOffsets,
    ];
    let mut loaded = LoadedDwarf {
        sections: Vec::new(),
        packed: Vec::new(),
        endian: gimli_endian,
    };
    let mut origin: Option<Option<Origin>> = None;
    for id in needed {
        let Some((index, _)) = sections.section_by_name(endian, id.name().as_bytes()) else {
            continue;
        };
        let (bytes, c) = section_bytes(file, index).map_err(|e| format!("{}: {e}", id.name()))?;
        if c.format != CompressionFormat::None && !LINE_SECTIONS.contains(&id) {
            // `c.data` lies inside `data`, the file's bytes as mapped.
            let offset = (c.data.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
            let inside = offset
                .checked_add(c.data.len())
                .is_some_and(|end| end <= data.len());
            // Told once, at the first section that needs it.
            if origin.is_none() {
                origin = Some(opened.and_then(Origin::of));
            }
            let bytes = match origin.as_ref().and_then(Option::as_ref) {
                Some(origin) if inside => PackedBytes::InFile {
                    origin: origin.clone(),
                    offset: offset as u64,
                    len: c.data.len(),
                },
                _ => PackedBytes::Held(c.data.into()),
            };
            loaded.packed.push(Packed {
                id,
                format: c.format,
                bytes,
                size: c.uncompressed_size,
            });
        }
        loaded.sections.push((
            id,
            gimli::EndianArcSlice::new(Arc::from(bytes), gimli_endian),
        ));
    }
    Ok(Some(loaded))
}

/// The most a compressed section may claim to inflate to, per byte it
/// holds: zlib reaches about 1032, and DWARF nowhere near that. A header
/// claiming more lies, and is not worth the allocation it asks for.
const MAX_INFLATION: u64 = 1100;

/// The contents of section `index`, inflated if it is compressed
/// (`SHF_COMPRESSED`, zlib or zstd, as distributions ship debug files),
/// and its bytes as the file holds them.
fn section_bytes<'d, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
    index: object::SectionIndex,
) -> Result<(Cow<'d, [u8]>, object::CompressedData<'d>), String> {
    use object::{CompressionFormat, Object, ObjectSection};
    let section = file.section_by_index(index).map_err(|e| e.to_string())?;
    let compressed = section.compressed_data().map_err(|e| e.to_string())?;
    if compressed.format != CompressionFormat::None {
        let packed = compressed.data.len() as u64;
        let most = packed.saturating_mul(MAX_INFLATION).saturating_add(4096);
        if compressed.uncompressed_size > most {
            return Err(format!(
                "its {packed} compressed bytes claim to inflate to {}",
                compressed.uncompressed_size
            ));
        }
    }
    let bytes = compressed.decompress().map_err(|e| e.to_string())?;
    Ok((bytes, compressed))
}

/// Padding between functions is under 16 bytes at the usual alignment: a
/// compilation unit whose uncovered stretches are all shorter has nothing
/// for DWARF to add, and its DIEs are not walked.
const MIN_DWARF_GAP: u64 = 16;

/// Reads every unit of `dwarf` once for two things: the functions DWARF
/// names where the symbols leave code uncovered ([`unit_functions`]),
/// added to `funcs` and their ranges to `out`, and the units' line index. Each
/// unit's abbreviations and line program header are parsed once for
/// both: for libc's 2,000 units, a quarter of reading its symbols. The
/// functions are kept up to a unit that cannot be read, whose error comes
/// back (the first); the index fails as a whole, as addr2line's does.
pub(super) fn read_units(
    dwarf: &gimli::Dwarf<DwarfReader>,
    code: &[(u64, u64)],
    covered: &[Interval],
    funcs: &mut Vec<PendingFunc<'_>>,
    out: &mut Vec<Interval>,
) -> (gimli::Result<()>, gimli::Result<UnitLines>) {
    let mut first_error = None;
    let mut lines = UnitLinesBuilder::new(dwarf);
    let mut headers = dwarf.units();
    loop {
        // A bad unit header leaves no way to find the next one.
        let header = match headers.next() {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(e) => {
                first_error.get_or_insert(e);
                lines = Err(e);
                break;
            }
        };
        let indexed = lines.as_ref().is_ok_and(|b| b.wants(&header));
        let unit = match dwarf.unit(header) {
            Ok(unit) => unit,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        if let Err(e) = unit_functions(dwarf, &unit, code, covered, funcs, out) {
            first_error.get_or_insert(e);
        }
        if let (true, Ok(b)) = (indexed, &mut lines) {
            if let Err(e) = b.add(dwarf, &unit) {
                lines = Err(e);
            }
        }
    }
    (
        first_error.map_or(Ok(()), Err),
        lines.map(UnitLinesBuilder::finish),
    )
}

/// Adds a function for each `DW_TAG_subprogram` range in `unit` that
/// the symbols leave uncovered.
fn unit_functions(
    dwarf: &gimli::Dwarf<DwarfReader>,
    unit: &gimli::Unit<DwarfReader>,
    code: &[(u64, u64)],
    covered: &[Interval],
    funcs: &mut Vec<PendingFunc<'_>>,
    out: &mut Vec<Interval>,
) -> gimli::Result<()> {
    let mut cursor = unit.entries();
    let Some(root) = cursor.next_dfs()? else {
        return Ok(());
    };
    let unit_ranges = die_ranges(dwarf, unit, root, code)?;
    if !unit_ranges
        .iter()
        .any(|&(b, e)| has_gap(covered, b, e, MIN_DWARF_GAP))
    {
        return Ok(());
    }
    while let Some(entry) = cursor.next_dfs()? {
        if entry.tag() != gimli::DW_TAG_subprogram {
            continue;
        }
        let ranges = die_ranges(dwarf, unit, entry, code)?;
        if ranges.is_empty() {
            continue;
        }
        let Some(name) = subprogram_name(dwarf, unit, entry) else {
            continue;
        };
        let low_pc = match entry.attr_value(gimli::DW_AT_low_pc) {
            Some(v) => dwarf.attr_address(unit, v)?,
            None => None,
        };
        let entry_pc = low_pc.unwrap_or_else(|| ranges.iter().map(|r| r.0).min().unwrap_or(0));
        let name: Cow<'static, str> = Cow::Owned(name);
        for (begin, end) in ranges {
            let Ok(func) = u32::try_from(funcs.len()) else {
                return Ok(());
            };
            funcs.push(PendingFunc {
                entry: entry_pc,
                end,
                name: name.clone(),
                plt: false,
                source: SymbolSource::Dwarf,
            });
            out.push(Interval {
                start: begin,
                end,
                func,
            });
        }
    }
    Ok(())
}

/// A DIE's address ranges inside the code regions. Unlike
/// `Dwarf::die_ranges`, adds `DW_AT_high_pc` offsets with overflow checks.
fn die_ranges(
    dwarf: &gimli::Dwarf<DwarfReader>,
    unit: &gimli::Unit<DwarfReader>,
    entry: &gimli::DebuggingInformationEntry<DwarfReader>,
    code: &[(u64, u64)],
) -> gimli::Result<Vec<(u64, u64)>> {
    let mut ranges = Vec::new();
    let mut low = None;
    let mut high = None;
    let mut size = None;
    for attr in entry.attrs() {
        match attr.name() {
            gimli::DW_AT_low_pc => low = dwarf.attr_address(unit, attr.value())?,
            gimli::DW_AT_high_pc => match attr.value() {
                gimli::AttributeValue::Udata(n) => size = Some(n),
                v => high = dwarf.attr_address(unit, v)?,
            },
            gimli::DW_AT_ranges => {
                if let Some(mut list) = dwarf.attr_ranges(unit, attr.value())? {
                    while let Some(r) = list.next()? {
                        ranges.push((r.begin, r.end));
                        if ranges.len() >= MAX_RANGES_PER_DIE {
                            break;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(begin) = low {
        let end = match size {
            Some(n) => begin.checked_add(n),
            None => high,
        };
        if let Some(end) = end {
            ranges.push((begin, end));
        }
    }
    ranges.retain(|&(b, e)| b < e && region_containing(code, b).is_some_and(|r| e <= r.1));
    Ok(ranges)
}

/// The demangled linkage name, or the plain name, following
/// `DW_AT_specification` / `DW_AT_abstract_origin` within the unit.
fn subprogram_name(
    dwarf: &gimli::Dwarf<DwarfReader>,
    unit: &gimli::Unit<DwarfReader>,
    entry: &gimli::DebuggingInformationEntry<DwarfReader>,
) -> Option<String> {
    let mut current = entry.clone();
    for _ in 0..MAX_NAME_INDIRECTIONS {
        for (attr, mangled) in [
            (gimli::DW_AT_linkage_name, true),
            (gimli::DW_AT_MIPS_linkage_name, true),
            (gimli::DW_AT_name, false),
        ] {
            if let Some(v) = current.attr_value(attr) {
                if let Ok(s) = dwarf.attr_string(unit, v) {
                    if let Ok(s) = s.to_string_lossy() {
                        return Some(if mangled {
                            demangle(&s).into_owned()
                        } else {
                            s.into_owned()
                        });
                    }
                }
            }
        }
        let next = [gimli::DW_AT_specification, gimli::DW_AT_abstract_origin]
            .into_iter()
            .find_map(|a| match current.attr_value(a) {
                Some(gimli::AttributeValue::UnitRef(offset)) => unit.entry(offset).ok(),
                _ => None,
            })?;
        current = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use crate::names::symbols::testutil::*;
    use crate::names::symbols::{ModuleSymbols, SymbolSource};

    #[test]
    fn locations_match_gnu_addr2line() {
        let dir = tempdir();
        let bin = compile(dir.path(), "plain", &[]);
        let syms = ModuleSymbols::load(&bin).unwrap();
        let nm = nm(&bin);
        let mut addrs = Vec::new();
        for name in ["main", "sum_bumps"] {
            let (addr, size) = nm[name];
            addrs.extend((addr..addr + size).step_by(3));
        }
        let theirs = gnu_addr2line(&bin, &addrs);
        let mut compared = 0;
        for (addr, (file, line)) in addrs.iter().zip(theirs) {
            let ours = syms.location(*addr);
            if line.is_none() {
                continue;
            }
            let ours = ours.unwrap_or_else(|| panic!("no location at {addr:#x}"));
            assert_eq!(ours.line, line, "line at {addr:#x}");
            assert_eq!(basename(&ours.file), basename(&file), "file at {addr:#x}");
            compared += 1;
        }
        assert!(compared > 10, "only {compared} addresses had lines");
    }

    #[test]
    fn inline_frames_find_an_always_inline_callee() {
        let dir = tempdir();
        let bin = compile(dir.path(), "plain", &[]);
        let syms = ModuleSymbols::load(&bin).unwrap();
        let (addr, size) = nm(&bin)["sum_bumps"];
        let call_line = marker_line("CALL-BUMP");
        let hit = (addr..addr + size).find_map(|a| {
            let frames = syms.inline_frames(a);
            (frames.first()?.function == "bump").then_some(frames)
        });
        let frames = hit.expect("no address of sum_bumps is inside the inlined bump");
        assert_eq!(frames[0].call_line, Some(call_line));
        assert_eq!(
            basename(frames[0].call_file.as_deref().unwrap()),
            "symbols.c"
        );
        assert!(syms.inline_frames(nm(&bin)["main"].0).is_empty());
        assert!(syms.inline_frames(0).is_empty());
    }

    /// Sections the file compresses are read from it again, not copied:
    /// the answers are those of the same bytes loaded with no file behind
    /// them (which keep a compressed copy). A file changed after its
    /// symbols were read gives no inlined calls, says which file and why,
    /// and the functions' own lines still come.
    #[test]
    fn compressed_sections_are_read_from_the_file_again() {
        let dir = tempdir();
        let bin = compile(dir.path(), "gz", &["-gz=zlib"]);
        let from_file = ModuleSymbols::load(&bin).unwrap();
        let bytes = std::fs::read(&bin).unwrap();
        let held = ModuleSymbols::from_bytes(&bin, &bytes).unwrap();
        let where_packed = |s: &ModuleSymbols| {
            let packed = s.dwarf.as_ref().unwrap().packed.lock();
            assert!(!packed.is_empty(), "nothing packed");
            packed
                .iter()
                .map(|p| matches!(p.bytes, super::PackedBytes::InFile { .. }))
                .collect::<Vec<_>>()
        };
        assert!(where_packed(&from_file).iter().all(|&f| f));
        assert!(where_packed(&held).iter().all(|&f| !f));
        let (addr, size) = nm(&bin)["sum_bumps"];
        let mut inlined = 0;
        for a in addr..addr + size {
            let frames = from_file.inline_frames(a);
            assert_eq!(frames, held.inline_frames(a), "at {a:#x}");
            assert_eq!(from_file.source_frames(a), held.source_frames(a));
            inlined += usize::from(!frames.is_empty());
        }
        assert!(inlined > 0, "no inlined call found");
        assert!(from_file.debug_info_problem().is_none());

        // Loaded, then the file rewritten (as a rebuild does) before the
        // first lookup that needs the compressed sections.
        let stale = ModuleSymbols::load(&bin).unwrap();
        let entry = stale.entry_location(addr);
        assert!(entry.is_some());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut changed = bytes.clone();
        changed.push(0);
        std::fs::write(&bin, &changed).unwrap();
        assert!(stale.inline_frames(addr).is_empty());
        assert!(stale.source_frames(addr).is_empty());
        let problem = stale.debug_info_problem().expect("a problem");
        assert!(
            problem.contains(&bin.display().to_string()) && problem.contains("changed"),
            "{problem}"
        );
        assert_eq!(stale.entry_location(addr), entry);
    }

    #[test]
    fn dwarf_names_functions_missing_from_the_symbols() {
        let dir = tempdir();
        let bin = compile(dir.path(), "dwarf_only", &[]);
        let nm = nm(&bin);
        run(Command::new("strip")
            .args(["--strip-all", "--keep-section=.debug_*"])
            .arg(&bin));
        let syms = ModuleSymbols::load(&bin).unwrap();
        assert!(!syms.has_symbols());
        assert!(syms.has_debug_info());
        for name in ["main", "sum_bumps"] {
            let (addr, size) = nm[name];
            let f = syms.function(addr + size / 2).unwrap();
            assert_eq!((f.name, f.entry), (name, addr));
            assert_eq!(f.source, SymbolSource::Dwarf);
        }
        assert!(syms.location(nm["main"].0).is_some());
    }
}
