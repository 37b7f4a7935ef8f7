//! `ptscope`: Intel Processor Trace capture and timeline viewer.
//!
//! With no command it opens the GUI (on the bundled demo snapshot, or on
//! FILE); the subcommands capture and inspect snapshots from the shell.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Args::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ptscope: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
