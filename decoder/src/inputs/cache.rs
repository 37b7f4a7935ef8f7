//! The decoded-model cache: a model decoded once is kept on disk, so that
//! opening the same file again with the same options costs a read, not a
//! decode.
//!
//! An entry is keyed by the file's identity (its canonical path, size,
//! modification time, inode and device), the decoder's version and the
//! options that change what a decode gives. It holds the model's spans,
//! functions, checkpoints and figures, and the recipe its fine pass was
//! built from ([`FineRecipe`]); the trace and the code stay in the
//! snapshot, which a re-open reads again to zoom down to lines.
//!
//! Entries live under the user's cache directory
//! (`$XDG_CACHE_HOME/ptscope/models`, else `~/.cache/ptscope/models`), at
//! most [`DEFAULT_MAX_BYTES`] in all: the least recently used go first.
//! One is written after the open that decoded it, on a thread of its own
//! that the cache owns: [`ModelCache::finish_writes`] waits for it, and so
//! does dropping the last handle of the cache. It goes to a temporary file
//! renamed into place, so a reader never sees half of one.
//!
//! An entry is a header (magic, format, the CRC-32 and length of the
//! directory), the directory (postcard: functions, threads with where
//! their lanes are, checkpoints, figures, the recipe), and then every
//! lane's spans as they are in memory (little-endian, 16 bytes each, at a
//! multiple of 16 in the file). A re-open maps the entry and reads the
//! lanes where they are: no span is decoded or copied, so reading a model
//! costs about what checking it costs. A read is never trusted: the
//! header, the directory's CRC and its decoding (with bounds checks), and
//! per lane its place in the file, its CRC, its order, its function ids
//! and its durations are checked (on every core) before the model is
//! used ([`ThreadSpans::from_parts`]); an entry that fails any of them is
//! an error, which the caller answers by decoding afresh. A window that
//! re-opens a file is first shown the shallowest lanes of each thread,
//! checked the same way, as a partial model: some 20 ms after the open on
//! the 256 MiB bench input, whose whole check takes half a second. On a
//! big-endian machine there is no user cache.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::decoded::Decoded;
use crate::passes::coarse::{Checkpoint, WalkFigures};
use crate::passes::event::{Func, FuncTable};
use crate::passes::fine::FineRecipe;
use crate::passes::stack::{OpenFrame, StackStats};
use crate::progress::DecodeProgress;
use crate::pt::memory::{Aligned, Backing, SharedSlice};
use ptscope_model::CpuTrack;
use ptscope_model::Marks;
use ptscope_model::{LaneRef, Span, SpanParts, SpanPartsRef, ThreadSpans};
use ptscope_model::{Model, ThreadModel, TimeUnit};

/// The first bytes of every entry.
const MAGIC: [u8; 8] = *b"PTSMODEL";

/// The layout of an entry; a change makes older entries misses.
const FORMAT: u32 = 4;

/// Magic, format, CRC-32 of the directory, directory length.
const HEADER: usize = 8 + 4 + 4 + 8;

/// The lanes' spans start at a multiple of this in the file (whose map
/// starts at a page), so that they can be read in place.
const ALIGN: usize = 16;

/// How much the cache holds at most by default: 4 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;

/// What went wrong reading or writing an entry.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The cause is in the message, and not a `source()` too: it is said
    /// once.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: not a model cache entry this ptscope can trust: {problem}")]
    Corrupt { path: PathBuf, problem: String },
}

/// Where decoded models are kept, and how much room they may take.
/// Clones share its counters and its writers: the entries being written
/// are waited for when the last clone goes, so a process that keeps its
/// cache until it ends loses none.
#[derive(Clone, Debug)]
pub struct ModelCache {
    dir: PathBuf,
    max_bytes: u64,
    hits: Arc<AtomicU64>,
    writes: Arc<Writes>,
}

/// The threads writing entries, joined when the last handle goes.
#[derive(Debug, Default)]
struct Writes(Mutex<Vec<std::thread::JoinHandle<()>>>);

