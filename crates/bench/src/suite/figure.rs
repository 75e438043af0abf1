//! Figures as data (panels of series), drawn to PNG and SVG with plotters.
//!
//! Text is drawn with the DejaVu Sans font compiled into the binary (plotters' `ab_glyph`
//! backend), so rendering needs no fontconfig and no system fonts.

use std::ops::Range;
use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// A figure: a title over one or more panels laid out in a grid.
#[derive(Debug, Clone, Default)]
pub struct Figure {
    /// Title over all panels.
    pub title: String,
    /// Panels, left to right, then top to bottom (two per row; three make one row).
    pub panels: Vec<Panel>,
}

/// One chart.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Caption above the chart.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// What is drawn, in legend order.
    pub series: Vec<Series>,
}

/// An axis: its label (with the unit) and scale.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Label, unit included: "latency (µs)".
    pub label: String,
    /// Logarithmic or linear.
    pub scale: Scale,
}

impl Panel {
    /// A chart titled `title` drawing `series` against `x` and `y`.
    pub fn new(title: impl Into<String>, x: Axis, y: Axis, series: Vec<Series>) -> Panel {
        Panel { title: title.into(), x, y, series }
    }
}

impl Axis {
    /// A linear axis: equal steps, for counts and rates that stay within one decade or two.
    pub fn linear(label: impl Into<String>) -> Axis {
        Axis { label: label.into(), scale: Scale::Linear }
    }

    /// A logarithmic axis: for figures that span decades (latency, subscriber counts).
    pub fn log(label: impl Into<String>) -> Axis {
        Axis { label: label.into(), scale: Scale::Log }
    }
}

/// Axis scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Equal steps.
    Linear,
    /// Decades; non-positive values are not drawn.
    Log,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Solid line with point markers: our measurements.
    Line,
    /// Dashed line with markers: reference figures (seeds, committed anchors).
    Dashed,
    /// Markers only.
    Points,
    /// Vertical bars from low to high at each x: a range a seed gives in words.
    Range,
    /// Thin vertical lines from low to high at each x: when something happened (a fault).
    Event,
}

/// A named set of points (or ranges) in one colour.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text; empty for no legend entry (further series of one kind).
    pub label: String,
    /// How it is drawn.
    pub mark: Mark,
    /// Index into the palette.
    pub color: usize,
    /// (x, y) points, for every mark but [`Mark::Range`].
    pub points: Vec<(f64, f64)>,
    /// (x, low, high), for [`Mark::Range`].
    pub ranges: Vec<(f64, f64, f64)>,
}

impl Series {
    /// A series of points drawn with `mark`.
    pub fn new(label: impl Into<String>, mark: Mark, color: usize, points: Vec<(f64, f64)>) -> Series {
        Series { label: label.into(), mark, color, points, ranges: Vec::new() }
    }

    /// Vertical ranges (x, low, high).
    pub fn ranges(label: impl Into<String>, color: usize, ranges: Vec<(f64, f64, f64)>) -> Series {
        Series { label: label.into(), mark: Mark::Range, color, points: Vec::new(), ranges }
    }

    /// Event markers: thin vertical lines (x, low, high).
    pub fn events(label: impl Into<String>, color: usize, ranges: Vec<(f64, f64, f64)>) -> Series {
        Series { label: label.into(), mark: Mark::Event, color, points: Vec::new(), ranges }
    }
}

/// Palette: tidings TCP, tidings UDP, NATS, NATS anchor, then seeds and extras.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(80, 80, 80),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];

/// Colour of our own measurements.
pub const TIDINGS: usize = 0;
/// Colour of a second series of ours (UDP, another hop count).
pub const TIDINGS_ALT: usize = 1;
/// Colour of NATS measured in this session.
pub const NATS: usize = 2;
/// Colour of the committed NATS anchors.
pub const NATS_ANCHOR: usize = 3;
/// Colour of the seed's own figures.
pub const SEED: usize = 4;

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        // The font is compiled in; a failure here would be a build defect, and plotters then
        // falls back to drawing no text rather than failing the figure.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

type DrawResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

