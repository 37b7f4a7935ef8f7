//! The debuginfod client against a real server: Debian's `debuginfod`,
//! started on 127.0.0.1 over a temporary directory holding a program of
//! ours and its debug file, and against the failures users meet: a
//! server that is down, one that never answers, and one that answers 404.
//! All traffic stays on the loopback interface; every server started is
//! killed when its test ends, passed or failed.

use std::net::TcpListener;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ptscope_debuginfo::debuginfod::{Artifact, Client, FetchError, Progress, ProgressFn};
use ptscope_debuginfo::{Origin, Search};
use ptscope_formats::buildid;

mod server;
use server::{free_port, Server};

/// A program of ours, stripped, and its debug file, in `dir`: both carry
/// the same build id, as a distribution's binary and its `-dbgsym` do.
struct Program {
    binary: PathBuf,
    debug: PathBuf,
    id: Vec<u8>,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn program(dir: &Path) -> Program {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join("prog.c");
    std::fs::write(
        &src,
        "int square(int x) { return x * x; }\nint main(void) { return square(3) - 9; }\n",
    )
    .unwrap();
    let binary = dir.join("prog");
    let debug = dir.join("prog.debug");
    run(Command::new("cc")
        .args(["-g", "-Wl,--build-id", "-o"])
        .arg(&binary)
        .arg(&src));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&binary)
        .arg(&debug));
    run(Command::new("objcopy").arg("--strip-debug").arg(&binary));
    std::fs::remove_file(&src).unwrap();
    let id = buildid::elf_build_id(&std::fs::read(&binary).unwrap()).expect("a build id");
    Program { binary, debug, id }
}

/// The reports kept: URL, bytes done, total.
type Reports = Arc<Mutex<Vec<(String, u64, Option<u64>)>>>;

/// A progress callback that keeps every report.
fn recorder() -> (Arc<ProgressFn>, Reports) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let f: Arc<ProgressFn> = Arc::new(move |p: &Progress<'_>| {
        keep.lock()
            .unwrap()
            .push((p.url.to_string(), p.done, p.total));
        ControlFlow::Continue(())
    });
    (f, seen)
}

#[test]
fn a_file_the_server_has_is_fetched_then_served_from_the_cache_without_it() {
    let t = tempfile::tempdir().unwrap();
    let prog = program(&t.path().join("files"));
    let hex = buildid::to_hex(&prog.id);
    let cache = t.path().join("cache");
    let server = Server::start(&t.path().join("files"), 2, &t.path().join("server"));
    let (progress, seen) = recorder();
    let client = Client::new([format!("{}/", server.url)], cache.clone()).with_progress(progress);

    let got = client.debuginfo(&prog.id).unwrap();
    let url = format!("{}/buildid/{hex}/debuginfo", server.url);
    assert_eq!(got.source, url);
    assert!(!got.from_cache);
    // In elfutils' layout, the very file the server holds.
    assert_eq!(got.path, cache.join(&hex).join("debuginfo"));
    let want = std::fs::read(&prog.debug).unwrap();
    assert_eq!(std::fs::read(&got.path).unwrap(), want);
    // Progress: from nothing to all of it, the size known up front.
    let seen = seen.lock().unwrap().clone();
    let len = want.len() as u64;
    assert_eq!(seen.first(), Some(&(url.clone(), 0, Some(len))));
    assert_eq!(seen.last(), Some(&(url, len, Some(len))));
    assert!(seen.windows(2).all(|w| w[0].1 <= w[1].1), "{seen:?}");
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(cache.join(&hex))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["debuginfo"]);

    // The executable, for a binary missing here, through the search.
    let search = Search {
        debuginfod: Some(client.clone()),
        ..Search::default()
    };
    let exe = search
        .binary(Some(&prog.id), "/elsewhere/prog")
        .expect("the executable from debuginfod");
    assert_eq!(exe, cache.join(&hex).join("executable"));
    assert_eq!(
        std::fs::read(&exe).unwrap(),
        std::fs::read(&prog.binary).unwrap()
    );

    // The server goes away; the cache serves, to us and to elfutils.
    let url = server.url.clone();
    drop(server);
    let later = Client::new([url.clone()], cache.clone());
    let again = later.debuginfo(&prog.id).unwrap();
    assert!(again.from_cache);
    assert_eq!(again.path, got.path);
    let mut notes = Vec::new();
    let found = Search {
        debuginfod: Some(later),
        ..Search::default()
    }
    .debug_file(&prog.binary, "/elsewhere/prog", Some(&prog.id), &mut notes)
    .unwrap();
    assert_eq!(found.path, got.path);
    assert!(matches!(found.origin, Origin::Debuginfod(_)));
    assert!(notes.is_empty(), "{notes:?}");
    let elfutils = Command::new("debuginfod-find")
        .args(["debuginfo", &hex])
        .env("DEBUGINFOD_URLS", &url)
        .env("DEBUGINFOD_CACHE_PATH", &cache)
        .output()
        .unwrap();
    assert!(
        elfutils.status.success(),
        "{}",
        String::from_utf8_lossy(&elfutils.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&elfutils.stdout).trim(),
        got.path.to_str().unwrap()
    );
}

