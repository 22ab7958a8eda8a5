//! An in-memory Redis with the commands dlock's lock scripts call, its clock in the
//! simulator's hands: strings, hashes and sorted sets, key expiry, and pub/sub that counts
//! its receivers as `PUBLISH` and `PUBSUB NUMSUB` do.
//!
//! Only what the scripts need, as Redis 7 does it: a key expires once the clock is past
//! its expiry (`now > at`), `PEXPIRE` takes `NX`/`XX`/`GT`/`LT`, a lease of 0 or below
//! deletes the key, and a script sees the clock stand still while it runs.

use std::collections::{BTreeMap, BTreeSet};

/// A Redis reply, as a script sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(String),
    Status(String),
    Array(Vec<Reply>),
    Error(String),
}

/// A value kept at a key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    /// A string.
    Str(String),
    /// A hash.
    Hash(BTreeMap<String, String>),
    /// Member → score, kept as the text it was given (dlock writes integers).
    ZSet(BTreeMap<String, Score>),
}

/// A sorted set's score: an integer or `±inf` are all dlock writes and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Score(pub i64);

/// A message `PUBLISH` sent: to every connection subscribed to its channel then.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Published {
    /// Its channel.
    pub channel: String,
    /// What it says.
    pub payload: String,
    /// The subscribers it went to.
    pub to: Vec<u32>,
}

/// The server: its keys, their expiries, its clock and its subscribers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Redis {
    /// The clock in µs.
    pub now_us: u64,
    /// Every key's value.
    pub keys: BTreeMap<String, Value>,
    /// Key → the ms at which it expires.
    pub expiries: BTreeMap<String, u64>,
    /// Channel → the subscribers (connection ids) listening there.
    pub subscribers: BTreeMap<String, BTreeSet<u32>>,
    /// What `PUBLISH` sent since the last take.
    pub outbox: Vec<Published>,
}

fn err(text: &str) -> Reply {
    Reply::Error(format!("ERR {text}"))
}

fn wrong_type() -> Reply {
    Reply::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
}

fn int(text: &str) -> Option<i64> {
    text.parse().ok()
}

impl Redis {
    /// The clock in ms.
    pub fn now_ms(&self) -> u64 {
        self.now_us / 1000
    }

    /// Drops `key` if its expiry has passed, as Redis does on access.
    fn expire_if_due(&mut self, key: &str) {
        if let Some(&at) = self.expiries.get(key)
            && self.now_ms() > at
        {
            self.keys.remove(key);
            self.expiries.remove(key);
        }
    }

    /// Drops every key whose expiry has passed (what a reader would find gone).
    pub fn expire_all_due(&mut self) {
        let due: Vec<String> = self
            .expiries
            .iter()
            .filter(|(_, at)| self.now_ms() > **at)
            .map(|(key, _)| key.clone())
            .collect();
        for key in due {
            self.expire_if_due(&key);
        }
    }

    fn get(&mut self, key: &str) -> Option<&mut Value> {
        self.expire_if_due(key);
        self.keys.get_mut(key)
    }

    fn del(&mut self, key: &str) -> bool {
        self.expiries.remove(key);
        self.keys.remove(key).is_some()
    }

    fn hash(
        &mut self,
        key: &str,
        create: bool,
    ) -> Result<Option<&mut BTreeMap<String, String>>, Reply> {
        self.expire_if_due(key);
        if create && !self.keys.contains_key(key) {
            self.keys
                .insert(key.to_owned(), Value::Hash(BTreeMap::new()));
        }
        match self.keys.get_mut(key) {
            None => Ok(None),
            Some(Value::Hash(hash)) => Ok(Some(hash)),
            Some(_) => Err(wrong_type()),
        }
    }

    fn zset(
        &mut self,
        key: &str,
        create: bool,
    ) -> Result<Option<&mut BTreeMap<String, Score>>, Reply> {
        self.expire_if_due(key);
        if create && !self.keys.contains_key(key) {
            self.keys
                .insert(key.to_owned(), Value::ZSet(BTreeMap::new()));
        }
        match self.keys.get_mut(key) {
            None => Ok(None),
            Some(Value::ZSet(set)) => Ok(Some(set)),
            Some(_) => Err(wrong_type()),
        }
    }

