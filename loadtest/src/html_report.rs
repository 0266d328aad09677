//! The HTML report of a run (`WARREN_BENCH_REPORT=DIR`): `DIR/index.html` with the table,
//! the notes, and one latency plot per sampled scenario (`DIR/NN-name.png`: the share of
//! requests answered within each latency, warren's against the baseline measured in the
//! same run). Anyone can open it; nothing is fetched from elsewhere.

use crate::report::{Series, Table};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Fonts the plots' text is drawn with, the first found (Debian: fonts-dejavu-core,
/// fonts-liberation).
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a system font for the plots; false when none is found.
fn font_ready() -> bool {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READY.get_or_init(|| {
        FONTS.iter().any(|path| {
            std::fs::read(path).is_ok_and(|bytes| {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
            })
        })
    })
}

/// `(latency ms, percent at or below)` of every sample, in order.
pub fn cdf(samples: &[Duration]) -> Vec<(f64, f64)> {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let n = ms.len() as f64;
    ms.into_iter()
        .enumerate()
        .map(|(i, v)| (v, (i + 1) as f64 * 100.0 / n))
        .collect()
}

/// A file name for the `i`th plot of scenario `name`.
pub fn plot_file(i: usize, name: &str) -> String {
    let mut slug = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug: String = slug.trim_matches('-').chars().take(60).collect();
    format!("{:02}-{slug}.png", i + 1)
}

/// How latencies are laid along the x axis: as they are, or as their logarithm when they
/// span more than a factor of 20 (labels still read in milliseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Axis {
    Linear,
    Log,
}

impl Axis {
    pub fn for_range(lo: f64, hi: f64) -> Axis {
        if lo > 0.0 && hi / lo > 20.0 {
            Axis::Log
        } else {
            Axis::Linear
        }
    }

    pub fn to_x(self, ms: f64) -> f64 {
        match self {
            Axis::Linear => ms,
            Axis::Log => ms.max(1e-3).log10(),
        }
    }

    pub fn label(self, x: f64) -> String {
        let ms = match self {
            Axis::Linear => x,
            Axis::Log => 10f64.powf(x),
        };
        if ms >= 100.0 {
            format!("{ms:.0}")
        } else if ms >= 1.0 {
            format!("{ms:.1}")
        } else {
            format!("{ms:.3}")
        }
    }
}

