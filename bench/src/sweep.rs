//! Scaling sweeps: S1, S2 / S5, S4 and waiters vs wake-ups, each run at a range of sizes
//! (tasks, contenders, held locks, waiting clients) to show how dlock behaves at 10× and
//! 100× a load.
//!
//! Every point is one run (no repeats) against a fresh server, through the scenario's own
//! code path with the size changed in its [`Config`]. Each curve gets a growth class
//! from the slope of `ln y` over `ln x` ([`growth`]); the pictures are drawn by
//! [`crate::plot`].

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::contended::{self, Primitive};
use crate::format::num;
use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::Result;
use crate::target::Target;
use crate::{processes, uncontended, watchdog};

/// Processes of the multi-process series of the contended sweep.
const PROCESSES: usize = 4;

/// The sizes of one sweep invocation.
struct Sizes {
    s1_tasks: &'static [usize],
    s1_duration: Duration,
    contenders: &'static [usize],
    contended_acquisitions: u64,
    /// A contended or wake-up point that takes longer fails (the sweep goes on).
    contended_timeout: Duration,
    locks: &'static [usize],
    s4_watchdog: Duration,
    s4_periods: u32,
    waiters: &'static [usize],
    wakeup_acquisitions: u64,
}

/// The sizes the scaling questions ask about.
const FULL: Sizes = Sizes {
    s1_tasks: &[1, 4, 16, 64, 256, 1024],
    s1_duration: Duration::from_secs(2),
    contenders: &[2, 16, 128, 1024],
    contended_acquisitions: 2_000,
    contended_timeout: Duration::from_secs(120),
    locks: &[1_000, 10_000, 100_000],
    // Longer than taking 100 k locks (≈ 2 s), so every lock is renewed in time.
    s4_watchdog: Duration::from_secs(6),
    s4_periods: 3,
    waiters: &[1, 2, 5, 10, 20, 50, 100],
    wakeup_acquisitions: 1_000,
};

/// `--quick`: a few small points of each sweep (for the smoke test).
const QUICK: Sizes = Sizes {
    s1_tasks: &[1, 16, 64],
    s1_duration: Duration::from_millis(500),
    contenders: &[4, 16],
    contended_acquisitions: 200,
    contended_timeout: Duration::from_secs(30),
    locks: &[100, 1_000],
    s4_watchdog: Duration::from_millis(1500),
    s4_periods: 2,
    waiters: &[1, 5, 20],
    wakeup_acquisitions: 200,
};

/// One point of a sweep: which scenario, at which size.
#[derive(Debug, Clone, Copy)]
enum Point {
    /// S1 (the lock, uncontended) with this many tasks.
    S1 { tasks: usize },
    /// S2 (`processes` = 1) or S5 with this many contenders in all.
    Contended { contenders: usize, processes: usize },
    /// S4 with this many locks held.
    Watchdog { locks: usize },
    /// Waiters vs wake-ups with this many clients.
    Wakeups { clients: usize },
}

impl Point {
    /// The base settings with this point's size.
    fn config(self, base: &Config, sizes: &Sizes) -> Config {
        let mut cfg = base.clone();
        cfg.runs = 1;
        match self {
            Point::S1 { tasks } => {
                cfg.s1_tasks = tasks;
                cfg.duration = sizes.s1_duration;
                cfg.warmup = sizes.s1_duration / 4;
            }
            Point::Contended {
                contenders,
                processes,
            } => {
                cfg.acquisitions = sizes.contended_acquisitions;
                cfg.contended_timeout = sizes.contended_timeout;
                cfg.s2_tasks = contenders;
                cfg.processes = processes;
                cfg.tasks_per_process = contenders / processes;
            }
            Point::Watchdog { locks } => {
                cfg.locks = locks;
                cfg.s4_watchdog = sizes.s4_watchdog;
                cfg.s4_periods = sizes.s4_periods;
            }
            Point::Wakeups { .. } => {
                cfg.acquisitions = sizes.wakeup_acquisitions;
                cfg.contended_timeout = sizes.contended_timeout;
            }
        }
        cfg
    }

