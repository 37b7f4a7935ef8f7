//! Import of `perf script` branch text into the branch-event stream.
//!
//! Whoever already records Intel PT with `perf record -e intel_pt//` can
//! open the result in ptscope without our capture: perf decodes the trace and
//! prints its branches with
//! `perf script --itrace=bep -F pid,tid,time,flags,ip,addr,sym,symoff,dso,event`,
//! and this module turns that text into the same [`Event`]s the coarse pass
//! produces, so stack reconstruction and the viewer need not know the source.
//!
//! That text is written for people, not programs. Column widths, the fields
//! present and some spellings differ between perf versions and `-F` lists
//! (perf 5.x prints `tr strt` where 6.x prints `tr strt jmp`; old versions
//! print no event name and no DSO; error lines may lack a time), and symbol
//! and DSO names may contain spaces, parentheses, `+0x` and even ` => `. So
//! nothing here relies on columns: header fields are recognised by their
//! shape, flags by perf's own vocabulary, and the source is split from the
//! target at the last ` => ` that is followed by an address. The parser is
//! strict about what events need (thread, time, flags, addresses) and lenient
//! about the rest: an unreadable symbol offset is just left out.
//!
//! Lines that are not branch events (power events, PSBs, sampled call
//! stacks, other sampled events, warnings) are skipped and counted. A line
//! that should be a branch event but cannot be read is skipped and counted
//! too, rather than failing the import: one lost branch costs at most one
//! wrong frame until the next resynchronisation, perf itself drops whole
//! stretches on overflow, and the usual culprit is a last line cut short.
//! Only when no line of the file is a branch event does the first unreadable
//! line become the error, because then the format itself is not understood.
//!
//! Functions are identified by name and DSO, not by entry address, because
//! perf sometimes prints garbage offsets (`memcpy@plt+0xffffffffff22f000`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::passes::event::{EndReason, Event, EventKind, FuncId, FuncTable, SpanKind, UNKNOWN};

/// Branch flags as perf's `PERF_IP_FLAG_*` bits, decoded from the names
/// `perf script` prints (`call`, `tr end  syscall`, `jmp (x)`, ...) or from
/// its fallback letters (`bcrosyiABExghDt`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BranchFlags(pub u32);

impl BranchFlags {
    pub const BRANCH: u32 = 1 << 0;
    pub const CALL: u32 = 1 << 1;
    pub const RETURN: u32 = 1 << 2;
    pub const CONDITIONAL: u32 = 1 << 3;
    pub const SYSCALLRET: u32 = 1 << 4;
    pub const ASYNC: u32 = 1 << 5;
    pub const INTERRUPT: u32 = 1 << 6;
    pub const TX_ABORT: u32 = 1 << 7;
    pub const TRACE_BEGIN: u32 = 1 << 8;
    pub const TRACE_END: u32 = 1 << 9;
    pub const IN_TX: u32 = 1 << 10;
    pub const VMENTRY: u32 = 1 << 11;
    pub const VMEXIT: u32 = 1 << 12;
    pub const INTR_DISABLE: u32 = 1 << 13;
    pub const INTR_TOGGLE: u32 = 1 << 14;
    pub const BRANCH_MISS: u32 = 1 << 15;

    /// All of `bits` are set.
    pub fn contains(self, bits: u32) -> bool {
        self.0 & bits == bits
    }

    fn any(self, bits: u32) -> bool {
        self.0 & bits != 0
    }

    /// The event this branch becomes. Trace begin and end win over the
    /// branch kind because they decide whether the frames that follow were
    /// traced at all; `tr strt tr end` (tracing began and stopped within one
    /// record) leaves tracing off, so it counts as an end.
    pub fn kind(self) -> EventKind {
        if self.any(Self::TRACE_END) {
            let reason = if self.contains(Self::CALL | Self::SYSCALLRET) {
                EndReason::Syscall
            } else if self.any(Self::ASYNC) || self.contains(Self::CALL | Self::INTERRUPT) {
                EndReason::Async
            } else {
                EndReason::Other
            };
            return EventKind::TraceEnd(reason);
        }
        if self.any(Self::TRACE_BEGIN) {
            return EventKind::TraceBegin;
        }
        if self.any(Self::SYSCALLRET) {
            return if self.any(Self::RETURN) {
                EventKind::KernelReturn
            } else {
                EventKind::Syscall
            };
        }
        if self.contains(Self::RETURN | Self::INTERRUPT) {
            return EventKind::KernelReturn;
        }
        if self.any(Self::ASYNC | Self::INTERRUPT) {
            return EventKind::Interrupt;
        }
        // vmentry/vmexit carry the call bit but push no frame.
        if self.any(Self::VMENTRY | Self::VMEXIT | Self::TX_ABORT) {
            return EventKind::Jump;
        }
        if self.any(Self::CALL) {
            return EventKind::Call;
        }
        if self.any(Self::RETURN) {
            return EventKind::Return;
        }
        EventKind::Jump
    }
}

/// One end of a branch as perf printed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location<'a> {
    pub ip: u64,
    /// `None` when perf printed no symbol or `[unknown]`.
    pub sym: Option<&'a str>,
    /// `None` when perf printed no offset or one that does not fit 64 bits.
    pub symoff: Option<u64>,
    /// `None` when perf printed no DSO or `[unknown]`.
    pub dso: Option<&'a str>,
}

/// One line of `perf script` output that matters to the import.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptRecord<'a> {
    Branch {
        pid: i32,
        tid: i32,
        /// ns; `None` when the line has no time field.
        time: Option<u64>,
        flags: BranchFlags,
        from: Location<'a>,
        to: Location<'a>,
    },
    /// `instruction trace error ...`: perf lost its place in the trace.
    Error {
        pid: i32,
        tid: i32,
        /// ns; `None` when perf printed no time or `time 0`.
        time: Option<u64>,
        /// `None` when perf printed `ip 0`.
        ip: Option<u64>,
        message: &'a str,
    },
}

/// Why one line could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("bad pid/tid `{0}`")]
    BadThread(String),
    #[error("bad time `{0}`")]
    BadTime(String),
    #[error("no branch flags before the source address (perf script needs `-F +flags`)")]
    NoFlags,
    #[error("unknown branch flag `{0}`")]
    UnknownFlag(String),
    #[error("expected the {what} address, found `{found}`")]
    BadAddress { what: &'static str, found: String },
    #[error("no ` => ` and target (line cut short, or perf script without `-F +addr`)")]
    NoArrow,
    #[error("malformed trace error record: {0}")]
    BadErrorRecord(&'static str),
}

/// Why a whole text could not be imported, naming the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("{}: empty perf script output", path.display())]
    Empty { path: PathBuf },
    #[error(
        "{}: none of its {lines} lines is a perf script branch event (expected `perf script --itrace=be -F pid,tid,time,flags,ip,addr,sym,symoff,dso,event`)",
        path.display()
    )]
    NoBranchEvents { path: PathBuf, lines: usize },
    /// `perf record -g` output: sampled call stacks, which say where the
    /// program was now and then, not every call it made.
    #[error(
        "{}: holds {samples} sampled call stacks (perf record -g) and no branches; ptscope reads Intel PT branch traces: record with `perf record -e intel_pt//u` and export with `perf script --itrace=bep -F pid,tid,time,flags,ip,addr,sym,symoff,dso,event`",
        path.display()
    )]
    SampledStacks { path: PathBuf, samples: usize },
    /// `line` is 1-based.
    #[error("{}:{line}: {error}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        error: ParseError,
    },
}

#[derive(Clone, Debug)]
pub struct ScriptThread {
    pub pid: i32,
    pub tid: i32,
    pub events: Vec<Event>,
}

#[derive(Clone, Debug)]
pub struct ScriptTrace {
    /// In order of first appearance.
    pub threads: Vec<ScriptThread>,
    pub funcs: FuncTable,
    /// Non-blank lines that were not branch events or errors, `malformed`
    /// included.
    pub skipped: usize,
    /// Lines that looked like branch events or errors but could not be read.
    pub malformed: usize,
    /// The first of those, for a warning ([`ScriptError::Parse`]).
    pub first_malformed: Option<ScriptError>,
}

/// Parses one line; Ok(None) for lines that are not branch events or errors.
pub fn parse_line(line: &str) -> Result<Option<ScriptRecord<'_>>, ParseError> {
    // Call-stack entries of sampled events are the only tab-indented lines.
    if line.starts_with('\t') {
        return Ok(None);
    }
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
    if let Some(rest) = error_record(line) {
        return parse_error_record(rest).map(Some);
    }
    let header = split_header(line)?;
    let branch_event = match header.event {
        Some("branches") => true,
        Some(_) => return Ok(None),
        None => false,
    };
    let body = header.body;
    let Some((left, right)) = split_arrow(body) else {
        // Without an event name, only something shaped like a branch up to
        // the missing arrow (a cut-off line) is worth a complaint; cbr, psb
        // and ptwrite records stop being branch-shaped before that.
        if !branch_event && !branch_shaped(body) {
            return Ok(None);
        }
        let (_, rest) = parse_flags(body)?;
        parse_location(rest, "source")?;
        return Err(ParseError::NoArrow);
    };
    let (flags, rest) = parse_flags(left)?;
    Ok(Some(ScriptRecord::Branch {
        pid: header.pid,
        tid: header.tid,
        time: header.time,
        flags,
        from: parse_location(rest, "source")?,
        to: parse_location(strip_trailing_fields(right), "target")?,
    }))
}

/// Imports a whole text; `source` names the file in errors.
pub fn import(text: &str, source: &Path) -> Result<ScriptTrace, ScriptError> {
    let mut b = Builder::default();
    let mut lines = 0;
    let mut branches = 0;
    let mut skipped = 0;
    let mut malformed = 0;
    let mut first_malformed = None;
    let mut samples = 0;
    let mut in_stack = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        lines += 1;
        let stack_entry = line.starts_with('\t');
        samples += (stack_entry && !in_stack) as usize;
        in_stack = stack_entry;
        match parse_line(line) {
            Ok(Some(rec)) => {
                branches += matches!(rec, ScriptRecord::Branch { .. }) as usize;
                b.push(rec);
            }
            Ok(None) => skipped += 1,
            Err(error) => {
                skipped += 1;
                malformed += 1;
                first_malformed.get_or_insert(ScriptError::Parse {
                    path: source.to_path_buf(),
                    line: i + 1,
                    error,
                });
            }
        }
    }
    let path = source.to_path_buf();
    if lines == 0 {
        return Err(ScriptError::Empty { path });
    }
    if branches == 0 {
        return Err(first_malformed.unwrap_or(if samples > 0 {
            ScriptError::SampledStacks { path, samples }
        } else {
            ScriptError::NoBranchEvents { path, lines }
        }));
    }
    Ok(ScriptTrace {
        threads: b.threads,
        funcs: b.funcs,
        skipped,
        malformed,
        first_malformed,
    })
}

