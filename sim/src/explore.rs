//! The explorer: every order of events from a starting world (depth-first, each world
//! visited once), or seeded random walks for larger ones; after each move the world's
//! invariants are checked (exclusion, the liveness bound, token order), and once every
//! client is done, that nothing was left behind. A broken invariant comes back as the
//! path that led to it, which [`Trace`] prints step by step with the lock's keys after
//! each step.

use crate::fingerprint::{self, Seen};
use crate::lua::Scripts;
use crate::model::{Config, Event, World, KEYS, NAPS, REGISTRIES};

/// What an exploration covered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Explored {
    /// Distinct worlds reached.
    pub states: usize,
    /// Moves made (a move into a world seen before included).
    pub steps: usize,
    /// Runs that reached the end with every client done.
    pub ends: usize,
    /// Paths cut at the depth bound.
    pub cut: usize,
}

/// A broken invariant and the events that led to it.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// What broke.
    pub problem: String,
    /// The moves from the starting world to it.
    pub events: Vec<Event>,
}

/// How deep one path may go: far beyond any run of the configurations explored (each
/// client makes a few acquisitions), so that a path cut here means a loop.
const MAX_DEPTH: usize = 500;

/// Every order of events from `config`'s starting world, up to `max_states` worlds.
pub fn exhaustive(
    config: &Config,
    scripts: &Scripts,
    max_states: usize,
) -> Result<Explored, Counterexample> {
    let mut seen = Seen::default();
    let mut explored = Explored::default();
    let mut path = Vec::new();
    let world = World::new(config);
    seen.insert(fingerprint::of(&world));
    explored.states = 1;
    dfs(
        world,
        config,
        scripts,
        &mut seen,
        &mut explored,
        &mut path,
        max_states,
    )?;
    Ok(explored)
}

fn dfs(
    world: World,
    config: &Config,
    scripts: &Scripts,
    seen: &mut Seen,
    explored: &mut Explored,
    path: &mut Vec<Event>,
    max_states: usize,
) -> Result<(), Counterexample> {
    let events = world.events(config);
    if events.is_empty()
        || world.finished()
            && events
                .iter()
                .all(|e| matches!(e, Event::Crash(_) | Event::ForceUnlock | Event::Tick))
    {
        let mut end = world.clone();
        end_of_run(&mut end, config, scripts).map_err(|problem| Counterexample {
            problem,
            events: path.clone(),
        })?;
        explored.ends += 1;
        if events.is_empty() {
            return Ok(());
        }
    }
    if path.len() >= MAX_DEPTH {
        explored.cut += 1;
        return Ok(());
    }
    for event in events {
        if explored.states >= max_states {
            return Ok(());
        }
        let mut next = world.clone();
        explored.steps += 1;
        path.push(event);
        if let Err(problem) = next.step(event, config, scripts) {
            return Err(Counterexample {
                problem,
                events: path.clone(),
            });
        }
        if seen.insert(fingerprint::of(&next)) {
            explored.states += 1;
            dfs(next, config, scripts, seen, explored, path, max_states)?;
        }
        path.pop();
    }
    Ok(())
}

/// Once every client is done: time runs on until the timers are spent (leases and grants
/// expire), and nothing of a finished owner may be left.
fn end_of_run(world: &mut World, config: &Config, scripts: &Scripts) -> Result<(), String> {
    for _ in 0..MAX_DEPTH {
        let events = world.events(config);
        let Some(event) = events.iter().copied().find(|e| {
            matches!(
                e,
                Event::Exec(_) | Event::Reply(_) | Event::Message(_) | Event::Tick
            )
        }) else {
            break;
        };
        world.step(event, config, scripts)?;
    }
    world.check_end()
}

/// A small, deterministic random number generator (xorshift), so that a seed replays.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 counts as 1).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One random walk from `config`'s starting world, choosing each move with `seed`'s
/// generator, until every client is done.
pub fn random_walk(config: &Config, scripts: &Scripts, seed: u64) -> Result<usize, Counterexample> {
    let mut rng = Rng::new(seed);
    let mut world = World::new(config);
    let mut path = Vec::new();
    for _ in 0..MAX_DEPTH * 4 {
        let events = world.events(config);
        if events.is_empty() {
            break;
        }
        let event = events[rng.below(events.len())];
        path.push(event);
        world
            .step(event, config, scripts)
            .map_err(|problem| Counterexample {
                problem,
                events: path.clone(),
            })?;
        if world.finished() {
            break;
        }
    }
    end_of_run(&mut world, config, scripts).map_err(|problem| Counterexample {
        problem,
        events: path.clone(),
    })?;
    Ok(path.len())
}

/// A counterexample replayed step by step: each event with the locks' hashes, registries
/// and naps after it.
pub struct Trace(pub String);

impl Trace {
    /// Replays `events` from `config`'s starting world.
    pub fn of(config: &Config, scripts: &Scripts, events: &[Event]) -> Trace {
        let mut world = World::new(config);
        let start = world.now_ms();
        let mut text = String::new();
        for (i, event) in events.iter().enumerate() {
            let outcome = world.step(*event, config, scripts);
            // The second lock's names only where a multi-lock or its clients use them.
            let keys: Vec<String> = (KEYS.into_iter().chain(REGISTRIES).chain(NAPS))
                .filter(|key| key.ends_with(KEYS[0]) || world.redis.keys.contains_key(*key))
                .map(|key| format!("{key} = {:?}", world.redis.keys.get(key)))
                .collect();
            text.push_str(&format!(
                "{i:>3} +{:>4} ms {event:?}\n      {}\n",
                world.now_ms() - start,
                keys.join("\n      ")
            ));
            if let Err(problem) = outcome {
                text.push_str(&format!("      !! {problem}\n"));
                break;
            }
        }
        Trace(text)
    }
}