    /// An empty hash or sorted set is no key, as in Redis.
    fn drop_if_empty(&mut self, key: &str) {
        let empty = match self.keys.get(key) {
            Some(Value::Hash(hash)) => hash.is_empty(),
            Some(Value::ZSet(set)) => set.is_empty(),
            _ => false,
        };
        if empty {
            self.del(key);
        }
    }

    /// Runs one command (`args[0]` its name).
    pub fn command(&mut self, args: &[String]) -> Reply {
        let Some(name) = args.first() else {
            return err("empty command");
        };
        let name = name.to_ascii_lowercase();
        let a = &args[1..];
        let result = match name.as_str() {
            "time" => Ok(Reply::Array(vec![
                Reply::Bulk((self.now_us / 1_000_000).to_string()),
                Reply::Bulk((self.now_us % 1_000_000).to_string()),
            ])),
            "exists" => Ok(Reply::Int(
                a.iter().filter(|key| self.get(key).is_some()).count() as i64,
            )),
            "del" => Ok(Reply::Int(
                a.iter()
                    .filter(|key| {
                        self.expire_if_due(key);
                        self.del(key)
                    })
                    .count() as i64,
            )),
            "type" => {
                let kind = match a.first().and_then(|key| self.get(key)) {
                    None => "none",
                    Some(Value::Str(_)) => "string",
                    Some(Value::Hash(_)) => "hash",
                    Some(Value::ZSet(_)) => "zset",
                };
                Ok(Reply::Status(kind.to_owned()))
            }
            "pttl" => Ok(Reply::Int(self.pttl(&a[0]))),
            "pexpire" | "pexpireat" => self.pexpire(&name, a),
            "get" => match self.get(&a[0]) {
                None => Ok(Reply::Nil),
                Some(Value::Str(text)) => Ok(Reply::Bulk(text.clone())),
                Some(_) => Err(wrong_type()),
            },
            "set" => {
                self.del(&a[0]);
                self.keys.insert(a[0].clone(), Value::Str(a[1].clone()));
                if a.len() >= 4 && a[2].eq_ignore_ascii_case("px") {
                    let at = self.now_ms() + int(&a[3]).unwrap_or(0).max(0) as u64;
                    self.expiries.insert(a[0].clone(), at);
                }
                Ok(Reply::Status("OK".into()))
            }
            "incr" | "incrby" => {
                let by = if name == "incr" {
                    1
                } else {
                    int(&a[1]).unwrap_or(0)
                };
                let current = match self.get(&a[0]) {
                    None => 0,
                    Some(Value::Str(text)) => match int(text) {
                        Some(n) => n,
                        None => return err("value is not an integer or out of range"),
                    },
                    Some(_) => return wrong_type(),
                };
                let next = current + by;
                self.keys.insert(a[0].clone(), Value::Str(next.to_string()));
                Ok(Reply::Int(next))
            }
            "hset" => self.hash(&a[0], true).map(|hash| {
                let hash = hash.expect("created");
                let mut added = 0;
                for pair in a[1..].chunks(2) {
                    if hash.insert(pair[0].clone(), pair[1].clone()).is_none() {
                        added += 1;
                    }
                }
                Reply::Int(added)
            }),
            "hget" => self.hash(&a[0], false).map(|hash| {
                hash.and_then(|hash| hash.get(&a[1]).cloned())
                    .map_or(Reply::Nil, Reply::Bulk)
            }),
            "hmget" => self.hash(&a[0], false).map(|hash| {
                Reply::Array(
                    a[1..]
                        .iter()
                        .map(|field| {
                            hash.as_ref()
                                .and_then(|hash| hash.get(field).cloned())
                                .map_or(Reply::Nil, Reply::Bulk)
                        })
                        .collect(),
                )
            }),
            "hexists" => self.hash(&a[0], false).map(|hash| {
                Reply::Int(i64::from(hash.is_some_and(|hash| hash.contains_key(&a[1]))))
            }),
            "hlen" => self
                .hash(&a[0], false)
                .map(|hash| Reply::Int(hash.map_or(0, |hash| hash.len() as i64))),
            "hkeys" => self.hash(&a[0], false).map(|hash| {
                Reply::Array(hash.map_or(Vec::new(), |hash| {
                    hash.keys().cloned().map(Reply::Bulk).collect()
                }))
            }),
            "hgetall" => self.hash(&a[0], false).map(|hash| {
                Reply::Array(hash.map_or(Vec::new(), |hash| {
                    hash.iter()
                        .flat_map(|(field, value)| {
                            [Reply::Bulk(field.clone()), Reply::Bulk(value.clone())]
                        })
                        .collect()
                }))
            }),
            "hdel" => {
                let removed = self.hash(&a[0], false).map(|hash| {
                    hash.map_or(0, |hash| {
                        a[1..]
                            .iter()
                            .filter(|field| hash.remove(*field).is_some())
                            .count()
                    })
                });
                self.drop_if_empty(&a[0]);
                removed.map(|n| Reply::Int(n as i64))
            }
            "hincrby" => {
                let by = int(&a[2]).unwrap_or(0);
                self.hash(&a[0], true).and_then(|hash| {
                    let hash = hash.expect("created");
                    let next = hash.get(&a[1]).map_or(Some(0), |v| int(v)).map(|n| n + by);
                    match next {
                        Some(next) => {
                            hash.insert(a[1].clone(), next.to_string());
                            Ok(Reply::Int(next))
                        }
                        None => Err(err("hash value is not an integer")),
                    }
                })
            }
            "zadd" => self.zadd(a),
            "zrem" => {
                let removed = self.zset(&a[0], false).map(|set| {
                    set.map_or(0, |set| {
                        a[1..]
                            .iter()
                            .filter(|member| set.remove(*member).is_some())
                            .count()
                    })
                });
                self.drop_if_empty(&a[0]);
                removed.map(|n| Reply::Int(n as i64))
            }
            "zscore" => self.zset(&a[0], false).map(|set| {
                set.and_then(|set| set.get(&a[1]).map(|score| Reply::Bulk(score.0.to_string())))
                    .unwrap_or(Reply::Nil)
            }),
            "zcard" => self
                .zset(&a[0], false)
                .map(|set| Reply::Int(set.map_or(0, |set| set.len() as i64))),
            "zrange" => self.zset(&a[0], false).map(|set| {
                let sorted = sorted(set);
                let (start, stop) = (int(&a[1]).unwrap_or(0), int(&a[2]).unwrap_or(-1));
                let len = sorted.len() as i64;
                let norm = |i: i64| if i < 0 { len + i } else { i };
                let (start, stop) = (norm(start).max(0), norm(stop).min(len - 1));
                Reply::Array(if start > stop {
                    Vec::new()
                } else {
                    sorted[start as usize..=stop as usize]
                        .iter()
                        .map(|(member, _)| Reply::Bulk(member.clone()))
                        .collect()
                })
            }),
            "zrangebyscore" => self.zset(&a[0], false).map(|set| {
                let bound = |text: &str| -> (i64, bool) {
                    match text {
                        "-inf" => (i64::MIN, false),
                        "+inf" | "inf" => (i64::MAX, false),
                        _ => match text.strip_prefix('(') {
                            Some(rest) => (int(rest).unwrap_or(0), true),
                            None => (int(text).unwrap_or(0), false),
                        },
                    }
                };
                let (min, min_open) = bound(&a[1]);
                let (max, max_open) = bound(&a[2]);
                let limit = a
                    .iter()
                    .position(|word| word.eq_ignore_ascii_case("limit"))
                    .map(|at| {
                        (
                            int(&a[at + 1]).unwrap_or(0) as usize,
                            int(&a[at + 2]).unwrap_or(-1),
                        )
                    });
                let mut found: Vec<Reply> = sorted(set)
                    .into_iter()
                    .filter(|(_, score)| {
                        let s = score.0;
                        (s > min || (!min_open && s == min)) && (s < max || (!max_open && s == max))
                    })
                    .map(|(member, _)| Reply::Bulk(member))
                    .collect();
                if let Some((offset, count)) = limit {
                    found = found
                        .into_iter()
                        .skip(offset)
                        .take(if count < 0 {
                            usize::MAX
                        } else {
                            count as usize
                        })
                        .collect();
                }
                Reply::Array(found)
            }),
            "zpopmin" => {
                let popped = self.zset(&a[0], false).map(|set| {
                    let Some(set) = set else {
                        return Reply::Array(Vec::new());
                    };
                    let first = sorted(Some(set)).into_iter().next();
                    match first {
                        Some((member, score)) => {
                            set.remove(&member);
                            Reply::Array(vec![
                                Reply::Bulk(member),
                                Reply::Bulk(score.0.to_string()),
                            ])
                        }
                        None => Reply::Array(Vec::new()),
                    }
                });
                self.drop_if_empty(&a[0]);
                popped
            }
            "zcount" => self.zset(&a[0], false).map(|set| {
                let min = int(&a[1]).unwrap_or(i64::MIN);
                let max = if a[2] == "+inf" {
                    i64::MAX
                } else {
                    int(&a[2]).unwrap_or(i64::MAX)
                };
                Reply::Int(set.map_or(0, |set| {
                    set.values().filter(|s| s.0 >= min && s.0 <= max).count() as i64
                }))
            }),
            "publish" | "spublish" => {
                let to: Vec<u32> = self
                    .subscribers
                    .get(&a[0])
                    .map(|subscribers| subscribers.iter().copied().collect())
                    .unwrap_or_default();
                let count = to.len() as i64;
                self.outbox.push(Published {
                    channel: a[0].clone(),
                    payload: a[1].clone(),
                    to,
                });
                Ok(Reply::Int(count))
            }
            "pubsub" => {
                let sub = a[0].to_ascii_lowercase();
                if sub == "numsub" || sub == "shardnumsub" {
                    Ok(Reply::Array(
                        a[1..]
                            .iter()
                            .flat_map(|channel| {
                                let n = self.subscribers.get(channel).map_or(0, BTreeSet::len);
                                [Reply::Bulk(channel.clone()), Reply::Int(n as i64)]
                            })
                            .collect(),
                    ))
                } else {
                    Err(err("unknown PUBSUB subcommand"))
                }
            }
            other => Err(err(&format!("the simulator has no command '{other}'"))),
        };
        result.unwrap_or_else(|error| error)
    }

