//! `ptscope grow`: a large genuine snapshot for benchmarks, made of one
//! period of a steady program's trace repeated.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

/// Grows `snapshot` into `output` until its trace holds `size` bytes, and
/// says what it made on stderr.
pub(super) fn grow(snapshot: PathBuf, size: u64, output: PathBuf) -> Result<ExitCode> {
    let t = std::time::Instant::now();
    let g = ptscope::scale::grow(&snapshot, &output, size)?;
    eprintln!(
        "ptscope: {}: {} MiB of trace: a {}-byte period ({} instructions) repeated {} times, in {:.2?}",
        output.display(),
        g.aux_bytes >> 20,
        g.period.to - g.period.from,
        g.period.instructions,
        g.copies,
        t.elapsed()
    );
    Ok(ExitCode::SUCCESS)
}
