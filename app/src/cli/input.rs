//! The input of the commands that decode (`decode`, `stats`, `export` and
//! `compare`): opening it as the options say, with a progress line on a
//! terminal, and printing what a command makes of it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use ptscope_decoder::Engine;
use ptscope_decoder::ModelCache;
use ptscope_decoder::OpenOptions;
use ptscope_decoder::Parallel;

use super::args::{DecoderChoice, InputOpts};

/// Opens the input and prints what `print` makes of its model to stdout;
/// a closed pipe (`| head`) is not an error.
pub(super) fn print_model(
    input: InputOpts,
    print: impl FnOnce(
        &ptscope_decoder::Decoded,
        &Path,
        &mut std::io::BufWriter<std::io::StdoutLock<'static>>,
    ) -> Result<()>,
) -> Result<ExitCode> {
    let file = input.file.clone();
    // The cache outlives the printing: its entry is written meanwhile, and
    // waited for when it goes.
    let (m, _cache) = load_input(input)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    ptscope::report::quiet_pipe(print(&m, &file, &mut out).and_then(|()| Ok(out.flush()?)))?;
    Ok(ExitCode::SUCCESS)
}

/// Opens the input as its options say, with the model cache it used (if
/// any): whoever holds that has its entry written in the background, and
/// waits for the write when it lets go.
pub(super) fn load_input(
    input: InputOpts,
) -> Result<(ptscope_decoder::Decoded, Option<ModelCache>)> {
    let threads = (!input.threads.is_empty()).then_some(input.threads);
    let engine = match input.decoder {
        DecoderChoice::Ptscope => Engine::Flow,
        #[cfg(feature = "libipt")]
        DecoderChoice::Libipt => Engine::Libipt,
        #[cfg(not(feature = "libipt"))]
        DecoderChoice::Libipt => anyhow::bail!(
            "--decoder libipt: this ptscope was built without libipt \
             (the `libipt` cargo feature, on by default)"
        ),
    };
    let mut parallel = match input.jobs {
        Some(n) => Parallel::on(n.into()),
        None => Parallel::default(),
    };
    if let Some(chunk) = input.chunk {
        parallel.chunk_bytes = chunk;
        parallel.first_chunk_bytes = parallel.first_chunk_bytes.min(chunk);
    }
    let opts = input.names.apply(
        OpenOptions {
            raw_images: input.raw.clone(),
            decode: ptscope_decoder::DecodeOptions {
                cpu: input.cpu,
                ip_filter: input.ip_filter,
                no_memo: input.no_memo,
                threads,
                engine,
                parallel,
                names: ptscope_decoder::NameOptions {
                    kallsyms: input.kernel.kallsyms.clone(),
                    vmlinux: input.kernel.vmlinux.clone(),
                    ..Default::default()
                },
                progress: None,
            },
            cache: if input.no_cache {
                None
            } else {
                ptscope_decoder::ModelCache::user()
            },
            ..OpenOptions::default()
        },
        true,
    );
    let cache = opts.cache.clone();
    let model = with_decode_progress(opts, |opts| ptscope_decoder::open(&input.file, opts))?;
    for w in &model.warnings {
        eprintln!("ptscope: warning: {}: {w}", input.file.display());
    }
    Ok((model, cache))
}

/// Runs `decode` with `opts`; on a terminal, a line on stderr says how far
/// it is, how fast it goes and the time left, rewritten twice a second
/// once the decode has taken a second, and cleared at the end.
fn with_decode_progress<T>(mut opts: OpenOptions, decode: impl FnOnce(&OpenOptions) -> T) -> T {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return decode(&opts);
    }
    let progress = ptscope_decoder::DecodeProgress::counting();
    opts.decode.progress = Some(progress.clone());
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let reporter = std::thread::spawn(move || {
        let mut shown = false;
        let wait = |d| stopped.recv_timeout(d) != Err(std::sync::mpsc::RecvTimeoutError::Timeout);
        if wait(std::time::Duration::from_secs(1)) {
            return;
        }
        loop {
            let (done, total) = progress.segments();
            if let Some(r) = progress.rate() {
                eprint!("\r\x1b[Kdecoding: {done} of {total} segments, {r}");
                shown = true;
            }
            if wait(std::time::Duration::from_millis(500)) {
                break;
            }
        }
        if shown {
            eprint!("\r\x1b[K");
        }
    });
    let out = decode(&opts);
    drop(stop);
    let _ = reporter.join();
    out
}

/// Whether `file` is to be read as a raw PT dump: `--raw` was given, or
/// it starts like one.
pub(super) fn is_raw(file: &Path, raw: &[(PathBuf, u64)]) -> Result<bool> {
    use ptscope_decoder::{input_kind, InputKind};
    Ok(input_kind(file, !raw.is_empty())? == InputKind::RawPt)
}
