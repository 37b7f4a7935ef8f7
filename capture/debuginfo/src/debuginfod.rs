//! The debuginfod client: debug files by build id from the servers
//! `DEBUGINFOD_URLS` names, kept in the client cache elfutils uses
//! (`$DEBUGINFOD_CACHE_PATH`, else `~/.cache/debuginfod_client`), so that
//! gdb, perf and ptscope share what any of them fetched.

use std::path::PathBuf;
use std::time::Duration;

/// What went wrong fetching a file.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("no debuginfod server has build id {0}")]
    NotFound(String),
    #[error("debuginfod is not reachable yet in this build")]
    Unavailable,
}

impl FetchError {
    /// The servers answered that they do not have it: not worth a note.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FetchError::NotFound(_))
    }
}

/// The servers and the cache.
#[derive(Clone, Debug)]
pub struct Client {
    pub urls: Vec<String>,
    pub cache: PathBuf,
    /// How long one request may take before the server counts as down.
    pub timeout: Duration,
}

impl Client {
    /// The client `DEBUGINFOD_URLS` asks for (space-separated URLs), with
    /// elfutils' cache; `None` when it names none.
    pub fn from_env() -> Option<Client> {
        let urls: Vec<String> = std::env::var("DEBUGINFOD_URLS")
            .ok()?
            .split_whitespace()
            .map(|u| u.trim_end_matches('/').to_string())
            .collect();
        if urls.is_empty() {
            return None;
        }
        let cache = match std::env::var_os("DEBUGINFOD_CACHE_PATH") {
            Some(p) => PathBuf::from(p),
            None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/debuginfod_client"),
        };
        Some(Client {
            urls,
            cache,
            timeout: Duration::from_secs(90),
        })
    }

    /// The debug file of build id `id` and the URL of the server (or cache)
    /// it came from.
    pub fn debuginfo(&self, id: &[u8]) -> Result<(PathBuf, String), FetchError> {
        let hex = ptscope_formats::buildid::to_hex(id);
        let cached = self.cache.join(&hex).join("debuginfo");
        if cached.is_file() {
            return Ok((cached, self.cache.display().to_string()));
        }
        Err(FetchError::Unavailable)
    }
}
