//! Function names and source lines for addresses inside one ELF binary.
//!
//! The decoder asks "which function is this?" every time the trace moves
//! between functions, so [`ModuleSymbols::function`] is a binary search
//! (narrowed by a bucket table) over a flat sorted array of non-overlapping
//! address ranges, with every name already demangled into one string arena:
//! no allocation, no hashing, no parsing at lookup time. All parsing happens
//! once in [`ModuleSymbols::load`].
//!
//! Names come from, in order of trust: `.symtab`, `.dynsym`, the PLT stubs
//! (named `foo@plt` from their GOT slots' relocations, as objdump and perf
//! do), and DWARF `DW_TAG_subprogram` ranges for code no symbol covers (a
//! stripped symbol table with debug info kept). Line numbers and inline
//! chains come from DWARF through `addr2line`, lazily, since only the views
//! that show source need them.
//!
//! Binaries arrive inside snapshot files from other machines, so nothing
//! here trusts the file: every offset and size is bounds-checked by
//! `object`/`gimli` or by checked arithmetic here, a bad file gives a typed
//! [`SymbolError`] naming it, and a bad DWARF section only turns debug info
//! off (the symbols stay usable).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gimli::Reader as _;
use object::elf;
use object::read::elf::{ElfFile, FileHeader, ProgramHeader, Rel, Rela, SectionHeader, Sym};
use object::read::SectionIndex;
use object::{Endianness, FileKind};
use ptscope_formats::demangle::demangle;

/// Why a binary could not be read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: not an ELF file: {problem}", path.display())]
    NotElf { path: PathBuf, problem: String },
    #[error("{}: malformed ELF file: {problem}", path.display())]
    Malformed { path: PathBuf, problem: String },
}

impl SymbolError {
    fn io(path: &Path, error: std::io::Error) -> SymbolError {
        SymbolError::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    fn not_elf(path: &Path, problem: impl fmt::Display) -> SymbolError {
        SymbolError::NotElf {
            path: path.to_path_buf(),
            problem: problem.to_string(),
        }
    }

    fn malformed(path: &Path, problem: impl fmt::Display) -> SymbolError {
        SymbolError::Malformed {
            path: path.to_path_buf(),
            problem: problem.to_string(),
        }
    }
}

/// Where a function's name came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SymbolSource {
    Symtab,
    Dynsym,
    /// A PLT stub, named after the relocation of the GOT slot it jumps through.
    Plt,
    /// A `DW_TAG_subprogram` range that no symbol covers.
    Dwarf,
    /// An `.eh_frame` FDE that no symbol or DWARF covers: a function of a
    /// stripped binary, named `[unknown] module+0xoffset` after its entry.
    Unwind,
}

/// The function containing an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionSym<'a> {
    /// Demangled, without Rust hash suffixes; `foo@plt` for PLT stubs.
    pub name: &'a str,
    /// Where the function starts (its symbol value).
    pub entry: u64,
    /// One past its last byte (for DWARF names, of the range holding the
    /// address: a hot/cold split function has several). A symbol nested
    /// inside `[entry, end)` takes over its own range, so this is not a
    /// range over which `function()` answers the same.
    pub end: u64,
    pub source: SymbolSource,
}

/// A line-table position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLocation {
    pub file: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

/// One frame of the source position of an address: a function and the
/// line running in it (for an outer frame, the line of the inlined call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFrame {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// One inlined call around an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlineFrame {
    /// The inlined function, demangled.
    pub function: String,
    /// Where, in the next frame out, it was inlined.
    pub call_file: Option<String>,
    pub call_line: Option<u32>,
}

type DwarfReader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// A function's name and extent; several pieces may share one.
#[derive(Clone, Copy, Debug)]
struct Func {
    entry: u64,
    end: u64,
    /// Byte range of the name in `ModuleSymbols::names`.
    name_start: u32,
    name_end: u32,
    source: SymbolSource,
}

/// One lookup range: `[starts[i], pieces[i].end)` belongs to `funcs[pieces[i].func]`.
#[derive(Clone, Copy, Debug)]
struct Piece {
    end: u64,
    func: u32,
}

/// Narrows the binary search to a few pieces: the address span is cut into
/// power-of-two buckets, one or two per piece, and `first[b]` counts the
/// pieces starting at or before bucket `b`'s first address. Random probes
/// over a large table otherwise spend most of their time mispredicting
/// the search's branches.
#[derive(Debug, Default)]
struct BucketIndex {
    base: u64,
    shift: u32,
    /// One more entry than there are buckets.
    first: Vec<u32>,
}

impl BucketIndex {
    fn new(starts: &[u64]) -> BucketIndex {
        let (Some(&base), Some(&last)) = (starts.first(), starts.last()) else {
            return BucketIndex::default();
        };
        let span = last - base;
        let wanted = (starts.len() as u64).next_power_of_two();
        let mut shift = 0;
        while shift < 63 && (span >> shift) >= wanted {
            shift += 1;
        }
        let buckets = (span >> shift) + 1;
        let first = (0..=buckets)
            .map(|b| {
                let addr = (u128::from(base) + (u128::from(b) << shift)).min(u128::from(u64::MAX));
                starts.partition_point(|&s| u128::from(s) <= addr) as u32
            })
            .collect();
        BucketIndex { base, shift, first }
    }

    /// The range of `starts` where the pieces starting at or before
    /// `svma` end: the answer is the last of them.
    #[inline]
    fn candidates(&self, svma: u64, len: usize) -> (usize, usize) {
        let Some(offset) = svma.checked_sub(self.base) else {
            return (0, 0);
        };
        let b = usize::try_from(offset >> self.shift).unwrap_or(usize::MAX);
        match (self.first.get(b), self.first.get(b.saturating_add(1))) {
            (Some(&lo), Some(&hi)) => (lo as usize, hi as usize),
            // Past the last bucket: only the last pieces can hold it.
            _ => (self.first.last().map_or(0, |&f| f as usize), len),
        }
    }
}

/// A PT_LOAD program header, for file offset to address translation.
#[derive(Clone, Copy, Debug)]
struct Segment {
    offset: u64,
    filesz: u64,
    vaddr: u64,
}

/// The symbols, segments and debug info of one ELF file.
pub struct ModuleSymbols {
    path: PathBuf,
    /// Range starts, sorted, for the binary search; kept apart from `pieces`
    /// so the search touches only 8 bytes per probe.
    starts: Vec<u64>,
    index: BucketIndex,
    pieces: Vec<Piece>,
    funcs: Vec<Func>,
    names: String,
    segments: Vec<Segment>,
    has_symtab: bool,
    /// addr2line's context caches parsed units in cells that are not `Sync`;
    /// the mutex lets one module be shared by decoding threads.
    dwarf: Option<Mutex<addr2line::Context<DwarfReader>>>,
    dwarf_problem: Option<String>,
}

