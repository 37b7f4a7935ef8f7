//! `ptscope stats`: the per-function table of calls and times, or with
//! `--function --histogram` how one function's call durations are spread.

use std::process::ExitCode;

use anyhow::Result;

use super::args::InputOpts;
use super::input::print_model;

/// Prints the input's function statistics, or `function`'s histogram.
pub(super) fn stats(
    input: InputOpts,
    sort: ptscope::report::SortKey,
    limit: Option<usize>,
    function: Option<String>,
    histogram: bool,
    format: ptscope::outlier::Output,
) -> Result<ExitCode> {
    print_model(input, |m, file, out| match &function {
        Some(f) if histogram => ptscope::outlier::histogram(m, file, f, format, out),
        Some(f) => ptscope::outlier::function_ids(m, file, f)
            .and_then(|ids| ptscope::report::stats(m, sort, limit, Some(&ids), out)),
        None => ptscope::report::stats(m, sort, limit, None, out),
    })
}
