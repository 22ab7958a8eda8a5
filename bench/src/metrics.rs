//! Named results of one scenario run, and how runs are combined.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::stats::median;

/// How the values of one metric over several runs are summarised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Agg {
    /// The median of the runs (rates, latencies).
    Median,
    /// The smallest value: checks where lower is worse (`counter_ok` = 1 only if every
    /// run was correct).
    Min,
    /// The largest value: checks where higher is worse (expired locks).
    Max,
}

/// One measured value.
#[derive(Clone, Debug)]
pub struct Metric {
    /// Machine-readable name, used in the JSON output.
    pub key: &'static str,
    /// Human-readable name with unit, used in the docs tables.
    pub label: &'static str,
    /// The value (NaN when it could not be measured).
    pub value: f64,
    /// How runs are combined.
    pub agg: Agg,
    /// Decimals shown in tables.
    pub decimals: usize,
}

/// The results of one run of one scenario.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Values in display order.
    pub items: Vec<Metric>,
    /// Remarks about the run (what was skipped, what a figure means).
    pub notes: Vec<String>,
}

impl Metrics {
    /// Adds a value summarised by the median.
    pub fn add(&mut self, key: &'static str, label: &'static str, value: f64, decimals: usize) {
        self.push(key, label, value, Agg::Median, decimals);
    }

    /// Adds a check value summarised by its minimum over runs.
    pub fn add_min(&mut self, key: &'static str, label: &'static str, value: f64) {
        self.push(key, label, value, Agg::Min, 0);
    }

    /// Adds a check value summarised by its maximum over runs.
    pub fn add_max(&mut self, key: &'static str, label: &'static str, value: f64) {
        self.push(key, label, value, Agg::Max, 0);
    }

    fn push(
        &mut self,
        key: &'static str,
        label: &'static str,
        value: f64,
        agg: Agg,
        decimals: usize,
    ) {
        self.items.push(Metric {
            key,
            label,
            value,
            agg,
            decimals,
        });
    }

    /// Adds a remark.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.items.iter().find(|m| m.key == key).map(|m| m.value)
    }

    /// `key → value` for the JSON output.
    pub fn as_map(&self) -> BTreeMap<&'static str, f64> {
        self.items.iter().map(|m| (m.key, m.value)).collect()
    }
}

/// Combines runs metric by metric (each with its own [`Agg`]); notes are merged without
/// duplicates.
pub fn summarize(runs: &[Metrics]) -> Metrics {
    let mut summary = Metrics::default();
    let Some(first) = runs.first() else {
        return summary;
    };
    for metric in &first.items {
        let values: Vec<f64> = runs.iter().filter_map(|run| run.get(metric.key)).collect();
        let value = match metric.agg {
            Agg::Median => median(&values),
            Agg::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
            Agg::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        };
        summary.items.push(Metric {
            value,
            ..metric.clone()
        });
    }
    for run in runs {
        for note in &run.notes {
            if !summary.notes.contains(note) {
                summary.notes.push(note.clone());
            }
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combines_each_metric_its_own_way() {
        let run = |rate: f64, ok: f64, expired: f64| {
            let mut m = Metrics::default();
            m.add("rate", "rate", rate, 0);
            m.add_min("ok", "ok", ok);
            m.add_max("expired", "expired", expired);
            m
        };
        let s = summarize(&[run(3.0, 1.0, 0.0), run(1.0, 0.0, 0.0), run(2.0, 1.0, 2.0)]);
        assert_eq!(s.get("rate"), Some(2.0));
        assert_eq!(s.get("ok"), Some(0.0));
        assert_eq!(s.get("expired"), Some(2.0));
    }
}
