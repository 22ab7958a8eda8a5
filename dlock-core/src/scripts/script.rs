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
            bytes: Vec::with_capacity(CALL_BYTES),
            values: Vec::with_capacity(CALL_VALUES),
            keys: 0,
        }
    }
}

/// A script with its keys and arguments, ready to be sent (see `Backend::invoke`).
///
/// Keys and arguments are written into one buffer, as Redis reads them, with where each
/// ends, rather than one allocation per value: an acquisition passes a dozen of them on
/// every call. Keys and arguments may be added in any order (a batch adds a key and its
/// argument at a time); each keeps its own order.
pub(crate) struct ScriptCall {
    script: &'static Script,
    bytes: Vec<u8>,
    values: Vec<Written>,
    /// How many of `values` are keys.
    keys: usize,
}

/// Where one value ends in [`ScriptCall`]'s buffer (it starts where the one before it
/// ends), and whether it is a key.
#[derive(Clone, Copy)]
struct Written {
    end: usize,
    key: bool,
}

/// Room made up front: a lock's five keys and its arguments fit, so the common calls
/// never grow their buffers.
const CALL_BYTES: usize = 448;
const CALL_VALUES: usize = 20;

impl ScriptCall {
    /// Adds a key (`KEYS[n]`).
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut ScriptCall {
        key.write_redis_args(&mut Writer {
            call: self,
            key: true,
        });
        self
    }

    /// Adds an argument (`ARGV[n]`).
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut ScriptCall {
        arg.write_redis_args(&mut Writer {
            call: self,
            key: false,
        });
        self
    }

    /// Gives back the room made up front that the call does not use: for a call kept
    /// while its caller waits (an acquisition between tries), which it sends again as it
    /// is.
    pub(crate) fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
        self.values.shrink_to_fit();
    }

    /// Replaces argument `index` (0-based: `ARGV[index + 1]`); nothing changes when there
    /// is no such argument.
    pub(crate) fn set_arg(&mut self, index: usize, arg: &str) {
        let Some(at) = self
            .values
            .iter()
            .enumerate()
            .filter(|(_, value)| !value.key)
            .nth(index)
            .map(|(at, _)| at)
        else {
            return;
        };
        let (start, end) = (self.start(at), self.values[at].end);
        self.bytes.splice(start..end, arg.bytes());
        let moved = arg.len() as isize - (end - start) as isize;
        for later in &mut self.values[at..] {
            later.end = later.end.wrapping_add_signed(moved);
        }
    }

    pub(crate) fn script(&self) -> &'static Script {
        self.script
    }

    pub(crate) fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.of_kind(true, self.keys)
    }

    pub(crate) fn args(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.of_kind(false, self.values.len() - self.keys)
    }

    /// The bytes of every key and argument together.
    pub(crate) fn len_bytes(&self) -> usize {
        self.bytes.len()
    }

    fn start(&self, at: usize) -> usize {
        at.checked_sub(1)
            .map_or(0, |before| self.values[before].end)
    }

    fn of_kind(&self, key: bool, count: usize) -> OfKind<'_> {
        OfKind {
            call: self,
            key,
            at: 0,
            left: count,
        }
    }
}

/// A copy with as much room as the original, so that the arguments a release adds to its
/// operation's call on every send fit without growing it.
impl Clone for ScriptCall {
    fn clone(&self) -> ScriptCall {
        let mut bytes = Vec::with_capacity(self.bytes.capacity());
        bytes.extend_from_slice(&self.bytes);
        let mut values = Vec::with_capacity(self.values.capacity());
        values.extend_from_slice(&self.values);
        ScriptCall {
            script: self.script,
            bytes,
            values,
            keys: self.keys,
        }
    }
}

/// The keys, or the arguments, of a [`ScriptCall`] in their order.
struct OfKind<'a> {
    call: &'a ScriptCall,
    key: bool,
    at: usize,
    left: usize,
}

impl<'a> Iterator for OfKind<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let call = self.call;
        while self.at < call.values.len() {
            let at = self.at;
            self.at += 1;
            if call.values[at].key == self.key {
                self.left -= 1;
                return Some(&call.bytes[call.start(at)..call.values[at].end]);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for OfKind<'_> {}

/// Writes keys or arguments into a [`ScriptCall`].
struct Writer<'a> {
    call: &'a mut ScriptCall,
    key: bool,
}

impl Writer<'_> {
    fn end_value(&mut self) {
        self.call.values.push(Written {
            end: self.call.bytes.len(),
            key: self.key,
        });
        if self.key {
            self.call.keys += 1;
        }
    }
}

impl redis::RedisWrite for Writer<'_> {
    fn write_arg(&mut self, arg: &[u8]) {
        self.call.bytes.extend_from_slice(arg);
        self.end_value();
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

/// Writes one value; it ends when the writer is dropped.
struct ValueWriter<'a, 'b>(&'a mut Writer<'b>);

impl std::io::Write for ValueWriter<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.call.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ValueWriter<'_, '_> {
    fn drop(&mut self) {
        self.0.end_value();
    }
}

#[cfg(test)]
mod tests {
    use super::{Script, ScriptCall};
    use std::sync::OnceLock;

    fn script() -> &'static Script {
        static SCRIPT: OnceLock<Script> = OnceLock::new();
        SCRIPT.get_or_init(|| Script::new("test", "return 1".to_owned()))
    }

    fn text<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<String> {
        values
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn keys_and_arguments_keep_their_order_and_are_replaced_in_place() {
        let mut call: ScriptCall = script().prepare_invoke();
        call.key("lock").arg("").key("channel").arg(30_000);
        call.arg(&["pub", "lish"][..]);
        {
            use redis::RedisWrite;
            use std::io::Write;
            let mut writer = super::Writer {
                call: &mut call,
                key: false,
            };
            let mut w = writer.writer_for_next_arg();
            w.write_all(b"writ").unwrap();
            w.write_all(b"ten").unwrap();
        }
        assert_eq!(text(call.keys()), ["lock", "channel"]);
        assert_eq!(text(call.args()), ["", "30000", "pub", "lish", "written"]);
        call.set_arg(0, "1");
        call.set_arg(1, "5");
        call.set_arg(4, "a-longer-value");
        call.set_arg(9, "no such argument");
        assert_eq!(text(call.keys()), ["lock", "channel"]);
        assert_eq!(
            text(call.args()),
            ["1", "5", "pub", "lish", "a-longer-value"]
        );
        assert_eq!((call.keys().len(), call.args().len()), (2, 5));

        let copy = call.clone();
        assert_eq!(text(copy.keys()), ["lock", "channel"]);
        assert_eq!(
            text(copy.args()),
            ["1", "5", "pub", "lish", "a-longer-value"]
        );
        assert_eq!(copy.len_bytes(), call.len_bytes());

        // A call kept while its caller waits gives back its spare room, and stays the
        // same call: sent as it was, its arguments still replaceable.
        call.shrink_to_fit();
        assert!(call.bytes.capacity() < super::CALL_BYTES);
        assert_eq!(text(call.keys()), ["lock", "channel"]);
        assert_eq!(
            text(call.args()),
            ["1", "5", "pub", "lish", "a-longer-value"]
        );
        call.set_arg(4, "a-value-longer-than-before");
        assert_eq!(
            text(call.args()),
            ["1", "5", "pub", "lish", "a-value-longer-than-before"]
        );
    }
}
