//! Frame-build benchmark: prints figures, asserts nothing.
//!
//! Builds a 10M-span synthetic model (`PTSCOPE_BENCH_SPANS` for another size) and times, at 1920×1080 and several
//! zoom levels, (a) the viewer's whole frame (egui pass over `TraceView`
//! plus tessellation, CPU side), (b) the span layout alone, and (c) the
//! same boxes drawn with one `rect_filled` per box instead of one mesh.
//! Run: `cargo bench -p ptscope-viewer --bench frame`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use egui::{pos2, vec2, Color32, Context, RawInput, Rect, Shape};
use ptscope_model::Model;
use ptscope_viewer::bench::LANE_H;
use ptscope_viewer::{bench::extend_styles, bench::FuncStyle};
use ptscope_viewer::{bench::layout_lane, bench::FrameBuf, bench::LaneGeom, bench::Paint};
use ptscope_viewer::{synthetic_model, SynthSpec};
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

use ptscope_viewer::bench::median_ms as median;

/// One full viewer frame: egui pass plus tessellation.
fn full_frame(ctx: &Context, view: &mut TraceView) -> (Duration, usize) {
    let t0 = Instant::now();
    let out = ctx.run_ui(input(), |ui| view.ui(ui));
    let prims = ctx.tessellate(out.shapes, out.pixels_per_point);
    let d = t0.elapsed();
    let verts = prims
        .iter()
        .map(|p| match &p.primitive {
            egui::epaint::Primitive::Mesh(m) => m.vertices.len(),
            _ => 0,
        })
        .sum();
    (d, verts)
}

/// The lanes a 1080 px window shows, top-down, as in the timeline.
fn lanes(model: &Model, rows: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (ti, t) in model.threads.iter().enumerate() {
        for d in 0..t.spans.depth() {
            if out.len() == rows {
                return out;
            }
            out.push((ti, d));
        }
    }
    out
}

fn layout_all(
    buf: &mut FrameBuf,
    model: &Model,
    rows: &[(usize, usize)],
    win: &TimeWindow,
    styles: &[FuncStyle],
) {
    buf.clear();
    let paint = Paint {
        styles,
        search: None,
    };
    for (r, &(ti, d)) in rows.iter().enumerate() {
        let y0 = 100.0 + r as f32 * LANE_H;
        let geom = LaneGeom {
            left: 0.0,
            width: W,
            y0,
            y1: y0 + LANE_H - 1.0,
            row: r as u32,
        };
        layout_lane(buf, &model.threads[ti].spans, d, win, &geom, &paint);
    }
}

/// The synthetic model of `total` spans every frame figure is taken on.
pub fn model(total: usize) -> Model {
    synthetic_model(&SynthSpec {
        threads: 8,
        spans_per_thread: total / 8,
        max_depth: 22,
        base_ns: 1_700_000_000_000_000, // a realistic perf clock value
        functions: 3_000,
        seed: 7,
    })
}