impl Writes {
    /// Waits for every write begun so far.
    fn join_all(&self) {
        let writes = std::mem::take(&mut *self.0.lock());
        for w in writes {
            let _ = w.join();
        }
    }

    /// Adds a writer, and collects those already done so that a long
    /// session does not gather handles.
    fn push(&self, w: std::thread::JoinHandle<()>) {
        let mut writes = self.0.lock();
        let (done, running): (Vec<_>, Vec<_>) = writes.drain(..).partition(|w| w.is_finished());
        *writes = running;
        writes.push(w);
        drop(writes);
        for w in done {
            let _ = w.join();
        }
    }
}

impl Drop for Writes {
    fn drop(&mut self) {
        self.join_all();
    }
}

/// A model as an entry keeps it, before its fine pass is built again.
pub(crate) struct Cached {
    pub model: Model,
    pub recipe: FineRecipe,
}

#[derive(serde::Serialize)]
struct EntryRef<'a> {
    decoder: &'a str,
    funcs: &'a [Func],
    threads: Vec<ThreadRef<'a>>,
    missing_binaries: &'a [String],
    warnings: &'a [String],
    unit: TimeUnit,
    recipe: FineRecipe,
    cpus: &'a [CpuTrack],
    cbr_mhz: f64,
}

#[derive(serde::Serialize)]
struct ThreadRef<'a> {
    spans: SpanPartsRef<'a>,
    stack: &'a StackStats,
    walk: &'a WalkFigures,
    checkpoints: &'a [Checkpoint],
    checkpoint_frames: &'a [OpenFrame],
    stream: Option<u32>,
    marks: &'a Marks,
}

#[derive(serde::Deserialize)]
struct Entry {
    decoder: String,
    funcs: Vec<Func>,
    threads: Vec<ThreadEntry>,
    missing_binaries: Vec<String>,
    warnings: Vec<String>,
    unit: TimeUnit,
    recipe: FineRecipe,
    cpus: Vec<CpuTrack>,
    cbr_mhz: f64,
}

#[derive(serde::Deserialize)]
struct ThreadEntry {
    spans: SpanParts,
    stack: StackStats,
    walk: WalkFigures,
    checkpoints: Vec<Checkpoint>,
    checkpoint_frames: Vec<OpenFrame>,
    stream: Option<u32>,
    marks: Marks,
}

impl<'a> EntryRef<'a> {
    /// What an entry keeps of `model`, whose fine pass was built from
    /// `recipe`; `place` puts each lane's spans after it.
    fn of(
        model: &'a Model,
        recipe: FineRecipe,
        place: &mut dyn FnMut(&'a [Span]) -> LaneRef,
    ) -> EntryRef<'a> {
        EntryRef {
            decoder: DECODER,
            funcs: model.funcs.funcs(),
            threads: model
                .threads
                .iter()
                .map(|t| ThreadRef {
                    spans: t.spans.parts(place),
                    stack: &t.stack,
                    walk: &t.walk,
                    checkpoints: &t.checkpoints,
                    checkpoint_frames: &t.checkpoint_frames,
                    stream: t.stream,
                    marks: &t.marks,
                })
                .collect(),
            missing_binaries: &model.missing_binaries,
            warnings: &model.warnings,
            unit: model.unit,
            recipe,
            cpus: &model.cpus,
            cbr_mhz: model.cbr_mhz,
        }
    }
}

/// How old a temporary file of an entry must be for an eviction to take
/// it for one whose writer died: no write takes this long.
const STALE_WRITE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The decoder's version, which every key and entry carries.
const DECODER: &str = env!("CARGO_PKG_VERSION");

impl ModelCache {
    /// A cache in `dir`, holding at most `max_bytes`.
    pub fn new(dir: PathBuf, max_bytes: u64) -> ModelCache {
        ModelCache {
            dir,
            max_bytes,
            hits: Arc::new(AtomicU64::new(0)),
            writes: Arc::default(),
        }
    }

    /// Waits until every entry this cache (or a clone) began writing is
    /// written: for a caller that reads the cache's files next.
    pub fn finish_writes(&self) {
        self.writes.join_all();
    }

