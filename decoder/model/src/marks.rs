//! Marks: what a trace says besides the control flow. The program's own
//! PTWRITE values, the core's frequency (CBR), and its power states
//! (MWAIT, PWRE, EXSTOP, PWRX). The decoder finds them with a scan of the
//! packets; [`Marks`] holds a thread's (or a CPU's) in time order, and
//! derives the frequency steps and the sleeps (C-state stays) the viewer
//! draws.

/// What one mark says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MarkKind {
    /// A PTWRITE's operand, `bytes` (4 or 8) wide.
    PtWrite { payload: u64, bytes: u8 },
    /// The core's ratio to the 100 MHz bus clock from here on.
    Cbr { ratio: u8 },
    /// MWAIT's operands: `hints` (the requested C-state in bits 7:4, its
    /// sub-state in 3:0, each in the hint encoding of [`c_state`]) and
    /// `ext`.
    Mwait { hints: u8, ext: u8 },
    /// The thread entered C-state `cstate`.`sub`, as the packet holds them
    /// (the hint encoding, [`c_state`]); `hw`: by the hardware's own
    /// choice.
    Pwre { hw: bool, cstate: u8, sub: u8 },
    /// Execution stopped (the core went idle or halted).
    Exstop,
    /// The core woke: the deepest and last core C-state of the stay (hint
    /// encoding), and why ([`wake_reason`]).
    Pwrx { deepest: u8, last: u8, wake: u8 },
}

/// One mark: its time (as the model's times count), the instruction it
/// was bound to when the trace says (a PTWRITE's or EXSTOP's FUP), and
/// what it says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mark {
    pub time: u64,
    pub ip: Option<u64>,
    pub kind: MarkKind,
}

impl Mark {
    /// The mark as one line, as the hover and `decode`'s text output give
    /// it; `mhz_per_ratio` turns a CBR into a frequency.
    pub fn describe(&self, mhz_per_ratio: f64) -> String {
        match self.kind {
            MarkKind::PtWrite { payload, .. } => format!("ptwrite = {payload:#x}"),
            MarkKind::Cbr { ratio } => {
                format!("cbr {ratio}: {:.0} MHz", ratio as f64 * mhz_per_ratio)
            }
            MarkKind::Mwait { hints, ext } => format!(
                "mwait C{}.{} (hints {hints:#x}, extensions {ext:#x})",
                c_state(hints >> 4),
                c_state(hints & 0xf)
            ),
            MarkKind::Pwre { hw, cstate, sub } => format!(
                "power entry C{}.{}{}",
                c_state(cstate),
                c_state(sub),
                if hw { " (hardware)" } else { "" }
            ),
            MarkKind::Exstop => "execution stopped".to_string(),
            MarkKind::Pwrx {
                deepest,
                last,
                wake,
            } => format!(
                "power exit: deepest C{}, last C{}, woken by {}",
                c_state(deepest),
                c_state(last),
                wake_reason(wake)
            ),
        }
    }
}

/// PWRX's wake reasons, as the SDM names its bits.
pub fn wake_reason(wake: u8) -> String {
    let names = [
        (1, "an interrupt"),
        (2, "a timer deadline"),
        (4, "a store to the monitored range"),
        (8, "a C1 wake (hardware)"),
    ];
    let hit: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| wake & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    if hit.is_empty() {
        "an unknown reason".to_string()
    } else {
        hit.join(" and ")
    }
}

/// A stay in a C-state deeper than C0: from the power entry (or the
/// execution stop, when no PWRE came) to the power exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sleep {
    pub start: u64,
    pub end: u64,
    /// The C-state entered (PWRE's, else MWAIT's request), decoded
    /// ([`c_state`]): 3 is C3.
    pub cstate: u8,
    /// The deepest C-state the core reached, from PWRX, decoded.
    pub deepest: u8,
    pub wake: u8,
}

/// A thread's or a CPU's marks, in time order, with what is drawn from
/// them (the frequency steps and the sleeps) worked out once, so that a
/// frame finds the visible ones by binary search.
///
/// Kept (in the model cache) as its marks alone: what is drawn from them
/// is worked out again as it is read, so a damaged entry cannot hold steps
/// or sleeps that its marks do not give.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "Vec<Mark>", into = "Vec<Mark>")]
pub struct Marks {
    marks: Vec<Mark>,
    steps: Vec<(u64, u8)>,
    sleeps: Vec<Sleep>,
}

