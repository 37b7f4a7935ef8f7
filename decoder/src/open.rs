//! One way in: any input a user can open, told apart by its content and
//! decoded into a [`Decoded`]: its model and the fine pass over it. The command line and the window both open
//! files through [`open`], so a file that opens in one opens in the other,
//! with the same errors.
//!
//! The kinds ([`InputKind`]): a `.ptscope` snapshot (a tar archive), a
//! perf.data from `perf record -e intel_pt//`, `perf script` branch text
//! (magic-trace's input), and a raw PT dump, which carries no sideband and
//! so needs the binaries it ran and their load addresses from the user. A
//! raw dump is recognised by a PSB packet near its start; opened without
//! those binaries it gets an error that asks for them (`--raw IMAGE:ADDR`),
//! and the window offers a form for them.

use std::io::Read;
use std::path::{Path, PathBuf};

use ptscope_formats::snapshot::Snapshot;
use ptscope_formats::FileError;

use crate::decode::{
    decode_raw, decode_snapshot, from_script, reopen, DecodeError, DecodeOptions, Reopened,
    Unpacking,
};
use crate::decoded::Decoded;
use crate::inputs::perf_script;
use crate::pt::block::DecoderConfig;

/// What a file holds, by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// A `.ptscope` archive: perf.data plus the binaries it maps.
    Snapshot,
    /// A perf.data file; its binaries are looked up on this machine.
    PerfData,
    /// `perf script` text with branch events.
    PerfScript,
    /// Raw PT bytes, as the hardware wrote them: told by a PSB packet in
    /// its first bytes, or by the caller.
    RawPt,
}

/// How to open an input.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// For a raw PT dump: every binary it ran, at its load address. A file
    /// is taken as a raw dump when this is not empty, or when it starts
    /// like one ([`InputKind::RawPt`]); a raw dump needs at least one.
    pub raw_images: Vec<(PathBuf, u64)>,
    /// For a raw PT dump, which records no CPU and no timing parameters:
    /// the ones to decode it with. The default names no CPU, so no errata
    /// apply, and times come from TSC packets alone.
    pub raw_config: DecoderConfig,
    /// How to decode: the CPU whose errata to work around (a raw dump
    /// says none; a perf.data or snapshot records its cpuid), the IP
    /// filter, the threads, the engine, the cores, progress and names.
    pub decode: DecodeOptions,
    /// Where decoded models are kept: a snapshot or perf.data opened again
    /// with the same options is read from it, not decoded. `None`: always
    /// decode (`--no-cache`).
    pub cache: Option<crate::inputs::cache::ModelCache>,
}

/// The first bytes of `path` that tell its kind.
const HEAD: usize = 512;

/// What `path` holds: a raw dump when the caller says so (`raw`), else by
/// its first bytes: perf.data by its magic, a snapshot by its tar header,
/// `perf script` output as text, and a raw PT dump by a PSB packet (which
/// none of the others holds there).
pub fn input_kind(path: &Path, raw: bool) -> Result<InputKind, DecodeError> {
    let io = |e| DecodeError::File(FileError::io(path, e));
    if path.is_dir() {
        return Err(input(path, "is a directory, not a snapshot"));
    }
    if raw {
        return Ok(InputKind::RawPt);
    }
    let mut head = [0u8; HEAD];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(io)?;
    let head = &head[..n];
    Ok(
        if head.starts_with(&ptscope_formats::perf_data::MAGIC.to_le_bytes()) {
            InputKind::PerfData
        } else if head.len() >= 262 && &head[257..262] == b"ustar" {
            InputKind::Snapshot
        } else if is_text(head) {
            InputKind::PerfScript
        } else if crate::pt::packet::find_psb(head).is_some() {
            InputKind::RawPt
        } else {
            // Not text, not a format we know: the snapshot reader says why in
            // the words it uses for every damaged file.
            InputKind::Snapshot
        },
    )
}

/// Whether `head`, the start of a file, is text: UTF-8 without NULs. The
/// last character may be cut by the end of `head`.
fn is_text(head: &[u8]) -> bool {
    let valid = match std::str::from_utf8(head) {
        Ok(s) => s,
        // Cut inside a character, not broken: the text up to it.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return false,
    };
    !valid.is_empty() && !valid.contains('\0')
}

