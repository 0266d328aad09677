//! Percentiles and the printed table.

use std::time::Duration;

/// p50 and p99 of a sample, in milliseconds, from an HDR histogram of microseconds (three
/// significant digits, 1 µs to one hour; a longer sample counts as one hour).
pub fn percentiles(samples: &[Duration]) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .expect("valid histogram bounds");
    for d in samples {
        h.saturating_record((d.as_micros() as u64).max(1));
    }
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    (ms(0.50), ms(0.99))
}

pub struct Row {
    pub name: String,
    pub n: usize,
    pub ours: (f64, f64),
    pub baseline_name: String,
    pub baseline: (f64, f64),
    pub target: String,
}

/// A scenario's whole samples and its baseline's, for the report's latency plots.
pub struct Series {
    pub name: String,
    pub ours: Vec<Duration>,
    pub baseline_name: String,
    pub baseline: Vec<Duration>,
}

#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
    notes: Vec<String>,
    series: Vec<Series>,
}

impl Table {
    pub fn add(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// Adds the row of whole samples (their count and percentiles), keeping the samples
    /// for the report's plots too.
    pub fn add_sampled(
        &mut self,
        name: &str,
        ours: &[Duration],
        baseline_name: &str,
        baseline: &[Duration],
        target: &str,
    ) {
        self.rows.push(Row {
            name: name.to_string(),
            n: ours.len(),
            ours: percentiles(ours),
            baseline_name: baseline_name.to_string(),
            baseline: percentiles(baseline),
            target: target.to_string(),
        });
        self.series.push(Series {
            name: name.to_string(),
            ours: ours.to_vec(),
            baseline_name: baseline_name.to_string(),
            baseline: baseline.to_vec(),
        });
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    pub fn series(&self) -> &[Series] {
        &self.series
    }

    pub fn note(&mut self, s: String) {
        self.notes.push(s);
    }

    pub fn print(&self) {
        println!();
        println!(
            "{:<34} {:>5} {:>10} {:>10}   {:<30} {:>10} {:>10} {:>9} {:>9}  target",
            "scenario", "n", "p50 ms", "p99 ms", "baseline", "p50 ms", "p99 ms", "p50 x", "p99 x"
        );
        for r in &self.rows {
            println!(
                "{:<34} {:>5} {:>10.2} {:>10.2}   {:<30} {:>10.2} {:>10.2} {:>9.3} {:>9.3}  {}",
                r.name,
                r.n,
                r.ours.0,
                r.ours.1,
                r.baseline_name,
                r.baseline.0,
                r.baseline.1,
                r.ours.0 / r.baseline.0,
                r.ours.1 / r.baseline.1,
                r.target
            );
        }
        for n in &self.notes {
            println!("  {n}");
        }
    }

    /// The rows and notes as JSON, with each ratio to its baseline (`null` where a
    /// percentile is missing).
    pub fn to_json(&self) -> serde_json::Value {
        let num = |x: f64| x.is_finite().then_some(x);
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "scenario": r.name,
                    "n": r.n,
                    "p50_ms": num(r.ours.0),
                    "p99_ms": num(r.ours.1),
                    "baseline": r.baseline_name,
                    "baseline_p50_ms": num(r.baseline.0),
                    "baseline_p99_ms": num(r.baseline.1),
                    "p50_ratio": num(r.ours.0 / r.baseline.0),
                    "p99_ratio": num(r.ours.1 / r.baseline.1),
                    "target": r.target,
                })
            })
            .collect();
        serde_json::json!({"rows": rows, "notes": self.notes})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_sample() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        // To three significant digits (HDR buckets).
        let near = |got: f64, want: f64| (got - want).abs() <= want * 0.001;
        let (p50, p99) = percentiles(&s);
        assert!(near(p50, 50.0) && near(p99, 99.0), "{p50} {p99}");
        let (p50, p99) = percentiles(&[Duration::from_millis(7)]);
        assert!(near(p50, 7.0) && near(p99, 7.0), "{p50} {p99}");
        // Three significant digits: 12.345 ms reads as 12.34x ms.
        let (p50, _) = percentiles(&[Duration::from_micros(12_345)]);
        assert!((p50 - 12.345).abs() < 0.02, "{p50}");
        assert!(percentiles(&[]).0.is_nan());
    }

    #[test]
    fn json_has_every_row_with_its_ratio() {
        let mut t = Table::default();
        t.add(Row {
            name: "a".into(),
            n: 3,
            ours: (10.0, 20.0),
            baseline_name: "b".into(),
            baseline: (40.0, f64::NAN),
            target: "p50 <= 1x".into(),
        });
        t.note("note".into());
        let j = t.to_json();
        assert_eq!(j["rows"][0]["p50_ratio"], 0.25);
        assert!(j["rows"][0]["p99_ratio"].is_null());
        assert_eq!(j["notes"][0], "note");
    }
}
