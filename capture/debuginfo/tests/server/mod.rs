//! A real `debuginfod` server (Debian's package) on 127.0.0.1, for tests:
//! the debuginfod client's own (`capture/debuginfo/tests`) and the
//! end-to-end ones (`tests/`, which include this file by path), so both
//! drive the same server the same way.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `debuginfod` server on 127.0.0.1, killed (and reaped) when dropped.
pub struct Server {
    child: Child,
    pub url: String,
    pub log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The value of an unlabelled-or-labelled metric line of `/metrics`.
pub fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

impl Server {
    /// `debuginfod` scanning `files` (holding `expect` ELF files), its
    /// database and logs in `state`, started once it has scanned them all.
    pub fn start(files: &Path, expect: u64, state: &Path) -> Server {
        std::fs::create_dir_all(state).unwrap();
        // The port is free when chosen but may be taken before the server
        // binds it: then try another.
        for attempt in 0..5 {
            let port = free_port();
            let log = state.join(format!("debuginfod-{attempt}.log"));
            let out = std::fs::File::create(&log).unwrap();
            let child = Command::new("debuginfod")
                .arg("-F")
                .arg(files)
                .args(["-p", &port.to_string()])
                .arg("-d")
                .arg(state.join(format!("db-{attempt}.sqlite")))
                // Scan once, never groom, one scanning thread.
                .args(["-t", "0", "-g", "0", "-c", "1"])
                // Never forward a miss to the user's servers: the tests
                // stay on loopback.
                .env_remove("DEBUGINFOD_URLS")
                .env("DEBUGINFOD_CACHE_PATH", state.join("server-cache"))
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .expect("debuginfod (Debian package debuginfod; scripts/deps.sh installs it)");
            let mut server = Server {
                child,
                url: format!("http://127.0.0.1:{port}"),
                log,
            };
            if server.wait_scanned(expect) {
                return server;
            }
        }
        panic!("debuginfod did not start on a free loopback port in 5 attempts");
    }

    /// Whether the server came up and scanned `expect` files; false when
    /// it exited (its port taken). Polls `/metrics`, a bounded number of
    /// times.
    fn wait_scanned(&mut self, expect: u64) -> bool {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().unwrap() {
                eprintln!(
                    "debuginfod exited ({status}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
                return false;
            }
            let scanned = agent
                .get(format!("{}/metrics", self.url))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|text| metric(&text, "scanned_files_total{source=\"file\"}"));
            if scanned.is_some_and(|n| n >= expect) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "debuginfod at {} did not scan {expect} files: {}",
            self.url,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }
}