impl Marks {
    /// `marks` sorted by time (stable: trace order within a time), less
    /// the CBRs that restate the ratio (every PSB+ does).
    pub fn new(mut marks: Vec<Mark>) -> Marks {
        marks.sort_by_key(|m| m.time);
        let mut last = None;
        marks.retain(|m| match m.kind {
            MarkKind::Cbr { ratio } => last.replace(ratio) != Some(ratio),
            _ => true,
        });
        let mut m = Marks {
            marks,
            steps: Vec::new(),
            sleeps: Vec::new(),
        };
        m.steps = m.find_steps();
        m.sleeps = m.find_sleeps();
        m
    }

    pub fn all(&self) -> &[Mark] {
        &self.marks
    }

    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// The marks from `from` to `to` (inclusive): a binary search, for
    /// drawing a window of a long trace.
    pub fn between(&self, from: u64, to: u64) -> &[Mark] {
        let a = self.marks.partition_point(|m| m.time < from);
        let b = self.marks.partition_point(|m| m.time <= to);
        &self.marks[a..b.max(a)]
    }

    pub fn ptwrites(&self) -> impl Iterator<Item = (&Mark, u64)> {
        self.marks.iter().filter_map(|m| match m.kind {
            MarkKind::PtWrite { payload, .. } => Some((m, payload)),
            _ => None,
        })
    }

    /// The frequency steps: each time the ratio changes, the new ratio.
    pub fn frequency(&self) -> &[(u64, u8)] {
        &self.steps
    }

    /// The steps that set the ratio over `[from, to]`: the one in force at
    /// `from` and those after it.
    pub fn frequency_between(&self, from: u64, to: u64) -> &[(u64, u8)] {
        let a = self
            .steps
            .partition_point(|s| s.0 <= from)
            .saturating_sub(1);
        let b = self.steps.partition_point(|s| s.0 <= to);
        &self.steps[a.min(b)..b]
    }

    /// The C-state stays, in time order.
    pub fn sleeps(&self) -> &[Sleep] {
        &self.sleeps
    }

    /// The stays that overlap `[from, to]`.
    pub fn sleeps_between(&self, from: u64, to: u64) -> &[Sleep] {
        let a = self.sleeps.partition_point(|s| s.end < from);
        let b = self.sleeps.partition_point(|s| s.start <= to);
        &self.sleeps[a..b.max(a)]
    }

    fn find_steps(&self) -> Vec<(u64, u8)> {
        let mut out: Vec<(u64, u8)> = Vec::new();
        for m in &self.marks {
            if let MarkKind::Cbr { ratio } = m.kind {
                if out.last().is_none_or(|&(_, r)| r != ratio) {
                    out.push((m.time, ratio));
                }
            }
        }
        out
    }

    /// The C-state stays: a PWRE (or EXSTOP) opens one, the next PWRX
    /// closes it. A stay still open at the end has no exit to end it and
    /// is left out; a PWRX with nothing open is a stay whose entry the
    /// trace did not hold, from its previous mark.
    fn find_sleeps(&self) -> Vec<Sleep> {
        let mut out = Vec::new();
        let mut open: Option<(u64, u8)> = None;
        let mut requested = 0u8;
        let mut previous = None;
        for m in &self.marks {
            match m.kind {
                MarkKind::Mwait { hints, .. } => requested = c_state(hints >> 4),
                MarkKind::Pwre { cstate, .. } => {
                    open.get_or_insert((m.time, c_state(cstate))).1 = c_state(cstate);
                }
                MarkKind::Exstop => {
                    open.get_or_insert((m.time, requested));
                }
                MarkKind::Pwrx { deepest, wake, .. } => {
                    let deepest = c_state(deepest);
                    let (start, cstate) = open.take().unwrap_or((
                        previous.unwrap_or(m.time),
                        if requested != 0 { requested } else { deepest },
                    ));
                    out.push(Sleep {
                        start,
                        end: m.time,
                        cstate,
                        deepest,
                        wake,
                    });
                    requested = 0;
                }
                MarkKind::PtWrite { .. } | MarkKind::Cbr { .. } => {}
            }
            previous = Some(m.time);
        }
        out
    }
}

impl From<Vec<Mark>> for Marks {
    fn from(marks: Vec<Mark>) -> Marks {
        Marks::new(marks)
    }
}

impl From<Marks> for Vec<Mark> {
    fn from(m: Marks) -> Vec<Mark> {
        m.marks
    }
}

/// A C-state from its hint encoding, as MWAIT's hints, PWRE and PWRX
/// carry it (and as libipt prints it): the value plus one, so 0 is C1, and
/// 0xf is C0.
pub fn c_state(v: u8) -> u8 {
    v.wrapping_add(1) & 0xf
}
