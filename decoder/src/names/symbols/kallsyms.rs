//! The kernel's symbols: which kernel function an address is in, from a
//! listing in `/proc/kallsyms`' format (a snapshot's copy, or the user's
//! `--kallsyms`) bounded by `/proc/modules`, or from a `vmlinux` ELF
//! (`--vmlinux`) moved to where the trace's kernel map says the kernel ran.
//! Kernel code is never decoded (no image of it is at hand); these names
//! label the spans the decoder would otherwise call `[kernel]`.
//!
//! The input is never trusted: lines that do not parse are skipped, sizes
//! are bounded, and a listing whose addresses are all zero (what
//! `kernel.kptr_restrict` shows) is refused with that reason.

use std::path::Path;
use std::sync::Arc;

use object::{Object, ObjectSymbol, SymbolKind};
use ptscope_formats::{snapshot::Snapshot, snapshot::Trace};

/// A listing larger than this is refused, not read: a real kallsyms is
/// some 10 MiB.
const MAX_LISTING: usize = 512 << 20;

/// The module name of the kernel proper, as perf names it.
pub(crate) const KERNEL_MODULE: &str = "[kernel.kallsyms]";

/// Why kernel symbols could not be had from a file.
#[derive(Debug, thiserror::Error)]
pub enum KallsymsError {
    #[error("{path}: its addresses are all zero (kallsyms read under kernel.kptr_restrict): kernel code stays [kernel]", path = .0.display())]
    Hidden(std::path::PathBuf),
    #[error("{path}: holds no kernel function symbols", path = .0.display())]
    Empty(std::path::PathBuf),
    #[error("{path}: is {1} bytes, more than a kernel symbol listing holds", path = .0.display())]
    TooLarge(std::path::PathBuf, usize),
    #[error("{path}: not an ELF file ({1})", path = .0.display())]
    NotElf(std::path::PathBuf, String),
    #[error("{path}: cannot read it ({1})", path = .0.display())]
    Io(std::path::PathBuf, std::io::Error),
}

#[derive(Clone, Copy, Debug)]
struct Sym {
    start: u64,
    end: u64,
    /// Byte ranges of the name and module in `KernelSymbols::text`.
    name: (u32, u32),
    module: (u32, u32),
    /// How good a name of several at one address is: lower wins.
    rank: u8,
}

/// A kernel function: its name, its module (`[kernel.kallsyms]` or
/// `[name]`) and its address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSymbol<'a> {
    pub name: &'a str,
    pub module: &'a str,
    pub start: u64,
    pub end: u64,
}

/// Kernel functions sorted by address, one per address, each ending where
/// the next begins (or its module ends).
#[derive(Clone, Debug, Default)]
pub struct KernelSymbols {
    text: String,
    syms: Vec<Sym>,
}

impl KernelSymbols {
    /// Reads a file in kallsyms' format (`path` names it in errors), with
    /// `modules` (in `/proc/modules`' format) bounding the modules' last
    /// functions.
    pub fn from_kallsyms(
        path: &Path,
        data: &[u8],
        modules: Option<&[u8]>,
    ) -> Result<KernelSymbols, KallsymsError> {
        if data.len() > MAX_LISTING {
            return Err(KallsymsError::TooLarge(path.into(), data.len()));
        }
        let mut out = KernelSymbols::default();
        let mut any_address = false;
        for line in data.split(|&b| b == b'\n') {
            let Ok(line) = std::str::from_utf8(line) else {
                continue;
            };
            let mut fields = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            any_address |= addr != 0;
            let rank = match kind {
                "T" | "W" => 0,
                "t" | "w" => 1,
                _ => continue,
            };
            if addr == 0 || name.is_empty() {
                continue;
            }
            // `[module]` after the name; the kernel's own have none.
            let module = match fields.next() {
                Some(m) if m.starts_with('[') && m.ends_with(']') && m.len() > 2 => m,
                _ => KERNEL_MODULE,
            };
            out.push(
                addr,
                0,
                name,
                module,
                rank + u8::from(name.starts_with("__")) * 2,
            );
        }
        if !any_address && !data.is_empty() {
            return Err(KallsymsError::Hidden(path.into()));
        }
        let bounds = modules.map(module_bounds).unwrap_or_default();
        out.finish(&bounds);
        if out.syms.is_empty() {
            return Err(KallsymsError::Empty(path.into()));
        }
        Ok(out)
    }

