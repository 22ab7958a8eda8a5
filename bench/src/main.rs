//! `dlock-bench`: throughput, latency and watchdog benchmarks of dlock, compared with the
//! Redis server's own ceiling for dlock's scripts and with rslock.
//!
//! ```text
//! cargo run --release -p dlock-bench -- [--scenarios limit,s1,s2,s3,s4,s5,churn,peers,
//!     family,memory,subscribe,demo,sweeps] [--runs 3] [--duration 10s] [--json]
//!     [--write-docs docs/perf/RESULTS.md] [--plots DIR] [--redis-url URL] [--quick]
//! ```
//!
//! Everything, tables and scaling sweeps with their pictures:
//! `cargo run --release -p dlock-bench -- --scenarios all,sweeps --write-docs docs/perf/RESULTS.md`.
//!
//! See `docs/perf/RESULTS.md` for what each scenario measures and the latest results, and
//! `docs/PERFORMANCE.md` for their summary.

mod churn;
mod cli;
mod contended;
mod cycle;
mod demo;
mod floor;
mod format;
mod limit;
mod machine;
mod memory;
mod metrics;
mod plan;
mod plot;
mod processes;
mod report;
mod scripts;
mod settings;
mod stats;
mod subscribe;
mod sweep;
mod target;
mod uncontended;
mod watchdog;

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

