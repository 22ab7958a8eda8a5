//! `stock-demo`: the seed's stock-decrement service, run as several processes under load,
//! with a report that proves (or, with `--no-lock`, disproves) that nothing is oversold.
//!
//! `stock-demo` with no arguments starts a throw-away `redis-server`, three service
//! processes, sets 10 items × 100 in stock and sends 5,000 buy requests at concurrency 200.
//! `stock-demo --help` lists the options; `stock-demo serve` is one service process.
//! `stock-demo --pause-holder 6s` is the fault mode: the first service process is
//! SIGSTOPped inside a sale's critical section for longer than the lock's 5 s lease, and
//! the report shows what the stale write it makes on waking did. The stock is written
//! through `client.fenced()` (which refuses that write) unless `--writes plain`.
//! `stock-demo --mode hot --hold 50ms --duration 10s --stock 100000 --concurrency 12` is
//! the hot item: the report shows each process's sales (fairness across processes) and
//! the sales per second against the one-lock ceiling of 1 / hold.
//! Each service process serves dlock's metrics on `GET /metrics` (Prometheus text).

mod app;
mod load;
mod local_redis;
mod metrics;
mod store;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use dlock::config::Config;
use dlock::LockClient;

use crate::app::AppState;
use crate::load::Pause;
use crate::local_redis::LocalRedis;
use crate::store::StockStore;

#[derive(Parser)]
#[command(about = "Sells stock from several processes under load and checks nothing is oversold")]
struct Cli {
    #[command(subcommand)]
    command: Option<Serve>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args)]
