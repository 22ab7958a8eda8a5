//! One Lua script of dlock and one call of it, independent of how the call reaches Redis:
//! `redis::scripting` sends it as `EVALSHA` or as `FCALL` of dlock's function library.

use redis::ToRedisArgs;

/// What a script may do when the server is out of memory (`maxmemory` reached).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Oom {
    /// It creates state (an acquisition): refused while the server is out of memory.
    Refused,
    /// It gives back, renews or reads: allowed, so that a full server still lets go of
    /// its locks.
    Allowed,
}

/// A script of dlock: its name in the function library, its Lua source and SHA1.
pub(crate) struct Script {
    name: &'static str,
    code: String,
    sha: String,
    oom: Oom,
}

impl Script {
    /// A script that gives back, renews or reads (see [`Oom::Allowed`]).
    pub(crate) fn new(name: &'static str, code: String) -> Script {
        Script::with_oom(name, code, Oom::Allowed)
    }

    /// A script that creates state: an acquisition (see [`Oom::Refused`]).
    pub(crate) fn creating(name: &'static str, code: String) -> Script {
        Script::with_oom(name, code, Oom::Refused)
    }

    fn with_oom(name: &'static str, code: String, oom: Oom) -> Script {
        Script {
            name,
            sha: redis::Script::new(&code).get_hash().to_owned(),
            code,
            oom,
        }
    }

    /// Its name, unique among dlock's scripts (`lock_acquire`, ...).
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source.
    pub(crate) fn code(&self) -> &str {
        &self.code
    }

    /// The SHA1 of the source, which `EVALSHA` names it by.
    pub(crate) fn sha(&self) -> &str {
        &self.sha
    }

    pub(crate) fn oom(&self) -> Oom {
        self.oom
    }

    /// A call of this script; add its keys and arguments in order.
    pub(crate) fn prepare_invoke(&'static self) -> ScriptCall {
        ScriptCall {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// A script with its keys and arguments, ready to be sent (see `Backend::invoke`).
pub(crate) struct ScriptCall {
    script: &'static Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl ScriptCall {
    /// Adds a key (`KEYS[n]`).
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut ScriptCall {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds an argument (`ARGV[n]`).
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut ScriptCall {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Replaces argument `index` (0-based: `ARGV[index + 1]`), which must exist.
    pub(crate) fn set_arg(&mut self, index: usize, arg: &str) {
        let slot = &mut self.args[index];
        slot.clear();
        slot.extend_from_slice(arg.as_bytes());
    }

    pub(crate) fn script(&self) -> &'static Script {
        self.script
    }

    pub(crate) fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    pub(crate) fn args(&self) -> &[Vec<u8>] {
        &self.args
    }
}