#[test]
fn a_build_id_the_server_lacks_is_not_found_and_not_asked_again() {
    let t = tempfile::tempdir().unwrap();
    let prog = program(&t.path().join("files"));
    let cache = t.path().join("cache");
    let server = Server::start(&t.path().join("files"), 2, &t.path().join("server"));
    let client = Client::new([server.url.clone()], cache.clone());
    let unknown = [0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04];
    let hex = buildid::to_hex(&unknown);

    let e = client.debuginfo(&unknown).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let text = e.to_string();
    eprintln!("{text}");
    assert!(text.contains(&server.url) && text.contains(&hex), "{text}");
    // Not a note for the search: most binaries have no debug file anywhere.
    let mut notes = Vec::new();
    let search = Search {
        debuginfod: Some(client.clone()),
        ..Search::default()
    };
    assert_eq!(
        search.debug_file(&prog.binary, "/usr/bin/x", Some(&unknown), &mut notes),
        None
    );
    assert!(notes.is_empty(), "{notes:?}");
    // elfutils' negative entry: an empty file.
    let negative = cache.join(&hex).join("debuginfo");
    assert_eq!(std::fs::metadata(&negative).unwrap().len(), 0);

    // Without the server: the negative entry answers a new client, and
    // this run's memory answers this one even without the entry.
    let url = server.url.clone();
    drop(server);
    let fresh = Client::new([url], cache.clone());
    assert!(fresh.debuginfo(&unknown).unwrap_err().is_not_found());
    std::fs::remove_file(&negative).unwrap();
    assert!(client.debuginfo(&unknown).unwrap_err().is_not_found());
    // While the new client, with neither, finds the server gone.
    let gone = fresh.debuginfo(&unknown).unwrap_err();
    assert!(matches!(gone, FetchError::Unreachable { .. }), "{gone}");
}

#[test]
fn a_server_that_is_down_is_named_in_a_note() {
    let t = tempfile::tempdir().unwrap();
    let prog = program(&t.path().join("files"));
    let url = format!("http://127.0.0.1:{}", free_port());
    let client = Client::new([url.clone()], t.path().join("cache"));
    let hex = buildid::to_hex(&prog.id);

    let e = client.executable(&prog.id).unwrap_err();
    assert!(!e.is_not_found());
    assert!(
        matches!(&e, FetchError::Unreachable { server, artifact: Artifact::Executable, earlier: false, .. } if *server == url),
        "{e:?}"
    );
    let text = e.to_string();
    eprintln!("{text}");
    assert!(
        text.contains(&url) && text.contains(&hex) && text.contains("not reachable"),
        "{text}"
    );

    // Through the search: no file, a note naming the binary, the server
    // and the build id; the server is not asked again in this run.
    let mut notes = Vec::new();
    let search = Search {
        debuginfod: Some(client),
        ..Search::default()
    };
    let found = search.debug_file(
        &prog.binary,
        "/usr/lib/libprog.so",
        Some(&prog.id),
        &mut notes,
    );
    assert_eq!(found, None);
    assert_eq!(notes.len(), 1, "{notes:?}");
    eprintln!("{}", notes[0]);
    assert!(
        notes[0].starts_with("/usr/lib/libprog.so: ")
            && notes[0].contains(&url)
            && notes[0].contains(&hex)
            && notes[0].contains("not asked again"),
        "{notes:?}"
    );
    // A down server is no negative entry: it may have the file tomorrow.
    assert!(!t.path().join("cache").join(&hex).join("debuginfo").exists());
}

#[test]
fn a_server_that_never_answers_times_out() {
    let t = tempfile::tempdir().unwrap();
    let prog = program(&t.path().join("files"));
    // The kernel completes the connection; nobody ever reads or answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let timeout = Duration::from_millis(300);
    let client = Client::new([url.clone()], t.path().join("cache")).with_timeout(Some(timeout));

    let e = client.debuginfo(&prog.id).unwrap_err();
    assert!(
        matches!(&e, FetchError::Timeout { server, timeout: t, earlier: false, .. } if *server == url && *t == timeout),
        "{e:?}"
    );
    let text = e.to_string();
    eprintln!("{text}");
    assert!(
        text.contains(&url) && text.contains(&buildid::to_hex(&prog.id)) && text.contains("0.3 s"),
        "{text}"
    );
    // The next file is not waited for again.
    let next = client.executable(&prog.id).unwrap_err();
    assert!(
        matches!(next, FetchError::Timeout { earlier: true, .. }),
        "{next:?}"
    );
    drop(silent);
}

#[test]
fn the_next_server_is_asked_when_one_is_down_and_cancelling_stops() {
    let t = tempfile::tempdir().unwrap();
    let prog = program(&t.path().join("files"));
    let server = Server::start(&t.path().join("files"), 2, &t.path().join("server"));
    let down = format!("http://127.0.0.1:{}", free_port());

    // The callback says stop at the first report: nothing is cached.
    let cache = t.path().join("cache");
    let stop: Arc<ProgressFn> = Arc::new(|_: &Progress<'_>| ControlFlow::Break(()));
    let client = Client::new([down.clone(), server.url.clone()], cache.clone());
    let e = client
        .fetch(Artifact::Debuginfo, &prog.id, Some(&*stop))
        .unwrap_err();
    assert!(matches!(e, FetchError::Cancelled { .. }), "{e:?}");
    let hex = buildid::to_hex(&prog.id);
    let left: Vec<_> = std::fs::read_dir(cache.join(&hex))
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");

    // Then, asked again, the second server delivers.
    let got = client.debuginfo(&prog.id).unwrap();
    assert_eq!(
        got.source,
        format!("{}/buildid/{hex}/debuginfo", server.url)
    );
    assert_eq!(
        std::fs::read(&got.path).unwrap(),
        std::fs::read(&prog.debug).unwrap()
    );
}