impl fmt::Debug for ModuleSymbols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModuleSymbols")
            .field("path", &self.path)
            .field("functions", &self.funcs.len())
            .field("has_symtab", &self.has_symtab)
            .field("has_debug_info", &self.dwarf.is_some())
            .finish()
    }
}

/// Runtime page size of the x86 targets PT exists on: mappings start on
/// page boundaries, so a mapped offset may precede its segment's p_offset.
const PAGE: u64 = 4096;

/// The last byte of the address space, where no code can start; addr2line
/// overflows probing it.
const NO_CODE: u64 = u64::MAX;

/// Guards against hostile range lists and inline chains.
const MAX_RANGES_PER_DIE: usize = 4096;
const MAX_INLINE_DEPTH: usize = 256;
const MAX_NAME_INDIRECTIONS: usize = 8;

impl ModuleSymbols {
    /// Reads the ELF file at `path`. Fails only if the file cannot be read
    /// or is not a sound ELF file; missing or damaged debug info just leaves
    /// [`has_debug_info`](Self::has_debug_info) false.
    pub fn load(path: &Path) -> Result<ModuleSymbols, SymbolError> {
        let file = std::fs::File::open(path).map_err(|e| SymbolError::io(path, e))?;
        ModuleSymbols::load_file(path, &file)
    }

    /// Reads `file`, already open; `path` names it.
    pub fn load_file(path: &Path, file: &std::fs::File) -> Result<ModuleSymbols, SymbolError> {
        let len = file.metadata().map_err(|e| SymbolError::io(path, e))?.len();
        if len == 0 {
            return Err(SymbolError::not_elf(path, "empty file"));
        }
        // The map is dropped before returning: everything kept is copied
        // out of it.
        let map = crate::memory::map_binary(file).map_err(|e| SymbolError::io(path, e))?;
        ModuleSymbols::from_bytes(path, &map)
    }

    /// Parses an ELF image already in memory; `path` is only for messages
    /// and [`path`](Self::path).
    pub fn from_bytes(path: &Path, data: &[u8]) -> Result<ModuleSymbols, SymbolError> {
        if data.is_empty() {
            return Err(SymbolError::not_elf(path, "empty file"));
        }
        match FileKind::parse(data) {
            Ok(FileKind::Elf32) => parse_elf::<elf::FileHeader32<Endianness>>(path, data),
            Ok(FileKind::Elf64) => parse_elf::<elf::FileHeader64<Endianness>>(path, data),
            Ok(other) => Err(SymbolError::not_elf(path, format!("{other:?} file"))),
            Err(e) => Err(SymbolError::not_elf(path, e)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the full `.symtab` was there (not stripped).
    pub fn has_symbols(&self) -> bool {
        self.has_symtab
    }

    /// Whether DWARF line and function info was found and parsed.
    pub fn has_debug_info(&self) -> bool {
        self.dwarf.is_some()
    }

    /// The first problem met reading the file's debug info, if any: why it
    /// is not used at all, or why some of its functions were skipped.
    pub fn debug_info_problem(&self) -> Option<&str> {
        self.dwarf_problem.as_deref()
    }

    /// Maps a file offset (as in an MMAP2 record's pgoff + (addr - start))
    /// to the stated virtual address (svma) using the PT_LOAD program headers.
    pub fn file_offset_to_svma(&self, offset: u64) -> Option<u64> {
        let exact = self
            .segments
            .iter()
            .find(|s| offset >= s.offset && offset - s.offset < s.filesz);
        if let Some(s) = exact {
            return s.vaddr.checked_add(offset - s.offset);
        }
        // The start of the page holding a segment's first byte is mapped
        // with it.
        self.segments.iter().find_map(|s| {
            let page_start = s.offset - s.offset % PAGE;
            (offset >= page_start && offset < s.offset)
                .then(|| s.vaddr.checked_sub(s.offset - offset))
                .flatten()
        })
    }

    /// The inverse of [`file_offset_to_svma`](Self::file_offset_to_svma),
    /// for addresses backed by file bytes.
    pub fn svma_to_file_offset(&self, svma: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| svma >= s.vaddr && svma - s.vaddr < s.filesz)
            .and_then(|s| s.offset.checked_add(svma - s.vaddr))
    }

    /// The function containing `svma`: demangled name, entry svma, end svma.
    /// `None` outside every known function.
    #[inline]
    pub fn function(&self, svma: u64) -> Option<FunctionSym<'_>> {
        let (lo, hi) = self.index.candidates(svma, self.starts.len());
        let in_bucket = self.starts.get(lo..hi)?.partition_point(|&s| s <= svma);
        let i = (lo + in_bucket).checked_sub(1)?;
        let piece = self.pieces.get(i)?;
        if svma >= piece.end {
            return None;
        }
        self.func_sym(piece.func)
    }

    /// The stretch around `svma` that resolves as one: the piece of the
    /// function that holds it, or the gap between the known functions
    /// around it. A caller that caches what an address resolved to by
    /// range must stay inside it, or an address nearby would resolve by
    /// what was asked before (a function's entry-to-end can hold another's
    /// piece; code after a gap is another function).
    pub fn extent(&self, svma: u64) -> (u64, u64) {
        let i = self.starts.partition_point(|&s| s <= svma);
        let next = self.starts.get(i).copied().unwrap_or(u64::MAX);
        match i.checked_sub(1) {
            Some(j) => {
                let start = self.starts[j];
                let end = self.pieces.get(j).map_or(start, |p| p.end);
                if svma < end {
                    (start, end)
                } else {
                    (end, next)
                }
            }
            None => (0, next),
        }
    }

    /// Every known function, in address order; a DWARF-only function split
    /// into several ranges (hot and cold parts) comes once per range.
    pub fn functions(&self) -> impl Iterator<Item = FunctionSym<'_>> + '_ {
        (0..self.funcs.len() as u32).filter_map(|i| self.func_sym(i))
    }

    fn func_sym(&self, index: u32) -> Option<FunctionSym<'_>> {
        let f = self.funcs.get(index as usize)?;
        Some(FunctionSym {
            name: self.names.get(f.name_start as usize..f.name_end as usize)?,
            entry: f.entry,
            end: f.end,
            source: f.source,
        })
    }

