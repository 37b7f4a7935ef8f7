//! `ptscope export`: the decoded spans written for other tools (Perfetto,
//! Fuchsia's FXT or Chrome's JSON trace events), with a count of the spans
//! written on a terminal.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::args::InputOpts;
use super::input::load_input;

/// Writes the input's spans between `from` and `to`, at `level`, to
/// `output` in `format` (by default the one `output`'s extension says).
pub(super) fn export(
    input: InputOpts,
    format: Option<ptscope::export::ExportFormat>,
    output: PathBuf,
    level: ptscope::export::ExportLevel,
    from: Option<u64>,
    to: Option<u64>,
) -> Result<ExitCode> {
    let file = input.file.clone();
    let (m, _cache) = load_input(input)?;
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let format = format.unwrap_or_else(|| ptscope::export::ExportFormat::for_path(&output));
    let sel = ptscope::export::Selection {
        from,
        to,
        threads: None,
        level,
    };
    let n = ptscope::export::export(&m, m.lines.as_deref(), &file, &sel, format, &output, |n| {
        if tty {
            eprint!("\rptscope: {n} spans written");
        }
    })?;
    if tty {
        eprintln!();
    }
    eprintln!("ptscope: {}: {n} spans", output.display());
    Ok(ExitCode::SUCCESS)
}