use crate::cli::{Cli, Scenario, Sub};
use crate::machine::Machine;
use crate::metrics::Metrics;
use crate::plan::Job;
use crate::report::JobResult;
use crate::settings::Config;
use crate::stats::{error, Result};
use crate::target::Target;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("dlock-bench: cannot start the Tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match cli.command {
        Some(Sub::Worker(args)) => runtime.block_on(processes::worker(args)).map(|()| true),
        Some(Sub::ChurnWorker(args)) => runtime.block_on(churn::worker::run(args)).map(|()| true),
        None => runtime.block_on(bench(&cli)),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("dlock-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the selected jobs; `Ok(false)` when one of them failed (the others still ran).
async fn bench(cli: &Cli) -> Result<bool> {
    let config = cli.settings();
    let mut jobs = Job::selected(&cli.scenarios);
    if !cli.only.is_empty() {
        jobs.retain(|job| {
            let row = format!("{}:{}", job.scenario(), job.implementation());
            cli.only.contains(&row)
        });
        if jobs.is_empty() {
            return Err(error(format!(
                "--only {} names no row of the selected scenarios (rows are <scenario>:<implementation>, as in the table, e.g. s2:dlock)",
                cli.only.join(",")
            )));
        }
    }
    let command = reproduce_command();
    let mut machine = Machine::collect(config.redis_url.as_deref()).await?;
    eprintln!(
        "dlock-bench: {} job(s) × {} run(s); Redis {}, {} cores, {} build",
        jobs.len(),
        config.runs,
        machine.redis_version,
        machine.cores,
        machine.build
    );
    if machine.build == "debug" {
        eprintln!("dlock-bench: warning: debug build; use --release for meaningful figures");
    }

    // With --json, stdout carries only the JSON document.
    let table = |line: &str| {
        if cli.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    // Rounds: every job's first run, then every job's second run, ...: a slow drift of
    // the shared machine's load then touches all jobs alike instead of a few.
    let mut pending: Vec<Pending> = jobs
        .into_iter()
        .map(|job| Pending {
            job,
            runs: Vec::new(),
            repeated: 0,
            error: None,
        })
        .collect();
    let mut done: Vec<JobResult> = Vec::new();
    table(&report::header());
    for round in 1..=config.runs {
        for p in pending.iter_mut().filter(|p| p.error.is_none()) {
            match run_once(p.job, &config, round).await {
                Ok((metrics, repeats)) => {
                    p.runs.push(metrics);
                    p.repeated += repeats;
                }
                Err(e) => p.error = Some(e.to_string()),
            }
            if round == config.runs || p.error.is_some() {
                let result = p.finish(&config);
                table(&report::row(&result, &done));
                done.push(result);
            }
        }
    }
    let sweeps = if cli.scenarios.contains(&Scenario::Sweeps) {
        let started = Instant::now();
        let sweeps = sweep::run(&config).await;
        eprintln!("dlock-bench: sweeps took {:.0?}", started.elapsed());
        for s in &sweeps {
            table(&sweep::summary_line(s));
        }
        sweeps
    } else {
        Vec::new()
    };
    let all_ok = done.iter().all(|r| r.error.is_none())
        && sweeps
            .iter()
            .flat_map(|s| &s.series)
            .flat_map(|s| &s.points)
            .all(|p| p.outcome.is_ok());

    // Pictures: into --plots, or beside the docs file; linked from the docs by a path
    // relative to the docs file when they are under its directory.
    let docs_dir = cli.write_docs.as_ref().map(|path| {
        path.parent()
            .unwrap_or(std::path::Path::new(""))
            .to_path_buf()
    });
    let plots = cli.plots.clone().or_else(|| docs_dir.clone());
    let mut pictures: Option<String> = None;
    if let (Some(dir), false) = (&plots, sweeps.is_empty()) {
        for path in plot::write_all(&sweeps, dir)? {
            eprintln!("dlock-bench: wrote {}", path.display());
        }
        pictures = match &docs_dir {
            Some(docs) => dir
                .strip_prefix(docs)
                .ok()
                .map(|rel| rel.to_string_lossy().into_owned()),
            None => None,
        };
    }

    machine.load_at_end = machine::load_average();
    let checks = report::checks(&done, &sweeps);
    if checks.iter().any(|c| c.met.is_some()) {
        table("");
        table("targets:");
        for check in &checks {
            table(&format!(
                "  {} {:<40} {}",
                check.mark(),
                check.target,
                check.measured
            ));
        }
    }
    if cli.json {
        println!(
            "{}",
            report::json(&machine, &config, &command, &done, &sweeps)?
        );
    }
    // Each generated section is rewritten only by a run that measured it: the tables and
    // the sweeps can be measured apart.
    if let Some(path) = &cli.write_docs {
        if !done.is_empty() {
            let section = report::markdown(&machine, &config, &command, &done, &sweeps);
            report::write_docs(path, report::BEGIN, report::END, &section)?;
        }
        if !sweeps.is_empty() {
            let section = report::sweeps_markdown(&machine, &command, &sweeps, pictures.as_deref());
            report::write_docs(path, report::SWEEPS_BEGIN, report::SWEEPS_END, &section)?;
        }
        eprintln!("dlock-bench: wrote {}", path.display());
    }
    Ok(all_ok)
}

/// A job's runs so far.
struct Pending {
    job: Job,
    runs: Vec<Metrics>,
    repeated: u32,
    error: Option<String>,
}

impl Pending {
    fn finish(&mut self, config: &Config) -> JobResult {
        let mut result =
            JobResult::new(self.job, std::mem::take(&mut self.runs), self.error.clone());
        if self.repeated > 0 {
            result.summary.note(format!(
                "{} run(s) repeated because other processes used more than {:.0}% of a core \
                 meanwhile (the machine is shared); the tables show the kept runs",
                self.repeated, config.foreign_cpu_limit
            ));
        }
        result
    }
}

/// Runs `job` once against a fresh target. A run during which other processes on the
/// (shared) machine used more than `config.foreign_cpu_limit` % of a core is repeated, at
/// most `MAX_REPEATS` times; returns the kept run and the number of repeats.
async fn run_once(job: Job, config: &Config, round: u32) -> Result<(Metrics, u32)> {
    const MAX_REPEATS: u32 = 2;
    let label = format!("{} {}", job.scenario(), job.implementation());
    let mut repeats = 0;
    loop {
        eprintln!("[{label}] run {round}/{}: {} ...", config.runs, job.title());
        let started = Instant::now();
        let target = Target::open(config.redis_url.as_deref()).await?;
        let outcome = job.run(&target, config).await;
        target.finish().await?;
        let metrics = outcome.inspect_err(|e| eprintln!("[{label}] run {round} failed: {e}"))?;
        let first = metrics.items.first().map_or_else(String::new, |m| {
            format!("{} = {}", m.key, crate::format::num(m.value, m.decimals))
        });
        eprintln!(
            "[{label}] run {round} done in {:.1?}: {first}",
            started.elapsed()
        );
        let foreign = metrics.get("other_cpu_pct").unwrap_or(0.0);
        if foreign > config.foreign_cpu_limit && repeats < MAX_REPEATS {
            eprintln!(
                "[{label}] other processes used {foreign:.0}% of a core during run {round} \
                 (limit {:.0}%); repeating it",
                config.foreign_cpu_limit
            );
            repeats += 1;
            continue;
        }
        return Ok((metrics, repeats));
    }
}

/// The command line to reproduce this invocation.
fn reproduce_command() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        "cargo run --release -p dlock-bench".to_owned()
    } else {
        format!("cargo run --release -p dlock-bench -- {}", args.join(" "))
    }
}