    /// The user's cache: `$XDG_CACHE_HOME/ptscope/models`, else
    /// `~/.cache/ptscope/models`; `None` without either variable.
    pub fn user() -> Option<ModelCache> {
        // Lanes are kept as little-endian memory: nowhere else to read them.
        if cfg!(target_endian = "big") {
            return None;
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".cache"))
            })?;
        Some(ModelCache::new(
            base.join("ptscope").join("models"),
            DEFAULT_MAX_BYTES,
        ))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many opens this cache (and its clones) answered.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The entry name for `input` decoded with `options` (a description of
    /// every option that changes the model); `None` if the file cannot be
    /// looked at.
    pub(crate) fn key(&self, input: &Path, options: &str) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let path = std::fs::canonicalize(input).ok()?;
        let md = std::fs::metadata(&path).ok()?;
        let id = format!(
            "{FORMAT}\n{DECODER}\n{}\n{}\n{}.{}\n{}\n{}\n{options}",
            path.display(),
            md.len(),
            md.mtime(),
            md.mtime_nsec(),
            md.ino(),
            md.dev(),
        );
        Some(ptscope_formats::buildid::to_hex(
            &ptscope_formats::buildid::content_id(id.as_bytes()),
        ))
    }

    fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.model"))
    }

    /// The entry `key`, if there is one; an error if there is one that
    /// cannot be trusted (the caller decodes afresh and writes it anew).
    /// With `preview`, the window waiting for it, the entry's shallowest
    /// lanes are offered to it as a partial model as soon as they are
    /// checked.
    pub(crate) fn load(
        &self,
        key: &str,
        preview: Option<&DecodeProgress>,
    ) -> Option<Result<Cached, CacheError>> {
        let path = self.path_of(key);
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(error) => return Some(Err(CacheError::Io { path, error })),
        };
        let read = crate::pt::memory::map_entry(&file)
            .map_err(|error| CacheError::Io {
                path: path.clone(),
                error,
            })
            .and_then(|map| {
                read_entry(&SharedSlice::new(Backing::Map(map)), preview)
                    .map_err(|problem| corrupt(&path, problem))
            });
        Some(read)
    }

    /// Counts a use of the entry `key` and marks it used now, so that it
    /// is the last to be evicted.
    pub(crate) fn used(&self, key: &str) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        if let Ok(f) = std::fs::File::options().write(true).open(self.path_of(key)) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
    }

    /// Drops the entry `key` (one that could not be trusted).
    pub(crate) fn forget(&self, key: &str) {
        let _ = std::fs::remove_file(self.path_of(key));
    }

    /// Keeps `model` as the entry `key` on a thread of its own, so that
    /// its opener has the model without waiting for the write (a copy of
    /// it: the lanes are shared, not copied). A write that fails costs the
    /// next open a decode, nothing more.
    pub(crate) fn keep(&self, key: String, model: Decoded) {
        // The writer's handle has writers of its own (none): it must not
        // hold this cache's, or it could be the last to let go of them
        // and join itself.
        let cache = ModelCache {
            writes: Arc::default(),
            ..self.clone()
        };
        let write = std::thread::Builder::new()
            .name("ptscope-model-cache".into())
            .spawn(move || {
                let _ = cache.store(&key, &model);
            });
        // With no thread to be had, nothing is kept.
        if let Ok(w) = write {
            self.writes.push(w);
        }
    }

    /// Keeps `model` as the entry `key`, then evicts the least recently
    /// used entries until the cache fits its bound. A model larger than
    /// the whole bound is not kept.
    pub(crate) fn store(&self, key: &str, model: &Decoded) -> Result<(), CacheError> {
        let Some(recipe) = model.lines.as_ref().and_then(|l| l.recipe()) else {
            return Ok(());
        };
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| CacheError::Io { path, error }
        };
        let mut lanes: Vec<&[Span]> = Vec::new();
        let mut data_len = 0u64;
        let entry = EntryRef::of(model, recipe, &mut |spans| {
            let at = LaneRef::of(data_len, spans);
            data_len += std::mem::size_of_val(spans) as u64;
            lanes.push(spans);
            at
        });
        let dir = postcard::to_allocvec(&entry).map_err(|e| CacheError::Corrupt {
            path: self.path_of(key),
            problem: format!("cannot encode the model: {e}"),
        })?;
        if (data_start(dir.len()) as u64).saturating_add(data_len) > self.max_bytes {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".entry-")
            .tempfile_in(&self.dir)
            .map_err(io(&self.dir))?;
        let written = (|| {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
            w.write_all(&head(&dir))?;
            for spans in lanes {
                w.write_all(bytemuck::cast_slice(spans))?;
            }
            w.flush()
        })();
        written.map_err(io(tmp.path()))?;
        let path = self.path_of(key);
        tmp.persist(&path).map_err(|e| CacheError::Io {
            path: path.clone(),
            error: e.error,
        })?;
        self.evict(&path);
        Ok(())
    }

    /// Removes the least recently used entries, never `keep`, until the
    /// cache holds at most its bound.
    fn evict(&self, keep: &Path) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = std::time::SystemTime::now();
        let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = dir
            .filter_map(|e| {
                let e = e.ok()?;
                let path = e.path();
                let md = e.metadata().ok()?;
                // What a writer that died left behind.
                let old = |t: std::time::SystemTime| {
                    now.duration_since(t).is_ok_and(|age| age > STALE_WRITE)
                };
                if e.file_name().to_string_lossy().starts_with(".entry-")
                    && md.modified().is_ok_and(old)
                {
                    let _ = std::fs::remove_file(&path);
                    return None;
                }
                if path.extension()? != "model" {
                    return None;
                }
                Some((md.modified().ok()?, md.len(), path))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

/// Where the data of an entry whose directory is `dir_len` bytes starts.
fn data_start(dir_len: usize) -> usize {
    (HEADER + dir_len).next_multiple_of(ALIGN)
}

/// An entry's header, directory and padding, up to its data.
fn head(dir: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data_start(dir.len()));
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(dir).to_le_bytes());
    out.extend_from_slice(&(dir.len() as u64).to_le_bytes());
    out.extend_from_slice(dir);
    out.resize(data_start(dir.len()), 0);
    out
}

