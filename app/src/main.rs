//! `ptscope`, the Intel Processor Trace capture and timeline viewer: this
//! is the binary's entry point, which parses the command line and runs it.
//!
//! With no command it opens the GUI, on the bundled demo snapshot or on
//! FILE; the subcommands capture and inspect snapshots from the shell. The
//! commands live in `cli`, and the window and the capture code in the
//! `ptscope` library, so that the GUI tests drive the same code. An error
//! is printed once, with its causes, and the exit status is 1.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    ptscope::allocator::tune();
    let args = cli::Args::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ptscope: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