/// Accumulates events. Its caches are keyed by slices of the input so that
/// a known function, error or thread costs a lookup and no allocation.
#[derive(Default)]
struct Builder<'a> {
    threads: Vec<ScriptThread>,
    thread_index: HashMap<(i32, i32), usize>,
    funcs: FuncTable,
    func_ids: HashMap<(&'a str, &'a str), FuncId>,
    error_ids: HashMap<&'a str, FuncId>,
}

impl<'a> Builder<'a> {
    fn push(&mut self, rec: ScriptRecord<'a>) {
        let event = match rec {
            ScriptRecord::Branch {
                pid,
                tid,
                time,
                flags,
                from,
                to,
            } => {
                let t = self.thread(pid, tid);
                let mut e = Event::new(self.time_or_last(t, time), flags.kind());
                e.from = from.ip;
                e.to = to.ip;
                e.from_fn = self.func(&from);
                e.to_fn = self.func(&to);
                e.to_is_entry = to.symoff == Some(0);
                (t, e)
            }
            ScriptRecord::Error {
                pid,
                tid,
                time,
                ip,
                message,
            } => {
                let t = self.thread(pid, tid);
                let mut e = Event::new(self.time_or_last(t, time), EventKind::Error);
                e.from = ip.unwrap_or(0);
                let funcs = &mut self.funcs;
                e.to_fn = *self
                    .error_ids
                    .entry(message)
                    .or_insert_with(|| funcs.decode_error(message));
                (t, e)
            }
        };
        self.threads[event.0].events.push(event.1);
    }

    /// A tid names a thread system-wide, so it alone picks the thread: perf
    /// prints pid -1 until it learns a thread's process, and the pid is the
    /// one field seen mangled in real output. Only unknown tids are told
    /// apart by pid.
    fn thread(&mut self, pid: i32, tid: i32) -> usize {
        let key = (tid, if tid == -1 { pid } else { 0 });
        let threads = &mut self.threads;
        let t = *self.thread_index.entry(key).or_insert_with(|| {
            threads.push(ScriptThread {
                pid,
                tid,
                events: Vec::new(),
            });
            threads.len() - 1
        });
        if threads[t].pid == -1 {
            threads[t].pid = pid;
        }
        t
    }

    /// A record without a time happened after the thread's previous one.
    fn time_or_last(&self, thread: usize, time: Option<u64>) -> u64 {
        time.unwrap_or_else(|| self.threads[thread].events.last().map_or(0, |e| e.time))
    }

    fn func(&mut self, loc: &Location<'a>) -> FuncId {
        if loc.ip == 0 {
            return UNKNOWN;
        }
        let key = (loc.sym.unwrap_or("[unknown]"), loc.dso.unwrap_or(""));
        let funcs = &mut self.funcs;
        *self
            .func_ids
            .entry(key)
            .or_insert_with(|| funcs.intern(key.0, key.1, 0, SpanKind::Call))
    }
}

/// Error snippets are cut so a garbage line does not become a garbage
/// message.
fn snippet(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Whitespace-separated tokens with their byte offsets in `s`.
fn tokens(s: &str) -> impl Iterator<Item = (usize, &str)> {
    let base = s.as_ptr() as usize;
    s.split_ascii_whitespace()
        .map(move |t| (t.as_ptr() as usize - base, t))
}

fn first_token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(|c: char| c.is_ascii_whitespace()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn parse_int(s: &str) -> Option<i32> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if !is_digits(digits) {
        return None;
    }
    s.parse().ok()
}

/// perf prints addresses as bare hex; a `0x` prefix is accepted too.
fn parse_hex(s: &str) -> Option<u64> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// `SECONDS[.FRACTION]` to ns, exactly. perf prints 9 digits with `--ns` and
/// 6 without; digits past the ninth are dropped.
fn parse_time(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    if !is_digits(secs) || !(frac.is_empty() || is_digits(frac)) {
        return None;
    }
    let frac = &frac[..frac.len().min(9)];
    let mut ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..9 {
        ns *= 10;
    }
    secs.parse::<u64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(ns)
}

fn is_time_shaped(s: &str) -> bool {
    matches!(s.split_once('.'), Some((a, b)) if is_digits(a) && is_digits(b))
}

struct Header<'a> {
    pid: i32,
    tid: i32,
    time: Option<u64>,
    /// The event name without modifiers: `branches` for `branches:uH:`.
    event: Option<&'a str>,
    /// What follows the header: flags and locations for a branch.
    body: &'a str,
}

/// Reads `[comm] [pid[/tid]] [[cpu]] [time:] [period] [event:]` by the shape
/// of each field, since `-F` decides which are present. A missing pid/tid
/// becomes -1, perf's own "unknown".
fn split_header(line: &str) -> Result<Header<'_>, ParseError> {
    let mut h = Header {
        pid: -1,
        tid: -1,
        time: None,
        event: None,
        body: "",
    };
    let mut thread_seen = false;
    for (n, (pos, tok)) in tokens(line).enumerate() {
        if h.event.is_some() {
            h.body = &line[pos..];
            break;
        }
        if let Some(t) = tok.strip_suffix(':') {
            if h.time.is_none() && is_time_shaped(t) {
                h.time = Some(parse_time(t).ok_or_else(|| ParseError::BadTime(snippet(t)))?);
            } else {
                let end = t.find([':', '/']).unwrap_or(t.len());
                h.event = Some(&t[..end]);
            }
            continue;
        }
        if (n == 0 || thread_seen || h.time.is_some()) && starts_flags(tok) {
            h.body = &line[pos..];
            break;
        }
        if h.time.is_some() {
            if is_digits(tok) {
                continue; // the sample period
            }
            h.body = &line[pos..];
            break;
        }
        if let Some((p, t)) = tok.split_once('/') {
            if let (Some(p), Some(t)) = (parse_int(p), parse_int(t)) {
                (h.pid, h.tid, thread_seen) = (p, t, true);
                continue;
            }
            if is_digits(p.trim_start_matches('-')) && is_digits(t.trim_start_matches('-')) {
                return Err(ParseError::BadThread(snippet(tok)));
            }
        }
        if !thread_seen {
            // Only one of pid and tid was asked for; otherwise a comm word.
            if let Some(id) = parse_int(tok) {
                (h.pid, h.tid, thread_seen) = (id, id, true);
            }
            continue;
        }
        if is_digits(tok) || (tok.starts_with('[') && tok.ends_with(']')) {
            continue; // a period, or the cpu
        }
        h.body = &line[pos..];
        break;
    }
    Ok(h)
}

/// The words perf builds flag names from; multi-word names start with the
/// first word of a pair.
fn starts_flags(tok: &str) -> bool {
    matches!(
        tok,
        "call"
            | "return"
            | "jcc"
            | "jmp"
            | "int"
            | "iret"
            | "syscall"
            | "sysret"
            | "async"
            | "vmentry"
            | "vmexit"
            | "hw"
            | "tx"
            | "tr"
            | "br"
    ) || raw_flags(tok).is_some()
}

/// perf's fallback for combinations without a name: one letter per bit of
/// `bcrosyiABExghDt`. A token of hex digits alone is taken for the address
/// that follows the flags instead.
fn raw_flags(tok: &str) -> Option<u32> {
    const CHARS: &[u8] = b"bcrosyiABExghDt";
    if !tok.starts_with('b') || tok.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    tok.bytes().try_fold(0, |bits, c| {
        let i = CHARS.iter().position(|&k| k == c)?;
        Some(bits | 1 << i)
    })
}

/// `(x)`, `(D)`, `(Dt)`...: transaction and interrupt state after the name.
/// Some perf 6.x versions print `()`.
fn state_flags(tok: &str) -> Option<u32> {
    let inner = tok.strip_prefix('(')?.strip_suffix(')')?;
    inner.bytes().try_fold(0, |bits, c| match c {
        b'x' => Some(bits | BranchFlags::IN_TX),
        b'D' => Some(bits | BranchFlags::INTR_DISABLE),
        b't' => Some(bits | BranchFlags::INTR_TOGGLE),
        _ => None,
    })
}

/// Reads the flag words at the start of `s`; returns them and the rest.
fn parse_flags(s: &str) -> Result<(BranchFlags, &str), ParseError> {
    use BranchFlags as F;
    let mut bits = 0;
    let mut words = 0;
    let mut toks = tokens(s).peekable();
    while let Some((pos, tok)) = toks.next() {
        let pair = |second: &str| -> u32 {
            match (tok, second) {
                ("hw", "int") => F::CALL | F::ASYNC | F::INTERRUPT,
                ("tx", "abrt") => F::TX_ABORT,
                ("tr", "strt") => F::TRACE_BEGIN,
                ("tr", "end") => F::TRACE_END,
                ("br", "miss") => F::BRANCH_MISS,
                _ => 0,
            }
        };
        let word = match tok {
            "call" => F::CALL,
            "return" => F::RETURN,
            "jcc" => F::CONDITIONAL,
            "jmp" => 0,
            "int" => F::CALL | F::INTERRUPT,
            "iret" => F::RETURN | F::INTERRUPT,
            "syscall" => F::CALL | F::SYSCALLRET,
            "sysret" => F::RETURN | F::SYSCALLRET,
            "async" => F::ASYNC,
            "vmentry" => F::CALL | F::VMENTRY,
            "vmexit" => F::CALL | F::VMEXIT,
            "hw" | "tx" | "tr" | "br" => match toks.peek().map(|&(_, t)| pair(t)) {
                Some(b) if b != 0 => {
                    toks.next();
                    b
                }
                _ => return Err(ParseError::UnknownFlag(snippet(tok))),
            },
            _ => match state_flags(tok).or_else(|| raw_flags(tok)) {
                Some(b) => b,
                None if words > 0 => return Ok((BranchFlags(bits), &s[pos..])),
                None if parse_hex(tok).is_some() => return Err(ParseError::NoFlags),
                None => return Err(ParseError::UnknownFlag(snippet(tok))),
            },
        };
        bits |= F::BRANCH | word;
        words += 1;
    }
    if words == 0 {
        return Err(ParseError::NoFlags);
    }
    Ok((BranchFlags(bits), ""))
}

/// Flags followed by an address: a branch record, whatever else is missing.
fn branch_shaped(body: &str) -> bool {
    parse_flags(body).is_ok_and(|(_, rest)| parse_hex(first_token(rest).0).is_some())
}