    /// Reads a `vmlinux` ELF's function symbols, moved by `text_at - _text`
    /// where the trace says the kernel's `_text` ran at `text_at` (KASLR).
    pub fn from_vmlinux(
        path: &Path,
        data: &[u8],
        text_at: Option<u64>,
    ) -> Result<KernelSymbols, KallsymsError> {
        let file = object::File::parse(data)
            .map_err(|e| KallsymsError::NotElf(path.into(), e.to_string()))?;
        let linked_text = file
            .symbols()
            .find(|s| s.name() == Ok("_text"))
            .map(|s| s.address());
        let shift = match (text_at, linked_text) {
            (Some(run), Some(link)) => run.wrapping_sub(link),
            _ => 0,
        };
        let mut out = KernelSymbols::default();
        for s in file.symbols() {
            let (Ok(name), SymbolKind::Text) = (s.name(), s.kind()) else {
                continue;
            };
            if s.address() == 0 || name.is_empty() {
                continue;
            }
            let start = s.address().wrapping_add(shift);
            let end = start.saturating_add(s.size());
            let rank = u8::from(!s.is_global()) + u8::from(name.starts_with("__")) * 2;
            out.push(start, end, name, KERNEL_MODULE, rank);
        }
        out.finish(&[]);
        if out.syms.is_empty() {
            return Err(KallsymsError::Empty(path.into()));
        }
        Ok(out)
    }

    /// Reads `path` with [`Self::from_kallsyms`] or, when it is an ELF,
    /// [`Self::from_vmlinux`].
    pub fn read_file(path: &Path, text_at: Option<u64>) -> Result<KernelSymbols, KallsymsError> {
        let len = std::fs::metadata(path)
            .map_err(|e| KallsymsError::Io(path.into(), e))?
            .len();
        if len > MAX_LISTING as u64 {
            return Err(KallsymsError::TooLarge(path.into(), len as usize));
        }
        let data = std::fs::read(path).map_err(|e| KallsymsError::Io(path.into(), e))?;
        if data.starts_with(b"\x7fELF") {
            Self::from_vmlinux(path, &data, text_at)
        } else {
            Self::from_kallsyms(path, &data, None)
        }
    }

    fn push(&mut self, start: u64, end: u64, name: &str, module: &str, rank: u8) {
        // Names past 4 GiB of text cannot be indexed; no real listing
        // comes near.
        let Ok(at) = u32::try_from(self.text.len()) else {
            return;
        };
        if self.text.len() + name.len() + module.len() > u32::MAX as usize {
            return;
        }
        self.text.push_str(name);
        let name_end = at + name.len() as u32;
        self.text.push_str(module);
        let module_end = name_end + module.len() as u32;
        self.syms.push(Sym {
            start,
            end,
            name: (at, name_end),
            module: (name_end, module_end),
            rank,
        });
    }