    async fn run(self, target: &Target, cfg: &Config) -> Result<Metrics> {
        match self {
            Point::S1 { .. } => uncontended::s1_dlock(target, cfg).await,
            Point::Contended { processes: 1, .. } => {
                contended::s2_dlock(target, cfg, Primitive::Lock).await
            }
            Point::Contended { .. } => processes::s5_processes(target, cfg, Primitive::Lock).await,
            Point::Watchdog { .. } => watchdog::s4_watchdog(target, cfg).await,
            Point::Wakeups { clients } => contended::wakeups(target, cfg, clients).await,
        }
    }
}

/// A figure drawn for a sweep: one metric of every point.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Figure {
    /// The metric's key in the points' [`Metrics`].
    pub key: &'static str,
    /// Axis label, with its unit.
    pub label: &'static str,
    /// Whether the y axis is logarithmic (as the x axis always is).
    pub log_y: bool,
}

/// One measured point of a series.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The swept size.
    pub x: f64,
    /// What the run measured, or why it failed.
    pub outcome: std::result::Result<Metrics, String>,
}

/// One curve family of a sweep (e.g. "1 process").
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend.
    pub name: &'static str,
    /// The points in increasing `x`.
    pub points: Vec<Measured>,
}

impl Series {
    /// `(x, value of key)` of the points that measured it.
    pub fn xy(&self, key: &str) -> Vec<(f64, f64)> {
        self.points
            .iter()
            .filter_map(|p| {
                let value = p.outcome.as_ref().ok()?.get(key)?;
                value.is_finite().then_some((p.x, value))
            })
            .collect()
    }
}

/// A finished sweep.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// File name stem of its picture, and its id in the JSON.
    pub id: &'static str,
    /// Heading.
    pub title: &'static str,
    /// What the x axis counts.
    pub x_label: &'static str,
    /// The metrics drawn, one panel each.
    pub figures: &'static [Figure],
    /// Its curves.
    pub series: Vec<Series>,
    /// What each point ran.
    pub setup: String,
}

