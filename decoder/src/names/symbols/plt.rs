//! PLT stubs named `foo@plt`, as objdump and perf name them. Each entry's
//! code is decoded to find the GOT slot it jumps through (or the relocation
//! index it pushes), and the dynamic relocation of that slot names it. This
//! x86 instruction and relocation reading is separate from the symbol tables
//! because no symbol table covers the PLT.

use std::borrow::Cow;
use std::collections::HashMap;

use object::elf;
use object::read::elf::{ElfFile, FileHeader, Rel, Rela, SectionHeader};
use object::read::SectionIndex;
use object::Endianness;

use super::elf::{source_rank, Candidate};
use super::SymbolSource;

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
pub(super) fn plt_candidates<'d, Elf: FileHeader<Endian = Endianness>>(
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

#[cfg(test)]
mod tests {
    use crate::names::symbols::testutil::*;
    use crate::names::symbols::{ModuleSymbols, SymbolSource};

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
}
