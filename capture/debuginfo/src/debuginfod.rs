//! The debuginfod client: debug files and executables by build id from
//! the servers `DEBUGINFOD_URLS` names, kept in the client cache elfutils
//! uses, so that gdb, perf and ptscope share what any of them fetched.
//!
//! It follows elfutils' `libdebuginfod` where users can see it:
//! - the cache is `$DEBUGINFOD_CACHE_PATH`, else `~/.debuginfod_client_cache`
//!   where that exists, else `$XDG_CACHE_HOME/debuginfod_client`, else
//!   `~/.cache/debuginfod_client`; a file lives at `<cache>/<hex build
//!   id>/debuginfo` (or `executable`), written under a temporary name and
//!   renamed, so a reader never sees half a file;
//! - an empty file there is a negative entry: every server answered 404.
//!   It is believed for `<cache>/cache_miss_s` seconds (600 by default),
//!   and written when all servers answer 404;
//! - `DEBUGINFOD_TIMEOUT` (seconds, 90 by default, 0 for none) bounds
//!   connecting, waiting for the answer and every stall of the transfer;
//!   `DEBUGINFOD_MAXTIME` bounds a whole transfer and `DEBUGINFOD_MAXSIZE`
//!   the size of a file taken;
//! - the servers are asked in the order `DEBUGINFOD_URLS` gives them.
//!
//! Beyond elfutils, within one run (one [`Client`] and its clones) a file
//! no server has is not asked for again, and a server that did not answer
//! (refused the connection, timed out) is not asked again: one dead server
//! costs one timeout, not one per library. Every file taken is checked to
//! be an ELF file with the build id asked for, so a web page answered with
//! 200 never lands in the cache. Errors name the server and the build id.
//!
//! Progress goes to a callback ([`Progress`]) with the bytes done and,
//! where the server says, the total; [`stderr_progress`] is one for a
//! command line.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{IsTerminal, Read, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, SystemTime};

use ptscope_formats::buildid;

/// What a server is asked for: `/buildid/<hex>/<artifact>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Artifact {
    /// The separate debug file (`debuginfo`).
    Debuginfo,
    /// The binary itself (`executable`), for binaries not on this machine.
    Executable,
}

impl Artifact {
    /// The name in the URL and in the cache.
    pub fn name(self) -> &'static str {
        match self {
            Artifact::Debuginfo => "debuginfo",
            Artifact::Executable => "executable",
        }
    }
}

impl fmt::Display for Artifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Artifact::Debuginfo => "debug file",
            Artifact::Executable => "executable",
        })
    }
}

/// What went wrong fetching a file. Each error names the build id and,
/// where one server is at fault, the server.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Every server answered 404, now or earlier (in this run, or within
    /// the cache's `cache_miss_s`).
    #[error("no debuginfod server ({servers}) has the {artifact} of build id {build_id}")]
    NotFound {
        artifact: Artifact,
        build_id: String,
        servers: String,
    },
    /// The server accepted the connection but did not answer (or stalled)
    /// within the timeout.
    #[error(
        "debuginfod server {server} did not answer within {} s for the {artifact} of build id {build_id} (DEBUGINFOD_TIMEOUT){}",
        timeout.as_secs_f64(), earlier_note(*earlier)
    )]
    Timeout {
        server: String,
        artifact: Artifact,
        build_id: String,
        timeout: Duration,
        /// It timed out on an earlier file of this run and was not asked
        /// again.
        earlier: bool,
    },
    /// The server could not be reached: nothing listening, no such host.
    #[error(
        "debuginfod server {server} is not reachable ({reason}) for the {artifact} of build id {build_id}{}",
        earlier_note(*earlier)
    )]
    Unreachable {
        server: String,
        artifact: Artifact,
        build_id: String,
        reason: String,
        earlier: bool,
    },
    /// The server answered with an HTTP status other than 200 and 404.
    #[error("debuginfod server {server} answered HTTP {status} for the {artifact} of build id {build_id}")]
    Status {
        server: String,
        artifact: Artifact,
        build_id: String,
        status: u16,
    },
    /// The transfer broke off, or what came is not the file asked for.
    #[error("debuginfod server {server} sent a bad {artifact} for build id {build_id}: {problem}")]
    Transfer {
        server: String,
        artifact: Artifact,
        build_id: String,
        problem: String,
    },
    /// The progress callback asked to stop.
    #[error("fetching the {artifact} of build id {build_id} from debuginfod server {server} was cancelled")]
    Cancelled {
        server: String,
        artifact: Artifact,
        build_id: String,
    },
    /// The client cache could not be written (the cause is said in the
    /// message, not again as a `source()`).
    #[error("debuginfod cache {}: {error}", path.display())]
    Cache {
        path: PathBuf,
        error: std::io::Error,
    },
}

