//! The simulated Redis and its Lua: the commands behave as Redis' do where dlock's scripts
//! rely on them, and dlock's own scripts run unchanged.

use dlock_sim::lua::Scripts;
use dlock_sim::redis::{Redis, Reply};

#[test]
fn a_script_calls_redis_and_returns_what_redis_would() {
    let scripts = Scripts::new([(
        "t",
        "redis.call('hset', KEYS[1], 'f', ARGV[1]) \
         local bad = redis.pcall('incr', KEYS[1]) \
         return {redis.call('hget', KEYS[1], 'f'), bad.err ~= nil, redis.call('hget', KEYS[1], 'x')}"
            .to_owned(),
    )]);
    let mut redis = Redis::default();
    let reply = scripts.run(&mut redis, "t", &["k".into()], &["7".into()]);
    // A missing field is `false` in Lua and a nil reply again; a true is 1.
    assert_eq!(
        reply,
        Reply::Array(vec![Reply::Bulk("7".into()), Reply::Int(1), Reply::Nil])
    );
    // `redis.call` of a failing command raises: the script ends with that error.
    let raising = Scripts::new([("r", "return redis.call('incr', KEYS[1])".to_owned())]);
    assert!(matches!(
        raising.run(&mut redis, "r", &["k".into()], &[]),
        Reply::Error(text) if text.contains("WRONGTYPE")
    ));
}

#[test]
fn dlocks_scripts_compile_and_take_a_free_lock() {
    let scripts = Scripts::dlock(|_, code| code);
    let mut redis = Redis::default();
    let keys: Vec<String> = [
        "{l}",
        "dlock:fence:{l}",
        "dlock:unlock:{l}:{l}",
        "dlock:unlock:{l}!{l}",
    ]
    .map(str::to_owned)
    .into();
    let args: Vec<String> = ["30000", "c:1", "1", "3000", "0", "publish"]
        .map(str::to_owned)
        .into();
    assert_eq!(
        scripts.run(&mut redis, "lock_acquire", &keys, &args),
        Reply::Array(vec![Reply::Int(1)])
    );
    let args: Vec<String> = ["30000", "c:2", "1", "3000", "0", "publish"]
        .map(str::to_owned)
        .into();
    assert_eq!(
        scripts.run(&mut redis, "lock_acquire", &keys, &args),
        Reply::Int(30000)
    );
}

fn run(redis: &mut Redis, words: &[&str]) -> Reply {
    redis.command(&words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>())
}

#[test]
fn keys_expire_once_the_clock_is_past_them() {
    let mut redis = Redis::default();
    run(&mut redis, &["hset", "k", "f", "1"]);
    assert_eq!(run(&mut redis, &["pexpire", "k", "100"]), Reply::Int(1));
    redis.now_us = 100_000;
    assert_eq!(run(&mut redis, &["pttl", "k"]), Reply::Int(0));
    redis.now_us = 100_001 + 999;
    assert_eq!(run(&mut redis, &["exists", "k"]), Reply::Int(0));
    assert_eq!(run(&mut redis, &["pttl", "k"]), Reply::Int(-2));
}

#[test]
fn pexpire_gt_never_shortens_and_skips_a_key_without_expiry() {
    let mut redis = Redis::default();
    run(&mut redis, &["hset", "k", "f", "1"]);
    assert_eq!(
        run(&mut redis, &["pexpire", "k", "500", "gt"]),
        Reply::Int(0)
    );
    assert_eq!(
        run(&mut redis, &["pexpire", "k", "500", "nx"]),
        Reply::Int(1)
    );
    assert_eq!(
        run(&mut redis, &["pexpire", "k", "100", "gt"]),
        Reply::Int(0)
    );
    assert_eq!(run(&mut redis, &["pttl", "k"]), Reply::Int(500));
}

#[test]
fn sorted_sets_pop_and_range_by_score() {
    let mut redis = Redis::default();
    run(&mut redis, &["zadd", "z", "nx", "20", "b", "10", "a"]);
    run(&mut redis, &["zadd", "z", "nx", "5", "a"]);
    assert_eq!(
        run(
            &mut redis,
            &["zrangebyscore", "z", "(10", "+inf", "limit", "0", "5"]
        ),
        Reply::Array(vec![Reply::Bulk("b".into())])
    );
    assert_eq!(
        run(&mut redis, &["zpopmin", "z"]),
        Reply::Array(vec![Reply::Bulk("a".into()), Reply::Bulk("10".into())])
    );
    run(&mut redis, &["zrem", "z", "b"]);
    assert_eq!(run(&mut redis, &["exists", "z"]), Reply::Int(0));
}

#[test]
fn publish_counts_and_records_its_receivers() {
    let mut redis = Redis::default();
    redis.subscribers.entry("c".into()).or_default().insert(7);
    assert_eq!(run(&mut redis, &["publish", "c", "hi"]), Reply::Int(1));
    assert_eq!(run(&mut redis, &["publish", "d", "hi"]), Reply::Int(0));
    assert_eq!(redis.outbox[0].to, [7]);
    assert_eq!(
        run(&mut redis, &["pubsub", "numsub", "c"]),
        Reply::Array(vec![Reply::Bulk("c".into()), Reply::Int(1)])
    );
}