/// An entry around `payload`, a directory and then the data its lanes
/// are in, with the header (length and checksum) and padding
/// [`ModelCache`] writes: for the fuzzer, whose inputs are payloads. The
/// directory ends where it decodes to its end, if it does.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let dir_len = match postcard::take_from_bytes::<Entry>(payload) {
        Ok((_, rest)) => payload.len() - rest.len(),
        Err(_) => payload.len(),
    };
    let mut out = head(&payload[..dir_len]);
    out.extend_from_slice(&payload[dir_len..]);
    out
}

/// The model an entry's bytes hold, checked as a re-open checks it (its
/// fine pass is not built: that needs the snapshot), the preview a window
/// is offered first included. For the fuzzer.
pub fn read_model(bytes: &[u8]) -> Result<Model, String> {
    read_entry(
        &SharedSlice::new(Backing::Memory(Aligned::copy_of(bytes))),
        Some(&DecodeProgress::new()),
    )
    .map(|c| c.model)
}

fn corrupt(path: &Path, problem: String) -> CacheError {
    CacheError::Corrupt {
        path: path.to_path_buf(),
        problem,
    }
}

/// Spans a re-open shows while it checks the rest: the shallowest lanes of
/// each thread up to about this many (16 MB of spans), checked in a few
/// milliseconds, which is all the first frame at full zoom-out draws
/// anyway.
const PREVIEW_SPANS: u64 = 1 << 20;