    /// Source file and line of `svma` (DWARF), if any.
    pub fn location(&self, svma: u64) -> Option<SourceLocation> {
        let ctx = self
            .dwarf
            .as_ref()
            .filter(|_| svma < NO_CODE)?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
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
        let Some(dwarf) = self.dwarf.as_ref().filter(|_| svma < NO_CODE) else {
            return Vec::new();
        };
        let ctx = dwarf.lock().unwrap_or_else(|e| e.into_inner());
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
        let Some(dwarf) = self.dwarf.as_ref().filter(|_| svma < NO_CODE) else {
            return Vec::new();
        };
        let ctx = dwarf.lock().unwrap_or_else(|e| e.into_inner());
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

/// A function symbol before deduplication.
struct Candidate<'d> {
    start: u64,
    size: u64,
    /// As stored (mangled), or synthesized.
    name: Cow<'d, str>,
    /// Append `@plt` after demangling.
    plt: bool,
    /// Lower wins among candidates at one address.
    rank: u8,
    source: SymbolSource,
    /// The end of the symbol's section: a zero-size symbol extends no further.
    section_end: Option<u64>,
}

/// A function after deduplication, before its name is demangled.
struct PendingFunc<'d> {
    entry: u64,
    end: u64,
    name: Cow<'d, str>,
    plt: bool,
    source: SymbolSource,
}

/// An address range owned by `PendingFunc` number `func`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Interval {
    start: u64,
    end: u64,
    func: u32,
}

fn parse_elf<Elf: FileHeader<Endian = Endianness>>(
    path: &Path,
    data: &[u8],
) -> Result<ModuleSymbols, SymbolError> {
    let file = ElfFile::<Elf, &[u8]>::parse(data).map_err(|e| SymbolError::malformed(path, e))?;
    let endian = file.endian();
    let sections = file.elf_section_table();

    let segments: Vec<Segment> = file
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .map(|p| Segment {
            offset: p.p_offset(endian).into(),
            filesz: p.p_filesz(endian).into(),
            vaddr: p.p_vaddr(endian).into(),
        })
        .collect();
    let code = code_regions(&file);

    let mut candidates = Vec::new();
    let symtab = file.elf_symbol_table();
    symbol_candidates(&file, symtab, SymbolSource::Symtab, &mut candidates);
    let has_symtab = !candidates.is_empty();
    symbol_candidates(
        &file,
        file.elf_dynamic_symbol_table(),
        SymbolSource::Dynsym,
        &mut candidates,
    );
    let machine = file.elf_header().e_machine(endian);
    if machine == elf::EM_X86_64 || machine == elf::EM_386 {
        plt_candidates(&file, &mut candidates);
    }

    let mut funcs = Vec::new();
    let intervals = dedup_candidates(candidates, &code, &mut funcs);
    let sym_pieces = flatten(intervals);

    // DWARF: for functions with no symbol, and for lines and inlines.
    let (dwarf, dwarf_problem) = match load_dwarf(&file, sections) {
        Ok(Some(d)) => (Some(d), None),
        Ok(None) => (None, None),
        Err(problem) => (None, Some(problem)),
    };
    let mut pieces = sym_pieces.clone();
    let mut context = None;
    let mut dwarf_problem = dwarf_problem;
    if let Some(dwarf) = dwarf {
        let mut dw_intervals = Vec::new();
        if let Err(e) = dwarf_functions(&dwarf, &code, &sym_pieces, &mut funcs, &mut dw_intervals) {
            dwarf_problem = Some(format!("reading DWARF functions: {e}"));
        }
        let dw_pieces = flatten(dw_intervals);
        pieces.extend(subtract(&dw_pieces, &sym_pieces));
        pieces.sort_by_key(|p| p.start);
        match addr2line::Context::from_dwarf(dwarf) {
            Ok(ctx) => context = Some(Mutex::new(ctx)),
            Err(e) => dwarf_problem = Some(format!("reading DWARF units: {e}")),
        }
    }

    // Unwind tables cover every function of a stripped binary: its FDEs
    // give exact boundaries where no name is known.
    let fde = unwind_functions(&file, &code, &segments, path, &mut funcs);
    if !fde.is_empty() {
        let known = flatten(pieces.clone());
        pieces.extend(subtract(&flatten(fde), &known));
        pieces.sort_by_key(|p| p.start);
    }

    build(
        path,
        funcs,
        pieces,
        segments,
        has_symtab,
        context,
        dwarf_problem,
    )
}

/// Function ranges from `.eh_frame` FDEs, named by module offset.
fn unwind_functions<'d, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
    code: &[(u64, u64)],
    segments: &[Segment],
    path: &Path,
    funcs: &mut Vec<PendingFunc<'d>>,
) -> Vec<Interval> {
    use gimli::UnwindSection;
    use object::{Object, ObjectSection};
    let mut out = Vec::new();
    let Some(section) = file.section_by_name(".eh_frame") else {
        return out;
    };
    let Ok(data) = section.data() else {
        return out;
    };
    let little = file.is_little_endian();
    let endian = if little {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let mut eh = gimli::EhFrame::new(data, endian);
    eh.set_address_size(if file.is_64() { 8 } else { 4 });
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let module = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut entries = eh.entries(&bases);
    // Bounded: a hostile section cannot loop forever, each entry advances.
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|_, bases, o| eh.cie_from_offset(bases, o)) else {
            continue;
        };
        let start = fde.initial_address();
        let Some(end) = start.checked_add(fde.len()) else {
            continue;
        };
        if fde.len() == 0 || region_containing(code, start).is_none() {
            continue;
        }
        let Ok(func) = u32::try_from(funcs.len()) else {
            break;
        };
        // A segment's offset is the file's word: it may be absurd.
        let offset = segments
            .iter()
            .find(|s| start >= s.vaddr && start - s.vaddr < s.filesz)
            .and_then(|s| s.offset.checked_add(start - s.vaddr))
            .unwrap_or(start);
        funcs.push(PendingFunc {
            entry: start,
            end,
            name: Cow::Owned(format!("[unknown] {module}+{offset:#x}")),
            plt: false,
            source: SymbolSource::Unwind,
        });
        out.push(Interval { start, end, func });
    }
    out
}

/// Executable address ranges, sorted and merged: from the section headers,
/// or the executable PT_LOADs when there are none. Zero-size symbols
/// extend at most to the end of their region, and DWARF ranges outside
/// every region (discarded COMDAT tombstones) are dropped.
fn code_regions<'d, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
) -> Vec<(u64, u64)> {
    let endian = file.endian();
    let exec = elf::SHF_ALLOC | elf::SHF_EXECINSTR;
    let mut regions: Vec<(u64, u64)> = file
        .elf_section_table()
        .iter()
        .filter(|s| s.sh_flags(endian).contains(exec))
        .filter_map(|s| {
            let start: u64 = s.sh_addr(endian).into();
            Some((start, start.checked_add(s.sh_size(endian).into())?))
        })
        .collect();
    if regions.is_empty() {
        regions = file
            .elf_program_headers()
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_LOAD && p.p_flags(endian).contains(elf::PF_X))
            .filter_map(|p| {
                let start: u64 = p.p_vaddr(endian).into();
                Some((start, start.checked_add(p.p_memsz(endian).into())?))
            })
            .collect();
    }
    regions.retain(|r| r.0 < r.1);
    regions.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(regions.len());
    for r in regions {
        match merged.last_mut() {
            Some(last) if r.0 <= last.1 => last.1 = last.1.max(r.1),
            _ => merged.push(r),
        }
    }
    merged
}

