//! The flags that say where names and binaries are found beyond the
//! snapshot and the machine's usual places (`--debug-dir`, `--binaries`,
//! `--no-debuginfod`), shared by `decode`, `stats`, `info` and the window,
//! and how they reach the decoder's [`OpenOptions`]: as the lookup the
//! decoder asks for files it does not hold (a [`Search`]), with debuginfod's
//! transfers reported where the caller shows them.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use ptscope_debuginfo::debuginfod::{Client, Progress};
use ptscope_debuginfo::Search;
use ptscope_decoder::DecodeOptions;
use ptscope_decoder::DecodeProgress;
use ptscope_decoder::NameOptions;
use ptscope_decoder::OpenOptions;

/// Where to look for debug files and for binaries not at their paths.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct NameDirs {
    /// A directory of debug files, searched after /usr/lib/debug: by build
    /// id (DIR/.build-id/xx/yyyy.debug) and by .gnu_debuglink
    /// (DIR/<binary's directory>/<link>). Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    /// A directory holding binaries that are not at their recorded paths
    /// (a perf.data from another machine): searched by build id
    /// (.build-id/xx/yyyy…/elf) and by name, a few levels deep. Repeatable.
    #[arg(long = "binaries", value_name = "DIR")]
    pub binary_dirs: Vec<PathBuf>,
    /// Do not ask the debuginfod servers DEBUGINFOD_URLS names for debug
    /// files.
    #[arg(long)]
    pub no_debuginfod: bool,
}

impl NameDirs {
    /// Whether the user named no directory.
    pub fn is_empty(&self) -> bool {
        self.binary_dirs.is_empty() && self.debug_dirs.is_empty()
    }

    /// A folder the user chose in the window: searched for binaries and
    /// for debug files both, since a user's folder often holds either.
    pub fn add_folder(&mut self, dir: &std::path::Path) {
        for list in [&mut self.binary_dirs, &mut self.debug_dirs] {
            if !list.iter().any(|d| d == dir) {
                list.push(dir.to_path_buf());
            }
        }
    }

    /// `opts` with these places to look, as the decoder's lookup for
    /// debug files and binaries. debuginfod transfers are reported to the
    /// decode's progress (a window shows what it waits on, and its Cancel
    /// stops a transfer) and, with `on_stderr`, on stderr as they go.
    pub fn apply(&self, opts: OpenOptions, on_stderr: bool) -> OpenOptions {
        let search = self.search(opts.decode.progress.clone(), on_stderr);
        let names = NameOptions {
            lookup: Some(Arc::new(search)),
            ..opts.decode.names
        };
        OpenOptions {
            decode: DecodeOptions {
                names,
                ..opts.decode
            },
            ..opts
        }
    }

    /// Where to look beyond a snapshot: the machine's places
    /// ([`Search::system`]) with the user's `--debug-dir`s after the
    /// system's, the user's `--binaries`, and debuginfod unless turned off,
    /// its transfers reported as [`NameDirs::apply`] says.
    pub fn search(&self, progress: Option<Arc<DecodeProgress>>, on_stderr: bool) -> Search {
        let mut s = Search::system();
        s.debug_dirs.extend(self.debug_dirs.iter().cloned());
        s.binary_dirs = self.binary_dirs.clone();
        s.debuginfod = match self.no_debuginfod {
            true => None,
            false => s.debuginfod.map(|c| reporting(c, on_stderr, progress)),
        };
        s
    }
}

/// `client`, reporting its transfers on stderr (`on_stderr`) and to a
/// window's `progress`, which shows what the decode waits on and whose
/// Cancel stops a transfer.
fn reporting(client: Client, on_stderr: bool, progress: Option<Arc<DecodeProgress>>) -> Client {
    if !on_stderr && progress.is_none() {
        return client;
    }
    let stderr = on_stderr.then(ptscope_debuginfo::debuginfod::stderr_progress);
    client.with_progress(Arc::new(move |p: &Progress<'_>| {
        if let Some(f) = &stderr {
            f(p)?;
        }
        let Some(progress) = &progress else {
            return ControlFlow::Continue(());
        };
        progress.set_waiting_on((!p.is_complete()).then(|| {
            let mib = |n: u64| n as f64 / (1u64 << 20) as f64;
            let total = p.total.map(|t| format!(" of {:.1}", mib(t)));
            format!(
                "fetching the {} of {} from {}: {:.1}{} MiB",
                p.artifact,
                p.build_id,
                p.server,
                mib(p.done),
                total.unwrap_or_default()
            )
        }));
        if progress.is_cancelled() {
            progress.set_waiting_on(None);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }))
}