/// Splits at the last ` => ` followed by an address, since symbols may
/// contain ` => ` themselves (`x => +0xb`), but not ones followed by one.
fn split_arrow(body: &str) -> Option<(&str, &str)> {
    body.match_indices(" =>")
        .filter(|&(i, _)| {
            let after = &body[i + 3..];
            after.starts_with(|c: char| c.is_ascii_whitespace())
                && parse_hex(first_token(after).0).is_some()
        })
        .last()
        .map(|(i, _)| (&body[..i], &body[i + 3..]))
}

/// What `-F +ipc`, `+insnlen` and `+insn` print after the target, which
/// would otherwise pass for part of its symbol and DSO.
fn strip_trailing_fields(s: &str) -> &str {
    [" IPC: ", " ilen: ", " insn: "]
        .iter()
        .filter_map(|m| s.find(m))
        .min()
        .map_or(s, |i| &s[..i])
}

/// `ip [sym[+0xoff]] [(dso)]`; the symbol may contain spaces, parentheses
/// and `+`.
fn parse_location<'a>(s: &'a str, what: &'static str) -> Result<Location<'a>, ParseError> {
    let (ip_tok, rest) = first_token(s);
    let ip = parse_hex(ip_tok).ok_or_else(|| ParseError::BadAddress {
        what,
        found: snippet(ip_tok),
    })?;
    let (sym_text, dso) = split_dso(rest.trim());
    let (sym, symoff) = split_symoff(sym_text);
    let known = |s: &'a str| Some(s).filter(|s| !s.is_empty() && *s != "[unknown]");
    Ok(Location {
        ip,
        sym: known(sym),
        symoff,
        dso: dso.and_then(known),
    })
}

/// The DSO is the trailing parenthesised group preceded by a space; a
/// C++ symbol's own `(int, char)` follows its name without one. Paths may
/// hold parentheses too (`/tmp/a (deleted)`), so the group is matched.
fn split_dso(s: &str) -> (&str, Option<&str>) {
    if !s.ends_with(')') {
        return (s, None);
    }
    let bytes = s.as_bytes();
    let mut depth = 0usize;
    for i in (0..bytes.len()).rev() {
        match bytes[i] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    if i == 0 || bytes[i - 1].is_ascii_whitespace() {
                        return (s[..i].trim_end(), Some(&s[i + 1..s.len() - 1]));
                    }
                    return (s, None);
                }
            }
            _ => {}
        }
    }
    (s, None)
}

/// `sym+0xoff`. An offset too long for 64 bits is garbage and dropped.
fn split_symoff(s: &str) -> (&str, Option<u64>) {
    if let Some(i) = s.rfind("+0x") {
        let hex = &s[i + 3..];
        if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return (s[..i].trim_end(), parse_hex(hex));
        }
    }
    (s, None)
}

/// The text after `error type` if `line` is an auxtrace error record:
/// ` instruction trace error type 1 ...` (`Instruction trace`, `unknown AUX`
/// in other perf versions).
fn error_record(line: &str) -> Option<&str> {
    const KEY: &str = " error type";
    let i = line.find(KEY)?;
    let name = &line[..i];
    let rest = &line[i + KEY.len()..];
    let named = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphabetic() || b == b' ');
    (named && (rest.is_empty() || rest.starts_with(' '))).then_some(rest)
}

