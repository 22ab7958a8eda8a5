//! The multi-process overlap checker: several OS processes take the same lock in a loop and
//! record each critical section on the monotonic clock; `check` merges their files.
//!
//! ```text
//! dlock-overlap run --config single.toml --lock overlap --count 500 --hold 1ms \
//!                   --out p1.txt --process 1 --api manual
//! dlock-overlap check --expect 2000 p1.txt p2.txt p3.txt p4.txt
//! ```
//!
//! `--api redlock` takes a [`RedLockClient`] built from the file's `[redlock]` table
//! instead of the `LockClient` of its `[redis]` table; `--api none` connects to nothing.
//!
//! `run` exits 0 once its file is written, also when acquisitions failed (they are printed
//! to stderr and show up as lost sections); 1 when the client cannot be built or the file
//! cannot be written. `check` prints the report and exits 0 when no section overlapped or
//! went missing, 1 otherwise. Bad arguments or an unreadable record file exit 2.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use dlock::{distributed_lock, redlock::RedLockClient, LockClient, LockError};
use dlock_tests::overlap::{read_files, Report, Section};

#[derive(Parser)]
#[command(
    name = "dlock-overlap",
    about = "Checks mutual exclusion across OS processes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Takes the lock `count` times and records each critical section in `out`.
    Run(RunArgs),
    /// Merges record files and reports overlaps and lost sections.
    Check {
        /// Sections the run should have recorded, over all processes.
        #[arg(long)]
        expect: u64,
        /// The record files, one per process.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// A dlock-config TOML file: the Redis deployment and lock settings.
    #[arg(long)]
    config: PathBuf,
    /// The lock name every process takes.
    #[arg(long)]
    lock: String,
    /// Critical sections to run.
    #[arg(long)]
    count: u64,
    /// Time spent inside each critical section, e.g. `1ms`.
    #[arg(long, value_parser = humantime::parse_duration)]
    hold: Duration,
    /// The record file to write.
    #[arg(long)]
    out: PathBuf,
    /// This process's id in the records.
    #[arg(long)]
    process: u32,
    /// How the lock is taken; `none` takes no lock (the control run, which must overlap).
    #[arg(long, value_enum)]
    api: Api,
}

#[derive(Clone, Copy, ValueEnum)]
enum Api {
    /// `client.lock(name).lock()` and `guard.unlock()`.
    Manual,
    /// An async fn under `#[distributed_lock]`.
    Attribute,
    /// `redlock.lock(name).lock()` and `guard.unlock()` on the `[redlock]` servers.
    Redlock,
    /// No lock at all, and no connection.
    None,
}

/// What the sections lock with and how, built from the config file as `--api` asks.
enum Locker {
    Manual(LockClient),
    Attribute(LockClient),
    RedLock(RedLockClient),
    Nothing,
}

impl Locker {
    async fn build(api: Api, config: &Path) -> Result<Locker, dlock::config::ConfigError> {
        if let Api::None = api {
            return Ok(Locker::Nothing);
        }
        let config = dlock::config::Config::from_file(config)?;
        Ok(match api {
            Api::Manual => Locker::Manual(config.build().await?),
            Api::Attribute => Locker::Attribute(config.build().await?),
            Api::Redlock => Locker::RedLock(config.build_redlock().await?),
            Api::None => Locker::Nothing,
        })
    }
}

/// The monotonic clock in nanoseconds: one clock for every process on the machine, unlike
/// `Instant`, which cannot be compared across processes.
fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // CLOCK_MONOTONIC counts from boot: never negative.
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// Enter and exit times of one critical section.
async fn occupy(hold: Duration) -> (u64, u64) {
    let enter = monotonic_ns();
    tokio::time::sleep(hold).await;
    (enter, monotonic_ns())
}

/// The critical section under the attribute; `client` and `name` come from the command line.
#[distributed_lock(key = "<name>", client = client)]
async fn locked_by_attribute(
    client: &LockClient,
    name: &str,
    hold: Duration,
) -> Result<(u64, u64), LockError> {
    Ok(occupy(hold).await)
}

/// One critical section the chosen way; a failed acquisition or release is an error and
/// the section is not recorded.
async fn section(locker: &Locker, name: &str, hold: Duration) -> Result<(u64, u64), LockError> {
    match locker {
        Locker::Manual(client) => {
            let guard = client.lock(name).lock().await?;
            let times = occupy(hold).await;
            guard.unlock().await?;
            Ok(times)
        }
        // The attribute logs a failed release instead of returning it: only failed
        // acquisitions show here.
        Locker::Attribute(client) => locked_by_attribute(client, name, hold).await,
        Locker::RedLock(redlock) => {
            let guard = redlock.lock(name).lock().await?;
            let times = occupy(hold).await;
            // `Ok(false)` (expired inside the section) is not an error here: if another
            // process got in meanwhile, the records show the overlap.
            guard.unlock().await?;
            Ok(times)
        }
        Locker::Nothing => Ok(occupy(hold).await),
    }
}

async fn run(args: RunArgs) -> ExitCode {
    let locker = match Locker::build(args.api, &args.config).await {
        Ok(locker) => locker,
        Err(e) => {
            eprintln!("dlock-overlap: process {}: {e}", args.process);
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let mut sections = Vec::new();
    let mut failures = 0u64;
    for seq in 0..args.count {
        match section(&locker, &args.lock, args.hold).await {
            Ok((enter_ns, exit_ns)) => sections.push(Section {
                process: args.process,
                seq,
                enter_ns,
                exit_ns,
            }),
            Err(e) => {
                failures += 1;
                eprintln!("dlock-overlap: process {} section {seq}: {e}", args.process);
            }
        }
    }
    let elapsed = started.elapsed();
    if let Err(e) = write_records(&args.out, &sections) {
        eprintln!("dlock-overlap: {}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    eprintln!(
        "dlock-overlap: process {}: {} sections, {failures} failed, in {elapsed:?}",
        args.process,
        sections.len()
    );
    ExitCode::SUCCESS
}

fn write_records(path: &Path, sections: &[Section]) -> std::io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    for section in sections {
        writeln!(out, "{section}")?;
    }
    out.flush()?;
    out.get_ref().sync_all()
}

fn check(expect: u64, files: &[PathBuf]) -> ExitCode {
    match read_files(files) {
        Ok(sections) => {
            let report = Report::new(&sections, expect);
            println!("{report}");
            if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("dlock-overlap: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    // Clap prints usage to stderr and exits 2 on bad arguments.
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    eprintln!("dlock-overlap: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            runtime.block_on(run(args))
        }
        Command::Check { expect, files } => check(expect, &files),
    }
}
