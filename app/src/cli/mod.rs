//! The command line: argument parsing and the non-GUI commands. This file
//! runs the command the arguments name; the parts are:
//!
//! - `args`: the clap types, whose doc comments are `ptscope --help`;
//! - `input`: the input of the commands that decode, opened as the
//!   options say, and what a command prints of it;
//! - `record`: `record` and `attach`, the capture;
//! - `check`: what this machine and user can capture;
//! - `grow`: large genuine snapshots for benchmarks;
//! - `info`: a snapshot's or a raw PT dump's description;
//! - `packets`: the ptdump-like listing of one trace's packets;
//! - `decode`, `stats`, `export` and `compare`: the commands that decode.

use std::process::ExitCode;

use anyhow::Result;

use ptscope_capture::recording::Target;

mod args;
mod check;
mod compare;
mod decode;
mod export;
mod grow;
mod info;
mod input;
mod packets;
mod record;
mod stats;

pub use args::Args;
use args::Command;
use input::is_raw;

pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        None => ptscope::gui::run(
            args.files,
            args.screenshot,
            match (args.select, args.explain) {
                (Some(f), _) => Some(ptscope::gui::OnLoad::Select(f)),
                (None, Some(f)) => Some(ptscope::gui::OnLoad::Explain(f)),
                (None, None) => None,
            },
            args.source_maps,
            args.capture,
            ptscope::loader::Decoding {
                raw_images: args.raw,
                cpu: args.cpu,
                ip_filter: args.ip_filter,
            },
            args.names,
        ),
        Some(Command::Record { opts, command }) => record::capture(
            Target::Spawn {
                argv: command,
                cwd: None,
            },
            opts,
        ),
        Some(Command::Attach { pid, opts }) => record::capture(Target::Attach(pid), opts),
        Some(Command::Check) => check::check(),
        Some(Command::Grow {
            snapshot,
            size,
            output,
        }) => grow::grow(snapshot, size, output),
        Some(Command::Info { file, raw, .. }) if is_raw(&file, &raw)? => {
            info::raw_info(&file, &raw)
        }
        Some(Command::Info {
            file,
            names,
            kernel,
            ..
        }) => info::info(&file, &names, &kernel),
        Some(Command::Packets {
            file,
            raw,
            thread,
            cpu,
            limit,
        }) if is_raw(&file, &raw)? => packets::raw_packets(&file, thread, cpu, limit),
        Some(Command::Packets {
            file,
            thread,
            cpu,
            limit,
            ..
        }) => packets::packets(&file, thread, cpu, limit),
        Some(Command::Decode {
            input,
            from,
            to,
            level,
            format,
        }) => decode::decode(input, from, to, level, format),
        Some(Command::Stats {
            input,
            sort,
            limit,
            function,
            histogram,
            format,
        }) => stats::stats(input, sort, limit, function, histogram, format),
        Some(Command::Export {
            input,
            format,
            output,
            level,
            from,
            to,
        }) => export::export(input, format, output, level, from, to),
        Some(Command::Compare {
            input,
            function,
            call,
            against,
            level,
            format,
        }) => compare::compare(input, function, call, against, level, format),
    }
}