fn earlier_note(earlier: bool) -> &'static str {
    if earlier {
        "; not asked again in this run"
    } else {
        ""
    }
}

impl FetchError {
    /// The servers answered that they do not have it: not worth a note.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FetchError::NotFound { .. })
    }
}

/// A file fetched (or found in the cache).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The file, in the client cache.
    pub path: PathBuf,
    /// The URL it came from, or `<cache> (cache)` where it was cached
    /// already.
    pub source: String,
    /// It was in the cache; no server was asked.
    pub from_cache: bool,
}

/// How far one transfer is, as the client reports it: before the first
/// byte (`done` 0), after every block read, and when complete.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    /// The server, as `DEBUGINFOD_URLS` names it.
    pub server: &'a str,
    /// The whole URL being fetched.
    pub url: &'a str,
    pub artifact: Artifact,
    /// The build id, in hex.
    pub build_id: &'a str,
    /// Bytes received so far.
    pub done: u64,
    /// The file's size, where the server says (`Content-Length`, else
    /// debuginfod's `X-DEBUGINFOD-SIZE`).
    pub total: Option<u64>,
}

impl Progress<'_> {
    /// The transfer is complete (the last report of a successful one).
    pub fn is_complete(&self) -> bool {
        self.total == Some(self.done)
    }
}

