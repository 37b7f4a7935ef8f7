//! The flags that say where names and binaries are found beyond the
//! snapshot and the machine's usual places (`--debug-dir`, `--binaries`,
//! `--no-debuginfod`), shared by `decode`, `stats`, `info` and the window,
//! and how they reach the decoder's [`OpenOptions`].

use std::path::PathBuf;

use ptscope_decoder::open::OpenOptions;

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

    /// `opts` with these places to look.
    pub fn apply(&self, opts: OpenOptions) -> OpenOptions {
        let names = ptscope_decoder::names::NameOptions {
            debug_dirs: self.debug_dirs.clone(),
            binary_dirs: self.binary_dirs.clone(),
            debuginfod: !self.no_debuginfod,
            ..opts.decode.names
        };
        OpenOptions {
            decode: ptscope_decoder::decode::DecodeOptions {
                names,
                ..opts.decode
            },
            ..opts
        }
    }

    /// The search the decoder uses for `snap`, for `info`: debuginfod
    /// transfers are reported on stderr.
    pub fn search(
        &self,
        snap: Option<&ptscope_formats::snapshot::Snapshot>,
    ) -> ptscope_decoder::names::Search {
        let mut s = ptscope_decoder::names::search(
            snap,
            &self.debug_dirs,
            &self.binary_dirs,
            !self.no_debuginfod,
        );
        s.debuginfod = s
            .debuginfod
            .map(|c| ptscope_decoder::names::reporting(c, Some(stderr_report()), None));
        s
    }
}

/// debuginfod transfers reported on stderr as they go: what the command
/// line passes the decoder, which prints nothing itself.
pub fn stderr_report() -> ptscope_decoder::names::TransferReport {
    ptscope_decoder::names::TransferReport(ptscope_debuginfo::debuginfod::stderr_progress())
}
