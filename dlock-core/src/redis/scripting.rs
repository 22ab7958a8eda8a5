//! How dlock's scripts reach the server: as `EVALSHA` of scripts the client loads itself,
//! or as `FCALL` of dlock's function library, which an administrator loaded.
//!
//! The function mode exists for least privilege: a user that may `EVALSHA` may also
//! `SCRIPT LOAD`, and so run any script, including one that never ends and stalls the
//! server for every client. A user that may only `FCALL` runs what the library holds.

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, ServerErrorKind};

use super::{Backend, CallError};
use crate::error::LockError;
use crate::scripts::catalog::every_script;
use crate::scripts::{FunctionLibrary, ScriptCall};

/// How a client runs dlock's scripts (see [`LockClientBuilder::script_mode`]).
///
/// [`LockClientBuilder::script_mode`]: crate::LockClientBuilder::script_mode
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptMode {
    /// Functions when this version's [`FunctionLibrary`] is loaded on the server,
    /// otherwise scripts (the default). Costs one round trip when connecting.
    #[default]
    Auto,
    /// `EVALSHA` of scripts the client loads with `SCRIPT LOAD` (again after `NOSCRIPT`,
    /// e.g. after a restart): works on any Redis, needs `+evalsha +script|load`.
    Eval,
    /// `FCALL` of this version's [`FunctionLibrary`] (Redis 7 and later), loaded by an
    /// administrator: the application user needs `+fcall` and may not load scripts. The
    /// client refuses to connect when the library is not loaded.
    Functions,
}

/// The way a connected backend runs scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scripting {
    Eval,
    Functions,
}

impl Backend {
    /// Decides how this backend runs scripts, as `mode` asks: probes for the function
    /// library and loads the scripts where needed. `shown` names the deployment in errors.
    pub(super) async fn prepare_scripts(
        &self,
        mode: ScriptMode,
        shown: &str,
    ) -> Result<Scripting, LockError> {
        let missing = |detail: String| LockError::FunctionLibraryMissing {
            address: shown.to_owned(),
            library: FunctionLibrary::current().name().to_owned(),
            detail,
        };
        if mode == ScriptMode::Eval {
            self.load_scripts()
                .await
                .map_err(|e| super::connect_error(shown.to_owned(), e))?;
            return Ok(Scripting::Eval);
        }
        let absent = match self.probe_library().await {
            Ok(()) => return Ok(Scripting::Functions),
            Err(LibraryProbe::Absent(detail)) => detail,
            // A user of the script-mode rule without `+fcall`: scripts are its way.
            Err(LibraryProbe::Failed(CallError::Redis(e, _)))
                if mode == ScriptMode::Auto && is_noperm(&e) =>
            {
                e.to_string()
            }
            Err(LibraryProbe::Failed(error)) => {
                return Err(super::connect_error(shown.to_owned(), error))
            }
        };
        if mode == ScriptMode::Functions {
            return Err(missing(absent));
        }
        match self.load_scripts().await {
            Ok(()) => Ok(Scripting::Eval),
            Err(CallError::Redis(e, _)) if is_noperm(&e) => Err(missing(format!(
                "{absent}, and this user may not load scripts either: {e}"
            ))),
            Err(e) => Err(super::connect_error(shown.to_owned(), e)),
        }
    }

    /// Calls the library's probe function: `Ok` when this version's library is loaded.
    async fn probe_library(&self) -> Result<(), LibraryProbe> {
        let library = FunctionLibrary::current();
        let mut probe = redis::cmd("FCALL");
        probe.arg(library.probe_function()).arg(0);
        match self.query::<String>(&probe).await {
            Ok(name) if name == library.name() => Ok(()),
            Ok(name) => Err(LibraryProbe::Absent(format!(
                "its probe function answered {name:?}"
            ))),
            Err(CallError::Redis(e, _)) if is_absent(&e) => {
                Err(LibraryProbe::Absent(e.to_string()))
            }
            Err(e) => Err(LibraryProbe::Failed(e)),
        }
    }

    /// Loads every script up front, so the first lock operation is one `EVALSHA` round
    /// trip. (After a restart or failover `NOSCRIPT` makes `invoke` reload them.)
    pub(super) async fn load_scripts(&self) -> Result<(), CallError> {
        for script in every_script() {
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(script.code());
            self.query::<String>(&load).await?;
        }
        Ok(())
    }

    /// The command that runs `call`: `EVALSHA` or `FCALL`, as the backend decided when it
    /// connected. Also what a pipeline sends (see `invoke_replicated`).
    pub(crate) fn script_cmd(&self, call: &ScriptCall) -> Cmd {
        let script = call.script();
        let keys = call.keys();
        let args = call.args();
        // Sized once: the command name, the script's name, the key count and the values.
        let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), 64 + call.len_bytes());
        match self.scripting() {
            Scripting::Eval => cmd.arg("EVALSHA").arg(script.sha()),
            Scripting::Functions => cmd
                .arg("FCALL")
                .arg(FunctionLibrary::current().function(script)),
        };
        cmd.arg(keys.len());
        for value in keys.chain(args) {
            cmd.arg(value);
        }
        cmd
    }

    /// Runs `call` on `conn`; in the script mode, a `NOSCRIPT` answer (the server's script
    /// cache was emptied by a restart, a failover or `SCRIPT FLUSH`) loads the script on
    /// the same connection and runs the call once more.
    pub(super) async fn run_script<T: FromRedisValue>(
        &self,
        conn: &mut impl ConnectionLike,
        call: &ScriptCall,
    ) -> Result<T, CallError> {
        let cmd = self.script_cmd(call);
        match cmd.query_async(conn).await {
            Err(e)
                if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript)
                    && self.scripting() == Scripting::Eval =>
            {
                // Boxed: rare, and it would double every call's future.
                Box::pin(Self::load_and_rerun(conn, call, &cmd)).await
            }
            other => other.map_err(CallError::from),
        }
    }

    /// Loads `call`'s script on `conn` and runs `cmd` again.
    async fn load_and_rerun<T: FromRedisValue>(
        conn: &mut impl ConnectionLike,
        call: &ScriptCall,
        cmd: &Cmd,
    ) -> Result<T, CallError> {
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(call.script().code());
        load.query_async::<String>(conn)
            .await
            .map_err(CallError::from)?;
        cmd.query_async(conn).await.map_err(CallError::from)
    }
}

/// Why the probe found no library.
enum LibraryProbe {
    /// The server answered: not loaded, or a Redis without functions.
    Absent(String),
    /// The call itself failed (connection, timeout, permissions...).
    Failed(CallError),
}

/// Whether `error` says the function does not exist (not loaded, or only an older
/// library), or that the server has no functions at all (Redis before 7).
fn is_absent(error: &redis::RedisError) -> bool {
    let text = error.to_string().to_ascii_lowercase();
    text.contains("function not found") || text.contains("unknown command")
}

fn is_noperm(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::Server(ServerErrorKind::NoPerm)
}
