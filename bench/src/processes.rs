//! S5: S2's workload across OS processes (one contending task per process, or
//! `cfg.tasks_per_process` in the scaling sweep).
//!
//! The parent re-executes its own binary with the hidden `worker` subcommand. Each worker
//! connects (its own `LockClient` and counter connection, shared by its tasks), prints
//! `READY`, and waits for a
//! `GO` line on stdin: the parent sends it to all workers once every one is ready, so
//! connection set-up is not measured. A worker prints its acquisitions as one JSON line on
//! stdout and exits.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use redis::AsyncCommands;

use crate::cli::WorkerArgs;
use crate::contended::{analyze, contend, Acquisition, Primitive};
use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{error, now_us, Result};
use crate::target::{self, Target};

/// Runs S5 once.
pub async fn s5_processes(target: &Target, cfg: &Config, primitive: Primitive) -> Result<Metrics> {
    let exe =
        std::env::current_exe().map_err(|e| error(format!("cannot find my own binary: {e}")))?;
    let counter = format!("{}s5:counter", target.prefix());
    let base: Vec<String> = vec![
        "worker".into(),
        "--redis-url".into(),
        target.url().into(),
        "--prefix".into(),
        target.prefix().into(),
        "--counter".into(),
        counter.clone(),
        "--total".into(),
        cfg.acquisitions.to_string(),
        "--timeout".into(),
        humantime::format_duration(cfg.contended_timeout).to_string(),
        "--primitive".into(),
        primitive.name().into(),
        "--tasks".into(),
        cfg.tasks_per_process.to_string(),
    ];
    let processes = cfg.processes;
    let mut conn = target.connection().await?;
    let server_before = target::server_cpu(&mut conn).await?;
    let (start_us, outputs) =
        tokio::task::spawn_blocking(move || run_workers(&exe, &base, processes))
            .await
            .map_err(|e| error(format!("worker supervisor: {e}")))??;
    // The workers' start-up and connections are in it too: a few ms of a seconds-long run.
    let server_cpu = target::server_cpu(&mut conn).await? - server_before;
    let mut events = Vec::new();
    for output in outputs {
        let mine: Vec<Acquisition> =
            serde_json::from_str(&output).map_err(|e| error(format!("bad worker output: {e}")))?;
        events.extend(mine);
    }
    let final_value: Option<u64> = conn.get(&counter).await?;
    let mut m = analyze(
        events,
        start_us,
        cfg.acquisitions,
        processes,
        final_value.unwrap_or(0),
    );
    m.add(
        "server_cpu_us_per_acquisition",
        "server CPU per acquisition, its GET and SET included (µs)",
        server_cpu * 1e6 / cfg.acquisitions as f64,
        1,
    );
    if cfg.tasks_per_process == 1 {
        m.note(
            "S5: one contender per process, each with its own LockClient; start by a stdin barrier",
        );
    } else {
        m.note(format!(
            "S5: {} tasks per process sharing its LockClient; per-contender figures \
             (fairness) are per process; start by a stdin barrier",
            cfg.tasks_per_process
        ));
    }
    Ok(m)
}

/// Spawns the workers, releases them together, and collects their JSON lines.
fn run_workers(
    exe: &std::path::Path,
    base: &[String],
    processes: usize,
) -> Result<(u64, Vec<String>)> {
    let mut children: Vec<Child> = Vec::new();
    let result = supervise(exe, base, processes, &mut children);
    if result.is_err() {
        for child in &mut children {
            // Our own children, by handle; they may have exited already.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    result
}

fn supervise(
    exe: &std::path::Path,
    base: &[String],
    processes: usize,
    children: &mut Vec<Child>,
) -> Result<(u64, Vec<String>)> {
    let mut readers: Vec<BufReader<ChildStdout>> = Vec::new();
    for id in 0..processes {
        let mut child = Command::new(exe)
            .args(base)
            .args(["--id", &id.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| error(format!("cannot start worker {id}: {e}")))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| error("worker stdout not captured"))?;
        readers.push(BufReader::new(stdout));
        children.push(child);
    }
    for (id, reader) in readers.iter_mut().enumerate() {
        let line = read_line(reader)?;
        if line != "READY" {
            return Err(error(format!(
                "worker {id} did not get ready (said {line:?})"
            )));
        }
    }
    let start_us = now_us();
    for child in children.iter_mut() {
        let stdin = child
            .stdin
            .as_mut()
            .ok_or_else(|| error("worker stdin not captured"))?;
        stdin.write_all(b"GO\n")?;
        stdin.flush()?;
    }
    let mut outputs = Vec::new();
    for (id, reader) in readers.iter_mut().enumerate() {
        let line = read_line(reader)?;
        if line.is_empty() {
            return Err(error(format!("worker {id} ended without a result")));
        }
        outputs.push(line);
    }
    for (id, child) in children.iter_mut().enumerate() {
        let status = child.wait()?;
        if !status.success() {
            return Err(error(format!("worker {id} exited with {status}")));
        }
    }
    Ok((start_us, outputs))
}

fn read_line(reader: &mut impl BufRead) -> Result<String> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    Ok(line.trim().to_owned())
}

/// The hidden `worker` subcommand: one S5 contender.
pub async fn worker(args: WorkerArgs) -> Result<()> {
    let client = dlock::LockClient::builder()
        .key_prefix(args.prefix.clone())
        .connect(&args.redis_url)
        .await?;
    let conn = redis::Client::open(args.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;

    let mut out = std::io::stdout();
    writeln!(out, "READY")?;
    out.flush()?;
    let go = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| error(format!("stdin reader: {e}")))??;
    if go.trim() != "GO" {
        return Err(error("worker: no GO from the parent"));
    }
    let timeout: Duration = args.timeout;
    let tasks: Vec<_> = (0..args.tasks)
        .map(|_| {
            let contender = args.primitive.contender(&client, "s5");
            tokio::spawn(contend(
                contender,
                conn.clone(),
                args.counter.clone(),
                args.total,
                args.id,
            ))
        })
        .collect();
    let joined = tokio::time::timeout(timeout, futures_util::future::join_all(tasks))
        .await
        .map_err(|_| error("worker: timed out"))?;
    let mut events = Vec::new();
    for task in joined {
        events.extend(task.map_err(|e| error(format!("worker task: {e}")))??);
    }
    writeln!(out, "{}", serde_json::to_string(&events)?)?;
    out.flush()?;
    Ok(())
}