/// The zoom levels: the whole trace, then windows centred on a deep call
/// in the middle of thread 0.
pub fn levels(model: &Model) -> [(&'static str, TimeWindow); 4] {
    let (lo, hi) = model.time_range().expect("spans");
    let t = &model.threads[0].spans;
    let deep = (t.depth() * 2 / 3).max(1);
    let mid = lo + (hi - lo) / 2;
    let lane = t.lane(deep);
    let k = lane.partition_point(|s| s.start < mid).min(lane.len() - 1);
    let center = lane[k].start + t.duration(deep, k) / 2;
    let window = |width: f64| {
        let mut w = TimeWindow::new(center, width);
        w.shift(-width / 2.0);
        w
    };
    [
        ("whole trace", TimeWindow::fit(lo, hi)),
        ("1 ms", window(1e6)),
        ("10 µs", window(1e4)),
        ("100 ns", window(100.0)),
    ]
}

/// The whole frame's CPU side (median of `FRAMES`, ms) at every level.
pub fn frame_times(model: Arc<Model>) -> Vec<(&'static str, f64)> {
    let ctx = Context::default();
    let levels = levels(&model);
    let mut view = TraceView::new(model);
    levels
        .into_iter()
        .map(|(name, win)| {
            view.set_window(win);
            for _ in 0..3 {
                full_frame(&ctx, &mut view);
            }
            let times = (0..FRAMES).map(|_| full_frame(&ctx, &mut view).0).collect();
            (name, median(times))
        })
        .collect()
}

fn main() {
    // PTSCOPE_BENCH_SPANS sets the total (default 10M).
    let total: usize = std::env::var("PTSCOPE_BENCH_SPANS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let t0 = Instant::now();
    let model = model(total);
    let spans = model.span_count();
    let bytes: usize = model.threads.iter().map(|t| t.spans.memory_bytes()).sum();
    let (lo, hi) = model.time_range().expect("spans");
    let max_depth = model
        .threads
        .iter()
        .map(|t| t.spans.depth())
        .max()
        .unwrap_or(0);
    println!(
        "model: {spans} spans, {} threads, depth up to {max_depth}, {:.1} ms of trace, built in {:.1} s",
        model.threads.len(),
        (hi - lo) as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    // memory_bytes counts Vec capacity: lanes grown by push keep up to
    // 2x slack until shrunk. The spans themselves are 16 bytes.
    println!(
        "span store: {:.2} bytes/span as allocated ({:.0} MiB), {} bytes/span of spans",
        bytes as f64 / spans as f64,
        bytes as f64 / (1 << 20) as f64,
        std::mem::size_of::<ptscope_model::Span>()
    );

    let levels = levels(&model);

    let model = Arc::new(model);
    let mut styles = Vec::new();
    extend_styles(&mut styles, &model.funcs);
    // Worst case for the layout column: lanes over the whole height.
    let rows = lanes(&model, ((H - 100.0) / LANE_H) as usize);
    if std::env::var_os("PER_LANE").is_some() {
        let win = TimeWindow::fit(lo, hi);
        let mut buf = FrameBuf::default();
        for &(ti, d) in &rows {
            let t0 = Instant::now();
            layout_all(&mut buf, &model, &[(ti, d)], &win, &styles);
            println!(
                "lane {ti}/{d}: {} spans, {} boxes, {:.3} ms",
                model.threads[ti].spans.lane(d).len(),
                buf.boxes.len(),
                t0.elapsed().as_secs_f64() * 1e3
            );
        }
    }
    let ctx = Context::default();
    let mut view = TraceView::new(model.clone());

    println!();
    println!(
        "{:<12} {:>10} {:>10} {:>9} {:>11} {:>11} {:>12}",
        "window", "frame ms", "layout ms", "boxes", "merged", "verts", "rect_filled"
    );
    for (name, win) in levels {
        view.set_window(win);
        // Warm up (fonts, galley cache), then measure.
        for _ in 0..3 {
            full_frame(&ctx, &mut view);
        }
        let mut times = Vec::new();
        let mut verts = 0;
        for _ in 0..FRAMES {
            let (d, v) = full_frame(&ctx, &mut view);
            times.push(d);
            verts = v;
        }
        let frame_ms = median(times);

        let mut buf = FrameBuf::default();
        let mut lt = Vec::new();
        for _ in 0..FRAMES {
            let t0 = Instant::now();
            layout_all(&mut buf, &model, &rows, &win, &styles);
            lt.push(t0.elapsed());
        }
        let layout_ms = median(lt);
        let boxes = buf.boxes.len();
        let merged: u64 = buf
            .boxes
            .iter()
            .filter(|b| b.count > 1)
            .map(|b| b.count as u64)
            .sum();

        // The same boxes: one mesh vs one rect_filled each, through egui.
        let rects: Vec<Rect> = buf
            .boxes
            .iter()
            .map(|b| {
                let y0 = 100.0 + b.row as f32 * LANE_H;
                Rect::from_x_y_ranges(b.x0..=b.x1, y0..=y0 + LANE_H - 1.0)
            })
            .collect();
        let mesh_ms = median(
            (0..FRAMES)
                .map(|_| {
                    let t0 = Instant::now();
                    layout_all(&mut buf, &model, &rows, &win, &styles);
                    let mesh = buf.take_mesh();
                    let out = ctx.run_ui(input(), |ui| {
                        ui.painter().add(Shape::mesh(mesh.clone()));
                    });
                    let _ = ctx.tessellate(out.shapes, out.pixels_per_point);
                    t0.elapsed()
                })
                .collect(),
        );
        let rect_ms = median(
            (0..FRAMES)
                .map(|_| {
                    let t0 = Instant::now();
                    layout_all(&mut buf, &model, &rows, &win, &styles);
                    let out = ctx.run_ui(input(), |ui| {
                        let p = ui.painter();
                        for r in &rects {
                            p.rect_filled(*r, 0.0, Color32::from_rgb(200, 120, 80));
                        }
                    });
                    let _ = ctx.tessellate(out.shapes, out.pixels_per_point);
                    t0.elapsed()
                })
                .collect(),
        );
        println!(
            "{name:<12} {frame_ms:>10.2} {layout_ms:>10.3} {boxes:>9} {merged:>11} {verts:>11} {:>5.2}/{:<5.2}",
            mesh_ms, rect_ms
        );
    }
    println!();
    println!("frame ms: TraceView::ui in an egui pass + Context::tessellate, 1920x1080, median of {FRAMES}");
    println!(
        "layout ms: layout_lane over {} lanes (a 1080 px screen full of lanes)",
        rows.len()
    );
    println!("merged: spans drawn inside merged boxes");
    println!("rect_filled: mesh ms / rect_filled-per-box ms for the same boxes (layout + egui pass + tessellate)");
    // A per-span rect_filled, without merging, on the densest window.
    let win = TimeWindow::fit(lo, hi);
    let mut n = 0usize;
    let t0 = Instant::now();
    let out = ctx.run_ui(input(), |ui| {
        let p = ui.painter();
        let ppn = win.px_per_ns(W);
        for (r, &(ti, d)) in rows.iter().enumerate() {
            let t = &model.threads[ti].spans;
            let y0 = 100.0 + r as f32 * LANE_H;
            for (i, s) in t.lane(d).iter().enumerate() {
                let x0 = win.x(s.start, ppn) as f32;
                let x1 = x0 + (t.duration(d, i) as f64 * ppn) as f32;
                p.rect_filled(
                    Rect::from_x_y_ranges(x0..=x1.max(x0 + 1.0), y0..=y0 + LANE_H - 1.0),
                    0.0,
                    Color32::from_rgb(200, 120, 80),
                );
                n += 1;
            }
        }
    });
    let _ = ctx.tessellate(out.shapes, out.pixels_per_point);
    println!(
        "no merging, one rect_filled per span, whole trace: {n} spans, {:.1} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
}