    /// Sorts, keeps the best name at each address, and ends each function
    /// at the next one's start, its own size, or its module's end.
    fn finish(&mut self, modules: &[(String, u64, u64)]) {
        self.syms.sort_by_key(|s| (s.start, s.rank));
        self.syms.dedup_by_key(|s| s.start);
        for i in 0..self.syms.len() {
            let s = self.syms[i];
            let module = &self.text[s.module.0 as usize..s.module.1 as usize];
            // The next function ends this one only within one module: the
            // kernel's last runs up to nowhere near the first module's.
            let next = self
                .syms
                .get(i + 1)
                .filter(|n| self.text[n.module.0 as usize..n.module.1 as usize] == *module)
                .map(|n| n.start);
            let module_end = modules
                .iter()
                .find(|(name, lo, hi)| {
                    module.len() > 2
                        && module[1..module.len() - 1] == **name
                        && (*lo..*hi).contains(&s.start)
                })
                .map(|m| m.2);
            let limit = match (next, module_end) {
                (Some(n), Some(m)) => Some(n.min(m)),
                (n, m) => n.or(m),
            };
            let end = if s.end > s.start {
                limit.map_or(s.end, |l| s.end.min(l))
            } else {
                // Where the last function of a module of unknown size ends
                // is unknown: its entry alone is named.
                limit.unwrap_or(s.start.saturating_add(1))
            };
            self.syms[i].end = end.max(s.start.saturating_add(1));
        }
    }

    /// The function `addr` is in.
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol<'_>> {
        let i = self
            .syms
            .partition_point(|s| s.start <= addr)
            .checked_sub(1)?;
        let s = &self.syms[i];
        (addr < s.end).then(|| KernelSymbol {
            name: &self.text[s.name.0 as usize..s.name.1 as usize],
            module: &self.text[s.module.0 as usize..s.module.1 as usize],
            start: s.start,
            end: s.end,
        })
    }

    /// The addresses around `addr` that [`lookup`](Self::lookup) finds no
    /// function at, as `lo..hi`, if it finds none at `addr`: a range a
    /// caller may cache as one, since every address in it looks up alike.
    pub fn gap(&self, addr: u64) -> Option<(u64, u64)> {
        let i = self.syms.partition_point(|s| s.start <= addr);
        let lo = match i.checked_sub(1) {
            Some(p) if addr < self.syms[p].end => return None,
            Some(p) => self.syms[p].end,
            None => 0,
        };
        let hi = self.syms.get(i).map_or(u64::MAX, |s| s.start);
        Some((lo, hi))
    }

    /// How many functions are known.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
}

/// The kernel's symbols for decoding `snap`: from the user's `vmlinux` or
/// `kallsyms` file, else those the snapshot carries. The note says why
/// kernel code stays `[kernel]` in a trace that has some.
pub fn for_trace(
    snap: &Snapshot,
    trace: &Trace,
    kallsyms: Option<&Path>,
    vmlinux: Option<&Path>,
) -> (Option<Arc<KernelSymbols>>, Option<String>) {
    // perf's kernel map is named after the symbol its page offset holds
    // the run-time address of (`_text`).
    let text_at = trace
        .mmaps
        .iter()
        .find(|m| m.kernel && m.path == "[kernel.kallsyms]_text")
        .map(|m| m.pgoff);
    // perf maps the kernel in every file; only a trace that includes it
    // misses its names.
    let traced_kernel = trace.mmaps.iter().any(|m| m.kernel)
        && trace.pt_attr.flags & ptscope_formats::perf_data::flag::EXCLUDE_KERNEL == 0;
    let read = match (vmlinux, kallsyms) {
        (Some(v), _) => Some(KernelSymbols::read_file(v, text_at)),
        (None, Some(k)) => Some(KernelSymbols::read_file(k, None)),
        (None, None) => snap.kallsyms.as_deref().map(|data| {
            let name = snap.path.join(ptscope_formats::snapshot::KALLSYMS_MEMBER);
            KernelSymbols::from_kallsyms(&name, data, snap.modules.as_deref())
        }),
    };
    match read {
        Some(Ok(k)) => (Some(Arc::new(k)), None),
        Some(Err(e)) => (None, Some(e.to_string())),
        None if traced_kernel => {
            let why = snap
                .metadata
                .as_ref()
                .and_then(|m| m.kallsyms_missing.clone())
                .unwrap_or_else(|| {
                    "no kernel symbols: kernel code is named [kernel] (give them with --kallsyms FILE \
                     or --vmlinux FILE)"
                        .into()
                });
            (None, Some(why))
        }
        None => (None, None),
    }
}

