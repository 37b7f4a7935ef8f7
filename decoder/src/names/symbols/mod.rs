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
//! chains come from DWARF through `addr2line`, whose index is built when
//! a view that shows source first needs it, or before, by the fine pass's
//! idle workers ([`ModuleSymbols::prepare_lines`]); the line of each function the coarse pass
//! names ([`ModuleSymbols::entry_location`]) is read from its own unit,
//! without addr2line's index of every unit. A stripped binary's `.symtab` and DWARF come
//! from its separate debug file ([`ModuleSymbols::load_split`]; which file,
//! [`crate::names`] decides), at the binary's addresses; code, `.dynsym`,
//! the PLT and `.eh_frame` always from the binary. Among aliases at one
//! address the name perf chooses wins, so both tools name code alike.
//!
//! Binaries arrive inside snapshot files from other machines, so nothing
//! here trusts the file: every offset and size is bounds-checked by
//! `object`/`gimli` or by checked arithmetic here, a bad file gives a typed
//! [`SymbolError`] naming it, and a bad DWARF section only turns debug info
//! off (the symbols stay usable).
//!
//! The parts, one file each:
//! - this file: [`ModuleSymbols`], [`SymbolError`] and the public types,
//!   the lookup table (sorted pieces, bucket index, name arena) and the
//!   lookups by address and file offset;
//! - `elf`: the ELF load itself, from program headers and executable
//!   regions to `.symtab`/`.dynsym` candidates, their deduplication and
//!   `.eh_frame` functions;
//! - `plt`: PLT entries decoded and named after their GOT relocations;
//! - `dwarf`: the sections loaded (those only addr2line reads kept
//!   compressed when the file compresses them), DWARF functions, DIE
//!   ranges and subprogram names, and the source-line and inline-frame
//!   lookups ([`ModuleSymbols::location`], [`ModuleSymbols::source_frames`],
//!   [`ModuleSymbols::inline_frames`]);
//! - `unit_lines`: a function's line from the one unit that holds it, the
//!   units' ranges found as addr2line finds them, read from the line
//!   programs and strings alone;
//! - `intervals`: flattening, subtracting and gap-finding over the address
//!   ranges the sources give, to decide which function owns each byte;
//! - [`kallsyms`]: the kernel's functions, from a kallsyms listing or a
//!   vmlinux, which name kernel code where no image of it is at hand;
//! - `testutil` (tests only): compiling the test program and asking GNU
//!   binutils about it.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

use object::{Endianness, FileKind};
use ptscope_formats::demangle;

mod dwarf;
mod elf;
mod intervals;
pub(crate) mod kallsyms;
mod plt;
#[cfg(test)]
pub(crate) mod testutil;
mod unit_lines;

use self::dwarf::SourceIndex;
use self::elf::parse_elf;
use self::intervals::Interval;

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
    /// Which of the module's functions it is: two can share an entry (a
    /// symbol sized to cover only the start of a DWARF subprogram, whose
    /// rest DWARF names), and only this tells them apart.
    pub index: u32,
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

impl Segment {
    /// Whether file offset `offset` is one of its bytes.
    fn holds(&self, offset: u64) -> bool {
        offset >= self.offset && offset - self.offset < self.filesz
    }

    /// Its bytes as file offsets `[lo, hi)`.
    fn bytes(&self) -> (u64, u64) {
        (self.offset, self.offset.saturating_add(self.filesz))
    }

    /// The file offsets before its first byte on that byte's page, which
    /// are mapped with it, as far as they have an svma: `[lo, hi)`.
    fn page_lead(&self) -> (u64, u64) {
        let page_start = self.offset - self.offset % PAGE;
        (
            page_start.max(self.offset.saturating_sub(self.vaddr)),
            self.offset,
        )
    }
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
    /// The DWARF behind source lookups, its index built on first use.
    dwarf: Option<SourceIndex>,
    dwarf_problem: Option<String>,
    /// The separate debug file its symbol table or DWARF came from.
    debug_file: Option<PathBuf>,
}

impl fmt::Debug for ModuleSymbols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModuleSymbols")
            .field("path", &self.path)
            .field("functions", &self.funcs.len())
            .field("has_symtab", &self.has_symtab)
            .field("has_debug_info", &self.dwarf.is_some())
            .field("debug_file", &self.debug_file)
            .finish()
    }
}