fn region_containing(code: &[(u64, u64)], addr: u64) -> Option<(u64, u64)> {
    let i = code.partition_point(|r| r.0 <= addr).checked_sub(1)?;
    code.get(i).copied().filter(|r| addr < r.1)
}

/// Function symbols of one symbol table: STT_FUNC and STT_GNU_IFUNC, and
/// sized STT_NOTYPE in executable sections (hand-written assembly).
fn symbol_candidates<'d, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
    table: &object::read::elf::SymbolTable<'d, Elf, &'d [u8]>,
    source: SymbolSource,
    out: &mut Vec<Candidate<'d>>,
) {
    let endian = file.endian();
    let sections = file.elf_section_table();
    for (index, sym) in table.enumerate().skip(1) {
        let st_type = sym.st_type();
        let size: u64 = sym.st_size(endian).into();
        let is_func = st_type == elf::STT_FUNC || st_type == elf::STT_GNU_IFUNC;
        let sized_notype = st_type == elf::STT_NOTYPE && size > 0;
        if !is_func && !sized_notype {
            continue;
        }
        let Ok(Some(section_index)) = table.symbol_section(endian, sym, index) else {
            continue; // undefined, absolute or common
        };
        let section = sections.section(section_index).ok();
        if !is_func && !section.is_some_and(|s| s.sh_flags(endian).contains(elf::SHF_EXECINSTR)) {
            continue;
        }
        let section_end = section.and_then(|s| {
            let addr: u64 = s.sh_addr(endian).into();
            addr.checked_add(s.sh_size(endian).into())
        });
        let Ok(raw) = table.symbol_name(endian, sym) else {
            continue;
        };
        if raw.is_empty() {
            continue;
        }
        let bind = sym.st_bind();
        let bind_rank = if bind == elf::STB_GLOBAL || bind == elf::STB_GNU_UNIQUE {
            0
        } else if bind == elf::STB_WEAK {
            1
        } else {
            2
        };
        out.push(Candidate {
            start: sym.st_value(endian).into(),
            size,
            name: String::from_utf8_lossy(raw),
            plt: false,
            rank: bind_rank * 4 + source_rank(source),
            source,
            section_end,
        });
    }
}

fn source_rank(source: SymbolSource) -> u8 {
    match source {
        SymbolSource::Symtab => 0,
        SymbolSource::Dynsym => 1,
        SymbolSource::Plt => 2,
        SymbolSource::Dwarf => 3,
        SymbolSource::Unwind => 4,
    }
}

/// What one PLT entry's code refers to.
#[derive(Debug, PartialEq, Eq)]
enum PltTarget {
    /// PLT0, which pushes the link map and jumps to the resolver.
    Header,
    /// Jumps through this GOT slot.
    Slot(u64),
    /// Lazy stub pushing this `.rela.plt` index (IBT `.plt` next to `.plt.sec`).
    Index(u64),
    Unknown,
}

/// Reads the first instruction that identifies an x86 PLT entry.
fn decode_plt_entry(code: &[u8], addr: u64, is_64: bool, got_base: u64) -> PltTarget {
    let mut at = 0usize;
    if code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) || code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfb]) {
        at = 4; // endbr64 / endbr32
    }
    if code.get(at) == Some(&0xf2) {
        at += 1; // bnd prefix
    }
    let imm32 = |from: usize| -> Option<u32> {
        let b = code.get(from..from.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    match (code.get(at), code.get(at + 1)) {
        // push GOT+8 (rip-relative or absolute) / push 4(%ebx)
        (Some(0xff), Some(0x35)) | (Some(0xff), Some(0xb3)) => PltTarget::Header,
        // jmp *slot: rip-relative on x86-64, absolute on i386
        (Some(0xff), Some(0x25)) => match imm32(at + 2) {
            Some(disp) if is_64 => {
                let next = addr.wrapping_add(at as u64 + 6);
                PltTarget::Slot(next.wrapping_add(disp as i32 as i64 as u64))
            }
            Some(abs) => PltTarget::Slot(u64::from(abs)),
            None => PltTarget::Unknown,
        },
        // i386 PIC: jmp *disp(%ebx), %ebx = GOT base
        (Some(0xff), Some(0xa3)) if !is_64 => match imm32(at + 2) {
            Some(disp) => PltTarget::Slot(got_base.wrapping_add(disp as i32 as i64 as u64)),
            None => PltTarget::Unknown,
        },
        // push index (x86-64) or byte offset into .rel.plt (i386)
        (Some(0x68), _) => match imm32(at + 1) {
            Some(v) if is_64 => PltTarget::Index(u64::from(v)),
            Some(v) => PltTarget::Index(u64::from(v) / 8),
            None => PltTarget::Unknown,
        },
        _ => PltTarget::Unknown,
    }
}

/// `foo@plt` for each entry of `.plt`, `.plt.sec` and `.plt.got`, and
/// `[plt]` for PLT0. Each entry's code names the GOT slot it jumps through
/// (or, for IBT lazy stubs, the `.rela.plt` index it pushes); the dynamic
/// relocation of that slot names the symbol. Decoding the entries instead
/// of assuming a layout handles lazy, IBT, `-z now` and static (IRELATIVE)
/// PLTs alike.
fn plt_candidates<'d, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
    out: &mut Vec<Candidate<'d>>,
) {
    let endian = file.endian();
    let data = file.data();
    let sections = file.elf_section_table();
    let is_64 = file.elf_header().is_type_64();
    // GOT slot -> symbol name, and `.rela.plt` in order for pushed indices.
    let mut names = RelocNames {
        irelative: if is_64 {
            elf::R_X86_64_IRELATIVE
        } else {
            elf::R_386_IRELATIVE
        },
        slots: HashMap::new(),
        plt_order: Vec::new(),
    };
    for shdr in sections.iter() {
        if !shdr.sh_flags(endian).contains(elf::SHF_ALLOC) {
            continue; // static relocations of an object file
        }
        let in_plt_order = matches!(
            sections.section_name(endian, shdr),
            Ok(b".rela.plt") | Ok(b".rel.plt")
        );
        // (slot, symbol index, type, addend)
        let (relocs, link): (Vec<(u64, u32, elf::RelocationType, i64)>, _) =
            if let Ok(Some((relas, link))) = shdr.rela(endian, data) {
                let relocs = relas.iter().map(|r| {
                    (
                        r.r_offset(endian).into(),
                        r.r_sym(endian, false),
                        r.r_type(endian, false),
                        r.r_addend(endian).into(),
                    )
                });
                (relocs.collect(), link)
            } else if let Ok(Some((rels, link))) = shdr.rel(endian, data) {
                let relocs = rels.iter().map(|r| {
                    (
                        r.r_offset(endian).into(),
                        r.r_sym(endian),
                        r.r_type(endian),
                        0,
                    )
                });
                (relocs.collect(), link)
            } else {
                continue;
            };
        names.add(file, link, &relocs, in_plt_order);
    }
    let RelocNames {
        slots, plt_order, ..
    } = names;

    let got_base: u64 = sections
        .section_by_name(endian, b".got.plt")
        .map(|(_, s)| s.sh_addr(endian).into())
        .unwrap_or(0);
    for (name, default_entsize) in [(&b".plt"[..], 16u64), (b".plt.sec", 16), (b".plt.got", 8)] {
        let Some((_, shdr)) = sections.section_by_name(endian, name) else {
            continue;
        };
        let Ok(bytes) = shdr.data(endian, data) else {
            continue;
        };
        let base: u64 = shdr.sh_addr(endian).into();
        let entsize = match shdr.sh_entsize(endian).into() {
            e @ (8 | 16) => e,
            _ => default_entsize,
        };
        for (i, code) in bytes.chunks_exact(entsize as usize).enumerate() {
            let addr = base.wrapping_add(i as u64 * entsize);
            let name = match decode_plt_entry(code, addr, is_64, got_base) {
                PltTarget::Header => {
                    out.push(Candidate {
                        start: addr,
                        size: entsize,
                        name: Cow::Borrowed("[plt]"),
                        plt: false,
                        rank: source_rank(SymbolSource::Plt),
                        source: SymbolSource::Plt,
                        section_end: None,
                    });
                    continue;
                }
                PltTarget::Slot(slot) => slots.get(&slot),
                PltTarget::Index(i) => usize::try_from(i)
                    .ok()
                    .and_then(|i| plt_order.get(i)?.as_ref()),
                PltTarget::Unknown => None,
            };
            if let Some(name) = name {
                out.push(Candidate {
                    start: addr,
                    size: entsize,
                    name: name.clone(),
                    plt: true,
                    rank: source_rank(SymbolSource::Plt),
                    source: SymbolSource::Plt,
                    section_end: None,
                });
            }
        }
    }
}