/// An entry's bytes to the model they keep, every part checked; its lanes
/// stay in `entry`, where they are read. With `preview`, a window waiting
/// for the model, the shallowest lanes are checked first and offered to it
/// as a partial model, before the rest are read and checked.
fn read_entry(entry: &SharedSlice, preview: Option<&DecodeProgress>) -> Result<Cached, String> {
    let bytes = entry.as_bytes();
    let header = bytes.get(..HEADER).ok_or("shorter than its header")?;
    if header[..8] != MAGIC {
        return Err("no model cache entry header".into());
    }
    let word = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    if word(8) != FORMAT {
        return Err(format!("format {}, not {FORMAT}", word(8)));
    }
    let len = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    let dir = usize::try_from(len)
        .ok()
        .and_then(|len| bytes.get(HEADER..HEADER.checked_add(len)?))
        .ok_or_else(|| format!("a directory of {len} bytes, past its end"))?;
    if crc32fast::hash(dir) != word(12) {
        return Err("its checksum does not match".into());
    }
    let data_at = data_start(dir.len()) as u64;
    let pad = bytes.get(HEADER + dir.len()..data_at as usize);
    if !pad.is_some_and(|p| p.iter().all(|&b| b == 0)) {
        return Err("its directory is not padded as written".into());
    }
    let data = entry
        .slice(data_at, (bytes.len() as u64).saturating_sub(data_at))
        .ok_or("no data after its directory")?;
    let Entry {
        decoder,
        funcs,
        threads: dirs,
        missing_binaries,
        warnings,
        unit,
        recipe,
        cpus,
        cbr_mhz,
    } = postcard::from_bytes(dir).map_err(|e| e.to_string())?;
    if decoder != DECODER {
        return Err(format!("written by ptscope {decoder}"));
    }
    let funcs = FuncTable::from_funcs(funcs)?;
    let n = funcs.len();
    recipe.check(n)?;
    for t in &dirs {
        let frames = t.checkpoint_frames.len() as u64;
        if t.checkpoints
            .iter()
            .any(|c| c.stack_start as u64 + c.stack_len as u64 > frames)
            || t.checkpoint_frames.iter().any(|f| f.func as usize >= n)
        {
            return Err("a checkpoint's stack is not in the model".into());
        }
    }
    let tops: Vec<SpanParts> = match preview.filter(|p| p.wants_partials()) {
        Some(_) => dirs.iter().map(|t| t.spans.top(PREVIEW_SPANS)).collect(),
        None => Vec::new(),
    };
    // A preview that would hold every lane is the model itself: the full
    // read below shows it as soon, without checking each lane twice.
    let whole = tops
        .iter()
        .zip(&dirs)
        .all(|(top, t)| top.lane_count() == t.spans.lane_count());
    if let Some(progress) = preview.filter(|_| !whole) {
        // A lane the preview shows is checked as the full read checks it;
        // a damaged one only means no preview (the full read says why).
        let top: Result<Vec<ThreadModel>, String> = dirs
            .iter()
            .zip(tops)
            .map(|(t, top)| {
                Ok(ThreadModel {
                    spans: ThreadSpans::from_parts(top, n, &data)?,
                    stack: t.stack.clone(),
                    walk: t.walk.clone(),
                    checkpoints: t.checkpoints.clone(),
                    checkpoint_frames: t.checkpoint_frames.clone(),
                    stream: t.stream,
                    marks: t.marks.clone(),
                })
            })
            .collect();
        if let Ok(threads) = top {
            progress.offer(|| Model {
                funcs: funcs.clone(),
                threads,
                missing_binaries: missing_binaries.clone(),
                warnings: warnings.clone(),
                unit,
                cpus: cpus.clone(),
                cbr_mhz,
            });
        }
    }
    // The rest is read in full now: its pages are asked for at once
    // rather than faulted in one by one.
    entry.populate();
    let mut threads = Vec::with_capacity(dirs.len());
    for t in dirs {
        threads.push(ThreadModel {
            spans: ThreadSpans::from_parts(t.spans, n, &data)?,
            stack: t.stack,
            walk: t.walk,
            checkpoints: t.checkpoints,
            checkpoint_frames: t.checkpoint_frames,
            stream: t.stream,
            marks: t.marks,
        });
    }
    Ok(Cached {
        model: Model {
            funcs,
            threads,
            missing_binaries,
            warnings,
            unit,
            cpus,
            cbr_mhz,
        },
        recipe,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model with a thread of spans and a recipe, as a decode gives.
    fn entry_bytes(model: &Model, recipe: FineRecipe) -> Vec<u8> {
        let mut data = Vec::new();
        let entry = EntryRef::of(model, recipe, &mut |spans| {
            let at = LaneRef::of(data.len() as u64, spans);
            data.extend_from_slice(bytemuck::cast_slice(spans));
            at
        });
        let mut bytes = head(&postcard::to_allocvec(&entry).unwrap());
        bytes.extend_from_slice(&data);
        bytes
    }

    fn read(bytes: &[u8]) -> Result<Cached, String> {
        read_entry(
            &SharedSlice::new(Backing::Memory(Aligned::copy_of(bytes))),
            None,
        )
    }

    fn model() -> Model {
        let mut funcs = FuncTable::default();
        let f = funcs.intern(
            "main",
            "/bin/prog",
            0x1000,
            crate::passes::event::SpanKind::Call,
        );
        let mut spans = ThreadSpans::new(7, 8, "prog".into());
        spans.push(0, 100, 900, f, 0);
        spans.push(1, 200, 300, f, 0);
        let mut t = ThreadModel::from_spans(spans);
        t.checkpoint_frames.push(OpenFrame {
            func: f,
            start: 100,
            call_site: 0,
            kernel: false,
            mid_from: crate::passes::event::UNKNOWN,
        });
        Model {
            funcs,
            threads: vec![t],
            warnings: vec!["a warning".into()],
            ..Model::default()
        }
    }

    #[test]
    fn an_entry_reads_back_as_the_model_it_kept() {
        let m = model();
        let recipe = FineRecipe {
            pids: vec![7],
            learned: vec![vec![(0x2000, 3)]],
            ..FineRecipe::default()
        };
        let back = read(&entry_bytes(&m, recipe.clone())).unwrap();
        assert_eq!(back.model.canonical(), m.canonical());
        assert_eq!(back.model.warnings, m.warnings);
        assert_eq!(back.recipe, recipe);
    }

    /// A window re-opening a big model is shown its shallowest lanes,
    /// checked, before the rest are read: even when a deeper lane then
    /// turns out damaged, and the entry is refused.
    #[test]
    fn a_reopen_offers_its_shallowest_lanes_before_it_checks_the_rest() {
        let mut m = model();
        let f = m.funcs.intern(
            "leaf",
            "/bin/prog",
            0x2000,
            crate::passes::event::SpanKind::Call,
        );
        let mut spans = ThreadSpans::new(7, 8, "prog".into());
        spans.push(0, 0, 1 << 30, f, 0);
        for i in 0..PREVIEW_SPANS {
            spans.push(1, 10 + i * 10, 15 + i * 10, f, 0);
        }
        spans.push(2, 11, 12, f, 0);
        m.threads = vec![ThreadModel::from_spans(spans)];
        let good = entry_bytes(&m, FineRecipe::default());
        let mut bad = good.clone();
        // The last lane's spans end the entry.
        let last = bad.len() - 1;
        bad[last] ^= 1;
        for (bytes, whole) in [(good, true), (bad, false)] {
            let progress = DecodeProgress::new();
            let entry = SharedSlice::new(Backing::Memory(Aligned::copy_of(&bytes)));
            let read = read_entry(&entry, Some(&progress));
            assert_eq!(read.is_ok(), whole);
            let preview = progress.take_partial().expect("no preview");
            let t = &preview.threads[0].spans;
            assert_eq!((t.depth(), t.span_count()), (1, 1));
            assert_eq!(t.lane(0), m.threads[0].spans.lane(0));
            if let Ok(c) = read {
                assert_eq!(c.model.canonical(), m.canonical());
            }
        }
        // The command line takes no partial models: none is built.
        let counting = DecodeProgress::counting();
        let entry = SharedSlice::new(Backing::Memory(Aligned::copy_of(&entry_bytes(
            &m,
            FineRecipe::default(),
        ))));
        read_entry(&entry, Some(&counting)).unwrap();
        assert!(counting.take_partial().is_none());
        // A model the preview would hold whole is shown whole, once.
        let small = model();
        let progress = DecodeProgress::new();
        let entry = SharedSlice::new(Backing::Memory(Aligned::copy_of(&entry_bytes(
            &small,
            FineRecipe::default(),
        ))));
        read_entry(&entry, Some(&progress)).unwrap();
        assert!(progress.take_partial().is_none());
    }

    #[test]
    fn every_damaged_byte_is_refused_not_trusted() {
        let m = model();
        let bytes = entry_bytes(&m, FineRecipe::default());
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x5a;
            assert!(read(&bad).is_err(), "a flip at byte {at} went unseen");
        }
        for len in 0..bytes.len() {
            assert!(read(&bytes[..len]).is_err(), "cut at {len}");
        }
    }

    #[test]
    fn a_checksummed_entry_that_lies_is_still_refused() {
        // A payload that decodes, checksum and all, but names a function
        // the table does not have.
        let mut m = model();
        let mut spans = ThreadSpans::new(1, 1, String::new());
        spans.push(0, 0, 1, 99, 0);
        m.threads.push(ThreadModel::from_spans(spans));
        let e = read(&entry_bytes(&m, FineRecipe::default()));
        assert!(e.err().unwrap().contains("names no function"));
        let bad_recipe = FineRecipe {
            pids: vec![1],
            learned: vec![vec![]],
            thread_procs: vec![5],
            ..FineRecipe::default()
        };
        assert!(read(&entry_bytes(&model(), bad_recipe)).is_err());
    }

    #[test]
    fn the_least_recently_used_entries_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModelCache::new(dir.path().to_path_buf(), 2500);
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            let p = cache.path_of(name);
            std::fs::write(&p, vec![0u8; 1000]).unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(old + std::time::Duration::from_secs(i as u64))
                .unwrap();
        }
        // "a" was used last.
        let f = std::fs::File::options()
            .write(true)
            .open(cache.path_of("a"))
            .unwrap();
        f.set_modified(std::time::SystemTime::now()).unwrap();
        cache.evict(&cache.path_of("c"));
        assert!(cache.path_of("a").exists());
        assert!(!cache.path_of("b").exists());
        assert!(cache.path_of("c").exists());
    }

    /// Writes the `model_cache` fuzz target's seeds (payloads: a directory
    /// and the data after it) into `$PTSCOPE_FUZZ_SEEDS`:
    /// `PTSCOPE_FUZZ_SEEDS=tests/fuzz/seeds/model_cache cargo test -p
    /// ptscope-decoder -- --ignored fuzz_seeds`.
    #[test]
    #[ignore = "writes the fuzz seeds"]
    fn fuzz_seeds() {
        let dir = PathBuf::from(std::env::var("PTSCOPE_FUZZ_SEEDS").expect("a directory"));
        let recipe = FineRecipe {
            pids: vec![7],
            learned: vec![vec![(0x2000, 3)]],
            schedules: vec![(0, vec![(5, 0)])],
            slot_of: vec![(8, 0)],
            thread_procs: vec![0],
            sources: vec!["/bin/prog".into()],
        };
        // The unit tests' model, and one with long spans, ties and more
        // lanes than blocks.
        let mut big = model();
        let mut spans = ThreadSpans::new(1, 2, "two".into());
        for i in 0..300u64 {
            spans.push(0, i * 10, i * 10 + 5, (i % 4) as u32, 0);
        }
        spans.push(1, 20, 20, 3, 0);
        spans.push(2, 4000, 4000 + (1 << 33), 3, ptscope_model::flag::OPEN_END);
        big.threads.push(ThreadModel::from_spans(spans));
        for (name, m) in [("entry-0", model()), ("entry-1", big)] {
            let bytes = entry_bytes(&m, recipe.clone());
            let dir_len = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
            let mut payload = bytes[HEADER..HEADER + dir_len].to_vec();
            payload.extend_from_slice(&bytes[data_start(dir_len)..]);
            assert!(read_model(&frame(&payload)).is_ok(), "{name} reads back");
            std::fs::write(dir.join(name), payload).unwrap();
        }
    }
}