fn plot(series: &Series, path: &Path) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("plot {}: {e}", path.display());
    let ours = cdf(&series.ours);
    let base = cdf(&series.baseline);
    let all = || ours.iter().chain(&base).map(|p| p.0);
    let (min, max) = (
        all().fold(f64::INFINITY, f64::min),
        all().fold(0.0, f64::max),
    );
    let axis = Axis::for_range(min, max);
    let (lo, hi) = match axis {
        Axis::Log => (axis.to_x(min) - 0.1, axis.to_x(max) + 0.1),
        Axis::Linear => {
            let pad = ((max - min) * 0.1).max(max * 0.02).max(0.01);
            ((min - pad).max(0.0), max + pad)
        }
    };
    let root = BitMapBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&series.name, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0.0..100.0)
        .map_err(|e| err(&e))?;
    let x_desc = match axis {
        Axis::Linear => "latency, ms",
        Axis::Log => "latency, ms (log scale)",
    };
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("% answered within")
        .x_label_formatter(&|x| axis.label(*x))
        .draw()
        .map_err(|e| err(&e))?;
    let with_n = |name: &str, n: usize| {
        if name.contains("(n=") {
            name.to_string()
        } else {
            format!("{name} (n={n})")
        }
    };
    for (points, color, label) in [
        (ours, BLUE, with_n("warren", series.ours.len())),
        (
            base,
            RED,
            with_n(&series.baseline_name, series.baseline.len()),
        ),
    ] {
        let Some(first) = points.first().copied() else {
            continue;
        };
        // A step up at every sample, from 0 % at the fastest.
        let mut steps = vec![(axis.to_x(first.0), 0.0)];
        let mut below = 0.0;
        for (ms, pct) in points {
            let x = axis.to_x(ms);
            steps.push((x, below));
            steps.push((x, pct));
            below = pct;
        }
        chart
            .draw_series(LineSeries::new(steps, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn num(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "—".into()
    }
}

/// The report's page for `table`, with the plots named by `plots` (scenario, file).
pub fn page(table: &Table, plots: &[(String, String)], context: &str) -> String {
    let mut h = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>warren benchmark report</title>\n<style>\
         body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child,td.l{text-align:left}\
         figure{margin:2em 0}img{max-width:100%;border:1px solid #eee}</style></head><body>\n\
         <h1>warren benchmark report</h1>\n",
    );
    let _ = writeln!(h, "<p>{}</p>", escape(context));
    h.push_str(
        "<table><tr><th>scenario</th><th>n</th><th>p50 ms</th><th>p99 ms</th><th>baseline</th>\
         <th>p50 ms</th><th>p99 ms</th><th>p50 ×</th><th>p99 ×</th><th>target</th></tr>\n",
    );
    for r in table.rows() {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            escape(&r.name),
            r.n,
            num(r.ours.0, 2),
            num(r.ours.1, 2),
            escape(&r.baseline_name),
            num(r.baseline.0, 2),
            num(r.baseline.1, 2),
            num(r.ours.0 / r.baseline.0, 3),
            num(r.ours.1 / r.baseline.1, 3),
            escape(&r.target),
        );
    }
    h.push_str("</table>\n");
    if !table.notes().is_empty() {
        h.push_str("<h2>Notes</h2>\n<ul>\n");
        for n in table.notes() {
            let _ = writeln!(h, "<li>{}</li>", escape(n));
        }
        h.push_str("</ul>\n");
    }
    if !plots.is_empty() {
        h.push_str("<h2>Latency</h2>\n");
        for (name, file) in plots {
            let _ = writeln!(
                h,
                "<figure><img src=\"{}\" alt=\"{}\"><figcaption>{}</figcaption></figure>",
                escape(file),
                escape(name),
                escape(name)
            );
        }
    }
    h.push_str("</body></html>\n");
    h
}

/// Writes the report into `dir` (made if missing); the page's path.
pub fn write(table: &Table, dir: &Path, context: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let mut plots = Vec::new();
    let mut table_notes = Vec::new();
    if font_ready() {
        for (i, s) in table.series().iter().enumerate() {
            if s.ours.is_empty() && s.baseline.is_empty() {
                continue;
            }
            let file = plot_file(i, &s.name);
            match plot(s, &dir.join(&file)) {
                Ok(()) => plots.push((s.name.clone(), file)),
                Err(e) => table_notes.push(format!("no plot: {e}")),
            }
        }
    } else {
        table_notes.push(format!(
            "no plots: none of the fonts {FONTS:?} is installed (Debian: apt-get install fonts-dejavu-core)"
        ));
    }
    let mut context = context.to_string();
    for n in table_notes {
        context.push_str(". ");
        context.push_str(&n);
    }
    let page_path = dir.join("index.html");
    std::fs::write(&page_path, page(table, &plots, &context))?;
    Ok(page_path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Row;

    #[test]
    fn the_cdf_rises_to_every_sample() {
        let s: Vec<Duration> = [30, 10, 20, 40].map(Duration::from_millis).to_vec();
        assert_eq!(
            cdf(&s),
            vec![(10.0, 25.0), (20.0, 50.0), (30.0, 75.0), (40.0, 100.0)]
        );
        assert!(cdf(&[]).is_empty());
    }

    #[test]
    fn a_wide_range_is_drawn_on_a_log_axis_labelled_in_ms() {
        assert_eq!(Axis::for_range(1.0, 50.0), Axis::Log);
        assert_eq!(Axis::for_range(200.0, 300.0), Axis::Linear);
        assert_eq!(Axis::for_range(0.0, 3.0), Axis::Linear);
        let x = Axis::Log.to_x(250.0);
        assert!((x - 250f64.log10()).abs() < 1e-9);
        assert_eq!(Axis::Log.label(x), "250");
        assert_eq!(Axis::Linear.label(12.34), "12.3");
        assert_eq!(Axis::Log.label(-1.0), "0.100");
    }

    #[test]
    fn plot_files_are_plain_names() {
        assert_eq!(
            plot_file(0, "burst of 200, pool grown"),
            "01-burst-of-200-pool-grown.png"
        );
        assert_eq!(
            plot_file(11, "warm exec `true` via API"),
            "12-warm-exec-true-via-api.png"
        );
        assert_eq!(plot_file(2, "../../etc"), "03-etc.png");
    }

    #[test]
    fn the_page_escapes_what_the_scenarios_say() {
        let mut t = Table::default();
        t.add(Row {
            name: "a <b> & c".into(),
            n: 3,
            ours: (1.0, 2.0),
            baseline_name: "docker".into(),
            baseline: (f64::NAN, f64::NAN),
            target: "p50 <= 1x".into(),
        });
        t.note("x < y".into());
        let h = page(&t, &[("a <b>".into(), "01-a-b.png".into())], "run");
        assert!(h.contains("a &lt;b&gt; &amp; c") && h.contains("p50 &lt;= 1x"));
        assert!(h.contains("<li>x &lt; y</li>") && h.contains("src=\"01-a-b.png\""));
        assert!(!h.contains("<b>"));
        // A missing baseline reads as a dash, not NaN.
        assert!(h.contains("<td>—</td>") && !h.contains("NaN"));
    }

    /// The real thing: a PNG comes out (host-setup installs fonts-dejavu-core with the
    /// test tools).
    #[test]
    fn a_report_with_a_plot_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Table::default();
        let ours: Vec<Duration> = (1..=50).map(Duration::from_millis).collect();
        let base: Vec<Duration> = (10..=60).map(Duration::from_millis).collect();
        t.add_sampled("sampled scenario", &ours, "docker", &base, "-");
        let page_path = write(&t, dir.path(), "test run").unwrap();
        let html = std::fs::read_to_string(page_path).unwrap();
        assert!(html.contains("sampled scenario"));
        assert!(font_ready(), "no font for the plots: {html}");
        let png = std::fs::read(dir.path().join("01-sampled-scenario.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(html.contains("src=\"01-sampled-scenario.png\""));
    }
}
