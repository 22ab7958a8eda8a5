//! The tool's one error type: each says what failed and where.

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Neither `--config` nor `DLOCK_CONFIG` names a config file.
    #[error("no dlock config: pass --config FILE (the application's dlock TOML file), or set DLOCK_CONFIG to its path")]
    NoConfig,
    /// The config file: unreadable or invalid (with file, line and column).
    #[error(transparent)]
    Config(#[from] dlock::config::ConfigError),
    /// Redis or a lock operation.
    #[error(transparent)]
    Lock(#[from] dlock::LockError),
    /// Writing the output or reading the confirmation.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: &'static str,
        /// The failure.
        source: std::io::Error,
    },
    /// A command that would do the wrong thing to what the name holds (a force-unlock of
    /// a read-write lock or a semaphore), refused before anything is changed.
    #[error("{0}")]
    Refused(String),
    /// Ctrl-C could not be listened for.
    #[error("cannot listen for Ctrl-C: {0}")]
    Signal(std::io::Error),
}
