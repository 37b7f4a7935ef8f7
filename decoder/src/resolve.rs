//! Resolution: which function an address is in. The coarse pass asks a
//! [`Resolve`] for every branch target that leaves the cached range;
//! [`ProcessSymbols`] answers over a process's mappings from each
//! binary's symbols ([`SymbolCache`], loaded once and shared by every
//! model of the same file), and names code no symbol covers by what calls
//! into it. Kernel code, never decoded, is named by the kernel's symbols
//! where a snapshot carries them or the user gave them
//! ([`SymbolCache::kernel`]), else `[kernel]`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::block::PtError;
use crate::event::{is_kernel_addr, FuncId, FuncTable, SpanKind, KERNEL_START, UNKNOWN};
use crate::image::Section;
use crate::symbols::kallsyms::KernelSymbols;
use crate::symbols::ModuleSymbols;

/// The function an address is in, and the address range that shares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub func: FuncId,
    pub lo: u64,
    pub hi: u64,
    /// Entry address, 0 if unknown.
    pub entry: u64,
    /// Code no symbol covers: a call learned later may split the range
    /// ([`Resolve::learn_entry`]), so what it resolves to depends on what
    /// the walk has seen.
    pub provisional: bool,
}

/// Maps addresses to functions; implemented per process over its mappings.
pub trait Resolve {
    fn resolve(&mut self, addr: u64, funcs: &mut FuncTable) -> Resolved;
    /// `addr` is a call target: a function starts there even if no symbol
    /// says so. Returns true if that is news (cached ranges are stale).
    fn learn_entry(&mut self, addr: u64, funcs: &mut FuncTable) -> bool {
        let _ = (addr, funcs);
        false
    }
    /// The label of a decode error at `ip` (e.g. a missing binary there).
    fn error_func(&mut self, ip: Option<u64>, error: PtError, funcs: &mut FuncTable) -> FuncId {
        let _ = ip;
        funcs.decode_error(&error.message())
    }
}

impl<R: Resolve + ?Sized> Resolve for &mut R {
    fn resolve(&mut self, addr: u64, funcs: &mut FuncTable) -> Resolved {
        (**self).resolve(addr, funcs)
    }
    fn learn_entry(&mut self, addr: u64, funcs: &mut FuncTable) -> bool {
        (**self).learn_entry(addr, funcs)
    }
    fn error_func(&mut self, ip: Option<u64>, error: PtError, funcs: &mut FuncTable) -> FuncId {
        (**self).error_func(ip, error, funcs)
    }
}

/// Symbols of every binary, loaded once.
#[derive(Default)]
pub struct SymbolCache {
    modules: HashMap<PathBuf, Option<Arc<ModuleSymbols>>>,
    /// The kernel's functions (kallsyms or vmlinux), which name kernel
    /// code; `None`: it is `[kernel]`.
    pub kernel: Option<Arc<KernelSymbols>>,
}

impl SymbolCache {
    pub fn get(&mut self, file: &Path) -> Option<Arc<ModuleSymbols>> {
        self.modules
            .entry(file.to_path_buf())
            .or_insert_with(|| shared_symbols(file))
            .clone()
    }
}

/// A file's identity: the same inode, unchanged.
type FileId = (u64, u64, u64, i64, i64);

/// Symbols any live model in the process already loaded from the same
/// unchanged file: a re-decode (another engine, other threads) or a second
/// model of the same snapshot shares them instead of parsing libc again.
/// Weak, so they go with the last model that uses them.
fn shared_symbols(path: &Path) -> Option<Arc<ModuleSymbols>> {
    use std::os::unix::fs::MetadataExt;
    use std::sync::{Mutex, Weak};
    static SHARED: Mutex<Option<HashMap<FileId, Weak<ModuleSymbols>>>> = Mutex::new(None);
    // Identified and read through one open file: a file replaced in
    // between cannot be cached under the other's identity.
    let file = std::fs::File::open(path).ok()?;
    let m = file.metadata().ok()?;
    let id = (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let map = shared.get_or_insert_with(HashMap::new);
    if let Some(m) = map.get(&id).and_then(Weak::upgrade) {
        return Some(m);
    }
    map.retain(|_, w| w.strong_count() > 0);
    drop(shared);
    let m = Arc::new(ModuleSymbols::load_file(path, &file).ok()?);
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared
        .get_or_insert_with(HashMap::new)
        .insert(id, Arc::downgrade(&m));
    Some(m)
}

#[derive(Clone)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    path: String,
    module: Option<Arc<ModuleSymbols>>,
    /// The binary is missing: `[no binary: path]`.
    missing: bool,
}