/// Runtime page size of the x86 targets PT exists on: mappings start on
/// page boundaries, so a mapped offset may precede its segment's p_offset.
const PAGE: u64 = 4096;

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
        ModuleSymbols::load_split(path, file, None)
    }

    /// Reads the binary `file` (named `path`) with its separate debug file
    /// `debug` (named, and open), whose symbol table and DWARF stand in for
    /// those the binary lacks (a stripped binary's). The debug file's
    /// problems never fail the load: the binary's own names stay, and
    /// [`debug_info_problem`](Self::debug_info_problem) says what went
    /// wrong.
    pub fn load_split(
        path: &Path,
        file: &std::fs::File,
        debug: Option<(&Path, &std::fs::File)>,
    ) -> Result<ModuleSymbols, SymbolError> {
        let len = file.metadata().map_err(|e| SymbolError::io(path, e))?.len();
        if len == 0 {
            return Err(SymbolError::not_elf(path, "empty file"));
        }
        // The maps are dropped before returning: everything kept is copied
        // out of them.
        let map = crate::pt::memory::map_binary(file).map_err(|e| SymbolError::io(path, e))?;
        // The sections kept as the file compresses them are read from the
        // open files again when needed, not copied out of the maps.
        let opened = (
            Some((file, path)),
            debug.map(|(dpath, dfile)| (dfile, dpath)),
        );
        let debug_map = debug.map(|(dpath, dfile)| {
            let map = dfile
                .metadata()
                .and_then(|m| match m.len() {
                    0 => Err(std::io::Error::other("the file is empty")),
                    _ => crate::pt::memory::map_binary(dfile),
                })
                .map_err(|e| format!("{}: {e}", dpath.display()));
            (dpath, map)
        });
        let (debug, problem) = match &debug_map {
            Some((dpath, Ok(m))) => (Some((*dpath, &m[..])), None),
            Some((_, Err(e))) => (None, Some(e.clone())),
            None => (None, None),
        };
        let mut syms = ModuleSymbols::from_parts(path, &map, debug, opened)?;
        if syms.dwarf_problem.is_none() {
            syms.dwarf_problem = problem;
        }
        Ok(syms)
    }

    /// Parses an ELF image already in memory; `path` is only for messages
    /// and [`path`](Self::path).
    pub fn from_bytes(path: &Path, data: &[u8]) -> Result<ModuleSymbols, SymbolError> {
        ModuleSymbols::from_bytes_split(path, data, None)
    }

    /// [`from_bytes`](Self::from_bytes) with a separate debug file's bytes
    /// (and its name), as [`load_split`](Self::load_split) reads it.
    pub fn from_bytes_split(
        path: &Path,
        data: &[u8],
        debug: Option<(&Path, &[u8])>,
    ) -> Result<ModuleSymbols, SymbolError> {
        ModuleSymbols::from_parts(path, data, debug, (None, None))
    }

    /// [`from_bytes_split`](Self::from_bytes_split), with the open files
    /// the binary's and the debug file's bytes were mapped from, if any.
    fn from_parts(
        path: &Path,
        data: &[u8],
        debug: Option<(&Path, &[u8])>,
        opened: (Option<dwarf::Opened<'_>>, Option<dwarf::Opened<'_>>),
    ) -> Result<ModuleSymbols, SymbolError> {
        use object::elf::{FileHeader32, FileHeader64};
        if data.is_empty() {
            return Err(SymbolError::not_elf(path, "empty file"));
        }
        match FileKind::parse(data) {
            Ok(FileKind::Elf32) => parse_elf::<FileHeader32<Endianness>>(path, data, debug, opened),
            Ok(FileKind::Elf64) => parse_elf::<FileHeader64<Endianness>>(path, data, debug, opened),
            Ok(other) => Err(SymbolError::not_elf(path, format!("{other:?} file"))),
            Err(e) => Err(SymbolError::not_elf(path, e)),
        }
    }

    /// Whether the ELF binary `data` lacks names of its own, a symbol
    /// table or DWARF, so that its separate debug file is worth looking
    /// for (a distribution's stripped library). False for what is not a
    /// sound ELF file: no debug file makes it one.
    pub fn lacks_own_names(data: &[u8]) -> bool {
        use object::elf::{FileHeader32, FileHeader64};
        let own = match FileKind::parse(data) {
            Ok(FileKind::Elf32) => elf::own_names::<FileHeader32<Endianness>>(data),
            Ok(FileKind::Elf64) => elf::own_names::<FileHeader64<Endianness>>(data),
            _ => None,
        };
        own.is_some_and(|(symtab, dwarf)| !symtab || !dwarf)
    }

    /// The separate debug file whose symbol table or DWARF this module's
    /// names and lines come from, if any.
    pub fn debug_file(&self) -> Option<&Path> {
        self.debug_file.as_deref()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a full `.symtab` was there: the binary's (not stripped), or
    /// its debug file's.
    pub fn has_symbols(&self) -> bool {
        self.has_symtab
    }

    /// Whether DWARF line and function info was found and read: its
    /// functions and its units' ranges at load, addr2line's index when the
    /// fine pass first asks for a line (a failure either time takes the
    /// lines away, and [`debug_info_problem`](Self::debug_info_problem)
    /// says why).
    pub fn has_debug_info(&self) -> bool {
        self.dwarf.as_ref().is_some_and(|d| d.failed().is_none())
    }

    /// Builds what the fine pass's line lookups in this module need
    /// (addr2line's index, for which its DWARF is inflated and parsed
    /// again: some 35 ms for libc's), unless it is built: what the first
    /// zoom into the module's code would otherwise wait for.
    pub fn prepare_lines(&self) {
        if let Some(d) = &self.dwarf {
            d.build_index();
        }
    }

    /// Whether a line lookup in this module waits for nothing: it has no
    /// DWARF, or its index is built (or could not be).
    pub fn lines_prepared(&self) -> bool {
        self.dwarf.as_ref().is_none_or(|d| d.index_built())
    }

    /// The first problem met reading the file's debug info, if any: why it
    /// is not used at all, or why some of its functions were skipped.
    pub fn debug_info_problem(&self) -> Option<&str> {
        self.dwarf_problem
            .as_deref()
            .or_else(|| self.dwarf.as_ref()?.failed())
    }

    /// Maps a file offset (as in an MMAP2 record's pgoff + (addr - start))
    /// to the stated virtual address (svma) using the PT_LOAD program headers.
    pub fn file_offset_to_svma(&self, offset: u64) -> Option<u64> {
        let (k, paged) = self.segment_of(offset)?;
        let s = &self.segments[k];
        if paged {
            s.vaddr.checked_sub(s.offset - offset)
        } else {
            s.vaddr.checked_add(offset - s.offset)
        }
    }

    /// The segment that maps file offset `offset`: the first that holds it
    /// among its bytes, else the first that maps it as the start of the
    /// page holding its first byte (`true`).
    fn segment_of(&self, offset: u64) -> Option<(usize, bool)> {
        if let Some(k) = self.segments.iter().position(|s| s.holds(offset)) {
            return Some((k, false));
        }
        let in_lead = |s: &Segment| {
            let (lo, hi) = s.page_lead();
            offset >= lo && offset < hi
        };
        let k = self.segments.iter().position(in_lead)?;
        Some((k, true))
    }

    /// The svmas `[lo, hi)` around file offset `offset`'s over which
    /// [`file_offset_to_svma`](Self::file_offset_to_svma) maps the offsets
    /// next to it one for one, as it maps `offset`: the stretch of the
    /// segment that maps it which no other rule or earlier segment takes.
    /// What resolves as one range of addresses must stay inside it: past a
    /// segment's end (a damaged header can end one inside a function) no
    /// svma is known, and an address there resolves otherwise. `None` where
    /// no segment maps `offset`.
    pub fn svma_run(&self, offset: u64) -> Option<(u64, u64)> {
        let svma = self.file_offset_to_svma(offset)?;
        let (k, paged) = self.segment_of(offset)?;
        let s = &self.segments[k];
        let (mut lo, mut hi) = if paged {
            s.page_lead()
        } else {
            // Up to where the svma would overflow, which maps to none.
            let last = s.offset.saturating_add(u64::MAX - s.vaddr);
            (s.offset, s.bytes().1.min(last.saturating_add(1)))
        };
        // What maps before this rule does: earlier segments' bytes, and
        // for a page's start, every segment's bytes and earlier pages.
        let first = self.segments.iter().enumerate().flat_map(|(j, t)| {
            let bytes = (paged || j < k).then(|| t.bytes());
            let page = (paged && j < k).then(|| t.page_lead());
            bytes.into_iter().chain(page)
        });
        for (a, b) in first.filter(|(a, b)| a < b) {
            if b <= offset {
                lo = lo.max(b);
            } else if a > offset {
                hi = hi.min(a);
            }
        }
        Some((
            svma.saturating_sub(offset.saturating_sub(lo)),
            svma.saturating_add(hi.saturating_sub(offset)),
        ))
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
            index,
        })
    }

    // The source lookups (`location`, `source_frames`, `inline_frames`)
    // read DWARF, and are with it in `dwarf.rs`.
}

/// A function after deduplication, before its name is demangled.
struct PendingFunc<'d> {
    entry: u64,
    end: u64,
    name: Cow<'d, str>,
    plt: bool,
    source: SymbolSource,
}

/// Demangles the kept names into one arena and builds the lookup arrays.
fn build(
    path: &Path,
    funcs: Vec<PendingFunc<'_>>,
    pieces: Vec<Interval>,
    segments: Vec<Segment>,
    has_symtab: bool,
    (dwarf, dwarf_problem): (Option<SourceIndex>, Option<String>),
    debug_file: Option<PathBuf>,
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
        debug_file,
    })
}

#[cfg(test)]
mod tests {

    use super::testutil::*;
    use super::*;

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
                    // Mapped one for one with the rest of its segment.
                    let (lo, hi) = syms.svma_run(offset + delta).unwrap();
                    assert!(lo <= vaddr + delta && vaddr + delta < hi, "{name}");
                    assert!(vaddr <= lo && hi <= vaddr + filesz, "{name}");
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
}