fn input(path: &Path, problem: &str) -> DecodeError {
    DecodeError::Input {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

/// What a raw PT dump opened without its binaries is told.
pub const RAW_NEEDS_IMAGES: &str = "starts with a PSB packet: it looks like a raw Intel PT dump, \
     which records no binaries; give each binary it ran at its load address with \
     --raw IMAGE:ADDR";

/// Opens `path` as a snapshot or perf.data, for what reads their PT and
/// sideband as such (`ptscope info`, `ptscope packets`): other kinds of
/// input get an error that says what they are.
pub fn open_snapshot(path: &Path) -> Result<Snapshot, DecodeError> {
    match input_kind(path, false)? {
        InputKind::PerfScript => Err(input(
            path,
            "is `perf script` text, which holds no PT; `ptscope decode` opens it",
        )),
        InputKind::RawPt => Err(input(path, RAW_NEEDS_IMAGES)),
        _ => Snapshot::open(path).map_err(DecodeError::File),
    }
}

/// The bytes of the raw PT dump `path`.
pub fn read_raw(path: &Path) -> Result<Vec<u8>, DecodeError> {
    std::fs::read(path).map_err(|e| DecodeError::File(FileError::io(path, e)))
}

/// Opens and decodes `path`, whatever kind of input it is.
pub fn open(path: &Path, opts: &OpenOptions) -> Result<Decoded, DecodeError> {
    match input_kind(path, !opts.raw_images.is_empty())? {
        InputKind::RawPt if opts.raw_images.is_empty() => Err(input(path, RAW_NEEDS_IMAGES)),
        InputKind::RawPt => {
            let pt = read_raw(path)?;
            let d = &opts.decode;
            let mut cfg = match d.cpu {
                Some(cpu) => opts.raw_config.with_cpu(cpu),
                None => opts.raw_config,
            };
            if let Some(f) = d.ip_filter {
                cfg = cfg.with_filter(f);
            }
            cfg.no_memo = d.no_memo;
            decode_raw(path, pt.into(), &opts.raw_images, &cfg, d.engine)
        }
        InputKind::PerfScript => {
            let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => input(path, "not UTF-8 text"),
                _ => DecodeError::File(FileError::io(path, e)),
            })?;
            let script = perf_script::import(&text, path)?;
            let mut m = from_script(script);
            if let Some(t) = &opts.decode.threads {
                m.threads.retain(|th| t.contains(&th.spans.tid));
            }
            Ok(Decoded::without_lines(m))
        }
        InputKind::Snapshot | InputKind::PerfData => {
            let (mut snap, unpack) =
                Snapshot::open_unpacking_later(path).map_err(DecodeError::File)?;
            let dopts = &opts.decode;
            let cache = opts
                .cache
                .as_ref()
                .and_then(|c| Some((c, c.key(path, &model_options(dopts))?)));
            match &cache {
                None => unpack.run().map_err(DecodeError::File)?,
                Some((c, key)) => {
                    // The snapshot's binaries are copied out when they are
                    // needed as files: by a decode, not by reading and
                    // checking a cached model, whose fine pass's source
                    // copies them after the model is shown.
                    let mut unpacking = Unpacking::later(unpack);
                    match c.load(key, dopts.progress.as_deref()) {
                        Some(Ok(cached)) => match reopen(snap, dopts, cached, unpacking)? {
                            Reopened::Model(model) => {
                                c.used(key);
                                return Ok(model);
                            }
                            // Stale: its names came from files that
                            // changed. Unpacked, to be decoded afresh.
                            Reopened::Stale(s) => snap = *s,
                        },
                        // Never trusted: decoded afresh and written anew.
                        Some(Err(_)) => {
                            unpacking.finish().map_err(DecodeError::File)?;
                            c.forget(key);
                        }
                        None => unpacking.finish().map_err(DecodeError::File)?,
                    }
                }
            }
            let model = decode_snapshot(&snap, dopts)?;
            if let Some((c, key)) = cache {
                c.keep(key, model.clone());
            }
            Ok(model)
        }
    }
}

