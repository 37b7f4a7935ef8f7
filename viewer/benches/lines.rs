//! Line-level zoom benchmark: prints figures, asserts nothing.
//!
//! On the bundled demo at 1920×1080: (a) from a zoom to the slow request
//! to its line spans on screen (the fine pass of the segments covering it
//! plus the frame that draws them), cold and from the cache; (b) the
//! viewer's whole frame with line detail at several zoom levels; (c) the
//! line-row layout alone over one lane of a million synthetic line spans,
//! which shows that merging keeps it per pixel, not per span.
//! Run: `cargo bench -p ptscope-viewer --bench lines`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use egui::epaint::Mesh;
use egui::{pos2, vec2, Context, RawInput, Rect};
use ptscope_model::LineSpan;
use ptscope_viewer::bench::LaneGeom;
use ptscope_viewer::{bench::runs, bench::Run};
use ptscope_viewer::{TimeWindow, TraceView};

const W: f32 = 1920.0;
const H: f32 = 1080.0;
const FRAMES: usize = 25;

fn input() -> RawInput {
    RawInput {
        screen_rect: Some(Rect::from_min_size(pos2(0.0, 0.0), vec2(W, H))),
        ..RawInput::default()
    }
}

fn frame(ctx: &Context, view: &mut TraceView) -> Duration {
    let t0 = Instant::now();
    let out = ctx.run_ui(input(), |ui| view.ui(ui));
    let _ = ctx.tessellate(out.shapes, out.pixels_per_point);
    t0.elapsed()
}

use ptscope_viewer::bench::median_ms as median;

/// The demo's model and the decoder's fine pass over it.
fn demo() -> (Arc<ptscope_model::Model>, ptscope_decoder::SegmentWorker) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/demo/demo.ptscope");
    let snap = ptscope_formats::snapshot::Snapshot::open(&path).expect("the demo snapshot");
    let decoded = ptscope_decoder::decode_snapshot(&snap, &Default::default()).expect("decodes");
    let (model, worker) = decoded.into_parts(ptscope_decoder::DEFAULT_SEGMENT_BUDGET, || {});
    (model, worker.expect("an instruction trace"))
}

/// Zooms to `[s, e)` and runs frames until its line detail is drawn.
fn zoom_until_drawn(ctx: &Context, view: &mut TraceView, s: u64, e: u64) -> (f64, usize) {
    let t0 = Instant::now();
    view.zoom_to(s, e);
    frame(ctx, view);
    view.wait_for_lines();
    frame(ctx, view);
    (t0.elapsed().as_secs_f64() * 1e3, view.visible_lines().len())
}

fn main() {
    let (model, worker) = demo();
    let ctx = Context::default();
    let mut view = TraceView::new(model.clone());
    view.set_detail(Arc::new(worker));
    for _ in 0..3 {
        frame(&ctx, &mut view);
    }
    let r = view.find_span("slow_path").expect("slow_path");
    let (s, e) = r.times(&model).expect("times");

    let (ms, boxes) = zoom_until_drawn(&ctx, &mut view, s, e);
    let figures = view.line_detail().map(|d| d.figures()).unwrap_or_default();
    let insns: usize = view
        .line_frame()
        .segs
        .iter()
        .flatten()
        .map(|r| r.seg.insns.len())
        .sum();
    println!(
        "zoom to slow_path ({:.1} µs), cold: {ms:.1} ms to {boxes} line boxes drawn ({} segments, {insns} instructions decoded in {:.1} ms)",
        (e - s) as f64 / 1e3,
        figures.decoded,
        figures.decode_ns as f64 / 1e6
    );
    view.fit_all();
    frame(&ctx, &mut view);
    let (ms, boxes) = zoom_until_drawn(&ctx, &mut view, s, e);
    println!("zoom to slow_path again, cached: {ms:.2} ms to {boxes} line boxes drawn");

    println!();
    println!("{:<22} {:>9} {:>11}", "window", "frame ms", "line boxes");
    let levels = [
        ("slow_path (25 µs)", (s, e)),
        ("2 µs", (s + 5_000, s + 7_000)),
        ("200 ns (instructions)", (s + 5_000, s + 5_200)),
        ("16 ns", (s + 5_000, s + 5_016)),
    ];
    for (name, (a, b)) in levels {
        zoom_until_drawn(&ctx, &mut view, a, b);
        for _ in 0..3 {
            frame(&ctx, &mut view);
        }
        let t = median((0..FRAMES).map(|_| frame(&ctx, &mut view)).collect());
        println!("{name:<22} {t:>9.2} {:>11}", view.visible_lines().len());
    }

    // One lane of a million 10 ns line spans with 5 ns gaps.
    let lines: Vec<LineSpan> = (0..1_000_000u64)
        .map(|i| LineSpan {
            start: i * 15,
            end: i * 15 + 10,
            depth: 1,
            chain: 0,
            level: 0,
            first: 0,
            count: 1,
        })
        .collect();
    println!();
    println!(
        "{:<22} {:>9} {:>9}",
        "1M line spans, window", "layout µs", "runs"
    );
    let geom = LaneGeom {
        left: 0.0,
        width: W,
        y0: 0.0,
        y1: 17.0,
        row: 0,
    };
    let mut mesh = Mesh::default();
    for (name, width) in [("all (15 ms)", 15e6), ("100 µs", 1e5), ("2 µs", 2e3)] {
        let win = TimeWindow::new(0, width);
        let mut count = 0;
        let t = median(
            (0..FRAMES)
                .map(|_| {
                    mesh.clear();
                    count = 0;
                    let t0 = Instant::now();
                    runs(&lines, &win, geom.width, |r: Run| {
                        count += 1;
                        ptscope_viewer::bench::rect(
                            &mut mesh,
                            r.x0 as f32,
                            r.x1 as f32,
                            geom.y0,
                            geom.y1,
                            egui::Color32::GRAY,
                        );
                    });
                    t0.elapsed()
                })
                .collect(),
        );
        println!("{name:<22} {:>9.1} {count:>9}", t * 1e3);
    }
    println!();
    println!("frame ms: TraceView::ui in an egui pass + Context::tessellate, 1920x1080, median of {FRAMES}");
}
