//! Resolution: which function an address is in. The coarse pass asks a
//! [`Resolve`] for every branch target that leaves the cached range;
//! [`ProcessSymbols`] answers over a process's mappings from each
//! binary's symbols ([`SymbolCache`], loaded once and shared by every
//! model of the same file, with the separate debug file of a binary that
//! lacks names of its own, found as [`crate::names`] says), and names
//! code no symbol covers by what calls into it. Kernel code, never
//! decoded, is named by the kernel's symbols where a snapshot carries them
//! or the user gave them ([`SymbolCache::kernel`]), else `[kernel]`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::names::image::Section;
use crate::names::lookup::Lookup;
use crate::names::symbols::kallsyms::KernelSymbols;
use crate::names::symbols::ModuleSymbols;
use crate::pt::block::PtError;
use ptscope_model::{is_kernel_addr, FuncId, FuncTable, SpanKind, KERNEL_START, UNKNOWN};

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

/// Symbols of every binary, loaded once, with the separate debug files
/// of those that lack names of their own, found by a [`Lookup`].
#[derive(Default)]
pub struct SymbolCache {
    modules: HashMap<PathBuf, Option<Arc<ModuleSymbols>>>,
    /// Where debug files are looked for; the default looks nowhere.
    lookup: Lookup,
    /// What the user should hear of the search: a server down, a debug
    /// file that could not be read.
    notes: Vec<String>,
    /// Every binary whose symbols were asked for, with its identity and
    /// that of the debug file its names came from: what a cached model's
    /// names depend on ([`SymbolCache::sources`]).
    sources: std::collections::BTreeSet<String>,
    /// Binaries found by [`SymbolCache::locate_mapped`] whose symbols are
    /// not read yet; `None`: the binary cannot be opened.
    located: HashMap<PathBuf, Option<Located>>,
    /// The debug files [`SymbolCache::identify_carried`] found for carried
    /// binaries, which locating them once unpacked takes rather than
    /// searching again (a debuginfod server asked twice).
    searched: HashMap<PathBuf, Option<ptscope_formats::DebugFile>>,
    /// The kernel's functions (kallsyms or vmlinux), which name kernel
    /// code; `None`: it is `[kernel]`.
    pub kernel: Option<Arc<KernelSymbols>>,
}

impl SymbolCache {
    /// A cache that looks for debug files where `lookup` says.
    pub fn new(lookup: Lookup) -> SymbolCache {
        SymbolCache {
            lookup,
            ..SymbolCache::default()
        }
    }

    /// Where this cache looks for debug files (and binaries).
    pub fn lookup(&self) -> &Lookup {
        &self.lookup
    }

    /// The symbols of the binary `file`, as if mapped at its own path.
    pub fn get(&mut self, file: &Path) -> Option<Arc<ModuleSymbols>> {
        self.get_mapped(file, &file.display().to_string())
    }

    /// The symbols of the binary `file`, which the trace mapped as
    /// `mapped_path` (where its `.gnu_debuglink` file is looked for).
    pub fn get_mapped(&mut self, file: &Path, mapped_path: &str) -> Option<Arc<ModuleSymbols>> {
        if let Some(m) = self.modules.get(file) {
            return m.clone();
        }
        self.locate_mapped(file, mapped_path);
        let found = self.located.remove(file).flatten();
        let m = found.and_then(|found| shared_symbols(&found, mapped_path, &mut self.notes));
        self.modules.insert(file.to_path_buf(), m.clone());
        m
    }