/// `N [time S.NS] [machine_pid P vcpu V] cpu C pid P tid T ip IP code N: msg`.
/// Keys are read by name, so fields added by later perf versions are
/// skipped.
fn parse_error_record(rest: &str) -> Result<ScriptRecord<'_>, ParseError> {
    let mut toks = tokens(rest);
    if !toks.next().is_some_and(|(_, t)| is_digits(t)) {
        return Err(ParseError::BadErrorRecord("no error type"));
    }
    let (mut time, mut pid, mut tid, mut ip) = (None, None, None, None);
    let message = loop {
        let (Some((_, key)), Some((pos, value))) = (toks.next(), toks.next()) else {
            return Err(ParseError::BadErrorRecord(
                "no `code N:` before the message",
            ));
        };
        match key {
            "time" if value == "0" => {}
            "time" => {
                time = Some(parse_time(value).ok_or_else(|| ParseError::BadTime(snippet(value)))?)
            }
            "pid" => {
                pid = Some(parse_int(value).ok_or_else(|| ParseError::BadThread(snippet(value)))?)
            }
            "tid" => {
                tid = Some(parse_int(value).ok_or_else(|| ParseError::BadThread(snippet(value)))?)
            }
            "ip" => {
                let v = parse_hex(value).ok_or_else(|| ParseError::BadAddress {
                    what: "error",
                    found: snippet(value),
                })?;
                ip = Some(v).filter(|&v| v != 0);
            }
            "code" => break rest[pos + value.len()..].trim(),
            _ => {}
        }
    };
    let (Some(pid), Some(tid)) = (pid, tid) else {
        return Err(ParseError::BadErrorRecord("no pid and tid"));
    };
    Ok(ScriptRecord::Error {
        pid,
        tid,
        time,
        ip,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::event::UNKNOWN;
    use BranchFlags as F;

    fn path() -> &'static Path {
        Path::new("test.txt")
    }

    fn loc<'a>(
        ip: u64,
        sym: Option<&'a str>,
        symoff: Option<u64>,
        dso: Option<&'a str>,
    ) -> Location<'a> {
        Location {
            ip,
            sym,
            symoff,
            dso,
        }
    }

    fn parse(line: &str) -> ScriptRecord<'_> {
        match parse_line(line) {
            Ok(Some(rec)) => rec,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    /// Imports one branch line and returns its only event.
    fn one_event(line: &str) -> (Event, ScriptTrace) {
        let trace = import(line, path()).unwrap();
        assert_eq!(trace.threads.len(), 1);
        assert_eq!(trace.threads[0].events.len(), 1);
        (trace.threads[0].events[0], trace)
    }

    fn func(trace: &ScriptTrace, id: FuncId) -> (&str, &str) {
        let f = trace.funcs.get(id);
        (f.name.as_str(), f.module.as_str())
    }

    // magic-trace's perf-decode-parse cases, one test each. Their expected
    // `Trace` events become our `Branch` records and events; `Power`,
    // `Stacktrace_sample` and `Event_sample` are not branch events here.

    #[test]
    fn mt01_c_symbol() {
        let line = " 25375/25375 4509191.343298468:                            1   branches:uH:   call                     7f6fce0b71f4 __clock_gettime+0x24 (foo.so) =>     7ffd193838e0 __vdso_clock_gettime+0x0 (foo.so)";
        assert_eq!(
            parse(line),
            ScriptRecord::Branch {
                pid: 25375,
                tid: 25375,
                time: Some(4_509_191_343_298_468),
                flags: BranchFlags(F::BRANCH | F::CALL),
                from: loc(
                    0x7f6fce0b71f4,
                    Some("__clock_gettime"),
                    Some(0x24),
                    Some("foo.so")
                ),
                to: loc(
                    0x7ffd193838e0,
                    Some("__vdso_clock_gettime"),
                    Some(0),
                    Some("foo.so")
                ),
            }
        );
        let (e, t) = one_event(line);
        assert_eq!(e.kind, EventKind::Call);
        assert_eq!(
            (e.time, e.from, e.to),
            (4_509_191_343_298_468, 0x7f6fce0b71f4, 0x7ffd193838e0)
        );
        assert_eq!(func(&t, e.from_fn), ("__clock_gettime", "foo.so"));
        assert_eq!(func(&t, e.to_fn), ("__vdso_clock_gettime", "foo.so"));
        assert!(e.to_is_entry);
        assert!(!e.estimated);
        assert_eq!((t.threads[0].pid, t.threads[0].tid), (25375, 25375));
        assert_eq!(t.funcs.get(e.to_fn).entry, 0);
    }

    #[test]
    fn mt02_c_symbol_trace_start() {
        let line = " 25375/25375 4509191.343298468:                            1   branches:uH:   tr strt                             0 [unknown] (foo.so) =>     7f6fce0b71d0 __clock_gettime+0x0 (foo.so)";
        let ScriptRecord::Branch {
            flags, from, to, ..
        } = parse(line)
        else {
            panic!()
        };
        assert_eq!(flags, BranchFlags(F::BRANCH | F::TRACE_BEGIN));
        assert_eq!(from, loc(0, None, None, Some("foo.so")));
        assert_eq!(
            to,
            loc(
                0x7f6fce0b71d0,
                Some("__clock_gettime"),
                Some(0),
                Some("foo.so")
            )
        );
        let (e, t) = one_event(line);
        assert_eq!(e.kind, EventKind::TraceBegin);
        assert_eq!((e.from, e.to), (0, 0x7f6fce0b71d0));
        assert_eq!(e.from_fn, UNKNOWN);
        assert_eq!(func(&t, e.to_fn), ("__clock_gettime", "foo.so"));
        assert!(e.to_is_entry);
    }

    #[test]
    fn mt03_c_symbol_trace_start_jump() {
        let line = " 25375/25375 4509191.343298468:                            1   branches:uH:   tr strt jmp                         0 [unknown] (foo.so) =>     7f6fce0b71d0 __clock_gettime+0x0 (foo.so)";
        let ScriptRecord::Branch {
            pid,
            time,
            flags,
            from,
            to,
            ..
        } = parse(line)
        else {
            panic!()
        };
        assert_eq!((pid, time), (25375, Some(4_509_191_343_298_468)));
        assert_eq!(flags, BranchFlags(F::BRANCH | F::TRACE_BEGIN));
        assert_eq!((from.ip, to.ip), (0, 0x7f6fce0b71d0));
        let (e, _) = one_event(line);
        assert_eq!(e.kind, EventKind::TraceBegin);
        assert_eq!(e.to, 0x7f6fce0b71d0);
    }

    #[test]
    fn mt04_cpp_symbol() {
        let line = " 7166/7166  4512623.871133092:                            1   branches:uH:   call                           9bc6db a::B<a::C, a::D<a::E>, a::F, a::F, G::H, a::I>::run+0x1eb (foo.so) =>           9f68b0 J::K<int, std::string>+0x0 (foo.so)";
        assert_eq!(
            parse(line),
            ScriptRecord::Branch {
                pid: 7166,
                tid: 7166,
                time: Some(4_512_623_871_133_092),
                flags: BranchFlags(F::BRANCH | F::CALL),
                from: loc(
                    0x9bc6db,
                    Some("a::B<a::C, a::D<a::E>, a::F, a::F, G::H, a::I>::run"),
                    Some(0x1eb),
                    Some("foo.so")
                ),
                to: loc(
                    0x9f68b0,
                    Some("J::K<int, std::string>"),
                    Some(0),
                    Some("foo.so")
                ),
            }
        );
        let (e, t) = one_event(line);
        assert_eq!(e.kind, EventKind::Call);
        assert_eq!(
            func(&t, e.from_fn).0,
            "a::B<a::C, a::D<a::E>, a::F, a::F, G::H, a::I>::run"
        );
        assert_eq!(func(&t, e.to_fn).0, "J::K<int, std::string>");
    }

    #[test]
    fn mt05_ocaml_symbol() {
        let line = "2017001/2017001 761439.053336670:                            1   branches:uH:   call                     56234f77576b Base.Comparable.=_2352+0xb (foo.so) =>     56234f4bc7a0 caml_apply2+0x0 (foo.so)";
        assert_eq!(
            parse(line),
            ScriptRecord::Branch {
                pid: 2017001,
                tid: 2017001,
                time: Some(761_439_053_336_670),
                flags: BranchFlags(F::BRANCH | F::CALL),
                from: loc(
                    0x56234f77576b,
                    Some("Base.Comparable.=_2352"),
                    Some(0xb),
                    Some("foo.so")
                ),
                to: loc(0x56234f4bc7a0, Some("caml_apply2"), Some(0), Some("foo.so")),
            }
        );
        let (e, t) = one_event(line);
        assert_eq!(
            (e.kind, e.from, e.to),
            (EventKind::Call, 0x56234f77576b, 0x56234f4bc7a0)
        );
        assert_eq!(func(&t, e.from_fn).0, "Base.Comparable.=_2352");
    }

    #[test]
    fn mt06_manufactured_example_1() {
        let line = "2017001/2017001 761439.053336670:                            1   branches:uH:   call                     56234f77576b x => +0xb (foo.so) =>     56234f4bc7a0 caml_apply2+0x0 (foo.so)";
        let ScriptRecord::Branch { time, from, to, .. } = parse(line) else {
            panic!()
        };
        assert_eq!(time, Some(761_439_053_336_670));
        assert_eq!(
            from,
            loc(0x56234f77576b, Some("x =>"), Some(0xb), Some("foo.so"))
        );
        assert_eq!(
            to,
            loc(0x56234f4bc7a0, Some("caml_apply2"), Some(0), Some("foo.so"))
        );
        let (e, t) = one_event(line);
        assert_eq!(
            (e.kind, e.from, e.to),
            (EventKind::Call, 0x56234f77576b, 0x56234f4bc7a0)
        );
        assert_eq!(func(&t, e.from_fn).0, "x =>");
    }

    #[test]
    fn mt07_manufactured_example_2() {
        let line = "2017001/2017001 761439.053336670:                            1   branches:uH:   call                     56234f77576b x => +0xb (foo.so) =>     56234f4bc7a0 => +0x0 (foo.so)";
        let ScriptRecord::Branch {
            flags, from, to, ..
        } = parse(line)
        else {
            panic!()
        };
        assert_eq!(flags.kind(), EventKind::Call);
        assert_eq!(
            from,
            loc(0x56234f77576b, Some("x =>"), Some(0xb), Some("foo.so"))
        );
        assert_eq!(to, loc(0x56234f4bc7a0, Some("=>"), Some(0), Some("foo.so")));
        let (e, t) = one_event(line);
        assert_eq!((e.from, e.to), (0x56234f77576b, 0x56234f4bc7a0));
        assert_eq!(func(&t, e.to_fn).0, "=>");
    }

    #[test]
    fn mt08_manufactured_example_3() {
        let line = "2017001/2017001 761439.053336670:                            1   branches:uH:   call                     56234f77576b + +0xb (foo.so) =>     56234f4bc7a0 caml_apply2+0x0 (foo.so)";
        let ScriptRecord::Branch { from, to, .. } = parse(line) else {
            panic!()
        };
        assert_eq!(
            from,
            loc(0x56234f77576b, Some("+"), Some(0xb), Some("foo.so"))
        );
        assert_eq!(to.ip, 0x56234f4bc7a0);
        let (e, _) = one_event(line);
        assert_eq!(
            (e.kind, e.from, e.to),
            (EventKind::Call, 0x56234f77576b, 0x56234f4bc7a0)
        );
    }

    #[test]
    fn mt09_unknown_symbol_in_dso() {
        let line = "2017001/2017001 761439.053336670:                            1   branches:uH:   call                     56234f77576b [unknown] (foo.so) =>     56234f4bc7a0 caml_apply2+0x0 (foo.so)";
        let ScriptRecord::Branch { from, .. } = parse(line) else {
            panic!()
        };
        assert_eq!(from, loc(0x56234f77576b, None, None, Some("foo.so")));
        let (e, t) = one_event(line);
        assert_eq!(
            (e.kind, e.from, e.to),
            (EventKind::Call, 0x56234f77576b, 0x56234f4bc7a0)
        );
        // Unknown code in a known DSO is its own region, not the global one.
        assert_ne!(e.from_fn, UNKNOWN);
        assert_eq!(func(&t, e.from_fn), ("[unknown]", "foo.so"));
        assert_eq!(t.funcs.kind(e.from_fn), SpanKind::Call);
    }

    #[test]
    fn mt10_dso_with_spaces_in_it() {
        let line = "2017001/2017001 761439.053336670:                            1   branches:uH:   call                     56234f77576b [unknown] (this is a spaced dso.so) =>     56234f4bc7a0 caml_apply2+0x0 (foo.so)";
        let ScriptRecord::Branch { from, to, .. } = parse(line) else {
            panic!()
        };
        assert_eq!(
            from,
            loc(0x56234f77576b, None, None, Some("this is a spaced dso.so"))
        );
        assert_eq!(to.dso, Some("foo.so"));
        let (e, t) = one_event(line);
        assert_eq!(
            (e.kind, e.from, e.to),
            (EventKind::Call, 0x56234f77576b, 0x56234f4bc7a0)
        );
        assert_eq!(
            func(&t, e.from_fn),
            ("[unknown]", "this is a spaced dso.so")
        );
    }

    #[test]
    fn mt11_software_interrupts() {
        let line = "1907478/1909463 457407.880965552:          1                                branches:uH:   int                      564aa58813d4 Builtins_RunMicrotasks+0x554 (/usr/local/bin/workload) =>     564aa584fa00 Builtins_Call_ReceiverIsNotNullOrUndefined+0x0 (/usr/local/bin/workload)";
        let ScriptRecord::Branch {
            pid,
            tid,
            time,
            flags,
            from,
            to,
        } = parse(line)
        else {
            panic!()
        };
        assert_eq!(
            (pid, tid, time),
            (1907478, 1909463, Some(457_407_880_965_552))
        );
        assert_eq!(flags, BranchFlags(F::BRANCH | F::CALL | F::INTERRUPT));
        assert_eq!((from.ip, to.ip), (0x564aa58813d4, 0x564aa584fa00));
        let (e, t) = one_event(line);
        assert_eq!(e.kind, EventKind::Interrupt);
        assert_eq!((t.threads[0].pid, t.threads[0].tid), (1907478, 1909463));
        assert_eq!(
            func(&t, e.to_fn),
            (
                "Builtins_Call_ReceiverIsNotNullOrUndefined",
                "/usr/local/bin/workload"
            )
        );
    }

    /// A branch of the same thread before the error line, so the import
    /// has something to fall back on and a branch event to accept.
    fn import_error(pid_tid: &str, error_line: &str) -> ScriptTrace {
        let text = format!(
            "{pid_tid} 10.000000005:   1   branches:uH:   jmp   401000 f+0x1 (a.out) =>   401010 f+0x11 (a.out)\n{error_line}\n"
        );
        import(&text, path()).unwrap()
    }

    #[test]
    fn mt12_decode_error_with_a_timestamp() {
        let line = " instruction trace error type 1 time 47170.086912826 cpu -1 pid 293415 tid 293415 ip 0x7ffff7327730 code 7: Overflow packet";
        assert_eq!(
            parse(line),
            ScriptRecord::Error {
                pid: 293415,
                tid: 293415,
                time: Some(47_170_086_912_826),
                ip: Some(0x7ffff7327730),
                message: "Overflow packet",
            }
        );
        let t = import_error("293415/293415", line);
        let e = t.threads[0].events[1];
        assert_eq!(e.kind, EventKind::Error);
        assert_eq!((e.time, e.from), (47_170_086_912_826, 0x7ffff7327730));
        assert_eq!(func(&t, e.to_fn), ("[decode error: Overflow packet]", ""));
        assert_eq!(t.funcs.kind(e.to_fn), SpanKind::DecodeError);
    }

    #[test]
    fn mt13_decode_error_without_a_timestamp() {
        let line = " instruction trace error type 1 cpu -1 pid 293415 tid 293415 ip 0x7ffff7327730 code 7: Overflow packet";
        assert_eq!(
            parse(line),
            ScriptRecord::Error {
                pid: 293415,
                tid: 293415,
                time: None,
                ip: Some(0x7ffff7327730),
                message: "Overflow packet",
            }
        );
        // No time: the thread's previous event's.
        let t = import_error("293415/293415", line);
        let e = t.threads[0].events[1];
        assert_eq!((e.kind, e.time), (EventKind::Error, 10_000_000_005));
        // Another thread's error without a time has nothing to go on.
        let t = import_error("1/1", line);
        assert_eq!((t.threads[1].pid, t.threads[1].tid), (293415, 293415));
        assert_eq!(t.threads[1].events[0].time, 0);
    }

    #[test]
    fn mt14_lost_trace_data() {
        let line = " instruction trace error type 1 time 2651115.104731379 cpu -1 pid 1801680 tid 1801680 ip 0 code 8: Lost trace data";
        assert_eq!(
            parse(line),
            ScriptRecord::Error {
                pid: 1801680,
                tid: 1801680,
                time: Some(2_651_115_104_731_379),
                ip: None,
                message: "Lost trace data",
            }
        );
        let t = import_error("1801680/1801680", line);
        let e = t.threads[0].events[1];
        assert_eq!((e.kind, e.from, e.to), (EventKind::Error, 0, 0));
        assert_eq!(func(&t, e.to_fn).0, "[decode error: Lost trace data]");
    }

    #[test]
    fn mt15_never_ending_loop() {
        let line = " instruction trace error type 1 time 406036.830210719 cpu -1 pid 114362 tid 114362 ip 0xffffffffb0999ed5 code 10: Never-ending loop (refer perf config intel-pt.max-loops)";
        assert_eq!(
            parse(line),
            ScriptRecord::Error {
                pid: 114362,
                tid: 114362,
                time: Some(406_036_830_210_719),
                ip: Some(0xffffffffb0999ed5),
                message: "Never-ending loop (refer perf config intel-pt.max-loops)",
            }
        );
        let t = import_error("114362/114362", line);
        let e = t.threads[0].events[1];
        assert_eq!(e.from, 0xffffffffb0999ed5);
        assert_eq!(
            func(&t, e.to_fn).0,
            "[decode error: Never-ending loop (refer perf config intel-pt.max-loops)]"
        );
    }

    /// Lines that are not branch events: each parses to nothing and the
    /// import says there are no branch events (or only sampled stacks).
    fn assert_not_branches(text: &str) {
        for line in text.lines() {
            assert_eq!(parse_line(line), Ok(None), "{line:?}");
        }
        let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
        let expected = if text.contains("\n\t") {
            ScriptError::SampledStacks {
                path: path().to_path_buf(),
                samples: 1,
            }
        } else {
            ScriptError::NoBranchEvents {
                path: path().to_path_buf(),
                lines,
            }
        };
        assert_eq!(import(text, path()).unwrap_err(), expected);
    }

    #[test]
    fn sampled_call_stacks_alone_get_an_error_that_says_what_to_record() {
        let sample = "825432/825432 339457.445933440:       1 cycles:u: \n\t    7f5c0c875c60 _dl_open+0x0 (/usr/lib64/ld-2.28.so)\n\t          4008de main+0x87 (/home/demo)\n\n";
        let e = import(&sample.repeat(3), path()).unwrap_err();
        assert_eq!(
            e,
            ScriptError::SampledStacks {
                path: path().to_path_buf(),
                samples: 3
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("perf record -g") && msg.contains("intel_pt//u"),
            "{msg}"
        );
    }

    #[test]
    fn mt16_power_event_cbr() {
        assert_not_branches("2937048/2937048 448556.689322817:                                   1    cbr:                        cbr: 46 freq: 4606 MHz (159%)                   0                0 [unknown] ([unknown])");
    }

    #[test]
    fn mt17_cbr_event_with_double_spaces() {
        assert_not_branches("2420596/2420596 525062.244538101:          1                                        cbr:   syscall              cbr:  8 freq:  801 MHz ( 28%)                   0     7f77dc9f4646 __nanosleep+0x16 (/usr/lib64/libc-2.28.so)");
    }

    #[test]
    fn mt18_cbr_event_with_tr_end() {
        let line = "21302/21302 82318.700445693:         1           cbr:  tr end               cbr: 45 freq: 4500 MHz (118%)                   0          5368e58 __symbol+0x168 (/dev/foo.exe)";
        assert_not_branches(line);
        // Without the event name it is still no branch: no target.
        assert_eq!(
            parse_line(&line.replace("cbr:  tr end", "tr end")),
            Ok(None)
        );
    }

    #[test]
    fn mt19_power_event_psb_offs() {
        assert_not_branches("2937048/2937048 448556.689403475:                             1          psb:                        psb offs: 0x4be8                                0     7f068fbfd330 mmap64+0x50 (/usr/lib64/ld-2.28.so)");
    }

    #[test]
    fn mt20_sampled_callstack() {
        assert_not_branches(
            "2060126/2060126 178090.391624068:     555555 cycles:u:
\tffffffff97201100 [unknown] ([unknown])
\t7f9bd48c1d80 _dl_setup_hash+0x0 (/usr/lib64/ld-2.28.so)
\t7f9bd48bd18f _dl_map_object_from_fd+0xb8f (/usr/lib64/ld-2.28.so)
\t7f9bd48bf6b0 _dl_map_object+0x1e0 (/usr/lib64/ld-2.28.so)
\t7f9bd48ca184 dl_open_worker_begin+0xa4 (/usr/lib64/ld-2.28.so)
\t7f9bd44521a2 _dl_catch_exception+0x82 (/usr/lib64/libc-2.28.so)
\t7f9bd48c9ac2 dl_open_worker+0x32 (/usr/lib64/ld-2.28.so)
\t7f9bd44521a2 _dl_catch_exception+0x82 (/usr/lib64/libc-2.28.so)
\t7f9bd48c9d0c _dl_open+0xac (/usr/lib64/ld-2.28.so)
\t7f9bd46ae1e8 dlopen_doit+0x58 (/usr/lib64/libdl-2.28.so)
\t7f9bd44521a2 _dl_catch_exception+0x82 (/usr/lib64/libc-2.28.so)
\t7f9bd445225e _dl_catch_error+0x2e (/usr/lib64/libc-2.28.so)
\t7f9bd46ae964 _dlerror_run+0x64 (/usr/lib64/libdl-2.28.so)
\t7f9bd46ae285 dlopen@@GLIBC_2.2.5+0x45 (/usr/lib64/libdl-2.28.so)
\t4008de main+0x87 (/home/demo)
",
        );
    }

    #[test]
    fn mt21_cache_misses_event_with_ipt() {
        assert_not_branches("3871580/3871580 430720.265503976:         50                   cache-misses/period=50/u:                                      0     7fca9945c595 __sleep+0x55 (/usr/lib64/libc-2.28.so)");
    }

    #[test]
    fn mt22_cache_misses_event_with_sampling() {
        assert_not_branches(
            "3871580/3871580 431043.387175119:         50 cache-misses/period=50/u: 
\t7fca999481a0 _dl_unmap+0x0 (/usr/lib64/ld-2.28.so)
\t7fca999454cc _dl_close_worker+0x83c (/usr/lib64/ld-2.28.so)
\t7fca99945dbd _dl_close+0x2d (/usr/lib64/ld-2.28.so)
\t7fca994cc1a2 _dl_catch_exception+0x82 (/usr/lib64/libc-2.28.so)
\t7fca994cc25e _dl_catch_error+0x2e (/usr/lib64/libc-2.28.so)
\t7fca99728964 _dlerror_run+0x64 (/usr/lib64/libdl-2.28.so)
\t7fca99728313 dlclose+0x23 (/usr/lib64/libdl-2.28.so)
\t4009b7 main+0x160 (/usr/local/home/demo)
",
        );
    }

    #[test]
    fn mt23_branch_misses_event_with_ipt() {
        assert_not_branches("3871580/3871580 431228.526799230:         50                  branch-misses/period=50/u:                                      0     7fca99943c60 _dl_open+0x0 (/usr/lib64/ld-2.28.so)");
    }

    #[test]
    fn mt24_perf_reports_a_garbage_symbol_offset() {
        let line = " 25375/25375 4509191.343298468:                            1   branches:uH:   call                     7f6fce0b71f4 [unknown] (foo.so) =>     7ffd193838e0 memcpy@plt+0xffffffffff22f000 (foo.so)";
        let ScriptRecord::Branch { from, to, .. } = parse(line) else {
            panic!()
        };
        assert_eq!(from, loc(0x7f6fce0b71f4, None, None, Some("foo.so")));
        assert_eq!(
            to,
            loc(
                0x7ffd193838e0,
                Some("memcpy@plt"),
                Some(0xffffffffff22f000),
                Some("foo.so")
            )
        );
        let (e, t) = one_event(line);
        assert_eq!(
            (e.kind, e.from, e.to),
            (EventKind::Call, 0x7f6fce0b71f4, 0x7ffd193838e0)
        );
        assert_eq!(func(&t, e.to_fn), ("memcpy@plt", "foo.so"));
        assert!(!e.to_is_entry);
    }

    #[test]
    fn mt25_tr_end_async() {
        let line = " 25375/25375 4509191.343298468:                            1   branches:uH:   tr end  async                     7f6fce0b71f4 [unknown] (foo.so) =>     0 [unknown] ([unknown])";
        let ScriptRecord::Branch {
            time,
            flags,
            from,
            to,
            ..
        } = parse(line)
        else {
            panic!()
        };
        assert_eq!(time, Some(4_509_191_343_298_468));
        assert_eq!(flags, BranchFlags(F::BRANCH | F::ASYNC | F::TRACE_END));
        assert_eq!(from, loc(0x7f6fce0b71f4, None, None, Some("foo.so")));
        assert_eq!(to, loc(0, None, None, None));
        let (e, t) = one_event(line);
        assert_eq!(e.kind, EventKind::TraceEnd(EndReason::Async));
        assert_eq!((e.from, e.to), (0x7f6fce0b71f4, 0));
        assert_eq!(func(&t, e.from_fn), ("[unknown]", "foo.so"));
        assert_eq!(e.to_fn, UNKNOWN);
        assert!(!e.to_is_entry);
    }

    fn flag_line(flags: &str) -> String {
        format!("1/1 1.000000001:  1  branches:uH:   {flags}   401000 f+0x0 (a.out) =>   401010 g+0x0 (a.out)")
    }

    #[test]
    fn every_flag_name_maps() {
        use EndReason::{Async, Other};
        use EventKind::*;
        let cases: &[(&str, u32, EventKind)] = &[
            ("call", F::CALL, Call),
            ("return", F::RETURN, Return),
            ("jcc", F::CONDITIONAL, Jump),
            ("jmp", 0, Jump),
            ("int", F::CALL | F::INTERRUPT, Interrupt),
            ("iret", F::RETURN | F::INTERRUPT, KernelReturn),
            ("syscall", F::CALL | F::SYSCALLRET, Syscall),
            ("sysret", F::RETURN | F::SYSCALLRET, KernelReturn),
            ("async", F::ASYNC, Interrupt),
            ("hw int", F::CALL | F::ASYNC | F::INTERRUPT, Interrupt),
            ("tx abrt", F::TX_ABORT, Jump),
            ("tr strt", F::TRACE_BEGIN, TraceBegin),
            ("tr end", F::TRACE_END, TraceEnd(Other)),
            ("vmentry", F::CALL | F::VMENTRY, Jump),
            ("vmexit", F::CALL | F::VMEXIT, Jump),
            ("br miss", F::BRANCH_MISS, Jump),
            ("tr strt jmp", F::TRACE_BEGIN, TraceBegin),
            ("tr strt call", F::TRACE_BEGIN | F::CALL, TraceBegin),
            (
                "tr strt syscall",
                F::TRACE_BEGIN | F::CALL | F::SYSCALLRET,
                TraceBegin,
            ),
            (
                "tr strt tr end",
                F::TRACE_BEGIN | F::TRACE_END,
                TraceEnd(Other),
            ),
            (
                "tr end  syscall",
                F::TRACE_END | F::CALL | F::SYSCALLRET,
                TraceEnd(EndReason::Syscall),
            ),
            ("tr end  async", F::TRACE_END | F::ASYNC, TraceEnd(Async)),
            (
                "tr end  hw int",
                F::TRACE_END | F::CALL | F::ASYNC | F::INTERRUPT,
                TraceEnd(Async),
            ),
            (
                "tr end  int",
                F::TRACE_END | F::CALL | F::INTERRUPT,
                TraceEnd(Async),
            ),
            ("tr end  call", F::TRACE_END | F::CALL, TraceEnd(Other)),
            ("tr end  return", F::TRACE_END | F::RETURN, TraceEnd(Other)),
            ("tr end  jmp", F::TRACE_END, TraceEnd(Other)),
            (
                "tr end  jcc",
                F::TRACE_END | F::CONDITIONAL,
                TraceEnd(Other),
            ),
            (
                "tr end  iret",
                F::TRACE_END | F::RETURN | F::INTERRUPT,
                TraceEnd(Other),
            ),
            (
                "tr end  sysret",
                F::TRACE_END | F::RETURN | F::SYSCALLRET,
                TraceEnd(Other),
            ),
            ("jcc                  (x)", F::CONDITIONAL | F::IN_TX, Jump),
            (
                "call (xDt)",
                F::CALL | F::IN_TX | F::INTR_DISABLE | F::INTR_TOGGLE,
                Call,
            ),
            ("return ()", F::RETURN, Return),
            // perf's letters for combinations without a name.
            (
                "bcyih",
                F::CALL | F::ASYNC | F::INTERRUPT | F::VMEXIT,
                Interrupt,
            ),
            ("brx", F::RETURN | F::IN_TX, Return),
        ];
        for &(text, bits, kind) in cases {
            let line = flag_line(text);
            let ScriptRecord::Branch {
                flags, from, to, ..
            } = parse(&line)
            else {
                panic!("{text}")
            };
            assert_eq!(flags, BranchFlags(F::BRANCH | bits), "{text}");
            assert_eq!(flags.kind(), kind, "{text}");
            assert_eq!((from.ip, to.ip), (0x401000, 0x401010), "{text}");
            let (e, _) = one_event(&line);
            assert_eq!(e.kind, kind, "{text}");
        }
    }

    #[test]
    fn header_variants() {
        let tail = "call   401000 main+0x10 (/tmp/demo) =>   401100 f+0x0 (/tmp/demo)";
        let cases: &[(&str, i32, i32, Option<u64>)] = &[
            // The default field list: comm and cpu, 6-digit time.
            (
                "            demo 1234/1235 [003] 12.345678:   1 branches:u:",
                1234,
                1235,
                Some(12_345_678_000),
            ),
            (
                "     Web Content 99/100 [001]     5.000001: branches:u:",
                99,
                100,
                Some(5_000_001_000),
            ),
            // No period, no event name, no pid, pid only, no time.
            ("1/2 3.000000004:", 1, 2, Some(3_000_000_004)),
            ("5.5:   1 branches:uH:", -1, -1, Some(5_500_000_000)),
            ("  1234 5.5: branches:", 1234, 1234, Some(5_500_000_000)),
            ("1234/1234   1 branches:u:", 1234, 1234, None),
            ("1234/1234", 1234, 1234, None),
            ("", -1, -1, None),
            ("2/3 [000]", 2, 3, None),
            ("perf-exec 2/3 [000] 0.1:", 2, 3, Some(100_000_000)),
        ];
        for &(head, pid, tid, time) in cases {
            let line = format!("{head} {tail}");
            let rec = parse(&line);
            assert_eq!(
                rec,
                ScriptRecord::Branch {
                    pid,
                    tid,
                    time,
                    flags: BranchFlags(F::BRANCH | F::CALL),
                    from: loc(0x401000, Some("main"), Some(0x10), Some("/tmp/demo")),
                    to: loc(0x401100, Some("f"), Some(0), Some("/tmp/demo")),
                },
                "{line:?}"
            );
        }
    }

    #[test]
    fn location_variants() {
        let cases: &[(&str, Location)] = &[
            // Old perf: no DSO.
            (
                "7faea66c0e85 _dl_map_object_from_fd+0x1065",
                loc(
                    0x7faea66c0e85,
                    Some("_dl_map_object_from_fd"),
                    Some(0x1065),
                    None,
                ),
            ),
            ("0 [unknown]", loc(0, None, None, None)),
            // Kernel addresses and DSOs.
            (
                "ffffffffae200ab0 asm_exc_page_fault+0x0 ([kernel.kallsyms])",
                loc(
                    0xffffffffae200ab0,
                    Some("asm_exc_page_fault"),
                    Some(0),
                    Some("[kernel.kallsyms]"),
                ),
            ),
            // No symbol, or no offset.
            ("401000", loc(0x401000, None, None, None)),
            (
                "401000 (/lib/x.so)",
                loc(0x401000, None, None, Some("/lib/x.so")),
            ),
            (
                "401000 main (/lib/x.so)",
                loc(0x401000, Some("main"), None, Some("/lib/x.so")),
            ),
            // C++ parameter lists are no DSO; nested parentheses in a DSO are.
            (
                "401000 foo(int, char) const+0x10 (/lib/x.so)",
                loc(
                    0x401000,
                    Some("foo(int, char) const"),
                    Some(0x10),
                    Some("/lib/x.so"),
                ),
            ),
            (
                "401000 foo(int, char) const (/lib/x.so)",
                loc(
                    0x401000,
                    Some("foo(int, char) const"),
                    None,
                    Some("/lib/x.so"),
                ),
            ),
            (
                "401000 foo(int, char)",
                loc(0x401000, Some("foo(int, char)"), None, None),
            ),
            (
                "401000 (anonymous namespace)::f(int)+0x1",
                loc(
                    0x401000,
                    Some("(anonymous namespace)::f(int)"),
                    Some(1),
                    None,
                ),
            ),
            (
                "401000 (anonymous namespace)::f(int)+0x1 (/a b/c (deleted))",
                loc(
                    0x401000,
                    Some("(anonymous namespace)::f(int)"),
                    Some(1),
                    Some("/a b/c (deleted)"),
                ),
            ),
            (
                "401000 operator()+0x2 (x)",
                loc(0x401000, Some("operator()"), Some(2), Some("x")),
            ),
            // Garbage offsets: too long, or not hex.
            (
                "401000 f+0x11112222333344445 (x)",
                loc(0x401000, Some("f"), None, Some("x")),
            ),
            (
                "401000 f+0xzz (x)",
                loc(0x401000, Some("f+0xzz"), None, Some("x")),
            ),
            (
                "401000 f+0x (x)",
                loc(0x401000, Some("f+0x"), None, Some("x")),
            ),
            // Unicode in names.
            (
                "401000 größe+0x3 (/tmp/ünï côdé.so)",
                loc(0x401000, Some("größe"), Some(3), Some("/tmp/ünï côdé.so")),
            ),
            (
                "0x401000 f+0x3 ([unknown])",
                loc(0x401000, Some("f"), Some(3), None),
            ),
        ];
        for (text, want) in cases {
            let line = format!("1/1 1.0: jmp 10 a+0x0 => {text}");
            let ScriptRecord::Branch { to, .. } = parse(&line) else {
                panic!("{line}")
            };
            assert_eq!(&to, want, "{text:?}");
            let line = format!("1/1 1.0: jmp {text} => 10 a+0x0");
            let ScriptRecord::Branch { from, .. } = parse(&line) else {
                panic!("{line}")
            };
            assert_eq!(&from, want, "{text:?}");
        }
    }

    #[test]
    fn fields_after_the_target_are_ignored() {
        let want = loc(0x401010, Some("g"), Some(0), Some("a.out"));
        for extra in [
            "  IPC: 0.50 (10/20) ",
            " ilen: 5",
            " ilen: 5 insn: e8 00 00 00 00",
            " insn: 74 05",
        ] {
            let line = format!("{}{extra}", flag_line("call"));
            let ScriptRecord::Branch { to, .. } = parse(&line) else {
                panic!("{line}")
            };
            assert_eq!(to, want, "{extra:?}");
        }
    }

    #[test]
    fn old_format_without_event_or_dso() {
        let text = "681400/681400 2065408.180095561:   tr strt                             0 [unknown] =>     7faea66c088d _dl_map_object_from_fd+0xa6d
681400/681400 2065408.180097250:   syscall                  7faea66dbbf9 __GI___close_nocancel+0x9 => ffffffffae200000 __entry_text_start+0x0
681400/681400 2065408.180095842:   hw int                   7faea66c0a6e _dl_map_object_from_fd+0xc4e => ffffffffae200ab0 asm_exc_page_fault+0x0
1439745/1439745 2472089.651286160:                            1   branches:uH:   iret                 ffffffffae2010a7 native_irq_return_iret+0x0 (foo.so) =>     7f5948676e18 _fini+0x0 (foo.so)
3268985/3268994 3444853.363323669:   tr end  syscall                4619e9 runtime.exit.abi0+0x9 =>                0 [unknown]\r
";
        let t = import(text, path()).unwrap();
        let kinds: Vec<_> = t
            .threads
            .iter()
            .flat_map(|th| th.events.iter().map(|e| e.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                EventKind::TraceBegin,
                EventKind::Syscall,
                EventKind::Interrupt,
                EventKind::KernelReturn,
                EventKind::TraceEnd(EndReason::Syscall),
            ]
        );
        let e = t.threads[0].events[1];
        assert_eq!(func(&t, e.to_fn), ("__entry_text_start", ""));
        assert!(e.to_is_entry);
        assert_eq!((t.threads[2].pid, t.threads[2].tid), (3268985, 3268994));
        assert_eq!((t.skipped, t.malformed), (0, 0));
    }

    #[test]
    fn error_record_variants() {
        let cases: &[(&str, ScriptRecord)] = &[
            // perf prints `time 0` when it has none.
            (
                " instruction trace error type 1 time 0 cpu 2 pid 5 tid 6 ip 0x400000 code 6: Trace doesn't match instruction",
                ScriptRecord::Error { pid: 5, tid: 6, time: None, ip: Some(0x400000), message: "Trace doesn't match instruction" },
            ),
            // perf 6.x adds guest fields.
            (
                " instruction trace error type 1 time 1.000000002 machine_pid 7 vcpu 1 cpu -1 pid 5 tid 6 ip 0 code 8: Lost trace data",
                ScriptRecord::Error { pid: 5, tid: 6, time: Some(1_000_000_002), ip: None, message: "Lost trace data" },
            ),
            // Older perf capitalised the name; an unknown AUX type is named so.
            (
                " Instruction trace error type 1 cpu 0 pid 5 tid 5 ip 0x1 code 1: Unexpected packet",
                ScriptRecord::Error { pid: 5, tid: 5, time: None, ip: Some(1), message: "Unexpected packet" },
            ),
            (
                " unknown AUX error type 9 cpu 0 pid -1 tid -1 ip 0 code 1:",
                ScriptRecord::Error { pid: -1, tid: -1, time: None, ip: None, message: "" },
            ),
            // As in magic-trace's page-fault case: the rest is the message.
            (
                " instruction trace error type 1 time 2472089.651285037 cpu -1 pid 1439745 tid 1439745 ip 0x7f5948676e18 code 7: Overflow packet (foo.so)",
                ScriptRecord::Error { pid: 1439745, tid: 1439745, time: Some(2_472_089_651_285_037), ip: Some(0x7f5948676e18), message: "Overflow packet (foo.so)" },
            ),
        ];
        for (line, want) in cases {
            assert_eq!(&parse(line), want, "{line:?}");
        }
        let bad: &[(&str, ParseError)] = &[
            (
                " instruction trace error type 1 time 47170.08 cpu -1",
                ParseError::BadErrorRecord("no `code N:` before the message"),
            ),
            (
                " instruction trace error type",
                ParseError::BadErrorRecord("no error type"),
            ),
            (
                " instruction trace error type 1 cpu 0 code 1: x",
                ParseError::BadErrorRecord("no pid and tid"),
            ),
            (
                " instruction trace error type 1 cpu -1 pid x tid 1 ip 0 code 1: m",
                ParseError::BadThread("x".into()),
            ),
            (
                " instruction trace error type 1 time 1.x cpu -1 pid 1 tid 1 ip 0 code 1: m",
                ParseError::BadTime("1.x".into()),
            ),
            (
                " instruction trace error type 1 cpu -1 pid 1 tid 1 ip zz code 1: m",
                ParseError::BadAddress {
                    what: "error",
                    found: "zz".into(),
                },
            ),
        ];
        for (line, want) in bad {
            assert_eq!(parse_line(line).as_ref(), Err(want), "{line:?}");
        }
        // A symbol that happens to say "error type" is no error record.
        let line = flag_line("call").replace("g+0x0", "an error type+0x0");
        assert!(matches!(parse(&line), ScriptRecord::Branch { .. }));
    }

    #[test]
    fn malformed_lines() {
        let head = "25375/25375 4509191.343298468:  1  branches:uH:";
        let cases: &[(String, ParseError)] = &[
            (
                format!("{head}   call   7f6fce0b71f4 __clock_gett"),
                ParseError::NoArrow,
            ),
            (
                format!("{head}   call   7f6fce0b71f4 f (a.so) =>   "),
                ParseError::NoArrow,
            ),
            (
                format!("{head}   frob  401000 f => 401010 g"),
                ParseError::UnknownFlag("frob".into()),
            ),
            (
                format!("{head}   tr frob  401000 f => 401010 g"),
                ParseError::UnknownFlag("tr".into()),
            ),
            (
                format!("{head}   401000 f => 401010 g"),
                ParseError::NoFlags,
            ),
            (head.to_string(), ParseError::NoFlags),
            (
                format!("{head}   call"),
                ParseError::BadAddress {
                    what: "source",
                    found: "".into(),
                },
            ),
            (
                format!("{head}   call  zz f => 401010 g"),
                ParseError::BadAddress {
                    what: "source",
                    found: "zz".into(),
                },
            ),
            (
                "1/1 99999999999999999999.5: branches: call 1 => 2".into(),
                ParseError::BadTime("99999999999999999999.5".into()),
            ),
            (
                "99999999999/1 1.0: branches: call 1 => 2".into(),
                ParseError::BadThread("99999999999/1".into()),
            ),
            // Without an event name: shaped like a branch up to the cut.
            (
                "681400/681400 2065408.180095586:   jcc   7faea66c0992 _dl_map".into(),
                ParseError::NoArrow,
            ),
            (
                "681400/681400 2065408.180095586:   7faea66c0992 f => 7faea66c0993 g".into(),
                ParseError::NoFlags,
            ),
        ];
        for (line, want) in cases {
            assert_eq!(parse_line(line).as_ref(), Err(want), "{line:?}");
        }
        let ignored = [
            "",
            "   ",
            "\t",
            "Warning:",
            "Warning: 3 instruction trace errors",
            "  1234 instruction trace errors",
            "Call 0 main",
            "=>",
            " => 0",
            "1/1",
            "1.5:",
            "681400/681400 2065408.180095586:   jcc",
            "日本語 => ü",
            "\u{0}\u{7f}",
            "((((",
            "))))",
            ": : :",
            "1/1 1.0: psb offs: 0x0",
        ];
        for line in ignored {
            assert_eq!(parse_line(line), Ok(None), "{line:?}");
        }
        // Error messages stay short whatever the garbage.
        let long = format!("{head}   call  {} f => 401010 g", "é".repeat(100));
        let Err(ParseError::BadAddress { found, .. }) = parse_line(&long) else {
            panic!()
        };
        assert_eq!(found.chars().count(), 41);
    }

    /// Every prefix of every line, cut at each char boundary, parses or
    /// fails without panicking.
    fn truncations_do_not_panic(line: &str) {
        for (i, _) in line.char_indices() {
            let _ = parse_line(&line[..i]);
            let _ = parse_line(&line[i..]);
        }
        let _ = parse_line(line);
    }

    #[test]
    fn truncated_lines_do_not_panic() {
        let lines = [
            " 25375/25375 4509191.343298468:                            1   branches:uH:   call                     7f6fce0b71f4 __clock_gettime+0x24 (foo.so) =>     7ffd193838e0 __vdso_clock_gettime+0x0 (foo.so)",
            "2017001/2017001 761439.053336670:                            1   branches:uH:   call                     56234f77576b x => +0xb (foo.so) =>     56234f4bc7a0 => +0x0 (foo.so)",
            " instruction trace error type 1 time 406036.830210719 cpu -1 pid 114362 tid 114362 ip 0xffffffffb0999ed5 code 10: Never-ending loop (refer perf config intel-pt.max-loops)",
            "21302/21302 82318.700445693:         1           cbr:  tr end               cbr: 45 freq: 4500 MHz (118%)                   0          5368e58 __symbol+0x168 (/dev/foo.exe)",
            "  ünï 1/2 [003] 1.5:  1 branches:u:  tr end  hw int  (xD)  401000 größe(ïnt)+0x3 (/tmp/a (b) ç) => 0 [unknown] ([unknown])",
            "3268985/3268994 3444853.363323669:   bcyih   4619e9 runtime.exit.abi0+0x9 =>                0 [unknown]",
        ];
        for line in lines {
            truncations_do_not_panic(line);
        }
    }

    #[test]
    fn time_parsing() {
        assert_eq!(parse_time("1.5"), Some(1_500_000_000));
        assert_eq!(parse_time("0.000000001"), Some(1));
        assert_eq!(parse_time("12.123456"), Some(12_123_456_000));
        assert_eq!(parse_time("1.1234567891"), Some(1_123_456_789));
        assert_eq!(parse_time("7"), Some(7_000_000_000));
        assert_eq!(parse_time("18446744073.709551615"), Some(u64::MAX));
        assert_eq!(parse_time("18446744073.709551616"), None);
        assert_eq!(parse_time("18446744074.0"), None);
        for bad in ["", ".5", "1.-5", "+1.5", "1.5e3", "a.b", "1..2"] {
            assert_eq!(parse_time(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn functions_are_named_by_symbol_and_dso() {
        let text = "1/1 1.0: call 401000 f+0x1 (a.so) => 402000 g+0x0 (a.so)
1/1 1.1: call 401000 f+0x1 (a.so) => 402010 g+0xffffffffff22f000 (a.so)
1/1 1.2: call 401000 f+0x1 (a.so) => 502000 g+0x0 (b.so)
1/1 1.3: jmp 401000 [unknown] ([unknown]) => 0 [unknown] ([unknown])
1/1 1.4: jmp 401000 => 401002
";
        let t = import(text, path()).unwrap();
        let ev = &t.threads[0].events;
        // Same name and DSO: one function, whatever perf says the offset is.
        assert_eq!(ev[0].to_fn, ev[1].to_fn);
        assert!(ev[0].to_is_entry && !ev[1].to_is_entry);
        assert_ne!(ev[0].to_fn, ev[2].to_fn);
        assert_eq!(func(&t, ev[2].to_fn), ("g", "b.so"));
        // Unknown symbol and DSO: the one `[unknown]`.
        assert_eq!((ev[3].from_fn, ev[3].to_fn), (UNKNOWN, UNKNOWN));
        assert_eq!((ev[4].from_fn, ev[4].to_fn), (UNKNOWN, UNKNOWN));
        assert_eq!(t.funcs.iter().filter(|(_, f)| f.name == "g").count(), 2);
        assert!(t.funcs.iter().all(|(_, f)| f.entry == 0));
    }

    #[test]
    fn threads_in_order_of_first_appearance() {
        let text = "7/8 1.0: call 401000 f => 402000 g
 instruction trace error type 1 time 1.5 cpu 0 pid 3 tid 3 ip 0 code 8: Lost trace data
7/7 2.0: return 402000 g => 401000 f
7/8 3.0: return 402000 g => 401000 f
3/3 4.0: tr strt 0 [unknown] => 401000 f
7/8 branches: jmp 401000 f => 401001 f
";
        let t = import(text, path()).unwrap();
        let ids: Vec<_> = t.threads.iter().map(|th| (th.pid, th.tid)).collect();
        assert_eq!(ids, [(7, 8), (3, 3), (7, 7)]);
        let times = |i: usize| -> Vec<u64> { t.threads[i].events.iter().map(|e| e.time).collect() };
        // A line without a time takes its thread's previous time.
        assert_eq!(times(0), [1_000_000_000, 3_000_000_000, 3_000_000_000]);
        assert_eq!(times(1), [1_500_000_000, 4_000_000_000]);
        assert_eq!(t.threads[1].events[0].kind, EventKind::Error);
        assert_eq!(times(2), [2_000_000_000]);
    }

    #[test]
    fn threads_are_told_apart_by_tid() {
        // perf prints pid -1 until it knows the process; a mangled pid (as
        // in magic-trace's old hello-world input) does not split a thread.
        let text = "-1/1234 1.0: call 401000 f => 402000 g
77/1234 2.0: return 402000 g => 401000 f
7/1234 3.0: call 401000 f => 402000 g
5.0: call 401000 f => 402000 g
 instruction trace error type 1 cpu 0 pid 9 tid -1 ip 0 code 8: Lost trace data
 instruction trace error type 1 cpu 0 pid 8 tid -1 ip 0 code 8: Lost trace data
";
        let t = import(text, path()).unwrap();
        let ids: Vec<_> = t
            .threads
            .iter()
            .map(|th| (th.pid, th.tid, th.events.len()))
            .collect();
        assert_eq!(ids, [(77, 1234, 3), (-1, -1, 1), (9, -1, 1), (8, -1, 1)]);
    }

    #[test]
    fn import_errors_and_tolerance() {
        let p = path().to_path_buf();
        assert_eq!(
            import("", path()).unwrap_err(),
            ScriptError::Empty { path: p.clone() }
        );
        assert_eq!(
            import(" \n\t\n", path()).unwrap_err(),
            ScriptError::Empty { path: p.clone() }
        );
        // Errors alone are no branch events.
        let err = import(
            " instruction trace error type 1 cpu -1 pid 1 tid 1 ip 0 code 8: Lost trace data\n",
            path(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            ScriptError::NoBranchEvents {
                path: p.clone(),
                lines: 1
            }
        );
        assert!(err
            .to_string()
            .starts_with("test.txt: none of its 1 lines is a perf script branch event"));
        // Nothing readable: the first unreadable line explains why.
        let text = "Warning: something\n1/1 1.0: branches: 401000 f => 402000 g\n1/1 1.0: branches: 401000 f => 402000 g\n";
        let err = import(text, path()).unwrap_err();
        assert_eq!(
            err,
            ScriptError::Parse {
                path: p.clone(),
                line: 2,
                error: ParseError::NoFlags
            }
        );
        assert_eq!(
            err.to_string(),
            "test.txt:2: no branch flags before the source address (perf script needs `-F +flags`)"
        );
        // Garbage among branches is skipped and counted.
        let text = "1/1 1.0: branches: call 401000 f => 402000 g\n\n1/1 2.0: branches: call 401000 f\nnot perf\n1/1 3.0: branches: return 402000 g => 401000 f\n";
        let t = import(text, path()).unwrap();
        assert_eq!(t.threads[0].events.len(), 2);
        assert_eq!((t.skipped, t.malformed), (2, 1));
        assert_eq!(
            t.first_malformed,
            Some(ScriptError::Parse {
                path: p.clone(),
                line: 3,
                error: ParseError::NoArrow
            })
        );
    }

    /// magic-trace's "decode error during memmove" input, imported whole.
    #[test]
    fn end_to_end_decode_error_during_memmove() {
        let text = "293415/293415 47170.086912805:                            1   branches:uH:   jcc                            40ac3f itch_bbo::book::Book::add_order+0xef (foo.so) =>           40ac20 itch_bbo::book::Book::add_order+0xd0 (foo.so)
293415/293415 47170.086912815:                            1   branches:uH:   jmp                            40ac4d itch_bbo::book::Book::add_order+0xfd (foo.so) =>           40aec5 itch_bbo::book::Book::add_order+0x375 (foo.so)
293415/293415 47170.086912815:                            1   branches:uH:   jcc                            40af03 itch_bbo::book::Book::add_order+0x3b3 (foo.so) =>           40b012 itch_bbo::book::Book::add_order+0x4c2 (foo.so)
293415/293415 47170.086912824:                            1   branches:uH:   call                           40b06c itch_bbo::book::Book::add_order+0x51c (foo.so) =>     7ffff7327730 __memmove_avx_unaligned_erms+0x0 (foo.so)
293415/293415 47170.086912825:                            1   branches:uH:   jcc                      7ffff732773b __memmove_avx_unaligned_erms+0xb (foo.so) =>     7ffff7327786 __memmove_avx_unaligned_erms+0x56 (foo.so)
293415/293415 47170.086912825:                            1   branches:uH:   jcc                      7ffff732778e __memmove_avx_unaligned_erms+0x5e (foo.so) =>     7ffff73277b7 __memmove_avx_unaligned_erms+0x87 (foo.so)
293415/293415 47170.086912825:                            1   branches:uH:   return                   7ffff73277c7 __memmove_avx_unaligned_erms+0x97 (foo.so) =>           40b072 itch_bbo::book::Book::add_order+0x522 (foo.so)
293415/293415 47170.086912826:                            1   branches:uH:   call                           40b093 itch_bbo::book::Book::add_order+0x543 (foo.so) =>     7ffff7327730 __memmove_avx_unaligned_erms+0x0 (foo.so)
 instruction trace error type 1 time 47170.086912826 cpu -1 pid 293415 tid 293415 ip 0x7ffff7327730 code 7: Overflow packet
293415/293415 47170.086912872:                            1   branches:uH:   tr strt                             0 [unknown] (foo.so) =>     7ffff7327786 __memmove_avx_unaligned_erms+0x56 (foo.so)
293415/293415 47170.086912944:                            1   branches:uH:   jcc                      7ffff7327793 __memmove_avx_unaligned_erms+0x63 (foo.so) =>     7ffff73277c8 __memmove_avx_unaligned_erms+0x98 (foo.so)
293415/293415 47170.086912946:                            1   branches:uH:   return                   7ffff73277d4 __memmove_avx_unaligned_erms+0xa4 (foo.so) =>           40b099 itch_bbo::book::Book::add_order+0x549 (foo.so)
293415/293415 47170.086912946:                            1   branches:uH:   jmp                            40b0a8 itch_bbo::book::Book::add_order+0x558 (foo.so) =>           40b1ba itch_bbo::book::Book::add_order+0x66a (foo.so)
293415/293415 47170.086912946:                            1   branches:uH:   jmp                            40b1ce itch_bbo::book::Book::add_order+0x67e (foo.so) =>           40b62d itch_bbo::book::Book::add_order+0xadd (foo.so)
293415/293415 47170.086912946:                            1   branches:uH:   jmp                            40b63c itch_bbo::book::Book::add_order+0xaec (foo.so) =>           40ac7f itch_bbo::book::Book::add_order+0x12f (foo.so)
293415/293415 47170.086912946:                            1   branches:uH:   jmp                            40ad14 itch_bbo::book::Book::add_order+0x1c4 (foo.so) =>           40ad4d itch_bbo::book::Book::add_order+0x1fd (foo.so)
";
        let t = import(text, Path::new("memmove_decode_error.perf")).unwrap();
        assert_eq!((t.skipped, t.malformed), (0, 0));
        assert_eq!(t.threads.len(), 1);
        assert_eq!((t.threads[0].pid, t.threads[0].tid), (293415, 293415));
        use EventKind::*;
        const T: u64 = 47_170_086_912_000;
        let want: &[(EventKind, u64, u64, u64)] = &[
            (Jump, T + 805, 0x40ac3f, 0x40ac20),
            (Jump, T + 815, 0x40ac4d, 0x40aec5),
            (Jump, T + 815, 0x40af03, 0x40b012),
            (Call, T + 824, 0x40b06c, 0x7ffff7327730),
            (Jump, T + 825, 0x7ffff732773b, 0x7ffff7327786),
            (Jump, T + 825, 0x7ffff732778e, 0x7ffff73277b7),
            (Return, T + 825, 0x7ffff73277c7, 0x40b072),
            (Call, T + 826, 0x40b093, 0x7ffff7327730),
            (Error, T + 826, 0x7ffff7327730, 0),
            (TraceBegin, T + 872, 0, 0x7ffff7327786),
            (Jump, T + 944, 0x7ffff7327793, 0x7ffff73277c8),
            (Return, T + 946, 0x7ffff73277d4, 0x40b099),
            (Jump, T + 946, 0x40b0a8, 0x40b1ba),
            (Jump, T + 946, 0x40b1ce, 0x40b62d),
            (Jump, T + 946, 0x40b63c, 0x40ac7f),
            (Jump, T + 946, 0x40ad14, 0x40ad4d),
        ];
        let got: Vec<_> = t.threads[0]
            .events
            .iter()
            .map(|e| (e.kind, e.time, e.from, e.to))
            .collect();
        assert_eq!(got, want);

        let ev = &t.threads[0].events;
        let add_order = ("itch_bbo::book::Book::add_order", "foo.so");
        let memmove = ("__memmove_avx_unaligned_erms", "foo.so");
        assert_eq!(func(&t, ev[3].from_fn), add_order);
        assert_eq!(func(&t, ev[3].to_fn), memmove);
        assert!(ev[3].to_is_entry && ev[7].to_is_entry);
        assert_eq!(ev[3].to_fn, ev[7].to_fn);
        assert_eq!(func(&t, ev[6].to_fn), add_order);
        assert!(!ev[6].to_is_entry);
        assert_eq!(
            func(&t, ev[8].to_fn),
            ("[decode error: Overflow packet]", "")
        );
        assert_eq!(ev[8].from_fn, UNKNOWN);
        assert_eq!(ev[9].from_fn, UNKNOWN);
        assert_eq!(func(&t, ev[9].to_fn), memmove);
        assert!(!ev[9].to_is_entry);
        assert!(ev.iter().all(|e| !e.estimated));
        // The three pseudo-functions, add_order, memmove, the decode error.
        assert_eq!(t.funcs.len(), 6);
    }

    /// The `INPUT` section of a peer-case file.
    fn input_section(text: &str) -> Option<String> {
        let mut lines = text.lines();
        lines.find(|l| l.starts_with("===== INPUT"))?;
        let input: Vec<&str> = lines
            .take_while(|l| !l.starts_with("===== EXPECTED"))
            .collect();
        Some(input.join("\n"))
    }

    fn txt_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                txt_files(&p, out);
            } else if p.extension().is_some_and(|e| e == "txt") {
                out.push(p);
            }
        }
    }

    /// magic-trace's replay inputs (kept in `tests/fixtures/magic-trace`):
    /// every arrow line and error line becomes an event, nothing is
    /// malformed, and no truncation panics.
    #[test]
    fn peer_case_inputs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/magic-trace");
        let mut files = Vec::new();
        txt_files(&root, &mut files);
        assert!(
            files.len() >= 40,
            "the magic-trace cases under {} are missing",
            root.display()
        );
        let mut seen = std::collections::HashSet::new();
        let mut imported = 0;
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let Some(input) = input_section(&text) else {
                continue;
            };
            for line in input.lines() {
                // Lines differing only in numbers cut the same way.
                let shape: String = line
                    .chars()
                    .map(|c| if c.is_ascii_hexdigit() { '0' } else { c })
                    .collect();
                if seen.insert(shape) {
                    truncations_do_not_panic(line);
                }
            }
            let arrows = input.lines().filter(|l| l.contains(" => ")).count();
            let errors = input.lines().filter(|l| l.contains(" error type ")).count();
            match import(&input, &file) {
                Ok(t) => {
                    assert_eq!(
                        t.malformed,
                        0,
                        "{}: {:?}",
                        file.display(),
                        t.first_malformed
                    );
                    let events: Vec<&Event> = t.threads.iter().flat_map(|th| &th.events).collect();
                    assert_eq!(events.len(), arrows + errors, "{}", file.display());
                    let error_events = events.iter().filter(|e| e.kind == EventKind::Error).count();
                    assert_eq!(error_events, errors, "{}", file.display());
                    imported += 1;
                }
                Err(ScriptError::NoBranchEvents { .. } | ScriptError::SampledStacks { .. }) => {
                    assert_eq!(arrows, 0, "{}", file.display())
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(imported > 0);
    }
}
