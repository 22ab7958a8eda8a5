//! The command line, and the client it configures.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use dlock::config::Config;
use dlock::{redlock::RedLockClient, LockClient};

use crate::error::CliError;

/// The name the tool's own client gives its connections, so that `CLIENT LIST` never
/// mistakes it for the application. It keeps no description: the process ends before
/// the description could be deleted.
const CLI_CLIENT_NAME: &str = "dlock-cli";

/// Who holds a dlock lock, who waits for it, and hand-offs live, read with the
/// application's own dlock config. Text that applications wrote into Redis (owner ids,
/// client descriptions, lock names) is shown with its control characters written as
/// `\u{..}`; `--json` escapes by JSON's rules.
#[derive(Debug, Parser)]
#[command(name = "dlock", version, propagate_version = true)]
pub(crate) struct Args {
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
pub(crate) enum Command {
    /// Holders with hold counts and fencing tokens, the remaining lease, the waiting
    /// clients, the subscribers of the unlock channel, a fair lock's queue and the fencing
    /// counter, each id with its client's name, host, pid and version; a read-write lock's
    /// mode, readers, writer and waiting writers; a semaphore's capacity and grants. With
    /// a RedLock config: each server's part and on how many servers the lock is held.
    /// Read-only.
    Inspect {
        /// The lock name, as the application passes it (without the key prefix).
        name: String,
    },
    /// The locks, fair locks, read-write locks and semaphores whose name starts with
    /// `--prefix`, with their holders (SCAN on every master; never KEYS; with a RedLock
    /// config, on every RedLock server). Read-only.
    List {
        /// Only names starting with this (after the config's key prefix).
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Prints the lock's holder at the start and at each change, until Ctrl-C or
    /// `--for`: Redis reports each change of the lock on a connection of the tool's
    /// (RESP3, `CLIENT TRACKING ON`), so short holds are seen too; a semaphore's grants
    /// show as holders with their permits. Read-only.
    Watch {
        /// The lock name.
        name: String,
        /// Stop after this long (`30s`, `5m`). Default: until Ctrl-C.
        #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
        /// How often the holder is also read, in case a change report is lost (the
        /// tracking connection dropped). A user without `+client|tracking` gets a warning
        /// on stderr and only this poll: a hold shorter than it can go unseen then.
        #[arg(long, default_value = "1s", value_parser = interval)]
        interval: Duration,
    },
    /// Deletes the lock whoever holds it and passes it on to the next waiter; the
    /// holder's guard learns at its next renewal, or at once when a task of its client
    /// waits for the lock (with a RedLock config: on every server). Refused for a
    /// read-write lock or a semaphore, which have no force-unlock. Asks for
    /// confirmation on stdin unless `--yes`; anything but `y` / `yes` changes nothing and
    /// exits with status 3.
    ForceUnlock {
        /// The lock name.
        name: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Stores a semaphore's capacity: its handles must agree with it (a handle of
    /// another size gets `CapacityMismatch`), and it stays in Redis while nobody holds a
    /// permit. Waiters under the old capacity adopt the new one. Refused for a name held
    /// as another kind of lock. Asks for confirmation on stdin unless `--yes`; anything
    /// but `y` / `yes` changes nothing and exits with status 3.
    SetPermits {
        /// The semaphore's name.
        name: String,
        /// The new capacity (at least 1).
        #[arg(value_parser = clap::value_parser!(u32).range(1..))]
        permits: u32,
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

/// What the application's config describes: one deployment, or the independent servers
/// of a RedLock (a `[redlock]` table and no `[redis]` table).
pub(crate) enum Target {
    /// One deployment: a single server, master and replicas, Sentinel or a cluster.
    Client(LockClient),
    /// A RedLock: one client per server, each read on its own.
    RedLock(RedLockServers),
}

/// The servers of a RedLock, each with its address as shown (password hidden).
pub(crate) struct RedLockServers {
    pub servers: Vec<(String, LockClient)>,
    /// How many servers must hold a lock for it to be held (a majority).
    pub quorum: usize,
}

/// The client(s) the application's config describes, named as the tool.
pub(crate) async fn connect(config: Option<&Path>) -> Result<Target, CliError> {
    let config = match config {
        Some(path) => Config::from_file(path)?.with_env_overrides()?,
        None if std::env::var_os(dlock::config::CONFIG_ENV).is_none_or(|path| path.is_empty()) => {
            return Err(CliError::NoConfig)
        }
        None => Config::from_env()?,
    };
    let builder = || {
        config
            .client_builder()
            .client_name(CLI_CLIENT_NAME)
            .describe_client(false)
            // It never locks: an operator's read-only user may run none of the writes
            // an application's client needs (a refused command is reported where met).
            .check_permissions(false)
    };
    if !config.is_redlock_only() {
        let topology = config.topology()?;
        return Ok(Target::Client(builder().connect_to(&topology).await?));
    }
    let mut servers = Vec::new();
    for (shown, topology) in config.redlock_servers()? {
        servers.push((shown, builder().connect_to(&topology).await?));
    }
    // Checks the servers as the application's RedLock does, and counts its quorum.
    let redlock = RedLockClient::new(servers.iter().map(|(_, c)| c.clone()).collect())?;
    Ok(Target::RedLock(RedLockServers {
        quorum: redlock.quorum(),
        servers,
    }))
}