    /// Reads the symbols of the binaries `files` (each with the path the
    /// trace mapped it at) that are not read yet: the largest on this
    /// thread, the others meanwhile on one more when `beside` (a decode on
    /// more than one core). A process's binaries are read before any of
    /// its trace is walked, and one of them (libc's debug file, inflated
    /// and indexed) can take as long as the others together. What the
    /// search tells the user comes in `files`' order, as read one by one.
    pub fn preload<'f>(
        &mut self,
        files: impl IntoIterator<Item = (&'f Path, &'f str)>,
        beside: bool,
    ) {
        let mut todo: Vec<(&Path, &str, Located)> = Vec::new();
        for (file, mapped_path) in files {
            if self.modules.contains_key(file) || todo.iter().any(|(f, ..)| *f == file) {
                continue;
            }
            self.locate_mapped(file, mapped_path);
            match self.located.remove(file).flatten() {
                Some(found) => todo.push((file, mapped_path, found)),
                None => {
                    self.modules.insert(file.to_path_buf(), None);
                }
            }
        }
        let size = |l: &Located| {
            let debug = l.debug.as_ref().and_then(|(_, f)| f.metadata().ok());
            debug
                .or_else(|| l.file.metadata().ok())
                .map_or(0, |m| m.len())
        };
        let largest = (0..todo.len()).max_by_key(|&i| size(&todo[i].2));
        let load = |i: usize| {
            let (_, mapped_path, found) = &todo[i];
            let mut notes = Vec::new();
            (shared_symbols(found, mapped_path, &mut notes), notes)
        };
        let others: Vec<usize> = (0..todo.len()).filter(|&i| Some(i) != largest).collect();
        let load_others = || others.iter().map(|&i| (i, load(i))).collect::<Vec<_>>();
        let (first, rest) = std::thread::scope(|s| {
            let helper = (beside && !others.is_empty()).then(|| s.spawn(load_others));
            let first = largest.map(|i| (i, load(i)));
            let rest = match helper {
                Some(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                None => load_others(),
            };
            (first, rest)
        });
        // Back in `files`' order.
        let mut loaded: Vec<_> = first.into_iter().chain(rest).collect();
        loaded.sort_unstable_by_key(|&(i, _)| i);
        for ((file, ..), (_, (module, notes))) in todo.iter().zip(loaded) {
            self.notes.extend(notes);
            self.modules.insert(file.to_path_buf(), module);
        }
    }

    /// Finds the binary `file` (mapped as `mapped_path`) and the separate
    /// debug file its names would come from, and adds both to
    /// [`SymbolCache::sources`], without reading their symbols: what a
    /// cached model is checked against before it is trusted. A later
    /// [`SymbolCache::get_mapped`] reads the files found here.
    pub fn locate_mapped(&mut self, file: &Path, mapped_path: &str) {
        if self.modules.contains_key(file) || self.located.contains_key(file) {
            return;
        }
        let searched = self.searched.remove(file);
        let found = std::fs::File::open(file).ok().map(|f| {
            let debug = match searched {
                Some(found) => found.and_then(|d| open_debug_file(d, mapped_path, &mut self.notes)),
                None => debug_file(&f, mapped_path, &self.lookup, &mut self.notes),
            };
            Located {
                path: file.to_path_buf(),
                file: f,
                debug,
            }
        });
        let debug = found.as_ref().and_then(|l| l.debug.as_ref());
        let source = self.source(
            (file, found.as_ref().map(|l| &l.file)),
            debug.map(|(d, f)| (d.as_path(), Some(f))),
        );
        self.sources.insert(source);
        self.located.insert(file.to_path_buf(), found);
    }

    /// What [`SymbolCache::locate_mapped`] adds to
    /// [`SymbolCache::sources`] for `file` (mapped as `mapped_path`), a
    /// binary the snapshot carries, found from its bytes in the archive
    /// (`bytes`), where it may not be unpacked yet; nothing is kept to be
    /// read. Once per file, as `locate_mapped`: the first mapped path's
    /// search is the one kept.
    pub(crate) fn identify_carried(&mut self, file: &Path, mapped_path: &str, bytes: &[u8]) {
        if self.modules.contains_key(file)
            || self.located.contains_key(file)
            || self.searched.contains_key(file)
        {
            return;
        }
        let found = find_debug_file(bytes, mapped_path, &self.lookup, &mut self.notes);
        self.searched.insert(file.to_path_buf(), found.clone());
        // A debug file the snapshot carries is known by its name there;
        // any other is opened, as once the binary is unpacked.
        let debug = found.and_then(|found| match self.lookup.is_carried(&found.path) {
            true => Some((found.path, None)),
            false => open_debug_file(found, mapped_path, &mut self.notes)
                .map(|(path, f)| (path, Some(f))),
        });
        let debug = debug.as_ref().map(|(d, f)| (d.as_path(), f.as_ref()));
        let source = self.source((file, None), debug);
        self.sources.insert(source);
    }

    /// The identity of the binary `file` (open as the file given, if it
    /// opened) and of its debug file, if any, among
    /// [`SymbolCache::sources`].
    fn source(
        &self,
        (file, opened): (&Path, Option<&std::fs::File>),
        debug: Option<(&Path, Option<&std::fs::File>)>,
    ) -> String {
        // What the snapshot carries is named by its place in it: the
        // snapshot, whose identity keys the cache, is unpacked afresh
        // (somewhere else) each time it is opened.
        let carried = self.lookup.carried();
        let identity = |p: &Path, f: Option<&std::fs::File>| {
            if let Some(rel) = carried.and_then(|d| p.strip_prefix(d).ok()) {
                return format!("in the snapshot: {}", rel.display());
            }
            let id = f.and_then(file_id);
            format!(
                "{} {}",
                p.display(),
                id.map_or_else(|| "unreadable".to_string(), |id| format!("{id:?}"))
            )
        };
        // The debug file found is a source whether or not it names
        // anything: one that is replaced by a better one makes the names
        // stale as surely as a changed binary.
        let debug = debug.map(|(d, f)| format!(", debug file {}", identity(d, f)));
        format!("{}{}", identity(file, opened), debug.unwrap_or_default())
    }

    /// The files this cache read names from, each with its identity
    /// (device, inode, size, modification time), in order: two decodes
    /// that read the same files name alike.
    pub fn sources(&self) -> Vec<String> {
        self.sources.iter().cloned().collect()
    }

    /// What the search met that the user should know, each once.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Adds `note` to [`SymbolCache::notes`], unless it is there.
    pub fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }
}

/// A file's identity: the same inode, unchanged (device, inode, size,
/// modification time).
pub(crate) type FileId = (u64, u64, u64, i64, i64);

