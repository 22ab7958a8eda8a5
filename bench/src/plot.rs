//! SVG pictures of the scaling sweeps, drawn with `plotters`' SVG backend only: text is
//! written as SVG `<text>` and laid out by the viewer, so no font files or font libraries
//! are needed to build or run.

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::format::num;
use crate::stats::{error, Result};
use crate::sweep::{Figure, Sweep};

/// Width of a picture, and height of each of its panels (one per figure), in pixels.
const WIDTH: u32 = 760;
const PANEL_HEIGHT: u32 = 300;

/// Writes `<dir>/<id>.svg` for every sweep; returns the files written.
pub fn write_all(sweeps: &[Sweep], dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| error(format!("cannot create {}: {e}", dir.display())))?;
    let mut written = Vec::new();
    for sweep in sweeps {
        let path = dir.join(format!("{}.svg", sweep.id));
        std::fs::write(&path, svg(sweep)?)
            .map_err(|e| error(format!("cannot write {}: {e}", path.display())))?;
        written.push(path);
    }
    Ok(written)
}

/// The SVG document of `sweep`: one panel per figure, one line per series, log x axis.
pub fn svg(sweep: &Sweep) -> Result<String> {
    let mut text = String::new();
    {
        let height = PANEL_HEIGHT * sweep.figures.len().max(1) as u32;
        let root = SVGBackend::with_string(&mut text, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let panels = root.split_evenly((sweep.figures.len().max(1), 1));
        for (area, figure) in panels.iter().zip(sweep.figures) {
            draw_panel(area, sweep, figure)?;
        }
        root.present().map_err(drawing)?;
    }
    Ok(text)
}

fn drawing(e: impl std::fmt::Display) -> crate::stats::Error {
    error(format!("drawing a sweep: {e}"))
}

/// One figure of `sweep` in `area`.
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    sweep: &Sweep,
    figure: &Figure,
) -> Result<()> {
    let curves: Vec<(&str, Vec<(f64, f64)>)> = sweep
        .series
        .iter()
        .map(|s| {
            let points = s
                .xy(figure.key)
                .into_iter()
                .filter(|(_, y)| !figure.log_y || *y > 0.0)
                .collect();
            (s.name, points)
        })
        .collect();
    let all = || curves.iter().flat_map(|(_, points)| points.iter());
    let (x_min, x_max) = bounds(all().map(|p| p.0), 1.0);
    // Ticks at powers of 2 where the sizes are (1 .. 1,024 contenders or tasks), of 10
    // otherwise (locks, clients).
    let base = if x_min.log2().fract() == 0.0 && x_max.log2().fract() == 0.0 {
        2.0
    } else {
        10.0
    };
    let x_range = (x_min / 1.2..x_max * 1.2).log_scale().base(base);
    if figure.log_y {
        let (y_min, y_max) = bounds(all().map(|p| p.1), 1.0);
        let y_range = (y_min / 2.0..y_max * 2.0).log_scale();
        draw_curves(area, sweep, figure, &curves, x_range, y_range)
    } else {
        let (_, y_max) = bounds(all().map(|p| p.1), 1.0);
        draw_curves(area, sweep, figure, &curves, x_range, 0.0..y_max * 1.1)
    }
}

/// An axis label: whole numbers with thousands separators, others to 3 significant
/// digits.
fn tick(value: f64) -> String {
    if value == 0.0 || value.abs() >= 100.0 || (value.abs() >= 1.0 && value.fract() == 0.0) {
        num(value, 0)
    } else {
        // 0 < |value| < 100 here, so the exponent is small and finite.
        let exponent = value.abs().log10().floor() as i32;
        num(value, (2 - exponent).clamp(0, 6) as usize)
    }
}

/// The smallest and largest of `values`, or `default` twice when there are none.
fn bounds(values: impl Iterator<Item = f64>, default: f64) -> (f64, f64) {
    let (min, max) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if min.is_finite() && max.is_finite() {
        (min, max.max(min * 1.01))
    } else {
        (default, default * 2.0)
    }
}

fn draw_curves<DB, X, Y>(
    area: &DrawingArea<DB, Shift>,
    sweep: &Sweep,
    figure: &Figure,
    curves: &[(&str, Vec<(f64, f64)>)],
    x_range: X,
    y_range: Y,
) -> Result<()>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}: {}", sweep.title, figure.label),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range, y_range)
        .map_err(drawing)?;
    chart
        .configure_mesh()
        .x_desc(format!("{} (log scale)", sweep.x_label))
        .x_label_formatter(&|x| tick(*x))
        .y_label_formatter(&|y| tick(*y))
        .y_labels(8)
        .light_line_style(WHITE)
        .y_desc(if figure.log_y {
            format!("{} (log)", figure.label)
        } else {
            figure.label.to_owned()
        })
        .draw()
        .map_err(drawing)?;
    for (i, (name, points)) in curves.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(drawing)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&point| Circle::new(point, 4, color.filled())),
            )
            .map_err(drawing)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(drawing)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(1024.0), "1,024");
        assert_eq!(tick(16.0), "16");
        assert_eq!(tick(0.25), "0.250");
        assert_eq!(tick(2.5), "2.50");
        assert_eq!(tick(-0.5), "-0.500");
    }
}
