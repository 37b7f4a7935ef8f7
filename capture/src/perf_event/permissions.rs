//! This module works out who may trace what, and what to tell a user who may
//! not.
//!
//! The rules (kernel/events/core.c): with `perf_event_paranoid` at 2 or
//! less, anyone may trace user space of their own processes, per thread;
//! CPU-wide tracing needs 0 or less and kernel tracing 1 or less, unless
//! the process has CAP_PERFMON (or CAP_SYS_ADMIN). The mmap'd buffers are
//! locked memory: each user gets `perf_event_mlock_kb` per CPU for free,
//! then RLIMIT_MEMLOCK, unless they have CAP_IPC_LOCK.

use nix::errno::Errno;

/// What a capture asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// User space of one process's threads.
    PerThread,
    /// Every CPU (needs paranoid ≤ 0).
    PerCpu,
    /// Kernel as well as user space (needs paranoid ≤ 1).
    Kernel,
}

impl Scope {
    fn max_paranoid(self) -> i32 {
        match self {
            Scope::PerThread => 2,
            Scope::Kernel => 1,
            Scope::PerCpu => 0,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Scope::PerThread => "tracing your own processes' user space",
            Scope::Kernel => "kernel tracing (--kernel)",
            Scope::PerCpu => "per-CPU tracing (--per-cpu)",
        }
    }
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_IPC_LOCK: u32 = 14;
const CAP_PERFMON: u32 = 38;

/// The privilege facts that decide what perf_event_open allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Privileges {
    pub paranoid: i32,
    /// Effective capabilities (the CapEff mask).
    pub caps: u64,
    /// kernel.perf_event_mlock_kb.
    pub mlock_kb: u64,
    /// RLIMIT_MEMLOCK soft limit in bytes (u64::MAX: unlimited).
    pub memlock_limit: u64,
    pub cpus: u64,
}

impl Privileges {
    /// Reads this process's privileges from /proc and getrlimit.
    pub fn read() -> Privileges {
        let num = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
        };
        let caps = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            })
            .unwrap_or(0);
        let memlock_limit =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
                .map(|(soft, _)| soft)
                .unwrap_or(0);
        Privileges {
            // Missing file: perf events are not available; treat as strictest.
            paranoid: num("/proc/sys/kernel/perf_event_paranoid").unwrap_or(4) as i32,
            caps,
            mlock_kb: num("/proc/sys/kernel/perf_event_mlock_kb").unwrap_or(516) as u64,
            memlock_limit,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        }
    }

    fn has(&self, cap: u32) -> bool {
        self.caps & (1u64 << cap) != 0
    }

    /// CAP_PERFMON, or CAP_SYS_ADMIN which implies it.
    pub fn perfmon(&self) -> bool {
        self.has(CAP_PERFMON) || self.has(CAP_SYS_ADMIN)
    }

    pub fn ipc_lock(&self) -> bool {
        self.has(CAP_IPC_LOCK)
    }

    /// Whether `scope` is allowed, and if not, why.
    pub fn allows(&self, scope: Scope) -> Result<(), String> {
        if self.perfmon() || self.paranoid <= scope.max_paranoid() {
            Ok(())
        } else {
            Err(format!(
                "{} needs kernel.perf_event_paranoid ≤ {} or CAP_PERFMON; it is {} here",
                scope.what(),
                scope.max_paranoid(),
                self.paranoid
            ))
        }
    }

    /// Locked memory perf buffers may take without CAP_IPC_LOCK, in bytes.
    pub fn mlock_budget(&self) -> u64 {
        if self.ipc_lock() {
            return u64::MAX;
        }
        (self.mlock_kb * 1024)
            .saturating_mul(self.cpus)
            .saturating_add(self.memlock_limit)
    }

    /// The largest per-thread AUX size (a power of two) that fits for
    /// `threads` threads, each with a data ring of `data_bytes`.
    pub fn aux_size_that_fits(&self, threads: u64, data_bytes: u64) -> u64 {
        let budget = self.mlock_budget() / threads.max(1);
        let room = budget.saturating_sub(data_bytes);
        if room < 4096 {
            return 0;
        }
        1u64 << (63 - room.leading_zeros())
    }

    /// What to do about a perf_event_open that failed with `errno`.
    pub fn explain_open(&self, errno: Errno, scope: Scope) -> String {
        match errno {
            Errno::EACCES | Errno::EPERM => {
                let mut s = match self.allows(scope) {
                    Err(why) => format!("{why}. "),
                    Ok(()) => String::from(
                        "perf_event_paranoid allows this, so the target is probably another user's process: trace your own processes, or run with CAP_SYS_PTRACE. ",
                    ),
                };
                s.push_str(&format!(
                    "Fixes: `sudo sysctl kernel.perf_event_paranoid={}`, or give ptscope the capability once: `sudo setcap cap_perfmon,cap_ipc_lock+ep $(command -v ptscope)`. ptscope itself never needs to run as root.",
                    scope.max_paranoid()
                ));
                s
            }
            Errno::ENOENT | Errno::ENODEV | Errno::EOPNOTSUPP => {
                "the kernel does not offer this event here (no such PMU, or it is unsupported in this VM)".into()
            }
            Errno::ESRCH => "the thread exited before its event could be opened".into(),
            Errno::EINVAL | Errno::E2BIG => {
                "the kernel refused the event's settings (an older kernel, or a config this CPU cannot do)".into()
            }
            Errno::ENOSPC => "no free hardware slot (all four debug registers may be in use, e.g. by a debugger)".into(),
            Errno::EBUSY => "Intel PT is already in use on this thread or CPU (another perf or ptscope session, or per-thread and per-CPU tracing mixed)".into(),
            Errno::EMFILE => "too many open files: raise `ulimit -n`".into(),
            other => format!("unexpected error {other}"),
        }
    }

    /// What to do about a mmap of `bytes` that failed with `errno`.
    pub fn explain_mmap(&self, errno: Errno, bytes: u64, threads: u64) -> String {
        match errno {
            Errno::ENOMEM => format!(
                "the kernel could not allocate {} of trace buffer per thread (it wants large contiguous pages; CPUs without multiple ToPA entries, such as Broadwell, need one contiguous block in snapshot mode): try a smaller --size",
                human(bytes)
            ),
            Errno::EPERM => {
                let fit = self.aux_size_that_fits(threads, 8 * 4096);
                format!(
                    "the trace buffers are locked memory: kernel.perf_event_mlock_kb is {} KiB per CPU ({} CPUs) and RLIMIT_MEMLOCK is {}; {} per thread for {threads} threads does not fit. {}Fixes: a smaller --size, `ulimit -l unlimited`, `sudo sysctl kernel.perf_event_mlock_kb=<KiB>`, or CAP_IPC_LOCK (`sudo setcap cap_perfmon,cap_ipc_lock+ep $(command -v ptscope)`).",
                    self.mlock_kb,
                    self.cpus,
                    if self.memlock_limit == u64::MAX {
                        "unlimited".to_string()
                    } else {
                        format!("{} KiB", self.memlock_limit / 1024)
                    },
                    human(bytes),
                    if fit > 0 {
                        format!("--size {} would fit. ", human(fit))
                    } else {
                        String::new()
                    }
                )
            }
            Errno::EINVAL => "the buffer size must be a power-of-two number of pages".into(),
            other => format!("unexpected error {other}"),
        }
    }
}