impl Figure {
    /// Writes `stem.png` and `stem.svg`.
    pub fn write(&self, stem: &Path) -> anyhow::Result<()> {
        register_font();
        let cols = if self.panels.len() == 3 { 3 } else { self.panels.len().clamp(1, 2) as u32 };
        let rows = self.panels.len().div_ceil(cols as usize).max(1) as u32;
        let size = (560 * cols, 40 + 440 * rows);
        let png = stem.with_extension("png");
        let svg = stem.with_extension("svg");
        self.draw(BitMapBackend::new(&png, size).into_drawing_area(), (rows, cols))
            .map_err(|e| anyhow::anyhow!("drawing {}: {e}", png.display()))?;
        self.draw(SVGBackend::new(&svg, size).into_drawing_area(), (rows, cols))
            .map_err(|e| anyhow::anyhow!("drawing {}: {e}", svg.display()))?;
        Ok(())
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>, grid: (u32, u32)) -> DrawResult<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE)?;
        let root = root.titled(&self.title, ("sans-serif", 22))?;
        let areas = root.split_evenly((grid.0 as usize, grid.1 as usize));
        for (panel, area) in self.panels.iter().zip(areas) {
            panel.draw(&area)?;
        }
        root.present()?;
        Ok(())
    }
}

impl Panel {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<()>
    where
        DB::ErrorType: 'static,
    {
        let (xs, ys) = self.extent();
        let x = axis_range(&xs, self.x.scale, 0.0);
        let y = axis_range(&ys, self.y.scale, HEADROOM);
        match (self.x.scale, self.y.scale) {
            (Scale::Linear, Scale::Linear) => self.draw_in(area, x, y),
            (Scale::Log, Scale::Linear) => self.draw_in(area, x.log_scale(), y),
            (Scale::Linear, Scale::Log) => self.draw_in(area, x, y.log_scale()),
            (Scale::Log, Scale::Log) => self.draw_in(area, x.log_scale(), y.log_scale()),
        }
    }

    /// Every x and every y value that will be drawn.
    fn extent(&self) -> (Vec<f64>, Vec<f64>) {
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for s in &self.series {
            for &(x, y) in &s.points {
                xs.push(x);
                ys.push(y);
            }
            for &(x, lo, hi) in &s.ranges {
                xs.push(x);
                ys.extend([lo, hi]);
            }
        }
        (xs, ys)
    }

    fn draw_in<DB, X, Y>(&self, area: &DrawingArea<DB, Shift>, x: X, y: Y) -> DrawResult<()>
    where
        DB: DrawingBackend,
        DB::ErrorType: 'static,
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(72)
            .build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc(&self.x.label)
            .y_desc(&self.y.label)
            .x_labels(12)
            .y_labels(12)
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let (x_log, y_log) = (self.x.scale == Scale::Log, self.y.scale == Scale::Log);
        let visible =
            |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!x_log || x > 0.0) && (!y_log || y > 0.0);
        for s in &self.series {
            let color = PALETTE[s.color % PALETTE.len()];
            let points: Vec<(f64, f64)> = s.points.iter().copied().filter(visible).collect();
            let legend = match s.mark {
                Mark::Line => {
                    chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?;
                    chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?
                }
                Mark::Dashed => {
                    chart.draw_series(DashedLineSeries::new(points.clone(), 6, 4, color.stroke_width(2)))?;
                    chart.draw_series(points.iter().map(|&p| TriangleMarker::new(p, 4, color.filled())))?
                }
                Mark::Points => chart.draw_series(points.iter().map(|&p| Cross::new(p, 4, color.stroke_width(2))))?,
                Mark::Range | Mark::Event => {
                    // A range is a bar with caps; an event, a thin bar without.
                    let width = if s.mark == Mark::Range { 3 } else { 1 };
                    let ranges: Vec<(f64, f64, f64)> = s
                        .ranges
                        .iter()
                        .copied()
                        .filter(|&(x, lo, hi)| visible(&(x, lo)) && visible(&(x, hi)))
                        .collect();
                    let cap = |p: (f64, f64)| {
                        EmptyElement::at(p) + PathElement::new(vec![(-6, 0), (6, 0)], color.stroke_width(3))
                    };
                    if s.mark == Mark::Range {
                        chart.draw_series(ranges.iter().flat_map(|&(x, lo, hi)| [cap((x, lo)), cap((x, hi))]))?;
                    }
                    let bar = |&(x, lo, hi): &(f64, f64, f64)| {
                        PathElement::new(vec![(x, lo), (x, hi)], color.stroke_width(width))
                    };
                    chart.draw_series(ranges.iter().map(bar))?
                }
            };
            let mark = s.mark;
            if !s.label.is_empty() {
                legend.label(s.label.clone()).legend(move |(x, y)| match mark {
                    Mark::Range => PathElement::new(vec![(x + 10, y - 6), (x + 10, y + 6)], color.stroke_width(3)),
                    Mark::Event => PathElement::new(vec![(x + 10, y - 6), (x + 10, y + 6)], color.stroke_width(1)),
                    _ => PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)),
                });
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.5))
            .draw()?;
        Ok(())
    }
}

