//! The lean floor: the least a reentrant hash lock can ask of Redis, sent by a bare
//! redis-rs client. dlock's Redis CPU per cycle is reported as a multiple of it, measured
//! in the same run.
//!
//! The pair keeps dlock's layout (a hash whose field is the owner, with a lease) and
//! drops everything else: no fencing token, no waiter registry, no re-entry, no checks.
//! Acquire is `EXISTS` → `HSET owner 1` + `PEXPIRE`, else `PTTL`; release is `HEXISTS` →
//! `DEL`. Anything dlock's scripts do beyond that is what the ratio to the floor counts.

use redis::aio::MultiplexedConnection;
use redis::Script;

use crate::stats::{error, Result};
use crate::uncontended::Cycle;

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

/// Lease of the floor's locks: dlock's default watchdog lease, as S1 uses.
pub const LEASE_MS: u64 = 30_000;

/// The two scripts, loaded.
#[derive(Clone)]
pub struct FloorScripts {
    acquire: Script,
    release: Script,
}

impl FloorScripts {
    pub fn new() -> FloorScripts {
        FloorScripts {
            acquire: Script::new(ACQUIRE),
            release: Script::new(RELEASE),
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
        let held: Option<i64> = self
            .acquire
            .key(key)
            .arg(owner)
            .arg(LEASE_MS)
            .invoke_async(conn)
            .await?;
        match held {
            None => Ok(()),
            Some(ttl) => Err(error(format!("floor: {key} is held ({ttl} ms left)"))),
        }
    }

    /// Gives `key` back; an error when `owner` did not hold it.
    pub async fn release(
        &self,
        conn: &mut MultiplexedConnection,
        key: &str,
        owner: &str,
    ) -> Result<()> {
        let released: i64 = self.release.key(key).arg(owner).invoke_async(conn).await?;
        if released != 1 {
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
