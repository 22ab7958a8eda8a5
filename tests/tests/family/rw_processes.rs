//! The read-write lock across OS processes (the `dlock-rw` worker), on one clock: Redis
//! `TIME`, recorded inside each critical section.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use dlock::LockClient;
use dlock_tests::RedisServer;
use redis::Commands;

const WORKER: &str = env!("CARGO_BIN_EXE_dlock-rw");

/// One critical section as a worker recorded it.
#[derive(Debug, Clone, Copy)]
struct Section {
    writer: bool,
    start: u64,
    end: u64,
    stable: bool,
}

fn overlaps(a: &Section, b: &Section) -> bool {
    a.start < b.end && b.start < a.end
}

/// Runs the workers `(role, count, hold_ms)` at once and returns every section recorded.
fn run_sections(server: &RedisServer, lock: &str, workers: &[(&str, u32, u64)]) -> Vec<Section> {
    let dir = tempfile::tempdir().unwrap();
    let mut children = vec![];
    for (i, (role, count, hold)) in workers.iter().enumerate() {
        let out = dir.path().join(format!("{i}.txt"));
        let child = Command::new(WORKER)
            .args(["sections", &server.url(), lock, role])
            .arg(count.to_string())
            .arg(hold.to_string())
            .arg(&out)
            .spawn()
            .unwrap();
        children.push((child, out));
    }
    let mut sections = vec![];
    for (mut child, out) in children {
        assert!(child.wait().unwrap().success(), "a dlock-rw worker failed");
        for line in std::fs::read_to_string(out).unwrap().lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            sections.push(Section {
                writer: fields[0] != "read",
                start: fields[1].parse().unwrap(),
                end: fields[2].parse().unwrap(),
                stable: fields[3] == "1",
            });
        }
    }
    sections
}

/// The most reader sections open at one instant, and the writer sections that overlapped
/// any other section.
fn analyse(sections: &[Section]) -> (usize, usize) {
    let most_readers = sections
        .iter()
        .filter(|s| !s.writer)
        .map(|s| {
            sections
                .iter()
                .filter(|o| !o.writer && o.start <= s.start && s.start < o.end)
                .count()
        })
        .max()
        .unwrap_or(0);
    let writer_overlaps = sections
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            s.writer
                && sections
                    .iter()
                    .enumerate()
                    .any(|(j, o)| *i != j && overlaps(s, o))
        })
        .count();
    (most_readers, writer_overlaps)
}

fn counter(server: &RedisServer, lock: &str) -> i64 {
    let value: Option<i64> = server.connection().get(format!("{lock}:counter")).unwrap();
    value.unwrap_or(0)
}

#[test]
fn readers_in_three_processes_overlap_and_writers_overlap_nobody() {
    let server = RedisServer::start();
    let workers = [
        ("read", 25, 20),
        ("read", 25, 20),
        ("read", 25, 20),
        ("write", 15, 5),
        ("write", 15, 5),
    ];
    let sections = run_sections(&server, "rw-procs", &workers);
    let (most_readers, writer_overlaps) = analyse(&sections);
    assert!(most_readers > 1, "readers never overlapped: {most_readers}");
    assert_eq!(writer_overlaps, 0, "writer sections overlapped others");
    assert!(
        sections.iter().all(|s| s.stable),
        "a reader saw the counter change while it held the read lock"
    );
    assert_eq!(
        counter(&server, "rw-procs"),
        30,
        "a writer's update was lost"
    );
    let left: bool = server.connection().exists("rw-procs").unwrap();
    assert!(!left);

    // The control: the same writers taking the read lock. The oracles must fire.
    let workers = [
        ("read", 25, 20),
        ("read", 25, 20),
        ("read", 25, 20),
        ("write-as-read", 15, 5),
        ("write-as-read", 15, 5),
    ];
    let sections = run_sections(&server, "rw-control", &workers);
    let (_, writer_overlaps) = analyse(&sections);
    assert!(writer_overlaps > 0, "the control run never overlapped");
    assert!(
        sections.iter().any(|s| !s.stable),
        "the control's readers never saw a change"
    );
}

