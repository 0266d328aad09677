//! Percentiles and the printed table.

use std::time::Duration;

/// p50 and p99 of a sample, in milliseconds.
pub fn percentiles(samples: &[Duration]) -> (f64, f64) {
    let mut v: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    (at(0.50), at(0.99))
}

pub struct Row {
    pub name: String,
    pub n: usize,
    pub ours: (f64, f64),
    pub baseline_name: String,
    pub baseline: (f64, f64),
    pub target: String,
}

#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Table {
    pub fn add(&mut self, row: Row) {
        self.rows.push(row);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_sample() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentiles(&s), (50.0, 99.0));
        assert_eq!(percentiles(&[Duration::from_millis(7)]), (7.0, 7.0));
    }
}