/// The symbol names of the GOT slots PLT entries jump through.
struct RelocNames<'d> {
    irelative: elf::RelocationType,
    slots: HashMap<u64, Cow<'d, str>>,
    /// `.rela.plt` by index, for lazy stubs that push one.
    plt_order: Vec<Option<Cow<'d, str>>>,
}

impl<'d> RelocNames<'d> {
    fn add<Elf: FileHeader<Endian = Endianness>>(
        &mut self,
        file: &ElfFile<'d, Elf, &'d [u8]>,
        link: SectionIndex,
        relocs: &[(u64, u32, elf::RelocationType, i64)],
        in_plt_order: bool,
    ) {
        let endian = file.endian();
        let symbols = file
            .elf_section_table()
            .symbol_table_by_index(endian, file.data(), link)
            .ok();
        for &(slot, sym, r_type, addend) in relocs {
            // JUMP_SLOT and GLOB_DAT have the same numbers on x86-64 and i386.
            let name: Option<Cow<'d, str>> = if r_type == self.irelative {
                Some(Cow::Owned(format!("*ABS*+0x{addend:x}")))
            } else if r_type == elf::R_X86_64_JUMP_SLOT || r_type == elf::R_X86_64_GLOB_DAT {
                symbols
                    .as_ref()
                    .and_then(|t| {
                        let s = t.symbol(object::read::SymbolIndex(sym as usize)).ok()?;
                        t.symbol_name(endian, s).ok()
                    })
                    .filter(|n| !n.is_empty())
                    .map(String::from_utf8_lossy)
            } else {
                None
            };
            if in_plt_order {
                self.plt_order.push(name.clone());
            }
            if let Some(name) = name {
                self.slots.entry(slot).or_insert(name);
            }
        }
    }
}