/// `file`'s identity now; `None` if its metadata cannot be read.
pub(crate) fn file_id(file: &std::fs::File) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The separate debug file of the binary `file` (mapped as
/// `mapped_path`), open, when the binary lacks names of its own and
/// `lookup` finds one; what went wrong on the way goes to `notes`.
fn debug_file(
    file: &std::fs::File,
    mapped_path: &str,
    lookup: &Lookup,
    notes: &mut Vec<String>,
) -> Option<(PathBuf, std::fs::File)> {
    let map = crate::pt::memory::map_binary(file).ok()?;
    let found = find_debug_file(&map, mapped_path, lookup, notes)?;
    drop(map);
    open_debug_file(found, mapped_path, notes)
}

/// Where the separate debug file of the binary whose bytes are `binary`
/// (mapped as `mapped_path`) is, when it lacks names of its own and
/// `lookup` finds one.
fn find_debug_file(
    binary: &[u8],
    mapped_path: &str,
    lookup: &Lookup,
    notes: &mut Vec<String>,
) -> Option<ptscope_formats::DebugFile> {
    if !ModuleSymbols::lacks_own_names(binary) {
        return None;
    }
    let build_id = ptscope_formats::buildid::elf_build_id(binary);
    lookup.debug_file(binary, mapped_path, build_id.as_deref(), notes)
}

/// The debug file `found`, open; `None`, said in `notes`, if it cannot be.
fn open_debug_file(
    found: ptscope_formats::DebugFile,
    mapped_path: &str,
    notes: &mut Vec<String>,
) -> Option<(PathBuf, std::fs::File)> {
    match std::fs::File::open(&found.path) {
        Ok(f) => Some((found.path, f)),
        Err(e) => {
            notes.push(format!(
                "{mapped_path}: its debug file {} (from {}) cannot be read: {e}",
                found.path.display(),
                found.origin
            ));
            None
        }
    }
}

/// A binary found on disk, open, with the separate debug file its names
/// come from when it lacks its own.
struct Located {
    path: PathBuf,
    file: std::fs::File,
    debug: Option<(PathBuf, std::fs::File)>,
}

/// Symbols any live model in the process already loaded from the same
/// unchanged file (and debug file): a re-decode (another engine, other
/// threads) or a second model of the same snapshot shares them instead of
/// parsing libc again. Weak, so they go with the last model that uses
/// them.
fn shared_symbols(
    found: &Located,
    mapped_path: &str,
    notes: &mut Vec<String>,
) -> Option<Arc<ModuleSymbols>> {
    use parking_lot::Mutex;
    use std::sync::Weak;
    type Key = (FileId, Option<FileId>);
    static SHARED: Mutex<Option<HashMap<Key, Weak<ModuleSymbols>>>> = Mutex::new(None);
    // Identified and read through the files opened when they were found:
    // a file replaced in between cannot be cached under the other's
    // identity.
    let Located { path, file, debug } = found;
    let id = (file_id(file)?, debug.as_ref().and_then(|(_, f)| file_id(f)));
    let mut shared = SHARED.lock();
    let map = shared.get_or_insert_with(HashMap::new);
    let m = match map.get(&id).and_then(Weak::upgrade) {
        Some(m) => m,
        None => {
            map.retain(|_, w| w.strong_count() > 0);
            drop(shared);
            let debug_ref = debug.as_ref().map(|(p, f)| (p.as_path(), f));
            let m = Arc::new(ModuleSymbols::load_split(path, file, debug_ref).ok()?);
            SHARED
                .lock()
                .get_or_insert_with(HashMap::new)
                .insert(id, Arc::downgrade(&m));
            m
        }
    };
    // Told to every cache that asks, whoever read the files first.
    if let (Some((dpath, _)), None) = (&debug, m.debug_file()) {
        let why = m
            .debug_info_problem()
            .unwrap_or("it holds no symbols or DWARF");
        notes.push(format!(
            "{mapped_path}: its debug file {} names nothing: {why}",
            dpath.display()
        ));
    }
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

    /// The stretch around `addr` (at `svma` in module `md`) that resolves
    /// as one, as addresses in this mapping, holding `addr`: the function's
    /// piece or the gap between functions there ([`ModuleSymbols::extent`]),
    /// as far as the segment that maps `addr` maps its neighbours too
    /// ([`ModuleSymbols::svma_run`]): past it no svma is known, and an
    /// address there resolves otherwise.
    fn extent(&self, addr: u64, md: &ModuleSymbols, svma: u64) -> (u64, u64) {
        let (lo, hi) = md.extent(svma);
        let (lo, hi) = match md.svma_run(self.file_offset(addr)) {
            Some((a, b)) => (lo.max(a), hi.min(b)),
            None => (svma, svma.saturating_add(1)),
        };
        let lo = addr.saturating_sub(svma.saturating_sub(lo)).max(self.start);
        let hi = addr.saturating_add(hi.saturating_sub(svma)).min(self.end);
        (lo.min(addr), hi.max(addr + 1))
    }
}

/// A process's mappings with their symbols: the coarse pass's resolver.
#[derive(Clone)]
pub struct ProcessSymbols {
    maps: Vec<Mapping>,
    /// Function ids by (mapping, the module's function index), so lookups
    /// intern once. Not by entry: functions that share one would take the
    /// id of whichever was met first, and what an address resolves to would
    /// depend on the walk's history (a chunk walked alone would differ).
    ids: HashMap<(usize, u32), FuncId>,
    /// Call targets in code no symbol covers: each starts a function that
    /// runs to the next one, named `[unknown] module+0xoffset`.
    learned: std::collections::BTreeMap<u64, FuncId>,
    /// The kernel's functions, when known, and their ids by entry (kernel
    /// symbols that share an entry are one function there).
    kernel: Option<Arc<KernelSymbols>>,
    kernel_ids: HashMap<u64, FuncId>,
}

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
                module: symbols.get_mapped(&s.file, &s.mapped_path),
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
            kernel_ids: HashMap::new(),
        }
    }

    /// The kernel function at `addr`, from the kernel's symbols, its range
    /// kept inside `lo..hi` (what holds no other mapping); else `lo..hi`
    /// narrowed to the kernel code around `addr` that no symbol names, the
    /// range to cache for the caller's unnamed function there (a range
    /// that took in a named function would name it alike in whatever walk
    /// looked at this address first).
    fn kernel_symbol(
        &mut self,
        addr: u64,
        (lo, hi): (u64, u64),
        funcs: &mut FuncTable,
    ) -> Result<Resolved, (u64, u64)> {
        let Some(kernel) = self.kernel.as_ref() else {
            return Err((lo, hi));
        };
        let Some(s) = kernel.lookup(addr) else {
            let (glo, ghi) = kernel.gap(addr).unwrap_or((addr, addr + 1));
            return Err((lo.max(glo).min(addr), hi.min(ghi).max(addr + 1)));
        };
        let func = *self
            .kernel_ids
            .entry(s.start)
            .or_insert_with(|| funcs.intern(s.name, s.module, s.start, SpanKind::NoBinary));
        Ok(Resolved {
            func,
            lo: s.start.max(lo).min(addr),
            hi: s.end.min(hi).max(addr + 1),
            entry: s.start,
            provisional: false,
        })
    }

    /// The functions learned from calls into code no symbol covers, by
    /// entry: what a model cache keeps so that a re-opened model's fine
    /// pass names that code as the decode did.
    pub(crate) fn learned(&self) -> impl Iterator<Item = (u64, FuncId)> + '_ {
        self.learned.iter().map(|(&a, &f)| (a, f))
    }

    /// Takes back functions [`learned`](Self::learned) before.
    pub(crate) fn relearn(&mut self, learned: impl IntoIterator<Item = (u64, FuncId)>) {
        self.learned.extend(learned);
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
                // Between the mappings around it, in the kernel's half.
                let i = self.maps.partition_point(|m| m.start <= addr);
                let below = if i > 0 { self.maps[i - 1].end } else { 0 };
                let above = self.maps.get(i).map_or(u64::MAX, |m| m.start);
                let (lo, hi) =
                    match self.kernel_symbol(addr, (below.max(KERNEL_START), above), funcs) {
                        Ok(r) => return r,
                        Err(gap) => gap,
                    };
                return Resolved {
                    func: funcs.kernel(),
                    lo,
                    hi,
                    entry: 0,
                    provisional: false,
                };
            }
            // Unmapped: one unknown function up to the next mapping, or
            // to the kernel's half, whose addresses are the kernel's.
            let i = self.maps.partition_point(|m| m.start <= addr);
            let lo = if i > 0 { self.maps[i - 1].end } else { 0 };
            let hi = self.maps.get(i).map_or(u64::MAX, |m| m.start);
            let hi = hi.min(KERNEL_START);
            return Resolved {
                func: UNKNOWN,
                lo,
                hi,
                entry: 0,
                provisional: false,
            };
        };
        let m = &self.maps[mi];
        let mut bounds = (m.start, m.end);
        if m.missing && is_kernel(m) {
            match self.kernel_symbol(addr, bounds, funcs) {
                Ok(r) => return r,
                Err(gap) => bounds = gap,
            }
        }
        let m = &self.maps[mi];
        if m.missing {
            return Resolved {
                func: missing_func(m, funcs),
                lo: bounds.0,
                hi: bounds.1,
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
            (Some(md), Some(svma)) => m.extent(addr, md, svma),
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
        let id = *self.ids.entry((mi, u32::MAX)).or_insert_with(|| {
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
        if let Some(r) =
            kernel_code.and_then(|ip| self.kernel_symbol(ip, (0, u64::MAX), funcs).ok())
        {
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
    /// Every mapping's path with the module read for it, in address order.
    pub(crate) fn modules(&self) -> impl Iterator<Item = (&str, &Arc<ModuleSymbols>)> + '_ {
        self.maps
            .iter()
            .filter_map(|m| Some((m.path.as_str(), m.module.as_ref()?)))
    }

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
                let (lo, hi) = m.extent(addr, md, svma);
                let id = *self.ids.entry((mi, f.index)).or_insert_with(|| {
                    // Unwind-table functions are named after the module
                    // as mapped, not the cached file's name.
                    if f.source == crate::names::symbols::SymbolSource::Unwind {
                        let off = m.pgoff.saturating_add(entry.saturating_sub(m.start));
                        let name = format!("[unknown] {}+{off:#x}", basename(&m.path));
                        funcs.intern(&name, &m.path, entry, SpanKind::Call)
                    } else {
                        let id = funcs.intern(f.name, &m.path, entry, SpanKind::Call);
                        // Once per function, so the tooltip can say where
                        // it is without a lookup per frame.
                        if let Some(loc) = md.entry_location(f.entry) {
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

    /// Where the kernel's text is mapped in [`missing_library_and_kernel`].
    const KERNEL_TEXT: u64 = 0xffff_ffff_8100_0000;

    /// Mappings whose binaries are all missing: a library, the kernel's
    /// text and a module.
    fn missing_library_and_kernel() -> [(u64, u64, String); 3] {
        [
            (0x1000, 0x1000, "/lib/libfoo.so".to_string()),
            (
                KERNEL_TEXT,
                0x100_0000,
                "[kernel.kallsyms]_text".to_string(),
            ),
            (
                0xffff_ffff_c000_0000,
                0x1000,
                "/lib/modules/x.ko".to_string(),
            ),
        ]
    }

    /// Code that could not be read is named by what is missing: the
    /// kernel where the sideband maps it or the address is the kernel's, a
    /// binary the sideband maps, and only otherwise the decoder's error
    /// (the kernel's addresses said "no memory mapped").
    #[test]
    fn unreadable_code_is_named_by_what_is_missing() {
        let mut funcs = FuncTable::default();
        let mut symbols = SymbolCache::default();
        let kernel = KERNEL_TEXT;
        let mut r = ProcessSymbols::new(&[], &missing_library_and_kernel(), &mut symbols);
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

    /// A stripped binary's debug file is found where the search says: by
    /// its `.gnu_debuglink` beside it, and by build id in a debug
    /// directory; only then are its static functions named. A debug file
    /// that names nothing is a note, not an error.
    #[test]
    fn the_cache_reads_names_from_the_debug_file_the_search_finds() {
        use crate::names::symbols::testutil::{compile, nm, split_debug, tempdir};
        let dir = tempdir();
        let bin = compile(dir.path(), "app", &[]);
        let (sb, _) = nm(&bin)["sum_bumps"];
        let debug = split_debug(&bin, &[]);
        let mapped = bin.display().to_string();
        use ptscope_debuginfo::Search;
        let name = |search: Search| {
            let lookup = Lookup::new(None, Some(Arc::new(search)));
            let mut cache = SymbolCache::new(lookup);
            let m = cache.get_mapped(&bin, &mapped).unwrap();
            let name = m.function(sb).map(|f| f.name.to_string());
            (
                name,
                m.debug_file().map(Path::to_path_buf),
                cache.notes().to_vec(),
            )
        };
        // Not where the link says: the unwind table's boundaries only.
        let aside = dir.path().join("aside");
        std::fs::rename(&debug, &aside).unwrap();
        let (n, file, notes) = name(Search::default());
        assert!(n.unwrap().starts_with("[unknown] app+0x"));
        assert_eq!((file, notes.len()), (None, 0));
        std::fs::rename(&aside, &debug).unwrap();
        // Beside the binary, by its debuglink.
        assert_eq!(
            name(Search::default()),
            (Some("sum_bumps".into()), Some(debug.clone()), vec![])
        );
        // By build id in a debug directory, the debuglink's file gone.
        let id = ptscope_formats::buildid::elf_build_id(&std::fs::read(&bin).unwrap()).unwrap();
        let root = dir.path().join("usr/lib/debug");
        let by_id = root.join(ptscope_formats::buildid::debug_dir_path(&id));
        std::fs::create_dir_all(by_id.parent().unwrap()).unwrap();
        std::fs::rename(&debug, &by_id).unwrap();
        let search = Search {
            debug_dirs: vec![root],
            ..Search::default()
        };
        assert_eq!(
            name(search.clone()),
            (Some("sum_bumps".into()), Some(by_id.clone()), vec![])
        );
        // A file there that names nothing.
        std::fs::write(&by_id, b"junk").unwrap();
        let (n, file, notes) = name(search);
        assert!(n.unwrap().starts_with("[unknown]"));
        assert_eq!(file, None);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("names nothing"), "{notes:?}");
    }

    /// Binaries read ahead, on this thread alone or on two, are what
    /// reading them one by one gives: the same symbols (shared, not read
    /// again), the same notes in the same order, and nothing for a file
    /// that is not there.
    #[test]
    fn binaries_read_ahead_are_those_read_one_by_one() {
        use crate::names::symbols::testutil::{compile, split_debug, tempdir};
        use ptscope_debuginfo::Search;
        let dir = tempdir();
        let bin = compile(dir.path(), "app", &[]);
        let debug = split_debug(&bin, &[]);
        // Its debug file, found by build id, names nothing: a note.
        let id = ptscope_formats::buildid::elf_build_id(&std::fs::read(&bin).unwrap()).unwrap();
        let root = dir.path().join("usr/lib/debug");
        let by_id = root.join(ptscope_formats::buildid::debug_dir_path(&id));
        std::fs::create_dir_all(by_id.parent().unwrap()).unwrap();
        std::fs::rename(&debug, &by_id).unwrap();
        std::fs::write(&by_id, b"junk").unwrap();
        let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo");
        let files: Vec<(PathBuf, String)> = [bin, demo, dir.path().join("gone")]
            .into_iter()
            .map(|f| {
                let mapped = f.display().to_string();
                (f, mapped)
            })
            .collect();
        let read = |ahead: Option<bool>| {
            let search = Search {
                debug_dirs: vec![root.clone()],
                ..Search::default()
            };
            let mut cache = SymbolCache::new(Lookup::new(None, Some(Arc::new(search))));
            if let Some(beside) = ahead {
                cache.preload(files.iter().map(|(f, m)| (f.as_path(), m.as_str())), beside);
            }
            let modules: Vec<_> = files.iter().map(|(f, m)| cache.get_mapped(f, m)).collect();
            (modules, cache.notes().to_vec())
        };
        let (one_by_one, notes) = read(None);
        assert!(one_by_one[0].is_some() && one_by_one[1].is_some() && one_by_one[2].is_none());
        assert!(
            notes.iter().any(|n| n.contains("names nothing")),
            "{notes:?}"
        );
        for beside in [false, true] {
            let (ahead, told) = read(Some(beside));
            assert_eq!(told, notes, "beside: {beside}");
            for (a, b) in ahead.iter().zip(&one_by_one) {
                match (a, b) {
                    (Some(a), Some(b)) => assert!(Arc::ptr_eq(a, b), "beside: {beside}"),
                    (a, b) => assert_eq!(a.is_some(), b.is_some(), "beside: {beside}"),
                }
            }
        }
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

    fn demo_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo")
    }

    impl DemoMapping {
        fn new() -> DemoMapping {
            DemoMapping::of(&demo_path())
        }

        /// `demo` (the demo's binary, or a damaged copy) mapped whole.
        fn of(demo: &Path) -> DemoMapping {
            let demo = demo.to_path_buf();
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

    /// A resolved range is what the walk caches: every address in it must
    /// resolve alike, or what a walk names depends on what it looked up
    /// first (chunks on two threads once named kernel code `[unknown]`
    /// where chunks in order named it `[kernel]`: an unmapped user range
    /// ran on into the kernel's half). Here over user and kernel
    /// mappings, missing binaries, the kernel's symbols and the gaps
    /// between all of them.
    #[test]
    fn every_address_of_a_resolved_range_resolves_alike() {
        let kernel = KERNEL_TEXT;
        let kallsyms = format!(
            "{:016x} T first\n{:016x} T second\n{:016x} t third [x]\n",
            kernel + 0x100,
            kernel + 0x300,
            0xffff_ffff_c000_0400u64,
        );
        let syms = KernelSymbols::from_kallsyms(Path::new("k"), kallsyms.as_bytes(), None).unwrap();
        let mut cache = SymbolCache {
            kernel: Some(Arc::new(syms)),
            ..SymbolCache::default()
        };
        let mut r = ProcessSymbols::new(&[], &missing_library_and_kernel(), &mut cache);
        let mut funcs = FuncTable::default();
        let probes: Vec<u64> = [
            0,
            0x800,
            0x1000,
            0x1800,
            0x2000,
            0x7fff_0000_0000,
            KERNEL_START - 1,
            KERNEL_START,
            kernel - 1,
            kernel,
            kernel + 0x100,
            kernel + 0x2ff,
            kernel + 0x300,
            kernel + 0x900,
            kernel + 0x1000,
            kernel + 0x100_0000,
            0xffff_ffff_c000_0000,
            0xffff_ffff_c000_0400,
            0xffff_ffff_c000_0fff,
            0xffff_ffff_c000_1000,
            u64::MAX - 1,
        ]
        .into_iter()
        .flat_map(|a: u64| [a.saturating_sub(1), a, a.saturating_add(1)])
        // The end of a range is past it: the last address is in none.
        .filter(|&a| a < u64::MAX)
        .collect();
        for &a in &probes {
            let ra = r.resolve(a, &mut funcs);
            assert!(ra.lo <= a && a < ra.hi, "{a:#x} outside its range {ra:?}");
            for &b in probes.iter().filter(|&&b| ra.lo <= b && b < ra.hi) {
                let rb = r.resolve(b, &mut funcs);
                assert_eq!(
                    (rb.func, rb.entry, rb.provisional),
                    (ra.func, ra.entry, ra.provisional),
                    "{b:#x} is in {a:#x}'s range {ra:?} but resolves to {rb:?}"
                );
            }
        }
    }

    /// Little-endian fields of an ELF64 file, to damage the demo's binary
    /// as fuzzing did.
    pub(super) fn field(b: &[u8], at: usize, len: usize) -> u64 {
        let mut v = [0u8; 8];
        v[..len].copy_from_slice(&b[at..at + len]);
        u64::from_le_bytes(v)
    }

    /// The demo's binary with `damage` done to its bytes, written to `dir`.
    pub(super) fn damaged_demo(dir: &Path, damage: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
        let mut bytes = std::fs::read(demo_path()).unwrap();
        damage(&mut bytes);
        let path = dir.join("demo");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// File offsets of the `.symtab` entry named `name`: its `st_size`,
    /// and its name in `.strtab`.
    pub(super) fn symbol_fields(b: &[u8], name: &str) -> (usize, usize) {
        let (shoff, shentsize, shnum) = (field(b, 0x28, 8), field(b, 0x3a, 2), field(b, 0x3c, 2));
        let header = |i: u64| (shoff + i * shentsize) as usize;
        let symtab = (0..shnum)
            .map(header)
            .find(|&h| field(b, h + 4, 4) == 2)
            .expect("the demo has a .symtab");
        let strtab = field(b, header(field(b, symtab + 0x28, 4)) + 0x18, 8) as usize;
        let (off, size, entsize) = (
            field(b, symtab + 0x18, 8),
            field(b, symtab + 0x20, 8),
            field(b, symtab + 0x38, 8),
        );
        (off..off + size)
            .step_by(entsize as usize)
            .map(|sym| sym as usize)
            .find_map(|sym| {
                let at = strtab + field(b, sym, 4) as usize;
                let end = at + b[at..].iter().position(|&c| c == 0)?;
                (&b[at..end] == name.as_bytes()).then_some((sym + 16, at))
            })
            .unwrap_or_else(|| panic!("no symbol {name}"))
    }

    /// File offset of the `p_filesz` of the demo's executable PT_LOAD.
    pub(super) fn text_filesz_field(b: &[u8]) -> usize {
        let (phoff, phentsize, phnum) = (field(b, 0x20, 8), field(b, 0x36, 2), field(b, 0x38, 2));
        (0..phnum)
            .map(|i| (phoff + i * phentsize) as usize)
            .find(|&h| field(b, h, 4) == 1 && field(b, h + 4, 4) & 1 != 0)
            .expect("the demo has an executable PT_LOAD")
            + 0x20
    }

    /// Two functions can share an entry: a symbol sized to cover only the
    /// start of its function, whose rest the function's DWARF subprogram
    /// names (fuzzing's damaged `.symtab`). Each keeps its own name
    /// whatever was resolved first: keyed by entry, the first met named
    /// both, so a chunk walked alone, which met the other first, named a
    /// frame otherwise than one walk.
    #[test]
    fn functions_that_share_an_entry_keep_their_names_whatever_came_first() {
        let dir = tempfile::tempdir().unwrap();
        let demo = damaged_demo(dir.path(), |b| {
            let (size, name) = symbol_fields(b, "hash_key");
            assert!(field(b, size, 8) > 9);
            b[size..size + 8].copy_from_slice(&9u64.to_le_bytes());
            // hash_kez: what the symbol says, no longer what DWARF says.
            b[name + 7] = b'z';
        });
        let m = DemoMapping::of(&demo);
        let entry = m.md.functions().find(|f| f.name == "hash_kez").unwrap();
        let rest = m.md.function(entry.end).expect("DWARF names the rest");
        assert_eq!((rest.name, rest.entry), ("hash_key", entry.entry));
        let (at_entry, in_rest) = (m.addr(entry.entry), m.addr(entry.end));
        let name = |r: &mut ProcessSymbols, addr, table: &mut FuncTable| {
            let f = r.resolve(addr, table).func;
            table.name(f).to_string()
        };
        for order in [[at_entry, in_rest], [in_rest, at_entry]] {
            let mut r = m.resolver.clone();
            let mut table = FuncTable::default();
            let names = order.map(|a| (a, name(&mut r, a, &mut table)));
            for (a, got) in names {
                let want = if a == at_entry {
                    "hash_kez"
                } else {
                    "hash_key"
                };
                assert_eq!(got, want, "{a:#x}, resolved in the order {order:x?}");
            }
        }
    }

    /// A damaged program header can end the text segment inside a function
    /// or inside the padding between two (fuzzing's inputs): the addresses
    /// past its end have no svma, and resolve as unnamed code. The range an
    /// address resolves to must stop there, or a walk that cached it named
    /// them after the function (or after the one learned from a call into
    /// the padding), while a chunk that met them first did not. Every
    /// address of every range handed out resolves to that range.
    #[test]
    fn a_resolved_range_stops_where_its_segment_ends() {
        let m = DemoMapping::new();
        let main = m.md.functions().find(|f| f.name == "main").unwrap();
        let (gap, next) = m.gap;
        assert!(next - gap >= 2, "{gap:#x}..{next:#x}");
        for end in [main.entry + 4, gap + 1] {
            let dir = tempfile::tempdir().unwrap();
            let demo = damaged_demo(dir.path(), |b| {
                let at = text_filesz_field(b);
                let filesz = field(b, at, 8);
                let shorter = end - field(b, at - 0x10, 8);
                assert!(shorter < filesz, "{shorter:#x} of {filesz:#x}");
                b[at..at + 8].copy_from_slice(&shorter.to_le_bytes());
            });
            let mut d = DemoMapping::of(&demo);
            assert!(d.md.svma_to_file_offset(end).is_none());
            let mut table = FuncTable::default();
            assert!(d.resolver.learn_entry(d.addr(gap), &mut table));
            let text = m.addr(main.entry) & !0xfff;
            for a in text..text + 0x1000 {
                let r = d.resolver.resolve(a, &mut table);
                assert!(r.lo <= a && a < r.hi, "{a:#x}: {r:x?}");
                for b in r.lo.max(text)..r.hi.min(text + 0x1000) {
                    let rb = d.resolver.resolve(b, &mut table);
                    assert_eq!(
                        (rb.func, rb.lo, rb.hi),
                        (r.func, r.lo, r.hi),
                        "{b:#x} in the range of {a:#x} (segment ends at {end:#x})"
                    );
                }
            }
        }
    }
}

/// One walk and chunks over hand-encoded trace of the demo's code, in a
/// damaged copy of its binary: what the resolver gives must not depend on
/// what it was asked before, or the two differ.
#[cfg(test)]
mod walk_and_chunks {
    use super::tests::{damaged_demo, field, symbol_fields, text_filesz_field};
    use super::*;
    use crate::passes::coarse::chunks::{decode_queue_chunked, Parallel};
    use crate::passes::coarse::{QueueThread, QueueWalk, ThreadBuilders};
    use crate::pt::block::DecoderConfig;
    use crate::pt::memory::{FileCache, Memory};
    use crate::pt::packet::psb_offsets;
    use ptscope_formats::pt::write::{self, IpCompression, IpPacket};
    use ptscope_model::{Model, ThreadModel, TimeUnit};

    /// Where the binary is mapped.
    const BASE: u64 = 0x5555_0000_0000;

    /// PSB+ with tracing on at `svma`: FUP, MODE.Exec 64-bit, PSBEND.
    fn psb_at(pt: &mut Vec<u8>, svma: u64) {
        pt.extend_from_slice(&write::PSB);
        write::ip_packet(pt, IpPacket::Fup, BASE + svma, IpCompression::Full);
        write::mode_exec_64(pt);
        pt.extend_from_slice(&write::PSBEND);
    }

    /// `pt` over `demo` mapped whole at [`BASE`], as one walk and as a
    /// chunk per PSB: both canonical models.
    fn one_walk_and_chunks(demo: &Path, pt: &[u8]) -> (Vec<String>, Vec<String>) {
        let secs = [Section {
            file: demo.to_path_buf(),
            offset: 0,
            size: std::fs::metadata(demo).unwrap().len(),
            vaddr: BASE,
            mapped_path: "/demo".into(),
        }];
        let psbs: Vec<u64> = psb_offsets(pt).into_iter().map(|o| o as u64).collect();
        assert!(psbs.len() > 1, "{psbs:?}");
        let decode = |parallel: Parallel| {
            let mut procs = [ProcessSymbols::new(&secs, &[], &mut SymbolCache::default())];
            let mem = Memory::new(&secs, &mut FileCache::default()).unwrap();
            let mut funcs = FuncTable::default();
            let threads = [QueueThread {
                pid: 1,
                tid: 1,
                comm: "t".into(),
                proc: 0,
            }];
            let mut sink = ThreadBuilders::new(&threads);
            let walk = QueueWalk {
                queue: 0,
                images: &[&mem],
                thread_procs: &[0],
                schedule: &[],
                to_ns: &crate::pt::timing::ToNs::IDENTITY,
                unit: TimeUnit::Ns,
                psbs: &psbs,
                stop_at_psb: false,
                progress: None,
            };
            let cfg = DecoderConfig::default();
            let figures = decode_queue_chunked(
                pt,
                &cfg,
                walk,
                &mut procs,
                &mut funcs,
                &mut sink,
                &parallel,
                |_, _| {},
            )
            .unwrap();
            sink.add_figures(figures);
            let d = sink.finish().pop().unwrap();
            Model {
                funcs,
                threads: vec![ThreadModel::new(d, Some(0))],
                missing_binaries: Vec::new(),
                warnings: Vec::new(),
                unit: TimeUnit::Ns,
                ..Model::default()
            }
            .canonical()
        };
        let chunks = Parallel {
            workers: 2,
            chunk_bytes: 1,
            first_chunk_bytes: 1,
            in_order: true,
        };
        (decode(Parallel::sequential()), decode(chunks))
    }

    /// The text segment of a damaged demo ends inside `hash_key`'s loop (at
    /// 0x1170), and a PSB's IP lies past that end. One walk met `hash_key`
    /// before the PSB and cached its range, which ran past the end, so the
    /// loop's `jne` there stayed inside it; the chunk that starts at the
    /// PSB met that code first, as unnamed, and made the `jne` a jump out
    /// of it.
    #[test]
    fn code_past_a_segment_end_resolves_alike_in_one_walk_and_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let demo = damaged_demo(dir.path(), |b| {
            let at = text_filesz_field(b);
            let shorter = 0x1170 - field(b, at - 0x10, 8);
            b[at..at + 8].copy_from_slice(&shorter.to_le_bytes());
        });
        // hash_key: 0x115e je (not taken), 0x1179 jne 0x1165 (taken); the
        // PSB at 0x1174, where the flow gets by itself; the loop once more
        // and out.
        let mut pt = Vec::new();
        psb_at(&mut pt, 0x1159);
        write::tnt(&mut pt, 0b01, 2);
        psb_at(&mut pt, 0x1174);
        write::tnt(&mut pt, 0b10, 2);
        let (one, chunks) = one_walk_and_chunks(&demo, &pt);
        assert!(one.iter().any(|l| l.contains("hash_key")), "{one:#?}");
        assert_eq!(one, chunks);
    }

    /// `hash_key`'s symbol, renamed `hash_kez`, covers only its first 9
    /// bytes; its DWARF subprogram names the rest, with the same entry. One
    /// walk met the symbol first and, keyed by entry, named the rest after
    /// it; the chunk that starts at a PSB in the rest met DWARF's name
    /// first, and named the return from there after that.
    #[test]
    fn functions_sharing_an_entry_are_named_alike_in_one_walk_and_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let demo = damaged_demo(dir.path(), |b| {
            let (size, name) = symbol_fields(b, "hash_key");
            b[size..size + 8].copy_from_slice(&9u64.to_le_bytes());
            b[name + 7] = b'z';
        });
        // As above, then out of the loop, back to lookup (0x1239) and on
        // to its `je` at 0x1243 (not taken).
        let mut pt = Vec::new();
        psb_at(&mut pt, 0x1159);
        write::tnt(&mut pt, 0b01, 2);
        psb_at(&mut pt, 0x1174);
        write::tnt(&mut pt, 0b10, 2);
        write::ip_packet(&mut pt, IpPacket::Tip, BASE + 0x1239, IpCompression::Full);
        write::tnt(&mut pt, 0, 1);
        let (one, chunks) = one_walk_and_chunks(&demo, &pt);
        assert!(one.iter().any(|l| l.contains("hash_kez")), "{one:#?}");
        assert!(one.iter().any(|l| l.contains("hash_key@")), "{one:#?}");
        assert_eq!(one, chunks);
    }

    /// A lookup that finds the file it names as every debug file beyond
    /// the snapshot, and counts the searches.
    #[derive(Debug)]
    struct Always(PathBuf, std::sync::atomic::AtomicUsize);

    impl ptscope_formats::FileLookup for Always {
        fn debug_file(
            &self,
            _: &[u8],
            _: &str,
            _: Option<&[u8]>,
            _: &mut Vec<String>,
        ) -> Option<ptscope_formats::DebugFile> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Some(ptscope_formats::DebugFile {
                path: self.0.clone(),
                origin: "here".into(),
            })
        }
        fn binary(&self, _: Option<&[u8]>, _: &str, _: &mut Vec<String>) -> Option<PathBuf> {
            None
        }
        fn key(&self) -> String {
            format!("always {}", self.0.display())
        }
    }

    /// A binary the snapshot carries is known by its bytes in the archive,
    /// before it is unpacked, as it is once unpacked: its identity and its
    /// debug file's, carried, found beyond the snapshot, or none.
    #[test]
    fn a_carried_binary_is_known_in_the_archive_as_once_unpacked() {
        use ptscope_formats::snapshot::{rewrite_members, Metadata, Snapshot};
        let dir = tempfile::tempdir().unwrap();
        // The demo carries a stripped libc (names in `.dynsym` alone), a
        // stripped loader and vdso, and no debug file; a copy carries one
        // for libc (any bytes will do).
        let demo = crate::testing::demo_path();
        let libc_id = [
            0x93, 0xac, 0x61, 0xec, 0x5a, 0x8e, 0xb1, 0x39, 0x6f, 0x9f, 0xbd, 0x35, 0x0e, 0x31,
            0x69, 0xa5, 0x58, 0x52, 0x8a, 0x40,
        ];
        let with_debug = dir.path().join("with-debug.ptscope");
        let elsewhere = demo.with_file_name("demo.c");
        rewrite_members(
            &Snapshot::open(&demo).unwrap(),
            &with_debug,
            &[(
                ptscope_formats::buildid::debug_cache_path(&libc_id),
                demo.with_file_name("demo"),
            )],
            &Metadata::default(),
        )
        .unwrap();
        let always = Arc::new(Always(elsewhere.clone(), Default::default()));
        let searches = || always.1.load(std::sync::atomic::Ordering::Relaxed);
        let beyond: Option<Arc<dyn ptscope_formats::FileLookup>> = Some(always.clone());
        for (path, caller, carried, found) in [
            (&demo, None, 0, 0),
            (&with_debug, None, 1, 0),
            (&demo, beyond.clone(), 0, 3),
            (&with_debug, beyond, 1, 2),
        ] {
            let (snap, unpack) = Snapshot::open_unpacking_later(path).unwrap();
            let binaries: Vec<PathBuf> = snap
                .carried_files()
                .filter(|f| !f.ends_with("debug"))
                .map(Path::to_path_buf)
                .collect();
            assert_eq!(binaries.len(), 4, "{binaries:?}");
            let lookup = Lookup::new(Some(&snap), caller);
            let mut before = SymbolCache::new(lookup.clone());
            for f in &binaries {
                assert!(!f.exists(), "{} is unpacked already", f.display());
                let bytes = snap.carried_bytes(f).unwrap();
                before.identify_carried(f, "/lib/mapped.so", &bytes);
            }
            unpack.run().unwrap();
            let mut after = SymbolCache::new(lookup);
            for f in &binaries {
                after.locate_mapped(f, "/lib/mapped.so");
            }
            let sources = after.sources();
            assert_eq!(before.sources(), sources);
            // Once per file, as `locate_mapped`: another mapping of one
            // (libc's text and data, or another path) searches no more.
            let searched = searches();
            for f in &binaries {
                let bytes = snap.carried_bytes(f).unwrap();
                before.identify_carried(f, "/usr/lib/other.so", &bytes);
            }
            assert_eq!(searches(), searched);
            assert_eq!(before.sources(), sources);
            // Located once unpacked, they are not searched for again.
            for f in &binaries {
                before.locate_mapped(f, "/lib/mapped.so");
            }
            assert_eq!(searches(), searched);
            assert_eq!(before.sources(), sources);
            let with = |what: &str| sources.iter().filter(|s| s.contains(what)).count();
            assert_eq!(
                with(", debug file in the snapshot: "),
                carried,
                "{sources:#?}"
            );
            let elsewhere = format!(", debug file {} (", elsewhere.display());
            assert_eq!(with(&elsewhere), found, "{sources:#?}");
        }
    }
}
