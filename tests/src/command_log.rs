//! Every command a server runs, with its arguments, from its slow log: the oracle of the
//! tests that count which tries reach Redis (`slowlog-log-slower-than 0` logs every
//! command; a script's `EVALSHA` carries the arguments that say what it tries).

use redis::aio::MultiplexedConnection;
use redis::Value;

/// Makes the server log every command, and empties the log.
///
/// # Panics
///
/// If the server refuses `CONFIG SET` or `SLOWLOG RESET`.
pub async fn log_every_command(admin: &mut MultiplexedConnection) {
    for (name, value) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "100000"),
    ] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .exec_async(admin)
            .await
            .unwrap();
    }
    reset_log(admin).await;
}

/// Forgets every command logged so far.
///
/// # Panics
///
/// If the server refuses `SLOWLOG RESET`.
pub async fn reset_log(admin: &mut MultiplexedConnection) {
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .exec_async(admin)
        .await
        .unwrap();
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// The argument lists of every command logged since the last reset, oldest first.
///
/// # Panics
///
/// If `SLOWLOG GET` fails or answers in a shape the slow log never has.
pub async fn logged_commands(admin: &mut MultiplexedConnection) -> Vec<Vec<String>> {
    let entries: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(admin)
        .await
        .unwrap();
    let mut commands: Vec<Vec<String>> = entries
        .iter()
        .map(|entry| match entry {
            Value::Array(fields) => match &fields[3] {
                Value::Array(args) => args.iter().map(text).collect(),
                other => panic!("slow log arguments: {other:?}"),
            },
            other => panic!("slow log entry: {other:?}"),
        })
        .collect();
    commands.reverse();
    commands
}

/// How many runs of dlock's script `name` (`lock_acquire`, `lock_renew`, ...) the server
/// logged since the last reset.
///
/// # Panics
///
/// If dlock has no script `name`, or as [`logged_commands`].
pub async fn script_runs(admin: &mut MultiplexedConnection, name: &str) -> usize {
    let script = dlock::admin::FunctionLibrary::current()
        .script(name)
        .unwrap_or_else(|| panic!("dlock has no script {name}"));
    let sha = redis::Script::new(script).get_hash().to_owned();
    logged_commands(admin)
        .await
        .iter()
        .filter(|args| args[0].eq_ignore_ascii_case("evalsha") && args.get(1) == Some(&sha))
        .count()
}