/// A worker printing lines to read.
struct Worker {
    child: Child,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl Worker {
    fn start(args: &[&str]) -> Worker {
        let mut child = Command::new(WORKER)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Worker { child, lines }
    }

    /// The next line's value after `word`.
    fn expect(&mut self, word: &str) -> Option<u64> {
        let line = self.lines.next().expect("worker output").unwrap();
        let mut parts = line.split(' ');
        assert_eq!(parts.next(), Some(word), "{line}");
        parts.next().map(|t| t.parse().unwrap())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn time_us(server: &RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.connection()).unwrap();
    secs * 1_000_000 + micros
}

#[tokio::test]
async fn after_a_downgrade_a_reader_in_another_process_proceeds_within_50_ms() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let rw = client.rw_lock("rw-downgrade");
    let mut worst = 0;
    for _ in 0..3 {
        let write = rw.write().lock().await.unwrap();
        let read = write.scope(rw.read().lock()).await.unwrap();
        let mut reader = Worker::start(&["read", &server.url(), "rw-downgrade"]);
        reader.expect("waiting");
        // Long enough for the reader to be waiting for a message, not between tries.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let released = time_us(&server);
        write.unlock().await.unwrap();
        let acquired = tokio::task::spawn_blocking(move || {
            let at = reader.expect("acquired");
            // Let it release its hold: killed, it would keep it for its lease.
            assert!(reader.child.wait().unwrap().success());
            at
        })
        .await
        .unwrap()
        .unwrap();
        worst = worst.max(acquired.saturating_sub(released));
        read.unlock().await.unwrap();
    }
    assert!(
        worst < 50_000,
        "a reader proceeded {worst} µs after the write release"
    );
}

/// The owners' deadlines in the lock hash (`<owner>:t` → server ms), by owner.
fn deadlines(server: &RedisServer, key: &str) -> std::collections::HashMap<String, u64> {
    let fields: std::collections::HashMap<String, String> =
        server.connection().hgetall(key).unwrap();
    fields
        .into_iter()
        .filter_map(|(field, value)| {
            let owner = field.strip_suffix(":t")?;
            Some((owner.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// Compared on Redis' own clock, from the deadlines the scripts wrote: the reader's
/// (grant + its lease + 1 ms) and the writer's (grant + the writer's lease + 1 ms: a hold
/// lasts to the end of the millisecond its lease ends in), so the writer's grant time is
/// exact, not when a process got to read the clock afterwards.
#[tokio::test]
async fn a_killed_readers_hold_ends_on_its_own_lease() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lease_ms = 1000;
    let mut reader = Worker::start(&[
        "hold-read",
        &server.url(),
        "rw-killed",
        &lease_ms.to_string(),
        "30000",
    ]);
    let held_at_us = reader.expect("held").unwrap();
    let before = deadlines(&server, "rw-killed");
    let [(reader_owner, reader_deadline)] =
        <[_; 1]>::try_from(before.into_iter().collect::<Vec<_>>())
            .unwrap_or_else(|all| panic!("one reader expected: {all:?}"));
    // The reader's deadline is its grant + its lease + 1 ms: the grant came before the
    // reader reported it, at most a few ms before.
    let reported_end = held_at_us / 1000 + lease_ms + 1;
    assert!(
        reader_deadline <= reported_end && reader_deadline + 50 >= reported_end,
        "the reader's deadline {reader_deadline} is not its lease after its grant (~{reported_end})"
    );
    reader.child.kill().unwrap();
    reader.child.wait().unwrap();
    let writer_lease = Duration::from_secs(20);
    let write = client
        .rw_lock("rw-killed")
        .write()
        .try_lock_with_lease(Duration::from_secs(5), writer_lease)
        .await
        .unwrap();
    let after = deadlines(&server, "rw-killed");
    assert!(
        !after.contains_key(&reader_owner),
        "the dead reader is still an owner"
    );
    let [(_, writer_deadline)] = <[_; 1]>::try_from(after.into_iter().collect::<Vec<_>>())
        .unwrap_or_else(|all| panic!("one writer expected: {all:?}"));
    let granted = writer_deadline - writer_lease.as_millis() as u64 - 1;
    assert!(
        granted >= reader_deadline && granted <= reader_deadline + 200,
        "the writer was granted {} ms after the reader's lease ended (at {reader_deadline})",
        granted as i64 - reader_deadline as i64
    );
    write.unlock().await.unwrap();
}

#[tokio::test]
async fn a_live_client_does_not_renew_a_dead_clients_reader() {
    let server = RedisServer::start();
    let live = LockClient::builder()
        .watchdog_timeout(Duration::from_millis(600))
        .connect(&server.url())
        .await
        .unwrap();
    let rival = LockClient::connect(&server.url()).await.unwrap();
    let mut dead = Worker::start(&["hold-read", &server.url(), "rw-zombie", "0", "600"]);
    dead.expect("held");
    let read = live.rw_lock("rw-zombie").read().lock().await.unwrap();
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    // Five renewal periods of the live client; the dead client's 600 ms lease ends.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let fields: Vec<(String, String)> = server.connection().hgetall("rw-zombie").unwrap();
    let now_ms = time_us(&server) / 1000;
    let live_deadlines = fields
        .iter()
        .filter(|(field, value)| field.ends_with(":t") && value.parse::<u64>().unwrap() > now_ms)
        .count();
    assert_eq!(
        live_deadlines, 1,
        "only the live reader's deadline moves on: {fields:?}"
    );
    assert!(!read.is_lost());
    read.unlock().await.unwrap();
    // The dead reader holds nothing: the writer gets in at once.
    let write = rival.rw_lock("rw-zombie").write().try_lock().await.unwrap();
    write.unlock().await.unwrap();
}