/// One function per address: the best-ranked candidate's name, its size or
/// the largest size given there. Zero-size functions extend to the next
/// function or the end of their section (and are dropped outside code).
/// Fills `funcs` and returns their intervals.
fn dedup_candidates<'d>(
    mut candidates: Vec<Candidate<'d>>,
    code: &[(u64, u64)],
    funcs: &mut Vec<PendingFunc<'d>>,
) -> Vec<Interval> {
    // Among aliases of one rank, the plainest name: `malloc` over
    // `__libc_malloc`, then the shorter, then any fixed order.
    let underscores = |c: &Candidate<'_>| c.name.bytes().take_while(|&b| b == b'_').count();
    candidates.sort_by(|a, b| {
        (a.start, a.rank, underscores(a), a.name.len(), &a.name).cmp(&(
            b.start,
            b.rank,
            underscores(b),
            b.name.len(),
            &b.name,
        ))
    });
    // (winner, size) per distinct start.
    let mut chosen: Vec<(Candidate<'d>, u64)> = Vec::new();
    for c in candidates {
        match chosen.last_mut() {
            Some((best, size)) if best.start == c.start => {
                if best.size == 0 {
                    *size = (*size).max(c.size);
                }
            }
            _ => {
                let size = c.size;
                chosen.push((c, size));
            }
        }
    }
    let next_starts: Vec<Option<u64>> = (0..chosen.len())
        .map(|i| chosen.get(i + 1).map(|(c, _)| c.start))
        .collect();
    let mut intervals = Vec::with_capacity(chosen.len());
    for ((c, size), next) in chosen.into_iter().zip(next_starts) {
        let end = if size > 0 {
            c.start.saturating_add(size)
        } else {
            let Some(region) = region_containing(code, c.start) else {
                continue;
            };
            let limit = c
                .section_end
                .filter(|&e| e > c.start)
                .map_or(region.1, |e| e.min(region.1));
            next.map_or(limit, |n| n.min(limit))
        };
        if end <= c.start {
            continue;
        }
        let Ok(func) = u32::try_from(funcs.len()) else {
            break;
        };
        funcs.push(PendingFunc {
            entry: c.start,
            end,
            name: c.name,
            plt: c.plt,
            source: c.source,
        });
        intervals.push(Interval {
            start: c.start,
            end,
            func,
        });
    }
    intervals
}

/// Turns possibly overlapping intervals into sorted, disjoint ones. Where
/// they nest, the inner one wins while it lasts and the outer one resumes
/// after it (an assembly label symbol inside a function, a DWARF
/// subprogram nested in another).
fn flatten(mut intervals: Vec<Interval>) -> Vec<Interval> {
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
fn subtract(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
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
fn has_gap(covered: &[Interval], begin: u64, end: u64, min_gap: u64) -> bool {
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

/// The DWARF sections, copied out of the file: the map does not outlive
/// `load`, and owned sections keep `ModuleSymbols` free of borrows (their
/// size in memory is the price). `Ok(None)` without `.debug_info`.
fn load_dwarf<'d, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
    sections: &object::read::elf::SectionTable<'d, Elf, &'d [u8]>,
) -> Result<Option<gimli::Dwarf<DwarfReader>>, String> {
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
    let dwarf = gimli::Dwarf::load(|id| -> Result<DwarfReader, String> {
        use gimli::SectionId as S;
        // What lines, functions and inlines need; not the variable
        // locations, macros or type units, which can be as large.
        let needed = matches!(
            id,
            S::DebugAbbrev
                | S::DebugAddr
                | S::DebugAranges
                | S::DebugInfo
                | S::DebugLine
                | S::DebugLineStr
                | S::DebugRanges
                | S::DebugRngLists
                | S::DebugStr
                | S::DebugStrOffsets
        );
        let found = needed
            .then(|| sections.section_by_name(endian, id.name().as_bytes()))
            .flatten();
        let bytes: &[u8] = match found {
            Some((_, s)) => {
                if s.sh_flags(endian).contains(elf::SHF_COMPRESSED) {
                    return Err(format!(
                        "{} is compressed, which is not supported",
                        id.name()
                    ));
                }
                s.data(endian, file.data())
                    .map_err(|e| format!("{}: {e}", id.name()))?
            }
            None => &[],
        };
        Ok(gimli::EndianArcSlice::new(Arc::from(bytes), gimli_endian))
    })?;
    Ok(Some(dwarf))
}

/// Padding between functions is under 16 bytes at the usual alignment: a
/// compilation unit whose uncovered stretches are all shorter has nothing
/// for DWARF to add, and its DIEs are not walked.
const MIN_DWARF_GAP: u64 = 16;

/// Adds a function for each `DW_TAG_subprogram` range in a compilation
/// unit that the symbols leave uncovered. A damaged unit is skipped; the
/// first error is returned after the others are read.
fn dwarf_functions(
    dwarf: &gimli::Dwarf<DwarfReader>,
    code: &[(u64, u64)],
    covered: &[Interval],
    funcs: &mut Vec<PendingFunc<'_>>,
    out: &mut Vec<Interval>,
) -> gimli::Result<()> {
    let mut first_error = None;
    let mut headers = dwarf.units();
    loop {
        // A bad unit header leaves no way to find the next one.
        let header = match headers.next() {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(e) => {
                first_error.get_or_insert(e);
                break;
            }
        };
        let result = dwarf
            .unit(header)
            .and_then(|unit| unit_functions(dwarf, &unit, code, covered, funcs, out));
        if let Err(e) = result {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

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

/// Demangles the kept names into one arena and builds the lookup arrays.
fn build(
    path: &Path,
    funcs: Vec<PendingFunc<'_>>,
    pieces: Vec<Interval>,
    segments: Vec<Segment>,
    has_symtab: bool,
    dwarf: Option<Mutex<addr2line::Context<DwarfReader>>>,
    dwarf_problem: Option<String>,
) -> Result<ModuleSymbols, SymbolError> {
    // Only functions some piece still points at keep their name.
    let mut remap: Vec<Option<u32>> = vec![None; funcs.len()];
    let mut used: Vec<&PendingFunc<'_>> = Vec::new();
    let mut starts = Vec::with_capacity(pieces.len());
    let mut out_pieces = Vec::with_capacity(pieces.len());
    for p in &pieces {
        let Some(slot) = remap.get_mut(p.func as usize) else {
            continue;
        };
        let index = match *slot {
            Some(i) => i,
            None => {
                let i = used.len() as u32;
                used.push(&funcs[p.func as usize]);
                *slot = Some(i);
                i
            }
        };
        starts.push(p.start);
        out_pieces.push(Piece {
            end: p.end,
            func: index,
        });
    }

    let mut names = String::new();
    let mut out_funcs = Vec::with_capacity(used.len());
    for f in used {
        let name_start = names.len();
        names.push_str(&demangle(&f.name));
        if f.plt {
            names.push_str("@plt");
        }
        let (Ok(name_start), Ok(name_end)) =
            (u32::try_from(name_start), u32::try_from(names.len()))
        else {
            return Err(SymbolError::malformed(path, "symbol names exceed 4 GiB"));
        };
        out_funcs.push(Func {
            entry: f.entry,
            end: f.end,
            name_start,
            name_end,
            source: f.source,
        });
    }
    names.shrink_to_fit();

    Ok(ModuleSymbols {
        path: path.to_path_buf(),
        index: BucketIndex::new(&starts),
        starts,
        pieces: out_pieces,
        funcs: out_funcs,
        names,
        segments,
        has_symtab,
        dwarf,
        dwarf_problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Instant;

    fn source() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata/symbols.c")
    }

    fn run(cmd: &mut Command) -> String {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        assert!(
            out.status.success(),
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Builds the test program with `flags` (after `-O2 -g`).
    fn compile(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
        let out = dir.join(name);
        run(Command::new("cc")
            .args(["-O2", "-g"])
            .args(flags)
            .arg("-o")
            .arg(&out)
            .arg(source()));
        out
    }

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// `nm -S`: name -> (address, size) of the defined text symbols.
    fn nm(bin: &Path) -> HashMap<String, (u64, u64)> {
        run(Command::new("nm").args(["-S", "--defined-only"]).arg(bin))
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                match f.as_slice() {
                    [addr, size, kind, name] if kind.eq_ignore_ascii_case("t") => Some((
                        name.to_string(),
                        (
                            u64::from_str_radix(addr, 16).unwrap(),
                            u64::from_str_radix(size, 16).unwrap(),
                        ),
                    )),
                    _ => None,
                }
            })
            .collect()
    }

    /// objdump's `<foo@plt>` labels: (address, name).
    fn objdump_plt(bin: &Path) -> Vec<(u64, String)> {
        run(Command::new("objdump").arg("-d").arg(bin))
            .lines()
            .filter_map(|l| {
                let (addr, rest) = l.split_once(" <")?;
                let name = rest.strip_suffix(">:")?;
                if !name.ends_with("@plt") || name.contains('-') || name.contains('+') {
                    return None;
                }
                Some((u64::from_str_radix(addr, 16).ok()?, name.to_string()))
            })
            .collect()
    }

    /// `readelf -SW`: (name, address, file offset, size) of each section.
    fn sections(bin: &Path) -> Vec<(String, u64, u64, u64)> {
        let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
        run(Command::new("readelf").arg("-SW").arg(bin))
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_once(']')?.1.split_whitespace().collect();
                let name = f.first().filter(|n| n.starts_with('.'))?;
                Some((name.to_string(), hex(f[2]), hex(f[3]), hex(f[4])))
            })
            .collect()
    }

    fn section_addr(bin: &Path, name: &str) -> Option<u64> {
        sections(bin)
            .into_iter()
            .find_map(|s| (s.0 == name).then_some(s.1))
    }

    /// `readelf -lW` LOAD headers: (offset, vaddr, filesz).
    fn load_segments(bin: &Path) -> Vec<(u64, u64, u64)> {
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        run(Command::new("readelf").arg("-lW").arg(bin))
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.first() == Some(&"LOAD")).then(|| (hex(f[1]), hex(f[2]), hex(f[4])))
            })
            .collect()
    }

    /// GNU addr2line's (file, line) per address; line `None` for `?`.
    fn gnu_addr2line(bin: &Path, addrs: &[u64]) -> Vec<(String, Option<u32>)> {
        let mut cmd = Command::new("addr2line");
        cmd.arg("-e").arg(bin);
        cmd.args(addrs.iter().map(|a| format!("{a:#x}")));
        run(&mut cmd)
            .lines()
            .map(|l| {
                let l = l.split(" (discriminator").next().unwrap();
                let (file, line) = l.rsplit_once(':').unwrap();
                (file.to_string(), line.parse().ok().filter(|&n| n != 0))
            })
            .collect()
    }

    /// The line of the source holding `marker`.
    fn marker_line(marker: &str) -> u32 {
        let text = std::fs::read_to_string(source()).unwrap();
        text.lines().position(|l| l.contains(marker)).unwrap() as u32 + 1
    }

    fn basename(p: &str) -> &str {
        p.rsplit('/').next().unwrap()
    }

    #[test]
    fn finds_main_and_a_static_function() {
        let dir = tempdir();
        let bin = compile(dir.path(), "plain", &[]);
        let syms = ModuleSymbols::load(&bin).unwrap();
        assert!(syms.has_symbols());
        assert!(syms.has_debug_info(), "{:?}", syms.debug_info_problem());
        assert_eq!(syms.path(), bin);
        let nm = nm(&bin);
        for name in ["main", "sum_bumps"] {
            let (addr, size) = nm[name];
            for probe in [addr, addr + 1, addr + size - 1] {
                let f = syms
                    .function(probe)
                    .unwrap_or_else(|| panic!("{name} at {probe:#x}"));
                assert_eq!(f.name, name);
                assert_eq!((f.entry, f.end), (addr, addr + size));
                assert_eq!(f.source, SymbolSource::Symtab);
            }
        }
        assert!(syms.functions().any(|f| f.name == "sum_bumps"));
        assert!(syms.function(0).is_none());
        assert!(syms.function(u64::MAX).is_none());
        assert!(syms.svma_to_file_offset(nm["main"].0).is_some());
    }

    #[test]
    fn names_plt_entries_in_every_layout() {
        let dir = tempdir();
        let variants: [(&str, &[&str]); 4] = [
            ("lazy", &[]),
            ("ibt", &["-fcf-protection=full", "-Wl,-z,ibtplt"]),
            ("now", &["-Wl,-z,now"]),
            ("nopie", &["-no-pie"]),
        ];
        for (name, flags) in variants {
            let bin = compile(dir.path(), name, flags);
            let syms = ModuleSymbols::load(&bin).unwrap();
            let plt = objdump_plt(&bin);
            for wanted in ["puts@plt", "printf@plt"] {
                assert!(
                    plt.iter().any(|(_, n)| n == wanted),
                    "{name}: objdump shows no {wanted}: {plt:?}"
                );
            }
            for (addr, label) in &plt {
                let f = syms
                    .function(*addr)
                    .unwrap_or_else(|| panic!("{name}: nothing at {label} {addr:#x}"));
                assert_eq!((f.name, f.entry), (label.as_str(), *addr), "{name}");
                assert_eq!(f.source, SymbolSource::Plt);
                assert_eq!(syms.function(addr + 5).unwrap().name, label, "{name}");
            }
            let plt0 = section_addr(&bin, ".plt").unwrap();
            assert_eq!(syms.function(plt0).unwrap().name, "[plt]", "{name}");
            assert_eq!(syms.function(plt0 + 15).unwrap().name, "[plt]", "{name}");
            // Lazy stubs after PLT0: the jumps themselves (lazy) or, with
            // IBT, the push stubs `.plt.sec` falls back to.
            let stub = syms.function(plt0 + 16).unwrap();
            assert!(stub.name.ends_with("@plt"), "{name}: {stub:?}");
            if name == "ibt" {
                assert!(section_addr(&bin, ".plt.sec").is_some());
            }
        }
    }

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

    #[test]
    fn stripped_binary_keeps_dynamic_symbols_and_plt() {
        let dir = tempdir();
        let bin = compile(dir.path(), "dynamic", &["-rdynamic"]);
        let nm = nm(&bin);
        let plt = objdump_plt(&bin);
        run(Command::new("strip").arg(&bin));
        let syms = ModuleSymbols::load(&bin).unwrap();
        assert!(!syms.has_symbols());
        assert!(!syms.has_debug_info());
        let (main, size) = nm["main"];
        let f = syms.function(main + 2).unwrap();
        assert_eq!((f.name, f.entry, f.end), ("main", main, main + size));
        assert_eq!(f.source, SymbolSource::Dynsym);
        // The static function lost its name, but the unwind table still
        // knows where it starts and ends.
        let (sb, sb_size) = nm["sum_bumps"];
        let f = syms.function(sb + 1).unwrap();
        assert_eq!(f.source, SymbolSource::Unwind);
        assert_eq!((f.entry, f.end), (sb, sb + sb_size));
        assert!(f.name.starts_with("[unknown] dynamic+0x"), "{}", f.name);
        for (addr, label) in &plt {
            assert_eq!(syms.function(*addr).unwrap().name, label);
        }
        let text = section_addr(&bin, ".text").unwrap();
        for a in text..text + 0x400 {
            let _ = syms.function(a);
            assert!(syms.location(a).is_none());
        }
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

    #[test]
    fn file_offsets_map_through_load_segments() {
        let dir = tempdir();
        for (name, flags) in [("pie", &["-pie", "-fPIE"][..]), ("nopie", &["-no-pie"])] {
            let bin = compile(dir.path(), name, flags);
            let syms = ModuleSymbols::load(&bin).unwrap();
            let segments = load_segments(&bin);
            assert!(segments.iter().any(|s| s.0 != s.1), "{name}: {segments:x?}");
            for (offset, vaddr, filesz) in segments {
                for delta in [0, filesz / 2, filesz.saturating_sub(1)] {
                    assert_eq!(
                        syms.file_offset_to_svma(offset + delta),
                        Some(vaddr + delta),
                        "{name}"
                    );
                }
            }
            // As the decoder computes it from an MMAP2 record: the text
            // mapping's page offset plus the distance into the mapping.
            let (main, _) = nm(&bin)["main"];
            let offset = syms.svma_to_file_offset(main).unwrap();
            let pgoff = offset - offset % PAGE;
            let start = 0x7f00_0000_0000 + pgoff;
            let runtime = start + (offset - pgoff);
            assert_eq!(
                syms.file_offset_to_svma(pgoff + (runtime - start)),
                Some(main)
            );
            assert_eq!(syms.file_offset_to_svma(u64::MAX), None);
        }
    }

    #[test]
    fn garbage_files_are_errors() {
        let dir = tempdir();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let empty = write("empty", b"");
        let err = ModuleSymbols::load(&empty).unwrap_err();
        assert!(matches!(err, SymbolError::NotElf { .. }), "{err}");
        assert!(err.to_string().contains("empty"), "{err}");
        let text = write("text", b"#!/bin/sh\necho not an elf\n");
        assert!(matches!(
            ModuleSymbols::load(&text),
            Err(SymbolError::NotElf { .. })
        ));
        let missing = dir.path().join("missing");
        assert!(matches!(
            ModuleSymbols::load(&missing),
            Err(SymbolError::Io { .. })
        ));
        let bin = compile(dir.path(), "whole", &[]);
        let elf = std::fs::read(&bin).unwrap();
        for len in [4, 16, 63, 64, 200, 1000, elf.len() / 2, elf.len() - 1] {
            let cut = write(&format!("cut{len}"), &elf[..len]);
            let err = ModuleSymbols::load(&cut).unwrap_err();
            assert!(err.to_string().contains(&format!("cut{len}")), "{err}");
        }
    }

    /// Flipped bytes anywhere in a real binary: any result but a panic.
    #[test]
    fn mutated_binaries_never_panic() {
        let dir = tempdir();
        let bin = compile(dir.path(), "fuzz", &[]);
        let elf = std::fs::read(&bin).unwrap();
        let nm = nm(&bin);
        let (text, _) = nm["main"];
        let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        let mut next = move || rng.u64(..);
        // Flips go, in turn, to the headers, the DWARF, and anywhere.
        let debug: Vec<(u64, u64)> = sections(&bin)
            .into_iter()
            .filter(|s| s.0.starts_with(".debug_"))
            .map(|s| (s.2, s.3))
            .collect();
        let debug_start = debug.iter().map(|d| d.0).min().unwrap();
        let debug_end = debug.iter().map(|d| d.0 + d.1).max().unwrap();
        let zones = [(0, 4096), (debug_start, debug_end), (0, elf.len() as u64)];
        let mut loaded = [0; 3];
        // PTSCOPE_FUZZ_ROUNDS runs it longer by hand.
        let rounds = std::env::var("PTSCOPE_FUZZ_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(600);
        for round in 0..rounds {
            let zone = round % zones.len();
            let (lo, hi) = zones[zone];
            let mut data = elf.clone();
            for _ in 0..1 + next() % 8 {
                let at = (lo + next() % (hi - lo)) as usize;
                data[at] = next() as u8;
            }
            let Ok(syms) = ModuleSymbols::from_bytes(Path::new("mutant"), &data) else {
                continue;
            };
            loaded[zone] += 1;
            for a in (text.saturating_sub(0x200)..text + 0x200).step_by(5) {
                let _ = syms.function(a);
                let _ = syms.location(a);
                let _ = syms.inline_frames(a);
                let _ = syms.file_offset_to_svma(a);
            }
            let _ = syms.functions().count();
        }
        println!("mutants loaded (headers, DWARF, anywhere): {loaded:?} of {rounds}");
        assert!(loaded.iter().all(|&n| n > 0), "{loaded:?}");
    }

    #[test]
    fn module_symbols_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<ModuleSymbols>();
    }

    /// Not an assertion: prints the cost of `function()` on libc (dynamic
    /// symbols only) and on this test binary (full symtab and DWARF).
    #[test]
    fn function_lookup_cost() {
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        if libc.exists() {
            time_lookups(libc);
        }
        time_lookups(&std::env::current_exe().unwrap());
    }

    fn time_lookups(path: &Path) {
        let t = Instant::now();
        let syms = ModuleSymbols::load(path).unwrap();
        let load = t.elapsed();
        let entries: Vec<u64> = syms.functions().map(|f| f.entry).collect();
        let (lo, hi) = (
            *entries.iter().min().unwrap(),
            *entries.iter().max().unwrap(),
        );
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let probes: Vec<u64> = (0..1 << 16).map(|_| rng.u64(lo..hi)).collect();
        // Random probes over the whole module, then a hot set of 64 (as a
        // trace hopping among a few functions would make).
        let time = |probes: &[u64], rounds: usize| {
            let mut found = 0usize;
            let t = Instant::now();
            for _ in 0..rounds {
                for &p in probes {
                    found += std::hint::black_box(syms.function(p)).is_some() as usize;
                }
            }
            let n = (rounds * probes.len()) as f64;
            (t.elapsed().as_nanos() as f64 / n, 100.0 * found as f64 / n)
        };
        let (random_ns, hits) = time(&probes, 32);
        let (hot_ns, _) = time(&probes[..64], 32 * 1024);
        println!(
            "{}: {} functions, loaded in {load:?}; function(): {random_ns:.1} ns per call \
             on random addresses ({hits:.0}% hits), {hot_ns:.1} ns on a hot set",
            path.display(),
            entries.len(),
        );
        let widest = syms.index.first.windows(2).map(|w| w[1] - w[0]).max();
        println!(
            "{} pieces, {} buckets of 2^{} bytes, widest {widest:?}",
            syms.starts.len(),
            syms.index.first.len() - 1,
            syms.index.shift
        );
    }
}
