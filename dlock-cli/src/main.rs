//! `dlock`: the operator's view of an application's dlock locks, configured by the same
//! TOML file as the application (`--config FILE`, else the file `DLOCK_CONFIG` names).
//!
//! - `dlock inspect <name>`: holders and hold counts, remaining lease, waiting clients,
//!   subscribers of the unlock channel, a fair lock's queue, the fencing counter, and
//!   next to every id the description its client registered (name, host, pid, version);
//! - `dlock list [--prefix P]`: the locks whose name starts with `P` (`SCAN` on every
//!   master, never `KEYS`);
//! - `dlock watch <name> [--for 30s]`: each change of holder, live;
//! - `dlock force-unlock <name> [--yes]`: deletes the lock whoever holds it, after a
//!   confirmation on stdin unless `--yes`.
//!
//! `--json` makes every command print one JSON document on stdout. Errors go to stderr
//! with exit status 1 (2 for a command line clap refuses).

mod args;
mod error;
mod inspect;
mod list;
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
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dlock: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), CliError> {
    let client = args::connect(args.config.as_deref()).await?;
    match args.command {
        Command::Inspect { name } => inspect::run(&client, &name, args.json).await,
        Command::List { prefix } => list::run(&client, &prefix, args.json).await,
        Command::Watch {
            name,
            duration,
            interval,
        } => watch::run(&client, &name, duration, interval, args.json).await,
        Command::ForceUnlock { name, yes } => unlock::run(&client, &name, yes, args.json).await,
    }
}
