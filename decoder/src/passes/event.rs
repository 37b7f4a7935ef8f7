//! The branch-event stream: what the coarse pass and the perf-script import
//! both produce, and what stack reconstruction consumes.
//!
//! Events carry resolved function ids rather than raw addresses alone, so
//! the stack rules in [`crate::passes::stack`] do not care whether the names came
//! from ELF symbols or from `perf script` text.

pub(crate) use ptscope_model::{
    is_kernel_addr, Func, FuncId, FuncTable, SpanKind, SYSCALL, UNKNOWN, UNTRACED,
};

/// Why tracing stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EndReason {
    /// Filtering, a context switch, the end of a buffer: `[untraced]`.
    Other,
    /// A system call: `[syscall]`.
    Syscall,
    /// An interrupt or exception taken into untraced code.
    Async,
}

/// What moved control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A near call, direct or indirect, from `from` to `to`.
    Call,
    /// A near return from `from` to `to`; `to` is 0 when the return left
    /// the traced code (the IP filter's ranges) and its target is unknown.
    Return,
    /// A jump (conditional or not) from `from` to `to` that the producer
    /// found worth reporting: one that leaves the current function.
    Jump,
    /// Tracing (re)started at `to`.
    TraceBegin,
    /// Tracing stopped after `from`.
    TraceEnd(EndReason),
    /// A system call instruction at `from` entering traced kernel code `to`.
    Syscall,
    /// An asynchronous transfer (interrupt, exception, signal delivery) from
    /// `from` to traced code at `to`.
    Interrupt,
    /// A return from the kernel (`sysret`, `iret`) to `to`.
    KernelReturn,
    /// The decoder lost its place: overflow, lost data, or a decode error.
    /// `to_fn` is the `[decode error: …]` pseudo-function; decoding resumes
    /// with the next `TraceBegin` or branch.
    Error,
}

/// One branch event. `from_fn`/`to_fn` are resolved by the producer; they
/// are [`UNKNOWN`] when an address is 0 or unmapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// perf time in ns.
    pub time: u64,
    pub kind: EventKind,
    pub from: u64,
    pub to: u64,
    pub from_fn: FuncId,
    pub to_fn: FuncId,
    /// `to` is the entry of `to_fn` (so a jump there is a tail call).
    pub to_is_entry: bool,
    /// The time was interpolated rather than read from a timing packet.
    pub estimated: bool,
}

impl Event {
    pub fn new(time: u64, kind: EventKind) -> Event {
        Event {
            time,
            kind,
            from: 0,
            to: 0,
            from_fn: UNKNOWN,
            to_fn: UNKNOWN,
            to_is_entry: false,
            estimated: false,
        }
    }
}
