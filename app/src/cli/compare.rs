//! `ptscope compare`: one call of a function set against another, by call
//! path or line by line, to explain why it was slow.

use std::process::ExitCode;

use anyhow::Result;

use super::args::InputOpts;
use super::input::print_model;

/// Prints the comparison of `function`'s `call` with its `against` call.
pub(super) fn compare(
    input: InputOpts,
    function: String,
    call: ptscope::outlier::Choice,
    against: ptscope::outlier::Choice,
    level: ptscope::outlier::CompareLevel,
    format: ptscope::outlier::Output,
) -> Result<ExitCode> {
    let args = ptscope::outlier::CompareArgs {
        function: &function,
        call,
        against,
        level,
        format,
    };
    print_model(input, |m, file, out| {
        ptscope::outlier::compare(m, m.lines.as_deref(), file, &args, out)
    })
}
