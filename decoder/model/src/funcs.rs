//! The function table: every function (and pseudo-function) a span can
//! name, interned once per model. Spans carry a [`FuncId`] into it.
//!
//! Pseudo-functions label the spans that are not calls (`[untraced]`,
//! `[syscall]`, `[decode error: ...]`, `[no binary: ...]`), so that the
//! store and the views treat every span alike and ask [`FuncTable::is_call`]
//! where the difference matters.

use std::collections::HashMap;

/// Index into a [`FuncTable`].
pub type FuncId = u32;

/// What kind of thing a function-table entry is. Pseudo-functions label
/// the spans that are not calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum SpanKind {
    /// A real function (or an `[unknown]` code region).
    Call = 0,
    /// Tracing was off: `[untraced]`.
    Untraced = 1,
    /// Tracing was off because of a system call: `[syscall]`.
    Syscall = 2,
    /// The trace could not be decoded here: `[decode error: reason]`.
    DecodeError = 3,
    /// Code in a mapping whose binary is not available: `[no binary: path]`.
    NoBinary = 4,
    /// An interrupt or other asynchronous transfer into the kernel, traced.
    Interrupt = 5,
}

impl SpanKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SpanKind::Call => "call",
            SpanKind::Untraced => "untraced",
            SpanKind::Syscall => "syscall",
            SpanKind::DecodeError => "decode_error",
            SpanKind::NoBinary => "no_binary",
            SpanKind::Interrupt => "interrupt",
        }
    }

    /// Whether a span of this kind is a call: code that ran (a function,
    /// an `[unknown]` region, a traced interrupt). Pseudo-spans
    /// (`[untraced]`, `[syscall]`, `[decode error: …]`, `[no binary: …]`)
    /// label stretches of time that are not calls, and no count of calls
    /// includes them.
    pub fn is_call(self) -> bool {
        matches!(self, SpanKind::Call | SpanKind::Interrupt)
    }
}

/// One function (or pseudo-function) that spans can name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Func {
    pub name: String,
    /// The module (binary path) it lives in, empty when unknown.
    pub module: String,
    /// Runtime entry address, 0 when unknown (perf-script input without
    /// symbol offsets, pseudo-functions).
    pub entry: u64,
    pub kind: SpanKind,
    /// `file:line` of its entry, when the binary's DWARF says.
    pub source: Option<String>,
}

/// Interned functions: every span names one by [`FuncId`].
#[derive(Clone, Debug)]
pub struct FuncTable {
    funcs: Vec<Func>,
    index: HashMap<(SpanKind, String, String, u64), FuncId>,
}

/// Ids of the pseudo-functions every table starts with.
pub const UNTRACED: FuncId = 0;
pub const SYSCALL: FuncId = 1;
pub const UNKNOWN: FuncId = 2;

/// Where the kernel's (upper) half of the x86-64 address space begins:
/// code there is the kernel's or its modules', whatever the sideband maps.
pub const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// `addr` is in the kernel's (upper) half of the x86-64 address space.
pub fn is_kernel_addr(addr: u64) -> bool {
    addr >= KERNEL_START
}

impl Default for FuncTable {
    fn default() -> Self {
        let mut t = FuncTable {
            funcs: Vec::new(),
            index: HashMap::new(),
        };
        t.intern("[untraced]", "", 0, SpanKind::Untraced);
        t.intern("[syscall]", "", 0, SpanKind::Syscall);
        t.intern("[unknown]", "", 0, SpanKind::Call);
        t
    }
}

impl FuncTable {
    /// The id of the function with this name, module and entry, added if new.
    pub fn intern(&mut self, name: &str, module: &str, entry: u64, kind: SpanKind) -> FuncId {
        let key = (kind, name.to_string(), module.to_string(), entry);
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        // A span holds 27 bits of function id: past that, every new
        // function shares one name rather than corrupting others.
        if self.funcs.len() as u64 > crate::store::MAX_FUNC as u64 {
            return UNKNOWN;
        }
        let id = self.funcs.len() as FuncId;
        self.funcs.push(Func {
            name: key.1.clone(),
            module: key.2.clone(),
            entry,
            kind,
            source: None,
        });
        self.index.insert(key, id);
        id
    }

