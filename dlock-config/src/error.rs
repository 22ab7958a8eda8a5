//! The one error type of dlock-config.

/// Why a configuration could not be loaded or turned into a client.
///
/// Messages name the file (or `<string>` for [`Config::from_toml_str`](crate::Config::from_toml_str)),
/// the line and column where the TOML has one, and what is expected. They never contain a
/// password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read dlock config {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// The file is larger than any dlock configuration ([`MAX_CONFIG_BYTES`]): most likely
    /// the wrong file (a log, a dump, a device). Nothing past the limit was read.
    ///
    /// [`MAX_CONFIG_BYTES`]: crate::MAX_CONFIG_BYTES
    #[error("dlock config {path} is larger than {limit} bytes; a dlock config is a few hundred bytes: is it the right file?")]
    TooLarge {
        /// The file.
        path: String,
        /// The largest size accepted.
        limit: u64,
    },

    /// The file is not UTF-8 text.
    #[error(
        "dlock config {path} is not UTF-8 text (invalid byte at offset {offset}); save it as UTF-8"
    )]
    NotUtf8 {
        /// The file.
        path: String,
        /// Byte offset of the first invalid byte.
        offset: usize,
    },

    /// The TOML is malformed or does not match the expected shape or values.
    #[error("{origin}:{line}:{column}: {message}")]
    Invalid {
        /// The file, or `<string>`.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong and what is expected.
        message: String,
    },

    /// A file the configuration refers to (e.g. `tls_ca_file`) could not be read.
    #[error("cannot read {key} {path}: {source}")]
    Referenced {
        /// The option naming the file.
        key: &'static str,
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// An environment override is not usable.
    #[error("environment variable {variable}: {message}")]
    Environment {
        /// The variable, e.g. `DLOCK_ADDRESS`.
        variable: &'static str,
        /// What is wrong.
        message: String,
    },

    /// [`Config::build`](crate::Config::build) (or [`Config::topology`](crate::Config::topology))
    /// on a file with a `[redlock]` table and no `[redis]` table.
    #[error("the dlock config has no [redis] table, only [redlock]: build its RedLock with Config::build_redlock, or add one of [redis.single], [redis.master_slave], [redis.sentinel] or [redis.cluster] for a LockClient")]
    NoRedis,

    /// [`Config::build_redlock`](crate::Config::build_redlock) on a file without a
    /// `[redlock]` table.
    #[error("the dlock config has no [redlock] table: add one with `servers = [\"redis://...\", ...]` (at least 3 independent servers)")]
    NoRedLock,

    /// The configuration is valid but the client could not be built (e.g. Redis is
    /// unreachable).
    #[error(transparent)]
    Lock(#[from] dlock_core::LockError),
}

/// `Result` with [`ConfigError`].
pub type Result<T, E = ConfigError> = std::result::Result<T, E>;