/// `(name, start, end)` of each module in a `/proc/modules` listing: `name
/// size refcount deps state address`.
fn module_bounds(data: &[u8]) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        let (Some(name), Some(size), Some(addr)) = (f.first(), f.get(1), f.get(5)) else {
            continue;
        };
        let (Ok(size), Ok(addr)) = (
            size.parse::<u64>(),
            u64::from_str_radix(addr.trim_start_matches("0x"), 16),
        ) else {
            continue;
        };
        if addr != 0 {
            out.push((name.to_string(), addr, addr.saturating_add(size)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000000 t __alias
ffffffff81000100 T do_syscall_64
ffffffff81000100 d some_data
ffffffff81000180 t helper
ffffffff81000200 D not_code
ffffffff81000300 T _etext
garbage line
zzzz T bad_address
ffffffffc0001000 t foo_read\t[foo]
ffffffffc0001040 t foo_write\t[foo]
";

    fn symbols() -> KernelSymbols {
        let modules = b"foo 16384 0 - Live 0xffffffffc0001000\nbroken\n";
        KernelSymbols::from_kallsyms(Path::new("ks"), LISTING.as_bytes(), Some(modules)).unwrap()
    }

    #[test]
    fn names_kernel_and_module_functions_by_range() {
        let k = symbols();
        let at = |a| k.lookup(a).map(|s| (s.name, s.module, s.start, s.end));
        assert_eq!(
            at(0xffff_ffff_8100_0120),
            Some((
                "do_syscall_64",
                KERNEL_MODULE,
                0xffff_ffff_8100_0100,
                0xffff_ffff_8100_0180
            ))
        );
        // One name of several at an address: a global one without leading
        // underscores.
        assert_eq!(at(0xffff_ffff_8100_0000).unwrap().0, "_stext");
        // Data symbols do not end functions or name code.
        assert_eq!(at(0xffff_ffff_8100_0250).unwrap().0, "helper");
        // A module's last function ends with the module.
        assert_eq!(
            at(0xffff_ffff_c000_2000),
            Some((
                "foo_write",
                "[foo]",
                0xffff_ffff_c000_1040,
                0xffff_ffff_c000_5000
            ))
        );
        assert_eq!(at(0xffff_ffff_c000_5000), None);
        assert_eq!(at(0x1000), None);
        assert_eq!(at(u64::MAX), None);
    }

    #[test]
    fn a_hidden_or_empty_listing_is_refused_with_its_reason() {
        let hidden = "0000000000000000 T _text\n0000000000000000 t helper\n";
        let e = KernelSymbols::from_kallsyms(Path::new("/x/kallsyms"), hidden.as_bytes(), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/x/kallsyms") && e.contains("kptr_restrict"),
            "{e}"
        );
        let e = KernelSymbols::from_kallsyms(Path::new("k"), b"ffffffff81000000 D data\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no kernel function"), "{e}");
        // Bytes of any kind parse to an error or a table, never a panic.
        for junk in [&b"\xff\xfe\n\n"[..], b"", b"ffffffffffffffff T x [", b"1 T"] {
            let _ = KernelSymbols::from_kallsyms(Path::new("j"), junk, Some(junk));
        }
    }

    #[test]
    fn a_vmlinux_is_moved_to_where_the_kernel_ran() {
        // Any ELF with function symbols serves: this test binary, with
        // `main` standing in for a kernel function.
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let k = KernelSymbols::from_vmlinux(Path::new("vmlinux"), &exe, None).unwrap();
        assert!(!k.is_empty());
        let e = KernelSymbols::from_vmlinux(Path::new("vmlinux"), b"not elf", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("vmlinux") && e.contains("not an ELF"), "{e}");
    }
}