/// The sweeps to run, in order: (id, title, x label, figures, series (name, points), setup).
struct Plan {
    id: &'static str,
    title: &'static str,
    x_label: &'static str,
    figures: &'static [Figure],
    series: Vec<(&'static str, Vec<(usize, Point)>)>,
    setup: String,
}

fn plans(sizes: &Sizes) -> Vec<Plan> {
    let contended = |processes: usize| -> Vec<(usize, Point)> {
        sizes
            .contenders
            .iter()
            .filter(|&&n| n >= processes && n % processes == 0)
            .map(|&contenders| {
                (
                    contenders,
                    Point::Contended {
                        contenders,
                        processes,
                    },
                )
            })
            .collect()
    };
    // S4 first: its memory per lock is the growth of the process' VmRSS, which memory
    // freed by earlier points (S1's 1,024 tasks, ...) would hide.
    vec![
        Plan {
            id: "sweep-s4",
            title: "S4 watchdog vs held locks",
            x_label: "locks held with watchdog renewal",
            figures: &[
                Figure {
                    key: "round_trips_per_period",
                    label: "round trips (EVALSHA) per renewal period",
                    log_y: true,
                },
                Figure {
                    key: "server_cpu_ms_per_period",
                    label: "server CPU per renewal period (ms)",
                    log_y: true,
                },
                Figure {
                    key: "client_bytes_per_lock",
                    label: "client memory per held lock (bytes of VmRSS)",
                    log_y: true,
                },
            ],
            series: vec![(
                "1 client",
                sizes
                    .locks
                    .iter()
                    .map(|&locks| (locks, Point::Watchdog { locks }))
                    .collect(),
            )],
            setup: format!(
                "S4 (locks taken by 64 tasks, held over {} renewal periods of {}); memory is \
                 the growth of the process' VmRSS while taking the locks, over their number",
                sizes.s4_periods,
                humantime::format_duration(sizes.s4_watchdog / 3)
            ),
        },
        Plan {
            id: "sweep-s1",
            title: "S1 uncontended vs tasks",
            x_label: "tasks (one key each, one client)",
            figures: &[
                Figure {
                    key: "cycles_per_s",
                    label: "lock + unlock cycles/s",
                    log_y: true,
                },
                Figure {
                    key: "cycle_p99_ms",
                    label: "cycle latency p99 (ms)",
                    log_y: true,
                },
            ],
            series: vec![(
                "1 process",
                sizes
                    .s1_tasks
                    .iter()
                    .map(|&tasks| (tasks, Point::S1 { tasks }))
                    .collect(),
            )],
            setup: format!(
                "S1's loop (lock + unlock, a key per task) for {} after a {} warm-up",
                humantime::format_duration(sizes.s1_duration),
                humantime::format_duration(sizes.s1_duration / 4)
            ),
        },
        Plan {
            id: "sweep-s2-s5",
            title: "S2 / S5 contended hand-off vs contenders",
            x_label: "contenders on one key (in all)",
            figures: &[
                Figure {
                    key: "acquisitions_per_s",
                    label: "acquisitions/s",
                    log_y: true,
                },
                Figure {
                    key: "wait_p99_ms",
                    label: "wait p99 (ms)",
                    log_y: true,
                },
                Figure {
                    key: "min_over_mean",
                    label: "fairness: min / mean acquisitions",
                    log_y: false,
                },
            ],
            series: vec![
                ("1 process (S2)", contended(1)),
                ("4 processes (S5)", contended(PROCESSES)),
            ],
            setup: format!(
                "S2's loop (lock, GET + SET of a counter, unlock) for {} counted acquisitions; \
                 fairness is per task in 1 process and per process in {PROCESSES} processes \
                 (contenders / {PROCESSES} tasks each, sharing the process' client; the \
                 {PROCESSES}-process series starts at {PROCESSES} contenders)",
                num(sizes.contended_acquisitions as f64, 0)
            ),
        },
        Plan {
            id: "sweep-wakeups",
            title: "Waiters vs wake-ups",
            x_label: "waiting clients (one task each)",
            figures: &[
                Figure {
                    key: "attempts_per_release",
                    label: "acquire scripts per release",
                    log_y: true,
                },
                Figure {
                    key: "woken_attempts_per_release",
                    label: "tries after a wait per release",
                    log_y: true,
                },
                Figure {
                    key: "lock_commands_per_release",
                    label: "Redis commands per release (the lock's)",
                    log_y: true,
                },
                Figure {
                    key: "acquisitions_per_s",
                    label: "acquisitions/s",
                    log_y: true,
                },
            ],
            series: vec![(
                "lock",
                sizes
                    .waiters
                    .iter()
                    .map(|&clients| (clients, Point::Wakeups { clients }))
                    .collect(),
            )],
            setup: format!(
                "N LockClients with one task each loop lock → GET + SET of a counter on \
                 another connection → unlock on one key, {} counted acquisitions in all; \
                 commands from INFO commandstats (reset at the start) less the critical \
                 section's and the measurement's",
                num(sizes.wakeup_acquisitions as f64, 0)
            ),
        },
    ]
}

/// Runs every sweep (`--quick`: the small ones); a failed point is recorded and the
/// sweep goes on.
pub async fn run(base: &Config) -> Vec<Sweep> {
    let sizes = if base.quick { &QUICK } else { &FULL };
    let mut sweeps = Vec::new();
    for plan in plans(sizes) {
        let mut series = Vec::new();
        for (name, points) in plan.series {
            let mut measured = Vec::new();
            for (x, point) in points {
                let cfg = point.config(base, sizes);
                let label = format!("{} {name} x={x}", plan.id);
                eprintln!("[{label}] ...");
                let started = Instant::now();
                let outcome = run_point(point, &cfg).await.map_err(|e| e.to_string());
                match &outcome {
                    Ok(m) => eprintln!(
                        "[{label}] done in {:.1?}: {}",
                        started.elapsed(),
                        plan.figures
                            .iter()
                            .map(|f| format!(
                                "{} = {}",
                                f.key,
                                num(m.get(f.key).unwrap_or(f64::NAN), 3)
                            ))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Err(e) => eprintln!("[{label}] failed: {e}"),
                }
                measured.push(Measured {
                    x: x as f64,
                    outcome,
                });
            }
            series.push(Series {
                name,
                points: measured,
            });
        }
        sweeps.push(Sweep {
            id: plan.id,
            title: plan.title,
            x_label: plan.x_label,
            figures: plan.figures,
            series,
            setup: plan.setup,
        });
    }
    sweeps
}

async fn run_point(point: Point, cfg: &Config) -> Result<Metrics> {
    let target = Target::open(cfg.redis_url.as_deref()).await?;
    let outcome = point.run(&target, cfg).await;
    target.finish().await?;
    outcome
}

/// How a curve grows: the least-squares slope of `ln y` over `ln x`, and the slopes
/// between successive points (where a knee shows).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Growth {
    /// The fitted exponent: y ∝ x^slope.
    pub slope: f64,
    /// Its class: "falling", "constant", "sub-linear", "linear" or "worse than linear".
    pub class: &'static str,
    /// Slopes between successive points.
    pub steps: Vec<f64>,
}

/// The growth of the curve through `points` (in increasing x); `None` with fewer than two
/// points where both coordinates are positive (a log needs them), unless the curve is
/// zero at two or more points and nowhere else: constant (a count of something that
/// never happens, such as tries nobody needed).
pub fn growth(points: &[(f64, f64)]) -> Option<Growth> {
    let measured = points.iter().filter(|(x, _)| *x > 0.0).count();
    if measured >= 2 && points.iter().all(|(_, y)| *y == 0.0) {
        return Some(Growth {
            slope: 0.0,
            class: class(0.0),
            steps: vec![0.0; measured - 1],
        });
    }
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    if logs.len() < 2 {
        return None;
    }
    let n = logs.len() as f64;
    let mean_x = logs.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = logs.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = logs.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = logs.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let steps = logs
        .windows(2)
        .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0))
        .collect();
    Some(Growth {
        slope,
        class: class(slope),
        steps,
    })
}

