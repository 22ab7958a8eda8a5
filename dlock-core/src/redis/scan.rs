//! Operators' reads that a cluster must route by hand: `SCAN` over every master of the
//! deployment (one server, the Sentinel's current master, or each master of a cluster in
//! turn: a cluster's `SCAN` only sees the keys of the node it reaches; never `KEYS`,
//! which blocks the server for the whole keyspace), and a command about a channel sent to
//! the master of the channel's slot (`PUBSUB SHARDNUMSUB`, which redis-rs would send to
//! every node, hiding a refusal behind a merge error).

use redis::cluster_routing::{Route as SlotRoute, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{RedisError, Value};

use super::{read, Backend, CallError, Conn, Route};

/// Keys asked for per `SCAN` call: a hint, each call stays short on the server.
const SCAN_COUNT: u32 = 500;

impl Backend {
    /// Runs `cmd` on the master that owns `key`'s slot (in a cluster; elsewhere, on the
    /// one master), bounded by the command timeout.
    pub(crate) async fn query_in_slot_of<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        key: &str,
    ) -> Result<T, CallError> {
        let Route::Cluster(route) = &self.shared.route else {
            return self.query(cmd).await;
        };
        self.follow_runtime().await?;
        let mut conn = read(&route.conn);
        let slot = u16::try_from(crate::names::slot_of(key.as_bytes())).unwrap_or_default();
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(SlotRoute::new(
            slot,
            SlotAddr::Master,
        )));
        let reply = self
            .bounded(conn.route_command(cmd.clone(), routing))
            .await?
            .extract_error()
            .map_err(CallError::from)?;
        decoded(reply)
    }

    /// Every key of type `kind` whose name matches the glob `pattern`, on every master,
    /// and how many were left out for a name that is not UTF-8 (see [`page`]); each call
    /// bounded by the command timeout.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        kind: &str,
    ) -> Result<(Vec<String>, usize), CallError> {
        let scan = |cursor: u64| {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .arg("TYPE")
                .arg(kind);
            cmd
        };
        let (mut keys, mut skipped) = (Vec::new(), 0);
        match &self.shared.route {
            Route::Cluster(route) => {
                self.follow_runtime().await?;
                let mut conn = read(&route.conn);
                let slots: Value = self
                    .bounded(redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut conn))
                    .await?;
                for (host, port) in masters(slots)? {
                    let mut cursor = 0;
                    loop {
                        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port,
                        });
                        let reply = self
                            .bounded(conn.route_command(scan(cursor), routing))
                            .await?;
                        let (next, found, unreadable) = page(reply)?;
                        keys.extend(found);
                        skipped += unreadable;
                        cursor = next;
                        if cursor == 0 {
                            break;
                        }
                    }
                }
            }
            Route::Direct(_) | Route::Sentinel(_) => {
                let mut cursor = 0;
                loop {
                    let mut conn: Conn = self.conn().await?;
                    let reply: Value = self.bounded(scan(cursor).query_async(&mut conn)).await?;
                    let (next, found, unreadable) = page(reply)?;
                    keys.extend(found);
                    skipped += unreadable;
                    cursor = next;
                    if cursor == 0 {
                        break;
                    }
                }
            }
        }
        keys.sort();
        keys.dedup();
        Ok((keys, skipped))
    }
}

/// One `SCAN` reply: the next cursor, the keys found, and how many keys were left out
/// for a name that is not UTF-8: no lock name (a `&str`) can have made one, and one such
/// key must not make the whole listing fail. A refusal (`NOPERM`) is the error it is.
fn page(reply: Value) -> Result<(u64, Vec<String>, usize), CallError> {
    let (next, found): (u64, Vec<Vec<u8>>) =
        decoded(reply.extract_error().map_err(CallError::from)?)?;
    let total = found.len();
    let keys: Vec<String> = found
        .into_iter()
        .filter_map(|key| String::from_utf8(key).ok())
        .collect();
    let skipped = total - keys.len();
    Ok((next, keys, skipped))
}

/// `value` as a `T`, or the error saying why not.
fn decoded<T: redis::FromRedisValue>(value: Value) -> Result<T, CallError> {
    redis::from_redis_value(value).map_err(|e| CallError::from(RedisError::from(e)))
}

/// A master's address in a `CLUSTER SLOTS` reply: host and port.
type Address = (String, u16);

/// The slot ranges of a `CLUSTER SLOTS` reply (`[start, end, [host, port, id], replicas...]`
/// per range): first slot, last slot and the master's address.
fn slot_ranges(slots: Value) -> Result<Vec<(u16, u16, Address)>, CallError> {
    let slots = slots.extract_error().map_err(CallError::from)?;
    let mut ranges = Vec::new();
    for range in decoded::<Vec<Vec<Value>>>(slots)? {
        let mut range = range.into_iter();
        let (Some(start), Some(end), Some(master)) = (range.next(), range.next(), range.next())
        else {
            continue;
        };
        // `[host, port, id]`, and a map of metadata since Redis 7.
        let mut node = decoded::<Vec<Value>>(master)?.into_iter();
        let (Some(host), Some(port)) = (node.next(), node.next()) else {
            continue;
        };
        let (start, end): (u16, u16) = decoded(Value::Array(vec![start, end]))?;
        ranges.push((start, end, decoded(Value::Array(vec![host, port]))?));
    }
    Ok(ranges)
}

/// The master of `slot` in a `CLUSTER SLOTS` reply; `None` when no range covers it.
pub(super) fn slot_master(slots: Value, slot: u16) -> Result<Option<Address>, CallError> {
    Ok(slot_ranges(slots)?
        .into_iter()
        .find(|(start, end, _)| (*start..=*end).contains(&slot))
        .map(|(_, _, master)| master))
}

/// The master of each slot range in a `CLUSTER SLOTS` reply, each once.
fn masters(slots: Value) -> Result<Vec<Address>, CallError> {
    let mut masters = Vec::new();
    for (_, _, address) in slot_ranges(slots)? {
        if !masters.contains(&address) {
            masters.push(address);
        }
    }
    Ok(masters)
}