/// Asks the kernel: opens (and closes) a dummy event in `scope` on this
/// process, or on CPU 0 for per-CPU.
pub fn probe(scope: Scope) -> Result<(), Errno> {
    let attr = super::sideband::dummy_attr(scope == Scope::Kernel, false, false);
    let (pid, cpu) = match scope {
        Scope::PerCpu => (-1, 0),
        _ => (0, -1),
    };
    super::sys::Event::open(&attr, pid, cpu).map(drop)
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(paranoid: i32) -> Privileges {
        Privileges {
            paranoid,
            caps: 0,
            mlock_kb: 516,
            memlock_limit: 8 << 20,
            cpus: 2,
        }
    }

    #[test]
    fn paranoid_levels_gate_scopes() {
        let p = user(2);
        assert!(p.allows(Scope::PerThread).is_ok());
        let why = p.allows(Scope::Kernel).unwrap_err();
        assert!(why.contains("≤ 1") && why.contains("it is 2"), "{why}");
        assert!(p.allows(Scope::PerCpu).is_err());
        assert!(user(3).allows(Scope::PerThread).is_err());
        assert!(user(-1).allows(Scope::PerCpu).is_ok());
        let perfmon = Privileges {
            caps: 1 << CAP_PERFMON,
            ..user(3)
        };
        assert!(perfmon.allows(Scope::PerCpu).is_ok());
    }

    #[test]
    fn denial_guidance_names_the_fixes() {
        let msg = user(2).explain_open(Errno::EACCES, Scope::Kernel);
        assert!(msg.contains("perf_event_paranoid"), "{msg}");
        assert!(msg.contains("it is 2"), "{msg}");
        assert!(msg.contains("kernel.perf_event_paranoid=1"), "{msg}");
        assert!(msg.contains("setcap cap_perfmon"), "{msg}");
        // Allowed by paranoid: then it is about whose process it is.
        let msg = user(2).explain_open(Errno::EACCES, Scope::PerThread);
        assert!(msg.contains("another user's process"), "{msg}");
    }

    #[test]
    fn mlock_guidance_suggests_a_size_that_fits() {
        let p = user(2);
        // 516 KiB × 2 CPUs + 8 MiB, over 4 threads: about 2.25 MiB each.
        assert_eq!(p.mlock_budget(), 516 * 1024 * 2 + (8 << 20));
        assert_eq!(p.aux_size_that_fits(4, 8 * 4096), 2 << 20);
        let msg = p.explain_mmap(Errno::ENOMEM, 16 << 20, 4);
        assert!(
            msg.contains("could not allocate 16M") && msg.contains("smaller --size"),
            "{msg}"
        );
        let msg = p.explain_mmap(Errno::EPERM, 16 << 20, 4);
        assert!(msg.contains("perf_event_mlock_kb is 516 KiB"), "{msg}");
        assert!(msg.contains("RLIMIT_MEMLOCK is 8192 KiB"), "{msg}");
        assert!(msg.contains("--size 2M would fit"), "{msg}");
        let locked = Privileges {
            caps: 1 << CAP_IPC_LOCK,
            ..p
        };
        assert_eq!(locked.mlock_budget(), u64::MAX);
    }
}
