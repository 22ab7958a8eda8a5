//! The command line, and the client it configures.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use dlock_config::Config;
use dlock_core::LockClient;

use crate::error::CliError;

/// The name the tool's own client gives its connections, so that `CLIENT LIST` never
/// mistakes it for the application. It keeps no description: the process ends before
/// the description could be deleted.
const CLI_CLIENT_NAME: &str = "dlock-cli";

/// Who holds a dlock lock, who waits for it, and hand-offs live, read with the
/// application's own dlock config.
#[derive(Debug, Parser)]
#[command(name = "dlock", version, propagate_version = true)]
pub struct Args {
    /// The application's dlock TOML file. Default: the file named by `DLOCK_CONFIG`.
    /// `DLOCK_PASSWORD`, `DLOCK_USERNAME` and `DLOCK_ADDRESS` apply as for the
    /// application.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print one JSON document on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Holders with hold counts and fencing tokens, the remaining lease, the waiting
    /// clients, the subscribers of the unlock channel, a fair lock's queue and the fencing
    /// counter, each id with its client's name, host, pid and version. Read-only.
    Inspect {
        /// The lock name, as the application passes it (without the key prefix).
        name: String,
    },
    /// The locks and fair locks whose name starts with `--prefix`, with their holders
    /// (SCAN on every master; never KEYS). Read-write locks and semaphores have other
    /// layouts and are not listed. Read-only.
    List {
        /// Only names starting with this (after the config's key prefix).
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Prints the lock's holder at the start and at each change, until Ctrl-C or
    /// `--for`. Read-only.
    Watch {
        /// The lock name.
        name: String,
        /// Stop after this long (`30s`, `5m`). Default: until Ctrl-C.
        #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
        /// How often the holder is read (two commands and one per holder): unlock
        /// messages are published only when a client waits, so the holder is read rather
        /// than heard. A hold shorter than this can go unseen.
        #[arg(long, default_value = "50ms", value_parser = interval)]
        interval: Duration,
    },
    /// Deletes the lock whoever holds it and wakes a waiter; the holder's guard learns
    /// at its next renewal. Asks for confirmation on stdin unless `--yes`.
    ForceUnlock {
        /// The lock name.
        name: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
}

/// A poll interval: a duration of at least 1 ms.
fn interval(text: &str) -> Result<Duration, String> {
    let value = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if value < Duration::from_millis(1) {
        return Err("must be at least 1ms".to_owned());
    }
    Ok(value)
}

/// The client the application's config describes, named as the tool.
pub async fn connect(config: Option<&Path>) -> Result<LockClient, CliError> {
    let config = match config {
        Some(path) => Config::from_file(path)?.with_env_overrides()?,
        None => Config::from_env()?,
    };
    let topology = config.topology()?;
    Ok(config
        .client_builder()
        .client_name(CLI_CLIENT_NAME)
        .describe_client(false)
        .connect_to(&topology)
        .await?)
}