/// Every option that changes the model a decode gives, as text for the
/// model cache's key: the options serialized, less what they skip (see
/// [`DecodeOptions`]), in hex.
fn model_options(opts: &DecodeOptions) -> String {
    let bytes = postcard::to_allocvec(opts).expect("options serialize");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_formats::pt::write::{self, IpCompression, IpPacket};

    fn demo() -> PathBuf {
        crate::testing::demo_path()
    }

    #[test]
    fn kinds_are_told_apart_by_content() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(input_kind(&demo(), false).unwrap(), InputKind::Snapshot);
        // The same bytes under any name.
        let renamed = dir.path().join("trace.txt");
        std::fs::copy(demo(), &renamed).unwrap();
        assert_eq!(input_kind(&renamed, false).unwrap(), InputKind::Snapshot);
        let perf = dir.path().join("x.data");
        std::fs::write(&perf, b"PERFILE2\0\0\0\0").unwrap();
        assert_eq!(input_kind(&perf, false).unwrap(), InputKind::PerfData);
        let text = dir.path().join("x.snapshot");
        std::fs::write(&text, "1/1 1.0: 1 branches:u: 1 a => 2 b\n").unwrap();
        assert_eq!(input_kind(&text, false).unwrap(), InputKind::PerfScript);
        assert_eq!(input_kind(&text, true).unwrap(), InputKind::RawPt);
        let e = input_kind(dir.path(), false).unwrap_err().to_string();
        assert!(e.ends_with("is a directory, not a snapshot"), "{e}");
        let e = open_snapshot(&text).unwrap_err().to_string();
        assert!(e.contains("`perf script` text"), "{e}");
        assert!(open_snapshot(&renamed).is_ok());
        let gone = dir.path().join("gone");
        let e = input_kind(&gone, false).unwrap_err().to_string();
        assert!(e.starts_with(&gone.display().to_string()), "{e}");
    }

    #[test]
    fn a_raw_dump_is_told_by_its_psb_and_asks_for_its_binaries() {
        let dir = tempfile::tempdir().unwrap();
        let pt = dir.path().join("trace.pt");
        // PSB, PSBEND, PAD: the start of any raw dump.
        let mut bytes = write::PSB.to_vec();
        bytes.extend(write::PSBEND);
        write::pad(&mut bytes);
        std::fs::write(&pt, &bytes).unwrap();
        assert_eq!(input_kind(&pt, false).unwrap(), InputKind::RawPt);
        // Cut anywhere past a few bytes, it is still one.
        let cut = dir.path().join("cut.pt");
        let mut late = vec![0x00u8; 40];
        late.extend(&bytes);
        std::fs::write(&cut, &late).unwrap();
        assert_eq!(input_kind(&cut, false).unwrap(), InputKind::RawPt);
        for e in [
            open(&pt, &OpenOptions::default()).err().unwrap(),
            open_snapshot(&pt).err().unwrap(),
        ] {
            let e = e.to_string();
            assert!(e.starts_with(&pt.display().to_string()), "{e}");
            assert!(
                e.contains("raw Intel PT dump") && e.contains("--raw IMAGE:ADDR"),
                "{e}"
            );
        }
        assert_eq!(read_raw(&pt).unwrap(), bytes);
    }

    #[test]
    fn text_cut_inside_a_character_is_still_text() {
        // A symbol name with an ü whose two bytes straddle the head's end.
        let mut line = "1/1 1.0: 1 branches:u: 1 f".repeat(30).into_bytes();
        line.truncate(HEAD - 1);
        line.extend_from_slice("ü => 2 g\n".as_bytes());
        assert!(is_text(&line[..HEAD]));
        assert!(!is_text(b"PT\0\x02"));
        assert!(!is_text(&[0xff, 0xfe, b'a']));
        assert!(!is_text(b""));
    }

    /// The model cache's key follows every option that changes the model
    /// (a field added to [`DecodeOptions`] joins it unless skipped), and
    /// none that does not.
    #[test]
    fn the_cache_key_follows_every_option_that_changes_the_model() {
        use crate::names::lookup::{FileLookup, NameOptions};
        use ptscope_debuginfo::{debuginfod::Client, Search};
        let search = |s: Search| -> std::sync::Arc<dyn FileLookup> { std::sync::Arc::new(s) };
        let base = DecodeOptions::default();
        let k0 = model_options(&base);
        let same = DecodeOptions {
            parallel: crate::passes::coarse::chunks::Parallel::sequential(),
            progress: Some(crate::progress::DecodeProgress::new()),
            ..base.clone()
        };
        assert_eq!(model_options(&same), k0);
        let names = |n: NameOptions| DecodeOptions {
            names: n,
            ..base.clone()
        };
        let filter = crate::pt::ip_filter::IpFilter::new(&[crate::pt::ip_filter::IpRange {
            first: 0x1000,
            last: 0x2000,
            stop: false,
        }])
        .unwrap();
        let changed = [
            DecodeOptions {
                threads: Some(vec![1]),
                ..base.clone()
            },
            #[cfg(feature = "libipt")]
            DecodeOptions {
                engine: crate::decode::Engine::Libipt,
                ..base.clone()
            },
            DecodeOptions {
                cpu: Some("6/85".parse().unwrap()),
                ..base.clone()
            },
            DecodeOptions {
                ip_filter: Some(filter),
                ..base.clone()
            },
            names(NameOptions {
                lookup: Some(search(Search::default())),
                ..Default::default()
            }),
            names(NameOptions {
                lookup: Some(search(Search {
                    debug_dirs: vec!["/d".into()],
                    ..Search::default()
                })),
                ..Default::default()
            }),
            names(NameOptions {
                lookup: Some(search(Search {
                    binary_dirs: vec!["/b".into()],
                    ..Search::default()
                })),
                ..Default::default()
            }),
            names(NameOptions {
                lookup: Some(search(Search {
                    debuginfod: Some(Client::new(["http://127.0.0.1:1"], "/c".into())),
                    ..Search::default()
                })),
                ..Default::default()
            }),
            names(NameOptions {
                kallsyms: Some("/k".into()),
                ..Default::default()
            }),
            names(NameOptions {
                vmlinux: Some("/v".into()),
                ..Default::default()
            }),
        ];
        let mut keys: Vec<String> = changed.iter().map(model_options).collect();
        keys.push(k0);
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "two option sets share a key");
    }

    #[test]
    fn the_demo_opens_the_same_as_decoding_it() {
        let m = open(&demo(), &OpenOptions::default()).unwrap();
        let snap = Snapshot::open(&demo()).unwrap();
        let direct = decode_snapshot(&snap, &DecodeOptions::default()).unwrap();
        assert_eq!(m.canonical(), direct.canonical());
        let one = open(
            &demo(),
            &OpenOptions {
                decode: DecodeOptions {
                    threads: Some(vec![m.threads[0].spans.tid]),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(one.threads.len(), 1);
    }

    /// `--cpu` reaches the decoder: a TMA with reserved bits set is an
    /// error, except on a CPU with erratum SKZ84, where it is skipped.
    #[test]
    fn a_cpu_given_for_a_raw_dump_applies_its_errata() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("code");
        std::fs::write(&image, [0x90u8; 16]).unwrap();
        let mut pt = write::PSB.to_vec();
        // FUP 0x1000, MODE.Exec 64-bit, PSBEND.
        write::ip_packet(&mut pt, IpPacket::Fup, 0x1000, IpCompression::Full);
        write::mode_exec_64(&mut pt);
        pt.extend(write::PSBEND);
        // A corrupt TMA and its bogus byte (reserved bits set, as SKZ84
        // writes it: on purpose, and no encoder writes one), then FUP
        // 0x1004 and TIP.PGD.
        pt.extend([0x02, 0x73, 1, 1, 1, 1, 0, 0]);
        write::ip_packet(&mut pt, IpPacket::Fup, 0x1004, IpCompression::Full);
        write::ip_packet(&mut pt, IpPacket::TipPgd, 0, IpCompression::Suppressed);
        let raw = dir.path().join("raw.pt");
        std::fs::write(&raw, &pt).unwrap();
        let errors = |cpu: Option<&str>| {
            let opts = OpenOptions {
                raw_images: vec![(image.clone(), 0x1000)],
                decode: DecodeOptions {
                    cpu: cpu.map(|c| c.parse().unwrap()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let m = open(&raw, &opts).unwrap();
            m.threads.iter().map(|t| t.walk.errors.len()).sum::<usize>()
        };
        assert_eq!(errors(None), 1);
        assert_eq!(errors(Some("6/85")), 0);
    }
}