/// The class of a fitted exponent.
fn class(slope: f64) -> &'static str {
    match slope {
        s if s < -0.2 => "falling",
        s if s <= 0.2 => "constant",
        s if s < 0.8 => "sub-linear",
        s if s <= 1.2 => "linear",
        _ => "worse than linear",
    }
}

/// `metric`'s value at `x` in the first series of sweep `id` that measured it.
pub fn value_at(sweeps: &[Sweep], id: &str, x: f64, metric: &str) -> Option<f64> {
    sweeps
        .iter()
        .filter(|s| s.id == id)
        .flat_map(|s| &s.series)
        .flat_map(|s| s.xy(metric))
        .find(|(px, _)| *px == x)
        .map(|(_, y)| y)
}

/// The table line of a sweep (stdout): each curve's growth.
pub fn summary_line(sweep: &Sweep) -> String {
    let mut parts = Vec::new();
    for figure in sweep.figures {
        for series in &sweep.series {
            let g = growth(&series.xy(figure.key));
            parts.push(format!(
                "{} [{}]: {}",
                figure.key,
                series.name,
                g.map_or_else(
                    || "n/a".to_owned(),
                    |g| format!("{} (slope {})", g.class, num(g.slope, 2))
                )
            ));
        }
    }
    format!("{:<8} {:<12} {}", "sweep", sweep.id, parts.join("; "))
}

