//! What `ptscope export` costs on a large trace: a synthetic model of 10M
//! spans (8 threads, 24 deep, 2,000 functions; `$PTSCOPE_BENCH_SPANS` to
//! change it) written in each format to a file. Prints, per format, the
//! time, spans a second, bytes a span, and the memory the export added
//! over the model (peak resident, from `/proc/self/status`), to show that
//! it streams. This prints figures; it asserts nothing.

use std::path::Path;
use std::time::Instant;

use ptscope::export::{export, ExportFormat, Selection};
use ptscope_viewer::{synthetic_model, SynthSpec};

/// A `VmRSS`/`VmHWM` line of /proc/self/status, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb << 10
}

fn main() {
    let spans: usize = std::env::var("PTSCOPE_BENCH_SPANS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let threads = 8;
    let model = synthetic_model(&SynthSpec {
        threads,
        spans_per_thread: spans / threads,
        max_depth: 24,
        functions: 2_000,
        ..SynthSpec::default()
    });
    let n = model.span_count();
    let dir = tempfile::tempdir().unwrap();
    println!("export of {n} spans ({threads} threads), one run each:");
    println!(
        "{:<10} {:>9} {:>13} {:>11} {:>12}",
        "format", "time", "spans/s", "bytes/span", "added peak"
    );
    for format in [
        ExportFormat::Perfetto,
        ExportFormat::Fxt,
        ExportFormat::Chrome,
    ] {
        let out = dir.path().join(format!("out.{}", format.extension()));
        let before = status_bytes("VmRSS:");
        // Resets VmHWM to what is resident now.
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        let t = Instant::now();
        let written = export(
            &model,
            None,
            Path::new("synthetic"),
            &Selection::default(),
            format,
            &out,
            |_| {},
        )
        .unwrap();
        let time = t.elapsed();
        let peak = status_bytes("VmHWM:").saturating_sub(before);
        let bytes = std::fs::metadata(&out).unwrap().len();
        assert_eq!(written as usize, n);
        println!(
            "{:<10} {:>8.2}s {:>12.1}M {:>11.1} {:>10.0} MB",
            format.extension(),
            time.as_secs_f64(),
            n as f64 / time.as_secs_f64() / 1e6,
            bytes as f64 / n as f64,
            peak as f64 / 1e6
        );
        std::fs::remove_file(&out).unwrap();
    }
}