impl Mapping {
    /// The file offset of `addr`, which lies in this mapping. Saturating:
    /// the page offset comes from a record a damaged file can set to
    /// anything, and must give a wrong answer there, not a panic.
    fn file_offset(&self, addr: u64) -> u64 {
        self.pgoff.saturating_add(addr - self.start)
    }

    /// The module's extent `(lo, hi)` around `svma` (which is `addr`) as
    /// addresses in this mapping, holding `addr`.
    fn extent(&self, addr: u64, svma: u64, (lo, hi): (u64, u64)) -> (u64, u64) {
        let lo = addr.saturating_sub(svma.saturating_sub(lo)).max(self.start);
        let hi = addr.saturating_add(hi.saturating_sub(svma)).min(self.end);
        (lo.min(addr), hi.max(addr + 1))
    }
}

/// A process's mappings with their symbols: the coarse pass's resolver.
#[derive(Clone)]
pub struct ProcessSymbols {
    maps: Vec<Mapping>,
    /// Function ids by (mapping, entry svma), so lookups intern once.
    ids: HashMap<(usize, u64), FuncId>,
    /// Call targets in code no symbol covers: each starts a function that
    /// runs to the next one, named `[unknown] module+0xoffset`.
    learned: std::collections::BTreeMap<u64, FuncId>,
    /// The kernel's functions, when known.
    kernel: Option<Arc<KernelSymbols>>,
}

/// The mapping index under which kernel functions are interned in `ids`.
const KERNEL_IDS: usize = usize::MAX;

impl ProcessSymbols {
    pub fn new(
        sections: &[Section],
        missing: &[(u64, u64, String)],
        symbols: &mut SymbolCache,
    ) -> ProcessSymbols {
        let mut maps: Vec<Mapping> = sections
            .iter()
            .map(|s| Mapping {
                start: s.vaddr,
                end: s.vaddr.saturating_add(s.size),
                pgoff: s.offset,
                path: s.mapped_path.clone(),
                module: symbols.get(&s.file),
                missing: false,
            })
            .chain(missing.iter().map(|(start, len, path)| Mapping {
                start: *start,
                end: start.saturating_add(*len),
                pgoff: 0,
                path: path.clone(),
                module: None,
                missing: true,
            }))
            .collect();
        maps.sort_by_key(|m| m.start);
        // Where a later mapping overlaps one (a damaged or reused range),
        // addresses from its start on are the later one's: the earlier
        // ends there, so that no range handed out (and cached by the walk)
        // crosses into it.
        for i in 1..maps.len() {
            let next = maps[i].start;
            let m = &mut maps[i - 1];
            m.end = m.end.min(next).max(m.start);
        }
        ProcessSymbols {
            maps,
            ids: HashMap::new(),
            learned: std::collections::BTreeMap::new(),
            kernel: symbols.kernel.clone(),
        }
    }

    /// The kernel function at `addr`, from the kernel's symbols, its range
    /// kept inside `lo..hi` (what holds no other mapping).
    fn kernel_symbol(
        &mut self,
        addr: u64,
        (lo, hi): (u64, u64),
        funcs: &mut FuncTable,
    ) -> Option<Resolved> {
        let s = self.kernel.as_ref()?.lookup(addr)?;
        let func = *self
            .ids
            .entry((KERNEL_IDS, s.start))
            .or_insert_with(|| funcs.intern(s.name, s.module, s.start, SpanKind::NoBinary));
        Some(Resolved {
            func,
            lo: s.start.max(lo).min(addr),
            hi: s.end.min(hi).max(addr + 1),
            entry: s.start,
            provisional: false,
        })
    }