struct RunArgs {
    /// dlock config file (any topology); default: start a local redis-server.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Service processes.
    #[arg(long, default_value_t = 3)]
    processes: usize,
    /// Buy requests to send.
    #[arg(long, default_value_t = 5000)]
    requests: usize,
    /// Requests in flight at once. Each in-flight slot sends to one service process only,
    /// so the per-process sales show how fairly the lock is shared between processes.
    #[arg(long, default_value_t = 200)]
    concurrency: usize,
    /// Stop sending new requests after this long (`--requests` stays an upper bound):
    /// a time-bounded run, e.g. for the hot item's sales per process and per second.
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Items in spread mode.
    #[arg(long, default_value_t = 10)]
    items: u64,
    /// Initial stock of each item.
    #[arg(long, default_value_t = 100)]
    stock: i64,
    /// `hot`: every request buys item 1; `spread`: requests go round-robin over the items.
    #[arg(long, value_enum, default_value_t = Mode::Spread)]
    mode: Mode,
    /// Which locking style serves the buys.
    #[arg(long, value_enum, default_value_t = Route::Attribute)]
    route: Route,
    /// Time spent in the critical section between reading and writing the stock.
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    hold: Duration,
    /// Control run: no lock at all.
    #[arg(long)]
    no_lock: bool,
    /// How the stock is written: `fenced` (default) with `client.fenced().set` and the
    /// hold's fencing token, so a stale holder's write is refused (answered 412) instead of
    /// overselling; `plain` with `SET`. Without the lock (`--no-lock`): always `plain`.
    #[arg(long, value_enum)]
    writes: Option<Writes>,
    /// Fault mode: SIGSTOP the first service process inside its first sale's critical
    /// section (stock read, not yet written) for this long, then SIGCONT. Must outlast the
    /// buy locks' 5 s lease, so another process takes the lock and sells meanwhile.
    #[arg(long, value_parser = humantime::parse_duration)]
    pause_holder: Option<Duration>,
    /// Print the report as one JSON object on stdout (and the table on stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum Serve {
    /// Run one service process (started by the demo itself).
    Serve {
        /// Port on 127.0.0.1.
        #[arg(long)]
        port: u16,
        /// Redis URL (single server).
        #[arg(long, conflicts_with = "config")]
        redis_url: Option<String>,
        /// dlock config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Serve without locks.
        #[arg(long)]
        no_lock: bool,
        /// Time in the critical section.
        #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
        hold: Duration,
        /// Write the stock through the fenced helper.
        #[arg(long)]
        fenced: bool,
        /// Stop the first sale inside its critical section until `go` arrives on stdin
        /// (announced by `inside <id> <stock>` on stdout): the `--pause-holder` hook.
        #[arg(long)]
        pause_point: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Hot,
    Spread,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Writes {
    /// `client.fenced().set` with the hold's token.
    Fenced,
    /// Plain `SET`: only the lock protects the stock.
    Plain,
}

#[derive(Clone, Copy, ValueEnum)]
enum Route {
    /// `#[distributed_lock]` on the handler.
    Attribute,
    /// `lock_with_lease` … `unlock` by hand.
    Manual,
    /// `try_lock_with_lease(wait, lease)`.
    Try,
}

impl Route {
    fn path(self) -> &'static str {
        match self {
            Route::Attribute => "buy",
            Route::Manual => "buy-manual",
            Route::Try => "buy-try",
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Serve::Serve {
            port,
            redis_url,
            config,
            no_lock,
            hold,
            fenced,
            pause_point,
        }) => serve(port, redis_url, config, !no_lock, hold, fenced, pause_point)
            .await
            .map(|()| ExitCode::SUCCESS),
        None => run(cli.run).await,
    };
    result.unwrap_or_else(|message| {
        eprintln!("stock-demo: {message}");
        ExitCode::from(2)
    })
}

/// One service process.
async fn serve(
    port: u16,
    redis_url: Option<String>,
    config: Option<PathBuf>,
    locking: bool,
    hold: Duration,
    fenced: bool,
    pause_point: bool,
) -> Result<(), String> {
    let (locks, stock) = match (redis_url, config) {
        (Some(url), None) => (
            LockClient::connect(&url).await.map_err(|e| e.to_string())?,
            StockStore::connect(&url).await.map_err(|e| e.to_string())?,
        ),
        (None, Some(path)) => {
            let config = Config::from_file(&path).map_err(|e| e.to_string())?;
            (
                config.build().await.map_err(|e| e.to_string())?,
                StockStore::from_config(&config)
                    .await
                    .map_err(|e| e.to_string())?,
            )
        }
        _ => return Err("serve needs exactly one of --redis-url and --config".into()),
    };
    let metrics = metrics::install()?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let state = AppState {
        locks: locks.clone(),
        stock,
        hold,
        fenced,
        pause_point: Arc::new(AtomicBool::new(pause_point)),
    };
    let router = app::app(state, locking).merge(metrics::route(metrics));
    axum::serve(listener, router)
        .with_graceful_shutdown(terminated())
        .await
        .map_err(|e| e.to_string())?;
    // The requests are answered: whatever the lock client still owes Redis (a dropped
    // guard's release, a cancelled request's cleanup) is done before the process exits.
    locks.shutdown().await.map_err(|e| e.to_string())
}

/// Completes at SIGTERM (how the demo stops its services) or Ctrl-C.
async fn terminated() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Service processes, stopped when dropped: asked with SIGTERM (they finish their
/// requests and settle their lock client), killed after [`STOP_GRACE`] if still running.
struct Services(Vec<Child>);

/// How long a service process gets to stop on SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(3);

impl Drop for Services {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let pid = rustix::process::Pid::from_child(child);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        for child in &mut self.0 {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

/// The whole demo: Redis, services, stock, load, report.
async fn run(args: RunArgs) -> Result<ExitCode, String> {
    if args.processes == 0 || args.requests == 0 || args.concurrency == 0 || args.items == 0 {
        return Err("--processes, --requests, --concurrency and --items must be at least 1".into());
    }
    if args.duration.is_some_and(|d| d.is_zero()) {
        return Err("--duration must be longer than 0".into());
    }
    if args.stock < 0 {
        return Err("--stock must not be negative".into());
    }
    let fenced = match (args.writes, args.no_lock) {
        (Some(Writes::Fenced), true) => {
            return Err("--writes fenced presents the lock's token: it needs the lock".into())
        }
        (Some(writes), _) => writes == Writes::Fenced,
        (None, no_lock) => !no_lock,
    };
    if let Some(pause) = args.pause_holder {
        if args.no_lock {
            return Err("--pause-holder pauses a lock holder: it needs the lock".into());
        }
        if pause <= app::LEASE {
            return Err(format!(
                "--pause-holder {} must be longer than the buy locks' {} lease",
                humantime::format_duration(pause),
                humantime::format_duration(app::LEASE)
            ));
        }
    }
    // Redis: the config's deployment, or a throw-away local server.
    let (_server, redis_args) = match &args.config {
        Some(path) => {
            Config::from_file(path).map_err(|e| e.to_string())?;
            (
                None,
                vec!["--config".to_owned(), path.display().to_string()],
            )
        }
        None => {
            let server = LocalRedis::start_on_a_free_port()?;
            let url = server.url().to_owned();
            eprintln!("started redis-server at {url}");
            (Some(server), vec!["--redis-url".to_owned(), url])
        }
    };

    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own binary: {e}"))?;
    let mut services = Services(Vec::new());
    let mut urls = Vec::new();
    let mut pauser = None;
    let first_paused = Arc::new(AtomicBool::new(false));
    for index in 0..args.processes {
        let pause = args.pause_holder.filter(|_| index == 0);
        let mut attempts = 0;
        let (mut child, url) = loop {
            attempts += 1;
            let port = free_port()?;
            let mut command = Command::new(&exe);
            command
                .arg("serve")
                .arg("--port")
                .arg(port.to_string())
                .args(&redis_args)
                .arg("--hold")
                .arg(humantime::format_duration(args.hold).to_string())
                .stdin(Stdio::null());
            if args.no_lock {
                command.arg("--no-lock");
            }
            if fenced {
                command.arg("--fenced");
            }
            if pause.is_some() {
                command
                    .arg("--pause-point")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped());
            }
            let mut child = command
                .spawn()
                .map_err(|e| format!("cannot start a service: {e}"))?;
            let url = format!("http://127.0.0.1:{port}");
            if serving(&url, &mut child).await? {
                break (child, url);
            }
            // Another process took the port first: a new one.
            let _ = child.kill();
            let _ = child.wait();
            if attempts == SERVICE_ATTEMPTS {
                return Err(format!(
                    "a service did not start in {SERVICE_ATTEMPTS} attempts: each exited (its error is above) or another process answered on its port"
                ));
            }
        };
        if let Some(pause) = pause {
            pauser = Some(pause_holder(&mut child, pause, first_paused.clone())?);
        }
        services.0.push(child);
        urls.push(url);
    }

    let ids: Vec<u64> = match args.mode {
        Mode::Hot => vec![1],
        Mode::Spread => (1..=args.items).collect(),
    };
    let http = reqwest::Client::new();
    for id in &ids {
        http.post(format!("{}/goods/{id}/stock", urls[0]))
            .body(args.stock.to_string())
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("setting the stock of item {id}: {e}"))?;
    }
    eprintln!(
        "{} service process(es), {} item(s) x {} in stock, {} requests at concurrency {}, route {} (POST /goods/<id>/{}), {}",
        args.processes,
        ids.len(),
        args.stock,
        args.requests,
        args.concurrency,
        args.route
            .to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_owned()),
        args.route.path(),
        match (args.no_lock, fenced) {
            (true, _) => "NO LOCK (control)",
            (false, true) => "locked, fenced writes",
            (false, false) => "locked",
        }
    );
    let mut report = load::run(load::Plan {
        services: urls,
        items: ids.iter().map(|id| (*id, args.stock)).collect(),
        requests: args.requests,
        duration: args.duration,
        hold: args.hold,
        concurrency: args.concurrency,
        route: args.route.path().to_owned(),
        progress: !args.json,
        first_paused,
    })
    .await?;
    drop(services);
    report.pause = match pauser {
        // The services are gone, so the pauser has seen its pipe close: this cannot hang.
        Some(pauser) => Some(
            pauser
                .join()
                .map_err(|_| "the pausing thread panicked".to_owned())??,
        ),
        None => None,
    };

    let title = if args.no_lock {
        "stock-demo report (control: no lock)"
    } else {
        "stock-demo report"
    };
    // With --json, stdout carries the JSON document alone (for tools), the table goes to
    // stderr (for people).
    if args.json {
        eprintln!("{}", report.table(title));
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!("{}", report.table(title));
    }
    Ok(if report.oversold == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs the `--pause-holder` fault on `child` (started with `--pause-point`): when it
/// reports a sale inside the critical section, SIGSTOP it for `pause`, SIGCONT, let it
/// write. `first_paused` is set meanwhile, for the load to route around it. Returns what
/// happened once the child's stdout closes.
fn pause_holder(
    child: &mut Child,
    pause: Duration,
    first_paused: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<Pause, String>>, String> {
    let (Some(stdout), Some(mut stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the paused service's stdin/stdout are not piped".into());
    };
    let pid = rustix::process::Pid::from_child(child);
    Ok(std::thread::spawn(move || {
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| format!("reading the paused service: {e}"))?;
        let mut words = line.split_whitespace();
        let (Some("inside"), Some(item), Some(stock_read)) = (
            words.next(),
            words.next().and_then(|w| w.parse().ok()),
            words.next().and_then(|w| w.parse().ok()),
        ) else {
            // EOF: the run ended before any sale reached the pause point.
            return Ok(Pause::default());
        };
        let signal = |signal, name| {
            rustix::process::kill_process(pid, signal)
                .map_err(|e| format!("SIG{name} to the paused service: {e}"))
        };
        first_paused.store(true, Ordering::SeqCst);
        signal(rustix::process::Signal::STOP, "STOP")?;
        eprintln!(
            "paused service {} inside item {item}'s critical section for {}",
            pid.as_raw_nonzero(),
            humantime::format_duration(pause)
        );
        std::thread::sleep(pause);
        signal(rustix::process::Signal::CONT, "CONT")?;
        first_paused.store(false, Ordering::SeqCst);
        writeln!(stdin, "go")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("waking the paused service: {e}"))?;
        Ok(Pause {
            item: Some(item),
            stock_read,
            paused_ms: pause.as_millis(),
            lease_ms: app::LEASE.as_millis(),
        })
    }))
}

/// How many times a service is started on a free port: a port found free can be taken
/// by another process before the service binds it.
const SERVICE_ATTEMPTS: usize = 5;

/// Waits until the service `child`, started on `url`, answers: `false` when it exited
/// first or another process answers there (its port was taken), an error when nothing
/// answers within 20 s.
async fn serving(url: &str, child: &mut Child) -> Result<bool, String> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = child.id().to_string();
    loop {
        if let Ok(response) = http.get(format!("{url}/health")).send().await
            && response.status().is_success()
        {
            let answered = response.text().await.unwrap_or_default();
            return Ok(answered == started);
        }
        if child.try_wait().is_ok_and(|exited| exited.is_some()) {
            return Ok(false);
        }
        if Instant::now() > deadline {
            return Err(format!("the service at {url} did not start within 20 s"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