    fn pttl(&mut self, key: &str) -> i64 {
        if self.get(key).is_none() {
            return -2;
        }
        match self.expiries.get(key) {
            None => -1,
            Some(&at) => at.saturating_sub(self.now_ms()) as i64,
        }
    }

    fn pexpire(&mut self, name: &str, a: &[String]) -> Result<Reply, Reply> {
        let key = &a[0];
        if self.get(key).is_none() {
            return Ok(Reply::Int(0));
        }
        let Some(n) = int(&a[1]) else {
            return Err(err("value is not an integer or out of range"));
        };
        let at = if name == "pexpireat" {
            n
        } else {
            self.now_ms() as i64 + n
        };
        let current = self.expiries.get(key).copied();
        let allowed = match a.get(2).map(|flag| flag.to_ascii_lowercase()).as_deref() {
            None => true,
            Some("nx") => current.is_none(),
            Some("xx") => current.is_some(),
            // A key without an expiry lives for ever: nothing is greater, anything less.
            Some("gt") => current.is_some_and(|current| at > current as i64),
            Some("lt") => current.is_none_or(|current| at < current as i64),
            Some(_) => return Err(err("unsupported option")),
        };
        if !allowed {
            return Ok(Reply::Int(0));
        }
        if at <= self.now_ms() as i64 {
            self.del(key);
        } else {
            self.expiries.insert(key.clone(), at as u64);
        }
        Ok(Reply::Int(1))
    }