/// A progress callback: it returns [`ControlFlow::Break`] to cancel the
/// transfer. It is called from the thread that fetches.
pub type ProgressFn = dyn Fn(&Progress<'_>) -> ControlFlow<()> + Send + Sync;

/// The default per-request timeout of elfutils (`DEBUGINFOD_TIMEOUT`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);

/// How long elfutils believes a negative cache entry by default
/// (`<cache>/cache_miss_s`).
pub const DEFAULT_CACHE_MISS: Duration = Duration::from_secs(600);

/// The size of one read of a transfer, and so the step of the progress
/// reports.
const BLOCK: usize = 64 * 1024;

/// What this run learnt, shared by a client's clones.
#[derive(Debug, Default)]
struct Memory {
    /// Files every server answered 404 for: (artifact, hex build id).
    missing: HashSet<(Artifact, String)>,
    /// Servers that did not answer, and how.
    down: HashMap<String, Down>,
}

#[derive(Clone, Debug)]
enum Down {
    Timeout(Duration),
    Unreachable(String),
}

/// The servers and the cache.
#[derive(Clone)]
pub struct Client {
    urls: Vec<String>,
    cache: PathBuf,
    timeout: Option<Duration>,
    max_time: Option<Duration>,
    max_size: Option<u64>,
    progress: Option<Arc<ProgressFn>>,
    agent: ureq::Agent,
    memory: Arc<Mutex<Memory>>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("urls", &self.urls)
            .field("cache", &self.cache)
            .field("timeout", &self.timeout)
            .field("max_time", &self.max_time)
            .field("max_size", &self.max_size)
            .field("progress", &self.progress.is_some())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the servers `urls` (tried in order; trailing slashes
    /// do not matter) with its cache at `cache`, elfutils' default
    /// timeout, no size or time limit and no progress reports.
    pub fn new<S: Into<String>>(urls: impl IntoIterator<Item = S>, cache: PathBuf) -> Client {
        let urls = urls
            .into_iter()
            .map(|u| u.into().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect();
        let mut client = Client {
            urls,
            cache,
            timeout: Some(DEFAULT_TIMEOUT),
            max_time: None,
            max_size: None,
            progress: None,
            agent: ureq::Agent::new_with_defaults(),
            memory: Arc::default(),
        };
        client.agent = client.make_agent();
        client
    }

    /// The client `DEBUGINFOD_URLS` asks for (space-separated URLs), with
    /// elfutils' cache and `DEBUGINFOD_TIMEOUT`, `DEBUGINFOD_MAXTIME` and
    /// `DEBUGINFOD_MAXSIZE`; `None` when it names no server.
    pub fn from_env() -> Option<Client> {
        let urls: Vec<String> = std::env::var("DEBUGINFOD_URLS")
            .ok()?
            .split_whitespace()
            .map(str::to_string)
            .collect();
        if urls.is_empty() {
            return None;
        }
        let secs = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let timeout = match secs("DEBUGINFOD_TIMEOUT") {
            None => Some(DEFAULT_TIMEOUT),
            Some(0) => None,
            Some(s) => Some(Duration::from_secs(s)),
        };
        let client = Client::new(urls, default_cache()?)
            .with_timeout(timeout)
            .with_max_time(
                secs("DEBUGINFOD_MAXTIME")
                    .filter(|&s| s > 0)
                    .map(Duration::from_secs),
            )
            .with_max_size(secs("DEBUGINFOD_MAXSIZE").filter(|&s| s > 0));
        Some(client)
    }

    /// The same client with `timeout` for connecting, for the answer and
    /// for every stall of a transfer (`None`: wait for ever).
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Client {
        self.timeout = timeout;
        self.agent = self.make_agent();
        self
    }

    /// The same client with a bound on a whole transfer.
    pub fn with_max_time(mut self, max_time: Option<Duration>) -> Client {
        self.max_time = max_time;
        self.agent = self.make_agent();
        self
    }

    /// The same client, refusing files larger than `max_size` bytes.
    pub fn with_max_size(mut self, max_size: Option<u64>) -> Client {
        self.max_size = max_size;
        self
    }

    /// The same client, reporting the progress of its transfers to
    /// `progress` (also for [`Client::debuginfo`] and
    /// [`Client::executable`] called through [`crate::Search`]).
    pub fn with_progress(mut self, progress: Arc<ProgressFn>) -> Client {
        self.progress = Some(progress);
        self
    }

    /// The servers, in the order they are asked.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The client cache's root.
    pub fn cache(&self) -> &Path {
        &self.cache
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn make_agent(&self) -> ureq::Agent {
        ureq::Agent::config_builder()
            // 404 is an answer, not an error; the status is read below.
            .http_status_as_error(false)
            .timeout_connect(self.timeout)
            .timeout_recv_response(self.timeout)
            .timeout_per_read(self.timeout)
            .timeout_global(self.max_time)
            .user_agent(concat!("ptscope/", env!("CARGO_PKG_VERSION")))
            .build()
            .into()
    }

    /// The debug file of build id `id`, from the cache or the first server
    /// that has it, reporting progress to the client's callback.
    pub fn debuginfo(&self, id: &[u8]) -> Result<Fetched, FetchError> {
        self.fetch(Artifact::Debuginfo, id, self.progress.as_deref())
    }

    /// The executable (or shared library) of build id `id`, for binaries
    /// that are not on this machine.
    pub fn executable(&self, id: &[u8]) -> Result<Fetched, FetchError> {
        self.fetch(Artifact::Executable, id, self.progress.as_deref())
    }

    /// The `artifact` of build id `id`: from the cache where it is there
    /// (or known missing), else from the servers in order, reporting to
    /// `progress` (instead of the client's callback).
    pub fn fetch(
        &self,
        artifact: Artifact,
        id: &[u8],
        progress: Option<&ProgressFn>,
    ) -> Result<Fetched, FetchError> {
        let hex = buildid::to_hex(id);
        let not_found = || FetchError::NotFound {
            artifact,
            build_id: hex.clone(),
            servers: self.urls.join(" "),
        };
        if id.is_empty() {
            return Err(not_found());
        }
        let dir = self.cache.join(&hex);
        let target = dir.join(artifact.name());
        if let Ok(meta) = std::fs::metadata(&target) {
            if meta.len() > 0 {
                return Ok(Fetched {
                    path: target,
                    source: format!("{} (cache)", self.cache.display()),
                    from_cache: true,
                });
            }
            // A negative entry: believed while fresh, as elfutils does.
            let age = meta
                .modified()
                .ok()
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .unwrap_or_default();
            if age <= self.cache_miss() {
                return Err(not_found());
            }
            let _ = std::fs::remove_file(&target);
        }
        if self.memory().missing.contains(&(artifact, hex.clone())) {
            return Err(not_found());
        }

        let mut first_error = None;
        for server in &self.urls {
            match self.fetch_from(server, artifact, &hex, id, &dir, &target, progress) {
                Ok(fetched) => return Ok(fetched),
                Err(e @ FetchError::Cancelled { .. }) => return Err(e),
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        // Every server answered 404: remember it for this run, and for
        // elfutils' clients, with an empty file in the cache.
        self.memory().missing.insert((artifact, hex.clone()));
        if std::fs::create_dir_all(&dir).is_ok() {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target);
        }
        Err(not_found())
    }

    fn memory(&self) -> parking_lot::MutexGuard<'_, Memory> {
        // A panic elsewhere while holding the lock leaves the memory as
        // consistent as it was: each update is one insert.
        self.memory.lock()
    }

    /// How long a negative cache entry holds: `<cache>/cache_miss_s`.
    fn cache_miss(&self) -> Duration {
        std::fs::read_to_string(self.cache.join("cache_miss_s"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_CACHE_MISS)
    }

    /// One server's answer for one file; a 404 is
    /// [`FetchError::NotFound`].
    #[allow(clippy::too_many_arguments)]
    fn fetch_from(
        &self,
        server: &str,
        artifact: Artifact,
        hex: &str,
        id: &[u8],
        dir: &Path,
        target: &Path,
        progress: Option<&ProgressFn>,
    ) -> Result<Fetched, FetchError> {
        let down = |down: &Down, earlier: bool| match down {
            Down::Timeout(timeout) => FetchError::Timeout {
                server: server.to_string(),
                artifact,
                build_id: hex.to_string(),
                timeout: *timeout,
                earlier,
            },
            Down::Unreachable(reason) => FetchError::Unreachable {
                server: server.to_string(),
                artifact,
                build_id: hex.to_string(),
                reason: reason.clone(),
                earlier,
            },
        };
        if let Some(d) = self.memory().down.get(server) {
            return Err(down(d, true));
        }
        let transfer = |problem: String| FetchError::Transfer {
            server: server.to_string(),
            artifact,
            build_id: hex.to_string(),
            problem,
        };
        let url = format!("{server}/buildid/{hex}/{}", artifact.name());
        let response = match self.agent.get(&url).call() {
            Ok(r) => r,
            Err(e) => {
                return Err(match self.classify(&e) {
                    Some(d) => {
                        let err = down(&d, false);
                        self.memory().down.insert(server.to_string(), d);
                        err
                    }
                    None => transfer(e.to_string()),
                });
            }
        };
        match response.status().as_u16() {
            200 => {}
            404 => {
                return Err(FetchError::NotFound {
                    artifact,
                    build_id: hex.to_string(),
                    servers: server.to_string(),
                })
            }
            status => {
                return Err(FetchError::Status {
                    server: server.to_string(),
                    artifact,
                    build_id: hex.to_string(),
                    status,
                })
            }
        }
        let header_size = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let total = header_size("content-length").or_else(|| header_size("x-debuginfod-size"));
        if let (Some(total), Some(max)) = (total, self.max_size) {
            if total > max {
                return Err(transfer(format!(
                    "{total} bytes, more than DEBUGINFOD_MAXSIZE ({max})"
                )));
            }
        }

        let cache_error = |path: &Path, error| FetchError::Cache {
            path: path.to_path_buf(),
            error,
        };
        create_private_dir(dir).map_err(|e| cache_error(dir, e))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!("{}.", artifact.name()))
            .tempfile_in(dir)
            .map_err(|e| cache_error(dir, e))?;
        let report = |done: u64| {
            let Some(progress) = progress else {
                return ControlFlow::Continue(());
            };
            progress(&Progress {
                server,
                url: &url,
                artifact,
                build_id: hex,
                done,
                total,
            })
        };
        let cancelled = || FetchError::Cancelled {
            server: server.to_string(),
            artifact,
            build_id: hex.to_string(),
        };
        if report(0).is_break() {
            return Err(cancelled());
        }
        let mut body = response.into_body().into_reader();
        let mut buf = vec![0u8; BLOCK];
        let mut done = 0u64;
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    let ureq_error = ureq::Error::from(e);
                    if let Some(Down::Timeout(t)) = self.classify(&ureq_error) {
                        return Err(transfer(format!(
                            "the transfer stalled for {} s after {done} bytes",
                            t.as_secs_f64()
                        )));
                    }
                    return Err(transfer(format!(
                        "the transfer broke off after {done} bytes: {ureq_error}"
                    )));
                }
            };
            tmp.write_all(&buf[..n])
                .map_err(|e| cache_error(tmp.path(), e))?;
            done += n as u64;
            if let Some(max) = self.max_size.filter(|&max| done > max) {
                return Err(transfer(format!(
                    "more than DEBUGINFOD_MAXSIZE ({max}) bytes"
                )));
            }
            if report(done).is_break() {
                return Err(cancelled());
            }
        }
        if let Some(total) = total.filter(|&t| t != done) {
            return Err(transfer(format!("{done} bytes of the {total} announced")));
        }
        tmp.flush().map_err(|e| cache_error(tmp.path(), e))?;
        // Only the file asked for goes into the cache: an ELF file with
        // this build id (not, say, a proxy's web page).
        let data = std::fs::read(tmp.path()).map_err(|e| cache_error(tmp.path(), e))?;
        match buildid::elf_build_id(&data) {
            Some(got) if got == id => {}
            Some(got) => {
                return Err(transfer(format!(
                    "it has build id {}",
                    buildid::to_hex(&got)
                )))
            }
            None => return Err(transfer("it is not an ELF file with a build id".into())),
        }
        drop(data);
        tmp.persist(target)
            .map_err(|e| cache_error(target, e.error))?;
        if total.is_none() {
            // Complete, now that the size is known.
            let _ = progress.map(|p| {
                p(&Progress {
                    server,
                    url: &url,
                    artifact,
                    build_id: hex,
                    done,
                    total: Some(done),
                })
            });
        }
        Ok(Fetched {
            path: target.to_path_buf(),
            source: url.clone(),
            from_cache: false,
        })
    }

    /// Whether `e` says the server is not there (or not answering), and
    /// how; `None` for errors of one transfer.
    fn classify(&self, e: &ureq::Error) -> Option<Down> {
        let timeout = || Down::Timeout(self.timeout.or(self.max_time).unwrap_or_default());
        match e {
            ureq::Error::Timeout(_) => Some(timeout()),
            ureq::Error::HostNotFound => Some(Down::Unreachable("host not found".into())),
            ureq::Error::ConnectionFailed => Some(Down::Unreachable("connection failed".into())),
            ureq::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::TimedOut => Some(timeout()),
                std::io::ErrorKind::ConnectionRefused => {
                    Some(Down::Unreachable("connection refused".into()))
                }
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::NotConnected
                | std::io::ErrorKind::AddrNotAvailable
                | std::io::ErrorKind::HostUnreachable
                | std::io::ErrorKind::NetworkUnreachable => Some(Down::Unreachable(io.to_string())),
                _ => None,
            },
            _ => None,
        }
    }
}

