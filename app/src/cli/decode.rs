//! `ptscope decode`: the input's call spans, source lines, instructions,
//! marks or CPUs, printed as text or JSON lines.

use std::process::ExitCode;

use anyhow::Result;

use super::args::InputOpts;
use super::input::print_model;

/// Prints the input at `level`, between `from` and `to`, in `format`.
pub(super) fn decode(
    input: InputOpts,
    from: Option<u64>,
    to: Option<u64>,
    level: ptscope::report::Level,
    format: ptscope::report::Format,
) -> Result<ExitCode> {
    print_model(input, |m, file, out| match level {
        ptscope::report::Level::Calls => ptscope::report::decode(m, from, to, format, out),
        ptscope::report::Level::Marks => ptscope::report::decode_marks(m, from, to, format, out),
        ptscope::report::Level::Cpus => {
            ptscope::report::decode_cpus(m, file, from, to, format, out)
        }
        fine => ptscope::report::decode_fine(m, file, from, to, fine, format, out),
    })
}