/// The Markdown of the sweeps: picture (at `<pictures>/<id>.svg`, relative to the docs
/// file), the points, and every curve's growth.
pub fn markdown(sweeps: &[Sweep], pictures: Option<&str>) -> String {
    let mut md = String::new();
    if sweeps.is_empty() {
        return md;
    }
    for sweep in sweeps {
        let _ = writeln!(md, "\n### {}\n", sweep.title);
        if let Some(dir) = pictures {
            let file = format!("{}.svg", sweep.id);
            let link = if dir.is_empty() {
                file
            } else {
                format!("{dir}/{file}")
            };
            let _ = writeln!(md, "![{}]({link})\n", sweep.title);
        }
        let _ = writeln!(md, "Each point: {}.\n", sweep.setup);
        let _ = write!(md, "| series | {} |", sweep.x_label);
        for figure in sweep.figures {
            let _ = write!(md, " {} |", figure.label);
        }
        let _ = writeln!(md, "\n|---|---|{}", "---|".repeat(sweep.figures.len()));
        for series in &sweep.series {
            for point in &series.points {
                let _ = write!(md, "| {} | {} |", series.name, num(point.x, 0));
                match &point.outcome {
                    Ok(m) => {
                        for figure in sweep.figures {
                            let v = m.get(figure.key).unwrap_or(f64::NAN);
                            let _ = write!(md, " {} |", num(v, decimals(v)));
                        }
                    }
                    Err(e) => {
                        let _ = write!(
                            md,
                            " failed: {}{}",
                            e.replace('|', "\\|"),
                            " |".repeat(sweep.figures.len())
                        );
                    }
                }
                let _ = writeln!(md);
            }
        }
        let _ = writeln!(
            md,
            "\n| curve | series | growth | slope | steps |\n|---|---|---|---|---|"
        );
        for figure in sweep.figures {
            for series in &sweep.series {
                let (class, slope, steps) = match growth(&series.xy(figure.key)) {
                    Some(g) => (
                        g.class.to_owned(),
                        num(g.slope, 2),
                        g.steps
                            .iter()
                            .map(|s| num(*s, 2))
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                    None => ("n/a".to_owned(), "n/a".to_owned(), String::new()),
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | **{class}** | {slope} | {steps} |",
                    figure.label, series.name
                );
            }
        }
    }
    md
}

/// Decimals that show a value's first three significant digits (at most 3).
fn decimals(value: f64) -> usize {
    match value.abs() {
        v if v >= 100.0 => 0,
        v if v >= 10.0 => 1,
        v if v >= 1.0 => 2,
        _ => 3,
    }
}

/// One sweep in the JSON document.
#[derive(Serialize)]
pub struct JsonSweep {
    /// Its id.
    pub id: &'static str,
    /// Heading.
    pub title: &'static str,
    /// The x axis.
    pub x_label: &'static str,
    /// What each point ran.
    pub setup: String,
    /// The curves.
    pub series: Vec<JsonSeries>,
}

/// One series in the JSON document.
#[derive(Serialize)]
pub struct JsonSeries {
    /// The legend.
    pub name: &'static str,
    /// Every point: `x`, and the run's values or its error.
    pub points: Vec<serde_json::Value>,
    /// Growth of each drawn metric (`null` where it cannot be fitted).
    pub growth: std::collections::BTreeMap<&'static str, Option<Growth>>,
}

/// The sweeps for the JSON document.
pub fn json(sweeps: &[Sweep]) -> Vec<JsonSweep> {
    sweeps
        .iter()
        .map(|sweep| JsonSweep {
            id: sweep.id,
            title: sweep.title,
            x_label: sweep.x_label,
            setup: sweep.setup.clone(),
            series: sweep
                .series
                .iter()
                .map(|series| JsonSeries {
                    name: series.name,
                    points: series
                        .points
                        .iter()
                        .map(|p| match &p.outcome {
                            Ok(m) => serde_json::json!({ "x": p.x, "values": m.as_map() }),
                            Err(e) => serde_json::json!({ "x": p.x, "error": e }),
                        })
                        .collect(),
                    growth: sweep
                        .figures
                        .iter()
                        .map(|f| (f.key, growth(&series.xy(f.key))))
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0]
            .iter()
            .map(|&x| (x, f(x)))
            .collect()
    }

    #[test]
    fn growth_classes_from_the_fitted_exponent() {
        let class = |f: &dyn Fn(f64) -> f64| growth(&curve(f)).map(|g| g.class);
        assert_eq!(class(&|_| 5.0), Some("constant"));
        assert_eq!(class(&|x| 3.0 * x), Some("linear"));
        assert_eq!(class(&|x| x * x), Some("worse than linear"));
        assert_eq!(class(&|x| x.sqrt()), Some("sub-linear"));
        assert_eq!(class(&|x| 100.0 / x), Some("falling"));
        let g = growth(&curve(|x| x * x)).unwrap();
        assert!((g.slope - 2.0).abs() < 1e-9);
        assert_eq!(g.steps.len(), 5);
    }

    #[test]
    fn a_knee_shows_in_the_steps() {
        // Linear up to 64, flat after: the fit is sub-linear, the steps show where.
        let g = growth(&curve(|x| x.min(64.0))).unwrap();
        assert!((g.steps[0] - 1.0).abs() < 1e-9 && g.steps[4].abs() < 1e-9);
    }

    #[test]
    fn growth_needs_two_positive_points() {
        assert_eq!(growth(&[(1.0, 2.0)]), None);
        assert_eq!(growth(&[(1.0, 0.0), (2.0, 3.0)]), None);
        assert!(growth(&[(1.0, 0.0), (2.0, 1.0), (4.0, 2.0)]).is_some());
    }

    #[test]
    fn a_curve_of_zeros_is_constant() {
        let zeros = growth(&[(1.0, 0.0), (2.0, 0.0), (4.0, 0.0)]).unwrap();
        assert_eq!((zeros.class, zeros.slope), ("constant", 0.0));
        assert_eq!(zeros.steps, [0.0, 0.0]);
        assert_eq!(growth(&[(1.0, 0.0)]), None);
    }
}
