//! The Fuchsia trace format (FXT), as magic-trace writes it for its
//! Perfetto fork: a stream of records of 64-bit little-endian words. The
//! file starts with the magic record, a provider and the initialization
//! record (ticks are ns); each thread gets a thread record and kernel
//! objects naming it and its process; each slice is a duration-complete
//! event (its end timestamp as its last word). Names and categories are
//! interned in the string table while it has room (32767 entries), and
//! written inline after that; threads past the 255 the thread table holds
//! are written inline too.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;
use ptscope_model::TimeUnit;

use super::{put, Sink, Slice};

const MAGIC: u64 = 0x0016_5478_4604_0010;
const METADATA: u64 = 0;
const INITIALIZATION: u64 = 1;
const STRING: u64 = 2;
const THREAD: u64 = 3;
const EVENT: u64 = 4;
const KERNEL_OBJECT: u64 = 7;
const PROVIDER_INFO: u64 = 1;
const DURATION_COMPLETE: u64 = 4;
const OBJ_PROCESS: u64 = 1;
const OBJ_THREAD: u64 = 2;
const ARG_KOID: u64 = 8;
const MAX_STRING_INDEX: u16 = 0x7fff;
const MAX_THREAD_INDEX: u8 = 0xff;
/// A string's longest form: two of them fit in one record (4095 words).
const MAX_INLINE: usize = 16_000;

/// Words a string of `len` bytes takes, padded to 8 bytes.
fn words(len: usize) -> usize {
    len.div_ceil(8)
}

/// How a record refers to a string: an index, or inline bytes.
enum StrRef<'s> {
    Index(u16),
    Inline(&'s [u8]),
}

impl StrRef<'_> {
    fn field(&self) -> u64 {
        match self {
            StrRef::Index(i) => *i as u64,
            StrRef::Inline(b) => 0x8000 | b.len() as u64,
        }
    }

    fn body_words(&self) -> usize {
        match self {
            StrRef::Index(_) => 0,
            StrRef::Inline(b) => words(b.len()),
        }
    }
}

pub struct Fxt<'w> {
    out: &'w mut dyn Write,
    strings: HashMap<String, u16>,
    /// Thread table: (pid, tid) to index.
    threads: HashMap<(i32, i32), u8>,
    processes: Vec<i32>,
    /// The current thread's reference: its index, or 0 (inline).
    thread: (i32, i32, u8),
}

impl<'w> Fxt<'w> {
    pub fn new(out: &'w mut dyn Write) -> Result<Fxt<'w>> {
        let mut f = Fxt {
            out,
            strings: HashMap::new(),
            threads: HashMap::new(),
            processes: Vec::new(),
            thread: (0, 0, 0),
        };
        f.word(MAGIC)?;
        let name = b"ptscope";
        f.word(
            METADATA
                | ((1 + words(name.len()) as u64) << 4)
                | (PROVIDER_INFO << 16)
                | ((name.len() as u64) << 52),
        )?;
        f.bytes(name)?;
        f.word(INITIALIZATION | (2 << 4))?;
        f.word(1_000_000_000)?;
        Ok(f)
    }

    fn word(&mut self, w: u64) -> Result<()> {
        put(self.out, &w.to_le_bytes())
    }

    /// `b`, padded with zeros to whole words.
    fn bytes(&mut self, b: &[u8]) -> Result<()> {
        put(self.out, b)?;
        let pad = words(b.len()) * 8 - b.len();
        put(self.out, &[0u8; 8][..pad])
    }

    /// A reference to `s`: its index, defining it first if it is new and
    /// the table has room; else inline.
    fn string<'s>(&mut self, s: &'s str) -> Result<StrRef<'s>> {
        if s.is_empty() {
            return Ok(StrRef::Index(0));
        }
        if let Some(&i) = self.strings.get(s) {
            return Ok(StrRef::Index(i));
        }
        let b = &s.as_bytes()[..s.len().min(MAX_INLINE)];
        if self.strings.len() >= MAX_STRING_INDEX as usize {
            return Ok(StrRef::Inline(b));
        }
        let i = self.strings.len() as u16 + 1;
        self.strings.insert(s.to_string(), i);
        self.word(
            STRING
                | ((1 + words(b.len()) as u64) << 4)
                | ((i as u64) << 16)
                | ((b.len() as u64) << 32),
        )?;
        self.bytes(b)?;
        Ok(StrRef::Index(i))
    }

    fn inline(&mut self, r: &StrRef) -> Result<()> {
        if let StrRef::Inline(b) = r {
            self.bytes(b)?;
        }
        Ok(())
    }

    /// A kernel object record naming `koid`, of `kind`; a thread's names
    /// its process.
    fn object(&mut self, kind: u64, koid: u64, name: &str, process: Option<u64>) -> Result<()> {
        let name = self.string(name)?;
        let arg = match process {
            Some(_) => Some(self.string("process")?),
            None => None,
        };
        let arg_words = arg.as_ref().map_or(0, |a| 2 + a.body_words());
        let size = 2 + name.body_words() + arg_words;
        self.word(
            KERNEL_OBJECT
                | ((size as u64) << 4)
                | (kind << 16)
                | (name.field() << 24)
                | ((arg.is_some() as u64) << 40),
        )?;
        self.word(koid)?;
        self.inline(&name)?;
        if let (Some(a), Some(p)) = (arg, process) {
            self.word(ARG_KOID | (((2 + a.body_words()) as u64) << 4) | (a.field() << 16))?;
            self.inline(&a)?;
            self.word(p)?;
        }
        Ok(())
    }
}

impl Sink for Fxt<'_> {
    fn thread(&mut self, pid: i32, tid: i32, comm: &str) -> Result<()> {
        if !self.processes.contains(&pid) {
            self.processes.push(pid);
            self.object(OBJ_PROCESS, pid as u64, &format!("{pid}"), None)?;
        }
        self.object(OBJ_THREAD, tid as u64, comm, Some(pid as u64))?;
        let index = match self.threads.get(&(pid, tid)) {
            Some(&i) => i,
            None if self.threads.len() < MAX_THREAD_INDEX as usize => {
                let i = self.threads.len() as u8 + 1;
                self.threads.insert((pid, tid), i);
                self.word(THREAD | (3 << 4) | ((i as u64) << 16))?;
                self.word(pid as u64)?;
                self.word(tid as u64)?;
                i
            }
            None => 0,
        };
        self.thread = (pid, tid, index);
        Ok(())
    }

    fn slice(&mut self, s: &Slice) -> Result<()> {
        let category = self.string(s.category)?;
        let name = self.string(s.name)?;
        let (pid, tid, index) = self.thread;
        let thread_words = if index == 0 { 2 } else { 0 };
        // Header, start, [pid, tid], [category], [name], end.
        let size = 3 + thread_words + category.body_words() + name.body_words();
        self.word(
            EVENT
                | ((size as u64) << 4)
                | (DURATION_COMPLETE << 16)
                | ((index as u64) << 24)
                | (category.field() << 32)
                | (name.field() << 48),
        )?;
        self.word(s.start)?;
        if index == 0 {
            self.word(pid as u64)?;
            self.word(tid as u64)?;
        }
        self.inline(&category)?;
        self.inline(&name)?;
        self.word(s.end)
    }

    fn finish(&mut self, _unit: TimeUnit) -> Result<()> {
        Ok(())
    }
}