    fn zadd(&mut self, a: &[String]) -> Result<Reply, Reply> {
        let mut at = 1;
        let (mut nx, mut xx) = (false, false);
        while let Some(flag) = a.get(at) {
            match flag.to_ascii_lowercase().as_str() {
                "nx" => nx = true,
                "xx" => xx = true,
                _ => break,
            }
            at += 1;
        }
        let set = self.zset(&a[0], !xx)?;
        let Some(set) = set else {
            return Ok(Reply::Int(0));
        };
        let mut added = 0;
        for pair in a[at..].chunks(2) {
            let score = Score(int(&pair[0]).unwrap_or(0));
            let present = set.contains_key(&pair[1]);
            if (nx && present) || (xx && !present) {
                continue;
            }
            if !present {
                added += 1;
            }
            set.insert(pair[1].clone(), score);
        }
        self.drop_if_empty(&a[0]);
        Ok(Reply::Int(added))
    }
}

/// A sorted set's members by score, then member, as Redis orders them.
fn sorted(set: Option<&mut BTreeMap<String, Score>>) -> Vec<(String, Score)> {
    let mut members: Vec<(String, Score)> = set
        .map(|set| {
            set.iter()
                .map(|(member, score)| (member.clone(), *score))
                .collect()
        })
        .unwrap_or_default();
    members.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    members
}
