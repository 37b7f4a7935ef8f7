//! ELF parsing: the program headers, the executable regions, the function
//! symbols of `.symtab` and `.dynsym`, and `.eh_frame` functions for code no
//! name covers. `parse_elf` runs the whole load, handing the PLT and DWARF
//! to their own files and the ranges to the interval helpers, then builds
//! the lookup table; it lives here because the ELF file is what it walks.

use std::borrow::Cow;
use std::path::Path;

use object::elf;
use object::read::elf::{ElfFile, FileHeader, ProgramHeader, SectionHeader, Sym};
use object::Endianness;

use super::dwarf::{load_dwarf, read_units, Opened, SourceIndex};
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

/// Whether the ELF file `data` has names of its own: a symbol table with
/// symbols in it, and DWARF with contents (not the empty `NOBITS` shells
/// `strip` leaves). `None` when it is not a sound ELF file.
pub(super) fn own_names<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Option<(bool, bool)> {
    let file = ElfFile::<Elf, &[u8]>::parse(data).ok()?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let symtab = file.elf_symbol_table().len() > 1;
    let dwarf = sections
        .section_by_name(endian, b".debug_info")
        .is_some_and(|(_, s)| s.sh_type(endian) != elf::SHT_NOBITS && s.sh_size(endian).into() > 0);
    Some((symtab, dwarf))
}

