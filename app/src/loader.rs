//! Loading a file off the UI thread.
//!
//! A [`Load`] decodes on its own thread and shares a
//! [`DecodeProgress`] with the window: the window polls it each frame for
//! the segments decoded so far and for partial models, so the first
//! threads are drawn while the rest decode, and the user can cancel. The
//! finished decode arrives as a [`Loaded`]: the model, and the fine pass
//! the app runs for it, which the view asks for line detail.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use ptscope_decoder::DecodeProgress;
use ptscope_decoder::Decoded;
use ptscope_decoder::ModelCache;
use ptscope_decoder::OpenOptions;
use ptscope_decoder::Parallel;
use ptscope_decoder::DEFAULT_SEGMENT_BUDGET;
use ptscope_decoder::{DecodeOptions, Engine};
use ptscope_model::DetailSource;
use ptscope_model::Model;

use crate::name_dirs::NameDirs;

/// How a file is decoded beyond what it records: the binaries of a raw
/// PT dump, and the CPU and IP filter to decode as (`--raw`, `--cpu`,
/// `--ip-filter`, the same options `decode` takes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decoding {
    /// The binaries of a raw PT dump, at their load addresses (empty for
    /// any other input).
    pub raw_images: Vec<(PathBuf, u64)>,
    /// Decode as on this CPU, whose errata are then worked around, over
    /// the cpuid the file records.
    pub cpu: Option<ptscope_decoder::Cpu>,
    /// The IP filter the trace was written under, over the one the file
    /// records.
    pub ip_filter: Option<ptscope_decoder::IpFilter>,
}

/// A decoded file: its model, and the fine pass over it (none for an
/// input without an instruction trace), running on a worker thread of
/// its own that wakes the window whenever a segment is ready.
pub struct Loaded {
    pub model: Arc<Model>,
    pub detail: Option<Arc<dyn DetailSource>>,
}

/// What a poll of a load found.
pub enum Poll {
    /// Still decoding; maybe with a newer partial model.
    Pending(Option<Arc<Model>>),
    Done(Result<Loaded, String>),
}

type Wake = Arc<dyn Fn() + Send + Sync>;

pub struct Load {
    pub path: PathBuf,
    progress: Arc<DecodeProgress>,
    rx: mpsc::Receiver<Result<Decoded, String>>,
    thread: Option<JoinHandle<()>>,
    wake: Wake,
}

impl Load {
    /// Starts decoding `path`, through `cache` if given; `wake` runs when
    /// it is done (to repaint).
    /// `decoding` gives what the file does not record (a raw dump's
    /// binaries, the CPU); `names` says where debug files and binaries not
    /// at their paths are looked for.
    pub fn start(
        path: &Path,
        decoding: &Decoding,
        names: &NameDirs,
        cache: Option<ModelCache>,
        wake: impl Fn() + Send + Sync + 'static,
    ) -> Load {
        let wake: Wake = Arc::new(wake);
        let done = wake.clone();
        let names = names.clone();
        let decoding = decoding.clone();
        let progress = DecodeProgress::new();
        let (tx, rx) = mpsc::channel();
        let p = progress.clone();
        let file = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("ptscope-load".into())
            .spawn(move || {
                let opts = names.apply(
                    OpenOptions {
                        raw_images: decoding.raw_images,
                        decode: DecodeOptions {
                            cpu: decoding.cpu,
                            ip_filter: decoding.ip_filter,
                            engine: Engine::Flow,
                            parallel: Parallel::default(),
                            progress: Some(p),
                            ..DecodeOptions::default()
                        },
                        cache,
                        ..OpenOptions::default()
                    },
                    false,
                );
                let r = ptscope_decoder::open(&file, &opts).map_err(|e| e.to_string());
                let _ = tx.send(r);
                done();
            })
            .ok();
        if thread.is_none() {
            // Without a thread there is no load; say so instead of hanging.
            let (tx, rx2) = mpsc::channel();
            let _ = tx.send(Err(format!(
                "{}: cannot start a thread to decode it",
                path.display()
            )));
            return Load {
                path: path.to_path_buf(),
                progress,
                rx: rx2,
                thread: None,
                wake,
            };
        }
        Load {
            path: path.to_path_buf(),
            progress,
            rx,
            thread,
            wake,
        }
    }

    /// The model to show and its fine pass, started here.
    fn loaded(&self, d: Decoded) -> Loaded {
        let wake = self.wake.clone();
        let (model, worker) = d.into_parts(DEFAULT_SEGMENT_BUDGET, move || wake());
        Loaded {
            model,
            detail: worker.map(|w| Arc::new(w) as Arc<dyn DetailSource>),
        }
    }

    /// (segments decoded, segments in all).
    pub fn segments(&self) -> (u64, u64) {
        self.progress.segments()
    }

    /// How fast the decode goes and its time left, once known.
    pub fn rate(&self) -> Option<ptscope_decoder::Rate> {
        self.progress.rate()
    }

    /// What the decode waits on besides decoding (a debuginfod transfer).
    pub fn waiting_on(&self) -> Option<String> {
        self.progress.waiting_on()
    }

    pub fn cancel(&self) {
        self.progress.cancel();
    }

    pub fn poll(&mut self) -> Poll {
        match self.rx.try_recv() {
            Ok(r) => {
                self.join();
                Poll::Done(r.map(|d| self.loaded(d)))
            }
            Err(mpsc::TryRecvError::Empty) => Poll::Pending(self.progress.take_partial()),
            Err(mpsc::TryRecvError::Disconnected) => {
                self.join();
                Poll::Done(Err(format!(
                    "{}: the decoder stopped without a result",
                    self.path.display()
                )))
            }
        }
    }

    /// Blocks until the load ends (the GUI tests).
    pub fn wait(&mut self) -> Result<Loaded, String> {
        let r = match self.rx.recv() {
            Ok(r) => r.map(|d| self.loaded(d)),
            Err(_) => Err(format!(
                "{}: the decoder stopped without a result",
                self.path.display()
            )),
        };
        self.join();
        r
    }

    fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // A closed tab stops its decode; the thread ends on its own.
        self.progress.cancel();
    }
}
