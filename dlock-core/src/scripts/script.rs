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
            keys: Values::with_capacity(KEYS_BYTES, 8),
            args: Values::with_capacity(ARGS_BYTES, 12),
        }
    }
}

/// A script with its keys and arguments, ready to be sent (see `Backend::invoke`).
///
/// Keys and arguments are written into one buffer each, as Redis reads them, rather
/// than one allocation per value: an acquisition passes a dozen of them on every call.
pub(crate) struct ScriptCall {
    script: &'static Script,
    keys: Values,
    args: Values,
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
        self.args.replace(index, arg.as_bytes());
    }

    pub(crate) fn script(&self) -> &'static Script {
        self.script
    }

    pub(crate) fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.keys.iter()
    }

    pub(crate) fn args(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.args.iter()
    }

    /// The bytes of every key and argument together.
    pub(crate) fn len_bytes(&self) -> usize {
        self.keys.bytes.len() + self.args.bytes.len()
    }
}

/// Values written one after another into one buffer, with where each ends.
#[derive(Default)]
struct Values {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// Room for a call's keys and arguments made up front: a lock's five keys and its
/// arguments fit, so the common calls never grow their buffers.
const KEYS_BYTES: usize = 320;
const ARGS_BYTES: usize = 128;

impl Values {
    fn with_capacity(bytes: usize, values: usize) -> Values {
        Values {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(values),
        }
    }

    fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.ends.len()).map(|i| {
            let start = i.checked_sub(1).map_or(0, |before| self.ends[before]);
            &self.bytes[start..self.ends[i]]
        })
    }

    /// Replaces value `index` with `value`.
    fn replace(&mut self, index: usize, value: &[u8]) {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        let end = self.ends[index];
        self.bytes.splice(start..end, value.iter().copied());
        let moved = value.len() as isize - (end - start) as isize;
        for later in &mut self.ends[index..] {
            *later = later.wrapping_add_signed(moved);
        }
    }
}

impl redis::RedisWrite for Values {
    fn write_arg(&mut self, arg: &[u8]) {
        self.bytes.extend_from_slice(arg);
        self.ends.push(self.bytes.len());
    }

    /// Formats in place (numbers, mostly), where the default would allocate a `String`.
    fn write_arg_fmt(&mut self, arg: impl std::fmt::Display) {
        use std::io::Write;
        // Writing into a Vec cannot fail.
        let _ = write!(self.writer_for_next_arg(), "{arg}");
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        ValueWriter(self)
    }
}

/// Writes one value into [`Values`]; it ends when the writer is dropped.
struct ValueWriter<'a>(&'a mut Values);

impl std::io::Write for ValueWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ValueWriter<'_> {
    fn drop(&mut self) {
        self.0.ends.push(self.0.bytes.len());
    }
}

#[cfg(test)]
mod tests {
    use super::Values;
    use redis::RedisWrite;

    fn values(values: &Values) -> Vec<String> {
        values
            .iter()
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn values_are_kept_in_order_and_replaced_in_place() {
        let mut v = Values::default();
        v.write_arg(b"lock");
        v.write_arg(b"");
        v.write_arg_fmt(30_000);
        {
            use std::io::Write;
            let mut w = v.writer_for_next_arg();
            w.write_all(b"pub").unwrap();
            w.write_all(b"lish").unwrap();
        }
        assert_eq!(values(&v), ["lock", "", "30000", "publish"]);
        v.replace(1, b"1");
        v.replace(2, b"5");
        v.replace(0, b"a-longer-key");
        assert_eq!(values(&v), ["a-longer-key", "1", "5", "publish"]);
        assert_eq!(v.iter().len(), 4);
    }
}