    /// `[decode error: reason]`.
    pub fn decode_error(&mut self, reason: &str) -> FuncId {
        self.intern(
            &format!("[decode error: {reason}]"),
            "",
            0,
            SpanKind::DecodeError,
        )
    }

    /// `[no binary: path]`.
    pub fn no_binary(&mut self, path: &str) -> FuncId {
        self.intern(&format!("[no binary: {path}]"), path, 0, SpanKind::NoBinary)
    }

    /// `[kernel]`: kernel code, whose image a user-space decode lacks.
    pub fn kernel(&mut self) -> FuncId {
        self.intern("[kernel]", "[kernel.kallsyms]", 0, SpanKind::NoBinary)
    }

    /// The id here of `f`, a function of another table, added with its
    /// source if new.
    pub fn adopt(&mut self, f: &Func) -> FuncId {
        let id = self.intern(&f.name, &f.module, f.entry, f.kind);
        if let Some(src) = &f.source {
            self.set_source(id, src.clone());
        }
        id
    }

    pub fn set_source(&mut self, id: FuncId, source: String) {
        if let Some(f) = self.funcs.get_mut(id as usize) {
            f.source = Some(source);
        }
    }

    pub fn get(&self, id: FuncId) -> &Func {
        &self.funcs[id as usize]
    }

    pub fn name(&self, id: FuncId) -> &str {
        &self.funcs[id as usize].name
    }

    pub fn kind(&self, id: FuncId) -> SpanKind {
        self.funcs[id as usize].kind
    }

    /// Whether spans of `id` are calls, not pseudo-spans
    /// ([`SpanKind::is_call`]); false for an id the table lacks.
    pub fn is_call(&self, id: FuncId) -> bool {
        self.funcs
            .get(id as usize)
            .is_some_and(|f| f.kind.is_call())
    }

    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (FuncId, &Func)> {
        self.funcs.iter().enumerate().map(|(i, f)| (i as FuncId, f))
    }

    /// Every function, by id.
    pub fn funcs(&self) -> &[Func] {
        &self.funcs
    }

    /// The table whose functions are `funcs`, by id, as
    /// [`funcs`](Self::funcs) gave them (from the model cache): the
    /// pseudo-functions first, no function twice, no more than a span can
    /// name.
    pub fn from_funcs(funcs: Vec<Func>) -> Result<FuncTable, String> {
        let fresh = FuncTable::default();
        if funcs.len() < fresh.len() || funcs[..fresh.len()] != fresh.funcs[..] {
            return Err("the pseudo-functions are not first".into());
        }
        if funcs.len() as u64 > crate::store::MAX_FUNC as u64 + 1 {
            return Err(format!(
                "{} functions, more than spans can name",
                funcs.len()
            ));
        }
        let mut index = HashMap::with_capacity(funcs.len());
        for (id, f) in funcs.iter().enumerate() {
            let key = (f.kind, f.name.clone(), f.module.clone(), f.entry);
            if index.insert(key, id as FuncId).is_some() {
                return Err(format!("function {} is listed twice", f.name));
            }
        }
        Ok(FuncTable { funcs, index })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudo_functions_are_not_calls() {
        let mut t = FuncTable::default();
        let err = t.decode_error("Overflow packet");
        let nobin = t.no_binary("/lib/libgone.so");
        let f = t.intern("main", "/bin/prog", 0x1000, SpanKind::Call);
        let irq = t.intern("asm_exc_page_fault", "", 0, SpanKind::Interrupt);
        for id in [UNTRACED, SYSCALL, err, nobin] {
            assert!(!t.is_call(id), "{}", t.name(id));
        }
        for id in [UNKNOWN, f, irq] {
            assert!(t.is_call(id), "{}", t.name(id));
        }
        assert!(!t.is_call(9999));
    }
}
