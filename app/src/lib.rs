//! The ptscope application: the window and the command line, wiring the
//! capture, decoder and viewer crates together.
//!
//! It is a library as well as the `ptscope` binary so that the GUI tests
//! (`tests/gui.rs`) drive the real application state.

pub mod capture_panel;
pub mod fuzzy;
pub mod gui;
pub mod loader;
pub mod recorder;
pub mod report;
pub mod scale;

/// An error and its causes on one line, each said once. Our library errors
/// already put their cause in their own message, so a cause whose text
/// ends the line so far is not repeated (`{:#}` would say it twice).
pub fn explain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let said = cause.to_string();
        if out == said || out.ends_with(&format!(": {said}")) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&said);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::explain;
    use anyhow::Context;

    #[test]
    fn causes_are_said_once() {
        let format = ptscope_capture::perf_data::PerfDataFile::parse(b"PERFILE2")
            .map_err(|e| ptscope_capture::CaptureError::format("x.data".as_ref(), e))
            .context("cannot open the snapshot")
            .unwrap_err();
        let text = explain(&format);
        assert!(
            text.starts_with("cannot open the snapshot: x.data: "),
            "{text}"
        );
        let cause = format.root_cause().to_string();
        assert_eq!(text.matches(&cause).count(), 1, "{text}");
        // A cause not already in its wrapper's message is kept.
        let io = Err::<(), _>(std::io::Error::other("disk on fire"))
            .context("cannot save")
            .unwrap_err();
        assert_eq!(explain(&io), "cannot save: disk on fire");
    }
}
