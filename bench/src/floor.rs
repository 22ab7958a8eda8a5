//! The lean floor: the least a reentrant hash lock can ask of Redis, sent by a bare
//! redis-rs client. dlock's Redis CPU per cycle is reported as a multiple of it, measured
//! in the same run.
//!
//! The pair keeps dlock's layout (a hash whose field is the owner, with a lease) and
//! drops everything else: no fencing token, no waiter registry, no re-entry, no checks.
//! Acquire is `EXISTS` → `HSET owner 1` + `PEXPIRE`, else `PTTL`; release is `HEXISTS` →
//! `DEL`. Anything dlock's scripts do beyond that is what the ratio to the floor counts.
//!
//! The design floor adds to it the two things dlock's design cannot drop, and nothing
//! else: a fencing token minted with the hold (`INCR` of a counter, kept in a second field
//! and returned), and a release that learns whether anyone waits (`EXISTS` of the waiter
//! registry), which waiting by pub/sub instead of polling needs. What dlock's scripts cost
//! beyond the design floor is what its scripts could still save; what the design floor
//! costs beyond the lean floor is what the design asks.
//!
//! The design floor at dlock's arguments runs the design floor's bodies called with as
//! many keys and arguments as dlock's calls pass, of about the same lengths. Every key and argument of a call
//! becomes a Lua string before the script runs, so what it costs beyond the design floor
//! is what dlock's calls pay for passing what their rarer branches need; what dlock's
//! scripts cost beyond it is their bodies. dlock's own scripts are sent the same way
//! (`Floor::DlockScripts`), so that the three are measured alike: driven through dlock's
//! client, a script's time per call also grows with the client's CPU competing with the
//! server's on a small machine (commandstats counts wall time).

use redis::aio::MultiplexedConnection;
use redis::Script;

use crate::cycle::Cycle;
use crate::stats::{error, Result};

/// The floor's acquire: `KEYS[1]` the hash, `ARGV[1]` the owner, `ARGV[2]` the lease in ms.
/// `nil` when taken, else the holder's remaining lease.
pub const ACQUIRE: &str = "\
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[1], '1')
  redis.call('pexpire', KEYS[1], ARGV[2])
  return nil
end
return redis.call('pttl', KEYS[1])";

/// The floor's release: `KEYS[1]` the hash, `ARGV[1]` the owner. 1 when released, else 0.
pub const RELEASE: &str = "\
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('del', KEYS[1])
  return 1
end
return 0";

/// The design floor's acquire: `KEYS[1]` the hash, `KEYS[2]` the fencing counter,
/// `ARGV[1]` the owner, `ARGV[2]` the lease in ms. `{token}` when taken, else the holder's
/// remaining lease.
pub const DESIGN_ACQUIRE: &str = "\
if redis.call('exists', KEYS[1]) == 0 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], '1', ARGV[1] .. ':f', string.format('%d', token))
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {token}
end
return redis.call('pttl', KEYS[1])";

/// The design floor's release: `KEYS[1]` the hash, `KEYS[2]` the waiter registry,
/// `ARGV[1]` the owner. 1 when released, 2 when released and someone waits, else 0.
pub const DESIGN_RELEASE: &str = "\
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('del', KEYS[1])
  if redis.call('exists', KEYS[2]) == 1 then
    return 2
  end
  return 1
end
return 0";

/// Which floor a pair of scripts is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floor {
    /// The least a reentrant hash lock asks of Redis.
    Lean,
    /// The lean floor plus a fencing token and the release's check for waiters.
    Design,
    /// The design floor's bodies, called with as many keys and arguments as dlock's.
    DesignAtDlockArguments,
    /// dlock's own acquire and release scripts, called as dlock's client calls them for
    /// a fresh acquisition and a last release (the same calls as the previous).
    DlockScripts,
}

/// Lease of the floor's locks: dlock's default watchdog lease, as S1 uses.
pub const LEASE_MS: u64 = 30_000;

/// One floor's two scripts.
#[derive(Clone)]
pub struct FloorScripts {
    floor: Floor,
    acquire: Script,
    release: Script,
}

impl FloorScripts {
    pub fn new(floor: Floor) -> FloorScripts {
        let (acquire, release) = match floor {
            Floor::Lean => (ACQUIRE, RELEASE),
            Floor::Design => (DESIGN_ACQUIRE, DESIGN_RELEASE),
            // The bodies find what they read where the design floor's calls put it; the
            // calls pass as much as dlock's (see `acquire` and `release`).
            Floor::DesignAtDlockArguments => (DESIGN_ACQUIRE, DESIGN_RELEASE),
            Floor::DlockScripts => {
                let library = dlock::admin::FunctionLibrary::current();
                (
                    library.script("lock_acquire").unwrap_or_default(),
                    library.script("lock_release").unwrap_or_default(),
                )
            }
        };
        FloorScripts {
            floor,
            acquire: Script::new(acquire),
            release: Script::new(release),
        }
    }

