//! `dlock`: the operator's view of an application's dlock locks, configured by the same
//! TOML file as the application (`--config FILE`, else the file `DLOCK_CONFIG` names).
//!
//! - `dlock inspect <name>`: holders and hold counts, remaining lease, waiting clients,
//!   subscribers of the unlock channel, a fair lock's queue, the fencing counter, and
//!   next to every id the description its client registered (name, host, pid, version);
//!   a read-write lock's mode, readers, writer and waiting writers; a semaphore's
//!   capacity, permits taken per grant and permits available;
//! - `dlock list [--prefix P]`: the locks, read-write locks and semaphores whose name
//!   starts with `P` (`SCAN` on every master, never `KEYS`);
//! - `dlock watch <name> [--for 30s]`: each change of holder, live: Redis reports each
//!   change (`CLIENT TRACKING`), with a poll every `--interval` (1 s) as the fallback;
//! - `dlock force-unlock <name> [--yes]`: deletes the lock whoever holds it, after a
//!   confirmation on stdin unless `--yes`; refused for read-write locks and semaphores;
//! - `dlock set-permits <name> <permits> [--yes]`: stores a semaphore's capacity (it
//!   stays in Redis while nobody holds a permit), after a confirmation unless `--yes`.
//!
//! A config with only a `[redlock]` table works on every RedLock server: `inspect` shows
//! each server's part and on how many of N servers (quorum Q) the lock is held and by
//! whom (`--json`: a `servers` array), `list` and `watch` read every server, and
//! `force-unlock` deletes the lock on each.
//!
//! `--json` makes every command print one JSON document on stdout. Errors go to stderr
//! with exit status 1 (2 for a command line clap refuses). A `force-unlock` or
//! `set-permits` that was not confirmed changes nothing and exits with status 3, so a
//! script can tell it from one that ran.

#![warn(missing_debug_implementations, unreachable_pub)]
mod args;
mod error;
mod escape;
mod inspect;
mod list;
mod permits;
mod report;
mod unlock;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use args::{Args, Command};
use error::CliError;

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("dlock: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(Done::Completed) => ExitCode::SUCCESS,
        Ok(Done::NotConfirmed) => ExitCode::from(NOT_CONFIRMED),
        Err(e) => {
            eprintln!("dlock: {}", escape::shown_text(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

/// The exit status of a `force-unlock` the operator did not confirm.
const NOT_CONFIRMED: u8 = 3;

/// How a command that did not fail ended.
enum Done {
    Completed,
    /// A `force-unlock` that was not confirmed: nothing changed.
    NotConfirmed,
}

async fn run(args: Args) -> Result<Done, CliError> {
    let target = args::connect(args.config.as_deref()).await?;
    match args.command {
        Command::Inspect { name } => inspect::run(&target, &name, args.json).await?,
        Command::List { prefix } => list::run(&target, &prefix, args.json).await?,
        Command::Watch {
            name,
            duration,
            interval,
        } => watch::run(&target, &name, duration, interval, args.json).await?,
        Command::ForceUnlock { name, yes } => {
            let confirmed = unlock::run(&target, &name, yes, args.json).await?;
            if !confirmed {
                return Ok(Done::NotConfirmed);
            }
        }
        Command::SetPermits { name, permits, yes } => {
            let confirmed = permits::run(&target, &name, permits, yes, args.json).await?;
            if !confirmed {
                return Ok(Done::NotConfirmed);
            }
        }
    }
    Ok(Done::Completed)
}
