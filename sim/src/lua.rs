//! dlock's scripts, run unchanged on the simulator's Redis by the Lua 5.1 Redis embeds:
//! `KEYS` and `ARGV`, `redis.call` and `redis.pcall` with Redis' conversions both ways,
//! `redis.error_reply`. Each script is compiled once; a run sees the server's clock
//! stand still, as a real script does.

use std::collections::HashMap;

use mlua::{Function, Lua, MultiValue, Table, Value as LuaValue};

use crate::redis::{Redis, Reply};

/// The scripts, compiled, by name (`lock_acquire`…).
pub struct Scripts {
    lua: Lua,
    compiled: HashMap<String, Function>,
}

impl Scripts {
    /// Compiles `scripts` (name → code, as dlock splices them).
    pub fn new<'a>(scripts: impl IntoIterator<Item = (&'a str, String)>) -> Scripts {
        let lua = Lua::new();
        redis_library(&lua).expect("the redis table is built");
        let compiled = scripts
            .into_iter()
            .map(|(name, code)| {
                let function = lua
                    .load(code)
                    .set_name(name)
                    .into_function()
                    .unwrap_or_else(|e| panic!("{name} does not compile: {e}"));
                (name.to_owned(), function)
            })
            .collect();
        Scripts { lua, compiled }
    }

    /// dlock's lock scripts as its function library holds them, each with `edit` applied
    /// to its code (a mutation test's change; identity otherwise).
    pub fn dlock(edit: impl Fn(&str, String) -> String) -> Scripts {
        let library = dlock::admin::FunctionLibrary::current();
        let names = [
            "lock_acquire",
            "lock_release",
            "lock_extend",
            "lock_renew",
            "lock_hold_until",
            "lock_force_unlock",
            "multi_acquire",
        ];
        Scripts::new(names.map(|name| {
            let code = library
                .script(name)
                .unwrap_or_else(|| panic!("no script {name}"))
                .to_owned();
            (name, edit(name, code))
        }))
    }

    /// Runs the script `name` on `redis` with `keys` and `args`; its answer, or the error
    /// it raised as `Reply::Error`.
    pub fn run(&self, redis: &mut Redis, name: &str, keys: &[String], args: &[String]) -> Reply {
        let function = self
            .compiled
            .get(name)
            .unwrap_or_else(|| panic!("no script {name}"));
        let lua = &self.lua;
        let store = std::cell::RefCell::new(redis);
        let store = &store;
        let outcome = lua.scope(|scope| {
            let globals = lua.globals();
            globals.set(
                "KEYS",
                lua.create_sequence_from(keys.iter().map(String::as_str))?,
            )?;
            globals.set(
                "ARGV",
                lua.create_sequence_from(args.iter().map(String::as_str))?,
            )?;
            // The commands are the one part of `redis` bound to this run's server.
            let redis_table: Table = globals.get("redis")?;
            let call = scope.create_function(move |lua, args: MultiValue| {
                let reply = store.borrow_mut().command(&words(args)?);
                match reply {
                    Reply::Error(text) => Err(mlua::Error::RuntimeError(text)),
                    other => to_lua(lua, other),
                }
            })?;
            let pcall = scope.create_function(move |lua, args: MultiValue| {
                let reply = store.borrow_mut().command(&words(args)?);
                to_lua(lua, reply)
            })?;
            redis_table.set("call", call)?;
            redis_table.set("pcall", pcall)?;
            let value: LuaValue = function.call(())?;
            from_lua(value)
        });
        outcome.unwrap_or_else(|error| Reply::Error(error.to_string()))
    }
}

/// The global `redis` table with what does not depend on the server (`call` and `pcall`
/// are set for each run).
fn redis_library(lua: &Lua) -> mlua::Result<()> {
    let redis_table = lua.create_table()?;
    // `redis.error_reply(text)` is `{err = text}`, `redis.status_reply(text)` `{ok = text}`.
    for (name, field) in [("error_reply", "err"), ("status_reply", "ok")] {
        let reply = lua.create_function(move |lua, text: String| {
            let table = lua.create_table()?;
            table.set(field, text)?;
            Ok(table)
        })?;
        redis_table.set(name, reply)?;
    }
    // No ACL here: every command is allowed.
    redis_table.set(
        "acl_check_cmd",
        lua.create_function(|_, _: MultiValue| Ok(true))?,
    )?;
    lua.globals().set("redis", redis_table)
}

/// A `redis.call`'s arguments as the command's words (numbers as Lua prints them).
fn words(args: MultiValue) -> mlua::Result<Vec<String>> {
    args.into_iter()
        .map(|value| match value {
            LuaValue::String(text) => Ok(text.to_string_lossy().to_string()),
            LuaValue::Integer(n) => Ok(n.to_string()),
            LuaValue::Number(n) if n.fract() == 0.0 && n.abs() < 1e15 => Ok(format!("{n:.0}")),
            LuaValue::Number(n) => Ok(n.to_string()),
            other => Err(mlua::Error::RuntimeError(format!(
                "ERR Lua redis lib command arguments must be strings or integers, got {}",
                other.type_name()
            ))),
        })
        .collect()
}

/// A Redis reply as Redis hands it to Lua.
fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<LuaValue> {
    Ok(match reply {
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Int(n) => LuaValue::Number(n as f64),
        Reply::Bulk(text) => LuaValue::String(lua.create_string(&text)?),
        Reply::Status(text) => {
            let table = lua.create_table()?;
            table.set("ok", text)?;
            LuaValue::Table(table)
        }
        Reply::Error(text) => {
            let table = lua.create_table()?;
            table.set("err", text)?;
            LuaValue::Table(table)
        }
        Reply::Array(items) => {
            let table = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                table.set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(table)
        }
    })
}

/// A script's return value as Redis replies with it.
fn from_lua(value: LuaValue) -> mlua::Result<Reply> {
    Ok(match value {
        LuaValue::Nil | LuaValue::Boolean(false) => Reply::Nil,
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(n) => Reply::Int(n),
        LuaValue::Number(n) => Reply::Int(n as i64),
        LuaValue::String(text) => Reply::Bulk(text.to_string_lossy().to_string()),
        LuaValue::Table(table) => table_reply(&table)?,
        other => Reply::Error(format!("a script returned a {}", other.type_name())),
    })
}

fn table_reply(table: &Table) -> mlua::Result<Reply> {
    if let Some(text) = table.get::<Option<String>>("err")? {
        return Ok(Reply::Error(text));
    }
    if let Some(text) = table.get::<Option<String>>("ok")? {
        return Ok(Reply::Status(text));
    }
    let mut items = Vec::new();
    for i in 1.. {
        let item: LuaValue = table.get(i)?;
        if item.is_nil() {
            break;
        }
        items.push(from_lua(item)?);
    }
    Ok(Reply::Array(items))
}