/// Loads the ELF file `data` (named `path`). With `debug`, its separate
/// debug file (named, and its bytes): the symbol table and DWARF the
/// binary lacks are read from there, at the same addresses; code, program
/// headers, `.dynsym`, the PLT and `.eh_frame` always from the binary,
/// since the debug file holds no bytes for them. `opened`: the open files
/// the binary's and the debug file's bytes are mapped from, if they are,
/// which the DWARF sections kept compressed are read from again.
pub(super) fn parse_elf<Elf: FileHeader<Endian = Endianness>>(
    path: &Path,
    data: &[u8],
    debug: Option<(&Path, &[u8])>,
    (opened, debug_opened): (Option<Opened<'_>>, Option<Opened<'_>>),
) -> Result<ModuleSymbols, SymbolError> {
    let file = ElfFile::<Elf, &[u8]>::parse(data).map_err(|e| SymbolError::malformed(path, e))?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let machine = file.elf_header().e_machine(endian);
    // A debug file that is not an ELF file of the binary's kind names
    // nothing: it is set aside, and says why.
    let mut debug_problem = None;
    let debug_file = debug.and_then(|(dpath, ddata): (&Path, &[u8])| {
        let parsed = ElfFile::<Elf, &[u8]>::parse(ddata)
            .map_err(|e| e.to_string())
            .and_then(|d| {
                let dm = d.elf_header().e_machine(d.endian());
                if dm == machine {
                    Ok(d)
                } else {
                    Err(format!("it is for machine {dm}, the binary for {machine}"))
                }
            });
        match parsed {
            Ok(d) => Some((dpath, d, ddata)),
            Err(e) => {
                debug_problem = Some(format!("{}: not a usable debug file: {e}", dpath.display()));
                None
            }
        }
    });

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
    let mut has_symtab = !candidates.is_empty();
    let mut names_from_debug = false;
    if let (false, Some((_, d, _))) = (has_symtab, &debug_file) {
        symbol_candidates(
            d,
            d.elf_symbol_table(),
            SymbolSource::Symtab,
            &mut candidates,
        );
        has_symtab = !candidates.is_empty();
        names_from_debug = has_symtab;
    }
    symbol_candidates(
        &file,
        file.elf_dynamic_symbol_table(),
        SymbolSource::Dynsym,
        &mut candidates,
    );
    if machine == elf::EM_X86_64 || machine == elf::EM_386 {
        plt_candidates(&file, &mut candidates);
    }

    let mut funcs = Vec::new();
    let intervals = dedup_candidates(candidates, &code, &mut funcs);
    let sym_pieces = flatten(intervals);

    // DWARF: for functions with no symbol, and for lines and inlines;
    // the debug file's when the binary has none.
    let mut dwarf_from_debug = false;
    let own = match (load_dwarf(&file, sections, (opened, data)), &debug_file) {
        (Ok(None), Some((dpath, d, ddata))) => {
            dwarf_from_debug = true;
            load_dwarf(d, d.elf_section_table(), (debug_opened, ddata))
                .map_err(|problem| format!("{}: {problem}", dpath.display()))
        }
        (own, _) => own,
    };
    let (dwarf, dwarf_problem) = match own {
        Ok(Some(d)) => (Some(d), debug_problem),
        Ok(None) => {
            dwarf_from_debug = false;
            (None, debug_problem)
        }
        Err(problem) => {
            dwarf_from_debug = false;
            (None, Some(problem))
        }
    };
    let mut pieces = sym_pieces.clone();
    let mut context = None;
    let mut dwarf_problem = dwarf_problem;
    if let Some(loaded) = dwarf {
        let dwarf = loaded.dwarf();
        let mut dw_intervals = Vec::new();
        let (found, units) = read_units(&dwarf, &code, &sym_pieces, &mut funcs, &mut dw_intervals);
        if let Err(e) = found {
            dwarf_problem = Some(format!("reading DWARF functions: {e}"));
        }
        drop(dwarf);
        let dw_pieces = flatten(dw_intervals);
        pieces.extend(subtract(&dw_pieces, &sym_pieces));
        pieces.sort_by_key(|p| p.start);
        context = Some(SourceIndex::new(loaded, units));
    }

    // Unwind tables cover every function of a stripped binary: its FDEs
    // give exact boundaries where no name is known.
    let fde = unwind_functions(&file, &code, &segments, path, &mut funcs);
    if !fde.is_empty() {
        let known = flatten(pieces.clone());
        pieces.extend(subtract(&flatten(fde), &known));
        pieces.sort_by_key(|p| p.start);
    }

    // The debug file counts only where it gave something.
    let debug_used = debug_file
        .filter(|_| names_from_debug || (dwarf_from_debug && context.is_some()))
        .map(|(p, _, _)| p.to_path_buf());
    build(
        path,
        funcs,
        pieces,
        segments,
        has_symtab,
        (context, dwarf_problem),
        debug_used,
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
/// STT_NOTYPE in executable sections (hand-written assembly's labels, as
/// the loader's `_start` and `_dl_start_user`; perf names code by them
/// too, a zero-size one up to the next symbol).
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
        if !is_func && st_type != elf::STT_NOTYPE {
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
        // `$x`/`$d` and the like mark code and data on other machines,
        // and name nothing.
        if raw.is_empty() || (!is_func && raw.starts_with(b"$")) {
            continue;
        }
        // As perf chooses among aliases: a weak symbol last, a global
        // one first.
        let bind = sym.st_bind();
        let bind_rank = if bind == elf::STB_GLOBAL {
            0
        } else if bind == elf::STB_WEAK {
            2
        } else {
            1
        };
        out.push(Candidate {
            start: sym.st_value(endian).into(),
            size,
            name: String::from_utf8_lossy(raw),
            plt: false,
            rank: source_rank(source) + bind_rank,
            source,
            section_end,
        });
    }
}

/// The rank of a candidate from `source`, before its binding's (0 to 2)
/// is added: the symbol table's names before any other, as perf reads
/// `.dynsym` only without one.
pub(super) fn source_rank(source: SymbolSource) -> u8 {
    match source {
        SymbolSource::Symtab => 0,
        SymbolSource::Dynsym => 4,
        SymbolSource::Plt => 8,
        SymbolSource::Dwarf => 12,
        SymbolSource::Unwind => 16,
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
    // Among aliases from one source, the name perf gives (its
    // `choose_best_symbol`), so that both tools name a function alike: a
    // sized symbol over a label, then by binding, then the fewest leading
    // underscores (`malloc` over `__libc_malloc`), then the longest name
    // (`memmove` over `memcpy`, `fstat64` over `fstat`), then the first in
    // the table (the sort is stable).
    let underscores = |c: &Candidate<'_>| c.name.bytes().take_while(|&b| b == b'_').count();
    let key = |c: &Candidate<'_>| {
        (
            c.start,
            c.rank / 4,
            c.size == 0,
            c.rank,
            underscores(c),
            std::cmp::Reverse(c.name.len()),
        )
    };
    candidates.sort_by_key(key);
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
    use std::path::Path;
    use std::process::Command;

    use crate::names::symbols::testutil::*;
    use crate::names::symbols::{ModuleSymbols, SymbolSource};

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

    /// The addresses of every function `nm` knows in `bin`, end to end.
    fn code_span(nm: &std::collections::HashMap<String, (u64, u64)>) -> std::ops::Range<u64> {
        let lo = nm.values().map(|f| f.0).min().unwrap();
        let hi = nm.values().map(|f| f.0 + f.1).max().unwrap();
        lo..hi
    }

    fn load_split(bin: &Path, debug: &Path) -> ModuleSymbols {
        let file = std::fs::File::open(bin).unwrap();
        let dfile = std::fs::File::open(debug).unwrap();
        ModuleSymbols::load_split(bin, &file, Some((debug, &dfile))).unwrap()
    }

    /// A binary split as distributions split theirs (`objcopy
    /// --only-keep-debug`, `strip`, `--add-gnu-debuglink`) answers, with
    /// its debug file, every lookup as it did whole: names, lines and
    /// inlined frames from the debug file, at the binary's addresses.
    /// Without it, the static functions were `[unknown]`.
    #[test]
    fn a_stripped_binary_is_named_from_its_separate_debug_file() {
        let dir = tempdir();
        let bin = compile(dir.path(), "split", &[]);
        assert!(!ModuleSymbols::lacks_own_names(
            &std::fs::read(&bin).unwrap()
        ));
        let whole = ModuleSymbols::load(&bin).unwrap();
        let nm = nm(&bin);
        let debug = split_debug(&bin, &[]);
        assert!(ModuleSymbols::lacks_own_names(
            &std::fs::read(&bin).unwrap()
        ));
        // The debug file's own code sections are empty.
        let text = sections(&debug)
            .into_iter()
            .find(|s| s.0 == ".text")
            .unwrap();
        assert!(run(Command::new("readelf").arg("-SW").arg(&debug)).contains("NOBITS"));
        assert!(text.3 > 0);
        let alone = ModuleSymbols::load(&bin).unwrap();
        let (sb, _) = nm["sum_bumps"];
        assert_eq!(alone.function(sb).unwrap().source, SymbolSource::Unwind);
        assert_eq!(alone.debug_file(), None);

        let split = load_split(&bin, &debug);
        assert!(split.has_symbols() && split.has_debug_info());
        assert_eq!(split.debug_file(), Some(debug.as_path()));
        assert_eq!(split.debug_info_problem(), None);
        let f = split.function(sb).unwrap();
        assert_eq!((f.name, f.source), ("sum_bumps", SymbolSource::Symtab));
        let mut inlined = 0;
        for a in code_span(&nm) {
            assert_eq!(split.function(a), whole.function(a), "{a:#x}");
            assert_eq!(split.location(a), whole.location(a), "{a:#x}");
            let frames = split.inline_frames(a);
            inlined += usize::from(!frames.is_empty());
            assert_eq!(frames, whole.inline_frames(a), "{a:#x}");
            assert_eq!(split.file_offset_to_svma(a), whole.file_offset_to_svma(a));
        }
        assert!(inlined > 0, "the test program inlines nothing");
    }

    /// Debian's debug files compress their DWARF (`SHF_COMPRESSED`, zlib);
    /// others use zstd. Both read as the plain sections do. They were
    /// refused as "compressed, which is not supported".
    #[test]
    fn compressed_debug_sections_are_read() {
        let dir = tempdir();
        for how in ["zlib", "zstd"] {
            let bin = compile(dir.path(), how, &[]);
            let whole = ModuleSymbols::load(&bin).unwrap();
            let nm = nm(&bin);
            let debug = split_debug(&bin, &[&format!("--compress-debug-sections={how}")]);
            let flags = run(Command::new("readelf").arg("-SW").arg(&debug));
            let info = flags.lines().find(|l| l.contains(".debug_info")).unwrap();
            assert!(info.contains(" C "), "{how}: not compressed: {info}");
            let split = load_split(&bin, &debug);
            assert!(
                split.has_debug_info(),
                "{how}: {:?}",
                split.debug_info_problem()
            );
            for a in code_span(&nm).step_by(3) {
                assert_eq!(split.location(a), whole.location(a), "{how} {a:#x}");
            }
        }
    }

    /// A compressed section whose header claims far more than its bytes
    /// can inflate to turns the debug info off with a reason, without the
    /// allocation it asks for; the names stay.
    #[test]
    fn a_compressed_section_claiming_too_much_is_refused() {
        let dir = tempdir();
        let bin = compile(dir.path(), "bomb", &[]);
        let (main, _) = nm(&bin)["main"];
        let debug = split_debug(&bin, &["--compress-debug-sections=zlib"]);
        let (_, _, offset, _) = sections(&debug)
            .into_iter()
            .find(|s| s.0 == ".debug_info")
            .unwrap();
        // Elf64_Chdr: ch_type, ch_reserved, then ch_size.
        let mut data = std::fs::read(&debug).unwrap();
        let at = offset as usize + 8;
        data[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        std::fs::write(&debug, &data).unwrap();
        let split = load_split(&bin, &debug);
        assert!(!split.has_debug_info());
        let problem = split.debug_info_problem().unwrap();
        assert!(
            problem.contains("inflate") && problem.contains("bomb.debug"),
            "{problem}"
        );
        assert!(split.has_symbols());
        assert_eq!(split.function(main).unwrap().name, "main");
    }

    /// A debug file that is no ELF file names nothing and says why; the
    /// binary's own names stay.
    #[test]
    fn a_debug_file_that_is_not_elf_is_set_aside() {
        let dir = tempdir();
        let bin = compile(dir.path(), "junk", &["-rdynamic"]);
        let debug = split_debug(&bin, &[]);
        std::fs::write(&debug, b"not an ELF file").unwrap();
        let split = load_split(&bin, &debug);
        assert_eq!(split.debug_file(), None);
        assert!(!split.has_symbols());
        let problem = split.debug_info_problem().unwrap();
        assert!(problem.contains("junk.debug"), "{problem}");
        assert!(split.functions().any(|f| f.name == "main"));
        // An empty one likewise.
        std::fs::write(&debug, b"").unwrap();
        let split = load_split(&bin, &debug);
        assert!(split.debug_info_problem().unwrap().contains("empty"));
    }
}