    /// The name of the lock `n` of this floor under `prefix`: the design floor's keys
    /// share a hash tag with their counter and registry, as dlock's do.
    pub fn key(&self, prefix: &str, n: usize) -> String {
        match self.floor {
            Floor::Lean => format!("{prefix}floor:{n}"),
            Floor::Design => format!("{{{prefix}design:{n}}}"),
            Floor::DesignAtDlockArguments => format!("{{{prefix}design-args:{n}}}"),
            Floor::DlockScripts => format!("{{{prefix}dlock-bare:{n}}}"),
        }
    }

    /// Loads both scripts, so that no measured call is the `NOSCRIPT` before a load.
    pub async fn load(&self, conn: &mut MultiplexedConnection) -> Result<()> {
        self.acquire.prepare_invoke().load_async(conn).await?;
        self.release.prepare_invoke().load_async(conn).await?;
        Ok(())
    }

    /// Takes `key` for `owner`; an error when someone else holds it.
    pub async fn acquire(
        &self,
        conn: &mut MultiplexedConnection,
        key: &str,
        owner: &str,
    ) -> Result<()> {
        let mut call = self.acquire.key(key);
        match self.floor {
            Floor::Lean => {
                call.arg(owner).arg(LEASE_MS);
            }
            Floor::Design => {
                call.key(format!("{key}:fence")).arg(owner).arg(LEASE_MS);
            }
            // dlock's 4 keys and 6 arguments for a fresh owner: the counter, the
            // registry, the naps; the lease, the owner, the fencing flag, the registry's
            // life, the registered flag and the publish command (the design floor's body
            // reads the owner first, dlock's the lease).
            Floor::DesignAtDlockArguments | Floor::DlockScripts => {
                call.key(format!("{key}:fence"))
                    .key(format!("{key}:waiters"))
                    .key(format!("{key}:naps"));
                match self.floor {
                    Floor::DlockScripts => call.arg(LEASE_MS).arg(owner),
                    _ => call.arg(owner).arg(LEASE_MS),
                };
                call.arg("1").arg(4_000).arg("0").arg("publish");
            }
        }
        let reply: redis::Value = call.invoke_async(conn).await?;
        match (self.floor, reply) {
            (Floor::Lean, redis::Value::Nil) => Ok(()),
            (
                Floor::Design | Floor::DesignAtDlockArguments | Floor::DlockScripts,
                redis::Value::Array(token),
            ) if token.len() == 1 => Ok(()),
            (_, held) => Err(error(format!("floor: {key} is held ({held:?})"))),
        }
    }

    /// Gives `key` back; an error when `owner` did not hold it.
    pub async fn release(
        &self,
        conn: &mut MultiplexedConnection,
        key: &str,
        owner: &str,
    ) -> Result<()> {
        let mut call = self.release.key(key);
        match self.floor {
            Floor::Lean => {
                call.arg(owner);
            }
            Floor::Design => {
                call.key(format!("{key}:waiters")).arg(owner);
            }
            // dlock's 4 keys and 6 arguments when no task of the client waits next: the
            // registry, the memo (the hash itself on a first send), the naps; the owner,
            // `one`, the memo's life, the publish command, the grant's length and the
            // first-send flag.
            Floor::DesignAtDlockArguments | Floor::DlockScripts => {
                call.key(format!("{key}:waiters"))
                    .key(key)
                    .key(format!("{key}:naps"))
                    .arg(owner)
                    .arg("one")
                    .arg(10_000)
                    .arg("publish")
                    .arg(100)
                    .arg("0");
            }
        }
        let released: i64 = call.invoke_async(conn).await?;
        // dlock's release answers the holds left: 0, the lock is free.
        let freed = match self.floor {
            Floor::DlockScripts => released == 0,
            _ => (1..=2).contains(&released),
        };
        if !freed {
            return Err(error(format!("floor: {key} was not held by {owner}")));
        }
        Ok(())
    }
}

/// S1's cycle with the floor's scripts: one multiplexed connection shared by every task,
/// as dlock's client shares its connection, a new owner per cycle as dlock makes one.
pub struct FloorCycle {
    pub conn: MultiplexedConnection,
    pub scripts: FloorScripts,
    pub key: String,
    pub owner_prefix: String,
    pub cycles: u64,
}

impl Cycle for FloorCycle {
    async fn cycle(&mut self) -> Result<()> {
        self.cycles += 1;
        let owner = format!("{}:{}", self.owner_prefix, self.cycles);
        self.scripts
            .acquire(&mut self.conn, &self.key, &owner)
            .await?;
        self.scripts
            .release(&mut self.conn, &self.key, &owner)
            .await
    }
}