    fn mapping(&self, addr: u64) -> Option<usize> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        (i > 0 && addr < self.maps[i - 1].end).then(|| i - 1)
    }
}

/// What names the code of a mapping whose binary we lack: `[kernel]` for
/// the kernel and its modules, else `[no binary: path]`.
fn missing_func(m: &Mapping, funcs: &mut FuncTable) -> FuncId {
    if is_kernel(m) {
        funcs.kernel()
    } else {
        funcs.no_binary(&m.path)
    }
}

/// Whether a mapping is the kernel's or one of its modules'.
fn is_kernel(m: &Mapping) -> bool {
    is_kernel_addr(m.start) || m.path.starts_with("[kernel.kallsyms]")
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl Resolve for ProcessSymbols {
    fn resolve(&mut self, addr: u64, funcs: &mut FuncTable) -> Resolved {
        let Some(mi) = self.mapping(addr) else {
            if is_kernel_addr(addr) {
                let i = self.maps.partition_point(|m| m.start <= addr);
                let lo = KERNEL_START.max(self.maps.last().map_or(0, |m| m.end));
                let below = if i > 0 { self.maps[i - 1].end } else { 0 };
                let above = self.maps.get(i).map_or(u64::MAX, |m| m.start);
                if let Some(r) = self.kernel_symbol(addr, (below, above), funcs) {
                    return r;
                }
                return Resolved {
                    func: funcs.kernel(),
                    lo,
                    hi: u64::MAX,
                    entry: 0,
                    provisional: false,
                };
            }
            // Unmapped: one unknown function up to the next mapping.
            let i = self.maps.partition_point(|m| m.start <= addr);
            let lo = if i > 0 { self.maps[i - 1].end } else { 0 };
            let hi = self.maps.get(i).map_or(u64::MAX, |m| m.start);
            return Resolved {
                func: UNKNOWN,
                lo,
                hi,
                entry: 0,
                provisional: false,
            };
        };
        let m = &self.maps[mi];
        if m.missing && is_kernel(m) {
            let bounds = (m.start, m.end);
            if let Some(r) = self.kernel_symbol(addr, bounds, funcs) {
                return r;
            }
        }
        let m = &self.maps[mi];
        if m.missing {
            return Resolved {
                func: missing_func(m, funcs),
                lo: m.start,
                hi: m.end,
                entry: 0,
                provisional: false,
            };
        }
        let file_off = m.file_offset(addr);
        if let Some(r) = self.symbol(mi, addr, funcs) {
            return r;
        }
        let m = &self.maps[mi];
        // The unnamed code around `addr`, between the known functions.
        let (gap_lo, gap_hi) = match (&m.module, self.svma(mi, addr)) {
            (Some(md), Some(svma)) => m.extent(addr, svma, md.extent(svma)),
            // The module knows its functions, but not this address (no
            // section holds it): how far its unnamed code runs is unknown,
            // and the whole mapping would take in the known functions too.
            (Some(_), None) => (addr, addr + 1),
            (None, _) => (m.start, m.end),
        };
        // A function learned from a call into unnamed code.
        if let Some((&start, &func)) = self.learned.range(gap_lo..=addr).next_back() {
            let hi = self
                .learned
                .range(addr + 1..gap_hi)
                .next()
                .map_or(gap_hi, |(&s, _)| s);
            return Resolved {
                func,
                lo: start,
                hi,
                entry: start,
                provisional: true,
            };
        }
        // Code no symbol covers: one `[unknown]` per module, named by the
        // module offset where we first met it.
        let id = *self.ids.entry((mi, u64::MAX)).or_insert_with(|| {
            funcs.intern(
                &format!("[unknown] {}+{:#x}", basename(&m.path), file_off),
                &m.path,
                0,
                SpanKind::Call,
            )
        });
        Resolved {
            func: id,
            lo: addr,
            hi: addr + 1,
            entry: 0,
            provisional: true,
        }
    }

    fn learn_entry(&mut self, addr: u64, funcs: &mut FuncTable) -> bool {
        let Some(mi) = self.mapping(addr) else {
            return false;
        };
        if self.maps[mi].missing
            || self.learned.contains_key(&addr)
            || self.symbol(mi, addr, funcs).is_some()
        {
            return false;
        }
        let m = &self.maps[mi];
        let off = m.file_offset(addr);
        let id = funcs.intern(
            &format!("[unknown] {}+{:#x}", basename(&m.path), off),
            &m.path,
            addr,
            SpanKind::Call,
        );
        self.learned.insert(addr, id);
        true
    }

    /// Code that could not be read is named by what is missing: the
    /// kernel, or the binary the sideband maps there.
    fn error_func(&mut self, ip: Option<u64>, error: PtError, funcs: &mut FuncTable) -> FuncId {
        // Kernel code, named by the kernel's symbols where they are known.
        let kernel_code = ip.filter(|&ip| {
            self.mapping(ip).map_or(is_kernel_addr(ip), |mi| {
                self.maps[mi].missing && is_kernel(&self.maps[mi])
            })
        });
        if let Some(r) = kernel_code.and_then(|ip| self.kernel_symbol(ip, (0, u64::MAX), funcs)) {
            return r.func;
        }
        match ip.and_then(|ip| self.mapping(ip).map(|mi| (ip, mi))) {
            Some((_, mi)) if self.maps[mi].missing => missing_func(&self.maps[mi], funcs),
            None if ip.is_some_and(is_kernel_addr) => funcs.kernel(),
            _ => funcs.decode_error(&error.message()),
        }
    }
}

impl ProcessSymbols {
    /// The module mapped at `addr` and the address there as the module
    /// sees it (its svma), for line lookups.
    pub fn module_at(&self, addr: u64) -> Option<(&Arc<ModuleSymbols>, u64)> {
        let m = &self.maps[self.mapping(addr)?];
        let md = m.module.as_ref()?;
        let svma = md.file_offset_to_svma(m.file_offset(addr))?;
        Some((md, svma))
    }

    /// `addr` of mapping `mi` as its module sees it.
    fn svma(&self, mi: usize, addr: u64) -> Option<u64> {
        let m = &self.maps[mi];
        m.module.as_ref()?.file_offset_to_svma(m.file_offset(addr))
    }

    /// The symbol (or unwind-table function) at `addr` of mapping `mi`.
    fn symbol(&mut self, mi: usize, addr: u64, funcs: &mut FuncTable) -> Option<Resolved> {
        let m = &self.maps[mi];
        let file_off = m.file_offset(addr);
        let module = m.module.as_ref();
        let svma = module.and_then(|md| md.file_offset_to_svma(file_off));
        if let (Some(md), Some(svma)) = (module, svma) {
            if let Some(f) = md.function(svma) {
                let entry = addr.saturating_sub(svma.saturating_sub(f.entry));
                let (lo, hi) = m.extent(addr, svma, md.extent(svma));
                let id = *self.ids.entry((mi, f.entry)).or_insert_with(|| {
                    // Unwind-table functions are named after the module
                    // as mapped, not the cached file's name.
                    if f.source == crate::symbols::SymbolSource::Unwind {
                        let off = m.pgoff.saturating_add(entry.saturating_sub(m.start));
                        let name = format!("[unknown] {}+{off:#x}", basename(&m.path));
                        funcs.intern(&name, &m.path, entry, SpanKind::Call)
                    } else {
                        let id = funcs.intern(f.name, &m.path, entry, SpanKind::Call);
                        // Once per function, so the tooltip can say where
                        // it is without a lookup per frame.
                        if let Some(loc) = md.location(f.entry) {
                            let line = loc.line.map(|l| format!(":{l}")).unwrap_or_default();
                            funcs.set_source(id, format!("{}{line}", loc.file));
                        }
                        id
                    }
                });
                return Some(Resolved {
                    func: id,
                    lo,
                    hi,
                    entry,
                    provisional: false,
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Code that could not be read is named by what is missing: the
    /// kernel where the sideband maps it or the address is the kernel's, a
    /// binary the sideband maps, and only otherwise the decoder's error
    /// (the kernel's addresses said "no memory mapped").
    #[test]
    fn unreadable_code_is_named_by_what_is_missing() {
        let mut funcs = FuncTable::default();
        let mut symbols = SymbolCache::default();
        let kernel = 0xffff_ffff_8100_0000;
        let mut r = ProcessSymbols::new(
            &[],
            &[
                (0x1000, 0x1000, "/lib/libfoo.so".to_string()),
                (kernel, 0x100_0000, "[kernel.kallsyms]_text".to_string()),
                (
                    0xffff_ffff_c000_0000,
                    0x1000,
                    "/lib/modules/x.ko".to_string(),
                ),
            ],
            &mut symbols,
        );
        let mut name = |ip: u64| {
            let f = r.error_func(Some(ip), PtError::NOMAP, &mut funcs);
            funcs.name(f).to_string()
        };
        assert_eq!(name(0x1800), "[no binary: /lib/libfoo.so]");
        assert_eq!(name(kernel + 0x40), "[kernel]");
        assert_eq!(name(0xffff_ffff_c000_0010), "[kernel]");
        // Kernel code the sideband does not map is still the kernel's.
        assert_eq!(name(0xffff_8880_0000_0000), "[kernel]");
        assert!(name(0x5000).starts_with("[decode error: "));
        let f = r.resolve(kernel + 0x40, &mut funcs).func;
        assert_eq!(funcs.name(f), "[kernel]");
        assert_eq!(funcs.kind(f), SpanKind::NoBinary);
        let f = r.resolve(0xffff_8880_0000_0000, &mut funcs).func;
        assert_eq!(funcs.name(f), "[kernel]");
    }

    #[test]
    fn symbols_of_an_unchanged_file_are_shared_while_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("demo");
        let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo");
        std::fs::copy(&demo, &file).unwrap();
        let a = SymbolCache::default().get(&file).unwrap();
        let b = SymbolCache::default().get(&file).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "a second cache parses again");
        drop((a, b));
        let c = SymbolCache::default().get(&file).unwrap();
        // A changed file is another file.
        std::fs::copy(&demo, dir.path().join("other")).unwrap();
        std::fs::rename(dir.path().join("other"), &file).unwrap();
        let d = SymbolCache::default().get(&file).unwrap();
        assert!(!Arc::ptr_eq(&c, &d), "a replaced file keeps old symbols");
    }

    /// The demo's binary mapped whole at a fixed base, with its known
    /// functions `(entry, end)` in address order and the first padding
    /// between two of them: `(its start, the next entry)`, as svmas.
    struct DemoMapping {
        md: Arc<ModuleSymbols>,
        funcs: Vec<(u64, u64)>,
        gap: (u64, u64),
        base: u64,
        size: u64,
        resolver: ProcessSymbols,
    }

    impl DemoMapping {
        fn new() -> DemoMapping {
            let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo");
            let mut cache = SymbolCache::default();
            let md = cache.get(&demo).unwrap();
            let mut funcs: Vec<_> = md.functions().map(|f| (f.entry, f.end)).collect();
            funcs.sort();
            let gap = funcs
                .windows(2)
                .find_map(|w| (w[0].1 < w[1].0).then_some((w[0].1, w[1].0)))
                .expect("the demo has padding between two functions");
            let base = 0x5555_0000_0000;
            let size = std::fs::metadata(&demo).unwrap().len();
            let secs = [Section {
                file: demo.clone(),
                offset: 0,
                size,
                vaddr: base,
                mapped_path: "/demo".into(),
            }];
            let resolver = ProcessSymbols::new(&secs, &[], &mut cache);
            DemoMapping {
                md,
                funcs,
                gap,
                base,
                size,
                resolver,
            }
        }

        /// Where `svma` is mapped.
        fn addr(&self, svma: u64) -> u64 {
            self.base + self.md.svma_to_file_offset(svma).unwrap()
        }
    }

    /// A function learned from a call into the padding before a symbol
    /// ends where the symbol starts. Its range ran to the end of the
    /// mapping, so a walk that cached it put the next function's code in
    /// it, and what an address resolved to depended on what came before.
    #[test]
    fn a_learned_function_ends_where_the_next_symbol_starts() {
        let mut m = DemoMapping::new();
        let (gap, next) = m.gap;
        let (gap_at, next_at) = (m.addr(gap), m.addr(next));
        let mut table = FuncTable::default();
        assert!(m.resolver.learn_entry(gap_at, &mut table));
        let learned = m.resolver.resolve(gap_at, &mut table);
        assert!(learned.provisional);
        assert_eq!((learned.lo, learned.hi), (gap_at, next_at));
        let symbol = m.resolver.resolve(next_at, &mut table);
        assert!(!symbol.provisional);
        assert_ne!(symbol.func, learned.func);
        assert_eq!(symbol.lo, next_at);
        // Code after the symbol is not the learned function's either.
        let after = m.funcs.iter().find(|f| f.0 == next).unwrap().1;
        if m.funcs.iter().all(|f| f.0 != after) {
            let after_at = m.addr(after);
            let r = m.resolver.resolve(after_at, &mut table);
            assert_ne!(r.func, learned.func);
        }
    }

    /// An address in the mapping that no section of the file holds (round
    /// 11's open input: code past `.fini` on its page) resolved to the
    /// function learned before it, over the whole mapping: a walk that
    /// cached that range then named the known functions in it after the
    /// learned one, while a chunk, which had learned nothing, named them.
    #[test]
    fn unnamed_code_outside_every_section_does_not_take_in_known_functions() {
        let mut m = DemoMapping::new();
        let gap_off = m.md.svma_to_file_offset(m.gap.0).unwrap();
        let outside = (gap_off..m.size)
            .find(|&off| m.md.file_offset_to_svma(off).is_none())
            .expect("the demo's file has bytes after the gap that no section holds");
        let mut table = FuncTable::default();
        assert!(m.resolver.learn_entry(m.base + gap_off, &mut table));
        let r = m.resolver.resolve(m.base + outside, &mut table);
        assert!(r.lo <= m.base + outside && m.base + outside < r.hi);
        for &(entry, _) in &m.funcs {
            let Some(off) = m.md.svma_to_file_offset(entry) else {
                continue;
            };
            let a = m.base + off;
            assert!(
                !(r.lo <= a && a < r.hi),
                "{:#x}..{:#x} takes in the function at {a:#x}",
                r.lo,
                r.hi
            );
        }
    }

    /// A mapping that a later one overlaps ends where that one starts:
    /// what resolved in the earlier one was cached by a range that ran
    /// over the later one, so an address there named the earlier's
    /// function or `[no binary]` depending on what came before.
    #[test]
    fn an_overlapped_mapping_ends_where_the_next_starts() {
        let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo");
        let len = std::fs::metadata(&demo).unwrap().len();
        let base = 0x5555_0000_0000;
        let secs = [Section {
            file: demo.clone(),
            offset: 0,
            size: len,
            vaddr: base,
            mapped_path: "/demo".into(),
        }];
        // A binary not on hand, mapped over all of it from before.
        let missing = [(base - 0x1000, len + 0x2000, "/gone".to_string())];
        let mut resolver = ProcessSymbols::new(&secs, &missing, &mut SymbolCache::default());
        let mut table = FuncTable::default();
        let before = resolver.resolve(base - 0x800, &mut table);
        assert_eq!((before.lo, before.hi), (base - 0x1000, base));
        let inside = resolver.resolve(base + 0x10, &mut table);
        assert_ne!(inside.func, before.func);
    }
}
