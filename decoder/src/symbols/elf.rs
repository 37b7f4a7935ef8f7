//! ELF parsing: the program headers, the executable regions, the function
//! symbols of `.symtab` and `.dynsym`, and `.eh_frame` functions for code no
//! name covers. `parse_elf` runs the whole load, handing the PLT and DWARF
//! to their own files and the ranges to the interval helpers, then builds
//! the lookup table; it lives here because the ELF file is what it walks.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Mutex;

use object::elf;
use object::read::elf::{ElfFile, FileHeader, ProgramHeader, SectionHeader, Sym};
use object::Endianness;

use super::dwarf::{dwarf_functions, load_dwarf};
use super::intervals::{flatten, subtract, Interval};
use super::plt::plt_candidates;
use super::{build, ModuleSymbols, PendingFunc, Segment, SymbolError, SymbolSource};

/// A function symbol before deduplication.
pub(super) struct Candidate<'d> {
    pub(super) start: u64,
    pub(super) size: u64,
    /// As stored (mangled), or synthesized.
    pub(super) name: Cow<'d, str>,
    /// Append `@plt` after demangling.
    pub(super) plt: bool,
    /// Lower wins among candidates at one address.
    pub(super) rank: u8,
    pub(super) source: SymbolSource,
    /// The end of the symbol's section: a zero-size symbol extends no further.
    pub(super) section_end: Option<u64>,
}

pub(super) fn parse_elf<Elf: FileHeader<Endian = Endianness>>(
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

pub(super) fn region_containing(code: &[(u64, u64)], addr: u64) -> Option<(u64, u64)> {
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

pub(super) fn source_rank(source: SymbolSource) -> u8 {
    match source {
        SymbolSource::Symtab => 0,
        SymbolSource::Dynsym => 1,
        SymbolSource::Plt => 2,
        SymbolSource::Dwarf => 3,
        SymbolSource::Unwind => 4,
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

#[cfg(test)]
mod tests {
    use std::process::Command;

    use crate::symbols::testutil::*;
    use crate::symbols::{ModuleSymbols, SymbolSource};

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
}