/// The cache directory elfutils' clients use when `DEBUGINFOD_CACHE_PATH`
/// is not set: `~/.debuginfod_client_cache` where it exists (older
/// elfutils), else `$XDG_CACHE_HOME/debuginfod_client`, else
/// `~/.cache/debuginfod_client`.
pub fn default_cache() -> Option<PathBuf> {
    cache_from(|name| std::env::var_os(name))
}

/// [`default_cache`] with the environment read through `var`.
fn cache_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    if let Some(p) = var("DEBUGINFOD_CACHE_PATH").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let home = var("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    if let Some(old) = home.as_ref().map(|h| h.join(".debuginfod_client_cache")) {
        if old.exists() {
            return Some(old);
        }
    }
    match var("XDG_CACHE_HOME").filter(|p| !p.is_empty()) {
        Some(xdg) => Some(PathBuf::from(xdg).join("debuginfod_client")),
        None => Some(home?.join(".cache/debuginfod_client")),
    }
}

/// The cache's directories are private (elfutils makes them 0700): what a
/// user fetched tells which programs they debug.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// A progress callback for a command line: on a terminal one line per
/// transfer, rewritten as it goes; elsewhere a line when a transfer starts
/// and one when it completes.
pub fn stderr_progress() -> Arc<ProgressFn> {
    let terminal = std::io::stderr().is_terminal();
    // The last tenth reported of the current transfer, so a terminal is
    // rewritten ten times per file, not once per block.
    let last = Mutex::new(None::<u64>);
    Arc::new(move |p: &Progress<'_>| {
        let mut last = last.lock();
        let step = match p.total {
            Some(t) if t > 0 => p.done * 10 / t,
            _ => p.done / (1 << 20),
        };
        let first = p.done == 0;
        if !(first || p.is_complete() || (terminal && *last != Some(step))) {
            return ControlFlow::Continue(());
        }
        *last = Some(step);
        let size = |n: u64| format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64);
        let amount = match p.total {
            Some(t) => format!("{} of {}", size(p.done), size(t)),
            None => size(p.done),
        };
        let mut err = std::io::stderr().lock();
        let line = format!("debuginfod: {} {}: {amount}", p.artifact, p.url);
        let _ = if terminal {
            write!(
                err,
                "\r\x1b[K{line}{}",
                if p.is_complete() { "\n" } else { "" }
            )
        } else if first {
            writeln!(err, "debuginfod: fetching the {} {}", p.artifact, p.url)
        } else {
            writeln!(err, "{line}, done")
        };
        ControlFlow::Continue(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::io::BufRead;
    use std::net::TcpListener;

    #[test]
    fn the_cache_is_where_elfutils_puts_it() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().to_path_buf();
        let env = |vars: &'static [(&'static str, &'static str)]| {
            let home = home.clone();
            move |name: &str| -> Option<OsString> {
                if name == "HOME" {
                    return Some(home.clone().into());
                }
                vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.into())
            }
        };
        assert_eq!(
            cache_from(env(&[("DEBUGINFOD_CACHE_PATH", "/c")])),
            Some(PathBuf::from("/c"))
        );
        assert_eq!(
            cache_from(env(&[("XDG_CACHE_HOME", "/x")])),
            Some(PathBuf::from("/x/debuginfod_client"))
        );
        assert_eq!(
            cache_from(env(&[])),
            Some(home.join(".cache/debuginfod_client"))
        );
        // An older elfutils' cache, where it exists, is kept.
        std::fs::create_dir(home.join(".debuginfod_client_cache")).unwrap();
        assert_eq!(
            cache_from(env(&[("XDG_CACHE_HOME", "/x")])),
            Some(home.join(".debuginfod_client_cache"))
        );
    }

    #[test]
    fn an_answer_that_is_not_the_file_asked_for_is_not_cached() {
        // A loopback "server" that answers one request with a web page,
        // as a misconfigured proxy or URL does.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let answer = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            let page = "<html>moved</html>";
            write!(
                &stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            )
            .unwrap();
        });
        let t = tempfile::tempdir().unwrap();
        let client = Client::new([url.clone()], t.path().to_path_buf());
        let e = client.debuginfo(&[0xab, 0xcd]).unwrap_err();
        answer.join().unwrap();
        assert!(
            matches!(&e, FetchError::Transfer { server, .. } if *server == url),
            "{e:?}"
        );
        assert!(e.to_string().contains("not an ELF file"), "{e}");
        let dir = t.path().join("abcd");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }
}