/// Share of a vertical axis kept free above the data, for the legend in the upper left.
const HEADROOM: f64 = 0.3;

/// The axis range covering `values` with the share `headroom` of it free above them: whole
/// decades for a log axis (positive values only; the lowest decade nudged so that its label is
/// drawn), from 0 for a linear one when the data is non-negative.
fn axis_range(values: &[f64], scale: Scale, headroom: f64) -> Range<f64> {
    let usable: Vec<f64> =
        values.iter().copied().filter(|v| v.is_finite() && (scale == Scale::Linear || *v > 0.0)).collect();
    let lo = usable.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = usable.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match scale {
        _ if usable.is_empty() => 0.0..1.0,
        Scale::Log => {
            let bottom = lo.log10().floor();
            let mut top = hi.log10().ceil().max(bottom + 1.0);
            if top - hi.log10() < headroom * (top - bottom) {
                top += 1.0;
            }
            10f64.powf(bottom) * 0.999..10f64.powf(top)
        }
        Scale::Linear => {
            let lo = if lo >= 0.0 { 0.0 } else { lo };
            let span = if hi > lo { hi - lo } else { hi.abs().max(1.0) };
            lo..hi + span * (headroom / (1.0 - headroom)).max(0.05)
        }
    }
}

/// Tick text: millions as M, from 100,000 thousands as k, whole numbers with separators,
/// small numbers with few decimals.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e5 {
        format!("{}k", trim(v / 1e3))
    } else if a >= 1000.0 && v.fract() == 0.0 {
        super::text::thousands(v)
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ranges_round_out_to_decades() {
        let decades = |r: Range<f64>| (r.start.log10().round(), r.end.log10().round());
        assert_eq!(decades(axis_range(&[15.0, 45.0, -3.0], Scale::Log, HEADROOM)), (1.0, 2.0));
        assert_eq!(decades(axis_range(&[15.0, 950.0], Scale::Log, HEADROOM)), (1.0, 4.0), "room for the legend");
        assert_eq!(decades(axis_range(&[15.0, 950.0], Scale::Log, 0.0)), (1.0, 3.0));
        assert_eq!(decades(axis_range(&[100.0], Scale::Log, HEADROOM)), (2.0, 3.0));
        assert_eq!(axis_range(&[], Scale::Log, HEADROOM), 0.0..1.0);
    }

    #[test]
    fn linear_ranges_start_at_zero_for_positive_data() {
        assert_eq!(axis_range(&[5.0, 10.0], Scale::Linear, 0.5), 0.0..20.0);
        assert_eq!(axis_range(&[5.0, 10.0], Scale::Linear, 0.0), 0.0..10.5);
    }

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(2_500_000.0), "2.5M");
        assert_eq!(tick(200_000.0), "200k");
        assert_eq!(tick(20_000.0), "20,000");
        assert_eq!(tick(999.0), "999");
        assert_eq!(tick(0.5), "0.5");
    }

    #[test]
    fn a_figure_renders_to_png_and_svg_without_system_fonts() {
        let dir = std::env::temp_dir().join(format!("tidings-figure-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let panel = Panel::new(
            "latency",
            Axis::log("subscribers"),
            Axis::log("latency (µs)"),
            vec![
                Series::new("ours", Mark::Line, TIDINGS, vec![(10.0, 100.0), (100.0, 1000.0)]),
                Series::ranges("seed", SEED, vec![(10.0, 50.0, 500.0)]),
            ],
        );
        let figure = Figure { title: "test".into(), panels: vec![panel.clone(), panel] };
        figure.write(&dir.join("fig")).unwrap();
        let svg = std::fs::read_to_string(dir.join("fig.svg")).unwrap();
        assert!(svg.contains("subscribers"));
        assert!(std::fs::metadata(dir.join("fig.png")).unwrap().len() > 1000);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
