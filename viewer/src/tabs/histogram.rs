//! The histogram of a function's call durations in the Details panel,
//! drawn with egui_plot on a log scale (the buckets of
//! [`ptscope_model::Distribution`], four to a doubling), with the
//! median, p90, p99 and max marked. Dragging across it brushes a range of
//! durations; a click brushes one bar, a double click clears the brush.

use egui_plot::{Bar, BarChart, Plot, PlotPoint, PlotPoints, Polygon, Text, VLine};
use ptscope_model::Distribution;

use crate::timeline::axis::format_duration;

/// The plot's x for a duration: its log2 (0 ns sits with 1 ns).
pub(crate) fn x_of(duration: u64) -> f64 {
    (duration.max(1) as f64).log2()
}

/// The duration at plot x.
pub(crate) fn duration_at(x: f64) -> u64 {
    let d = x.clamp(0.0, 64.0).exp2();
    if d >= u64::MAX as f64 {
        u64::MAX
    } else {
        d.round() as u64
    }
}

/// The brush a drag from `x0` to `x1` makes: the durations between, ends
/// included.
pub(crate) fn brush_between(x0: f64, x1: f64) -> (u64, u64) {
    let (a, b) = if x0 <= x1 { (x0, x1) } else { (x1, x0) };
    (duration_at(a), duration_at(b))
}

/// The brush a click at `x` makes: the bar under it, if any.
pub(crate) fn brush_at(dist: &Distribution, x: f64) -> Option<(u64, u64)> {
    dist.buckets
        .iter()
        .find(|b| x >= x_of(b.from) && x < x_of(b.to) && b.count > 0)
        .map(|b| (b.from, b.to.saturating_sub(1).max(b.from)))
}

/// Draws the histogram; true when the brush changed.
pub(crate) fn histogram_ui(
    ui: &mut egui::Ui,
    dist: &Distribution,
    brush: &mut Option<(u64, u64)>,
) -> bool {
    let fill = ui.visuals().selection.bg_fill;
    let bars: Vec<Bar> = dist
        .buckets
        .iter()
        .filter(|b| b.count > 0)
        .map(|b| {
            let (x0, x1) = (x_of(b.from), x_of(b.to));
            Bar::new((x0 + x1) / 2.0, b.count as f64)
                .width((x1 - x0) * 0.9)
                .name(format!(
                    "{} to {}: {} calls",
                    format_duration(b.from),
                    format_duration(b.to),
                    b.count
                ))
                .fill(fill)
        })
        .collect();
    let top = dist.buckets.iter().map(|b| b.count).max().unwrap_or(1) as f64;
    let marks = [
        (dist.p50, "median"),
        (dist.p90, "p90"),
        (dist.p99, "p99"),
        (dist.max, "max"),
    ];
    let shown = *brush;
    let plot = Plot::new("ptscope-histogram")
        .height(80.0)
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .allow_double_click_reset(false)
        .show_y(false)
        .include_y(0.0)
        .include_y(top * 1.25)
        .include_x(x_of(dist.min) - 0.5)
        .include_x(x_of(dist.max) + 0.5)
        .x_axis_formatter(|mark, _| format_duration(duration_at(mark.value)))
        .y_axis_min_width(24.0);
    let shown_plot = plot.show(ui, |p| {
        p.bar_chart(BarChart::new("calls", bars));
        // Marks that fall together (closer than a twentieth of the axis)
        // are named together, at the first.
        let near = (x_of(dist.max) - x_of(dist.min) + 1.0) / 20.0;
        let mut named: Vec<(f64, String)> = Vec::new();
        for (v, name) in marks {
            let x = x_of(v);
            match named.iter_mut().find(|(nx, _)| (*nx - x).abs() < near) {
                Some((_, n)) => {
                    n.push_str(", ");
                    n.push_str(name);
                }
                None => named.push((x, name.to_string())),
            }
        }
        for (x, name) in named {
            p.vline(VLine::new(name.clone(), x).width(1.0));
            p.text(Text::new(name.clone(), PlotPoint::new(x, top * 1.15), name));
        }
        if let Some((lo, hi)) = shown {
            let (x0, x1) = (x_of(lo), x_of(hi));
            let pts: PlotPoints =
                vec![[x0, 0.0], [x1, 0.0], [x1, top * 1.1], [x0, top * 1.1]].into();
            p.polygon(Polygon::new("brush", pts));
        }
        p.pointer_coordinate().map(|c| c.x)
    });
    let r = &shown_plot.response;
    let x = shown_plot.inner;
    let start = r.id.with("brush-start");
    let mut changed = false;
    if r.drag_started() {
        if let Some(x) = x {
            ui.data_mut(|m| m.insert_temp(start, x));
        }
    }
    if r.dragged() {
        if let (Some(x0), Some(x1)) = (ui.data(|m| m.get_temp::<f64>(start)), x) {
            *brush = Some(brush_between(x0, x1));
            changed = true;
        }
    }
    if r.double_clicked() {
        *brush = None;
        changed = true;
    } else if r.clicked() {
        if let Some(x) = x {
            *brush = brush_at(dist, x);
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_click_brushes_the_bar_under_it_and_a_drag_what_it_spans() {
        let mut d = vec![40u64; 95];
        d.extend([1000u64; 5]);
        let dist = Distribution::of(d);
        let (lo, hi) = brush_at(&dist, x_of(1000)).unwrap();
        assert!(lo <= 1000 && (1000..1300).contains(&hi), "{lo} {hi}");
        assert!(brush_at(&dist, x_of(300)).is_none(), "an empty bucket");
        let (lo, hi) = brush_between(x_of(2000), x_of(500));
        assert_eq!((lo, hi), (500, 2000));
        assert_eq!(duration_at(x_of(0)), 1);
        assert_eq!(duration_at(x_of(u64::MAX)), u64::MAX);
    }
}
