-- Shared by the acquire and release scripts of every kind of lock that waits (after
-- scripts/clock.lua): what each waiting owner was told.
--
-- A busy answer tells a waiter how long it may sleep before it tries again: until the lock
-- can change hands as far as Redis knows then (the holder's lease). The naps set of a lock
-- name (a sorted set: waiting owner -> server time in ms until which it may sleep) keeps
-- that promise. When a lock's expiry is then set earlier than what some waiter was told (a
-- new holder with a shorter lease, a `min_hold`), those waiters must be told to try again:
-- otherwise, should the lock run out without a release (its holder died, or kept its
-- guard past its lease), they would sleep while it is free. With uniform leases this never
-- happens: a new holder's expiry is later than every promise made before it.

-- Makes `key` (a set of waiters, which exists) live at least `lifetime` ms from now,
-- never less than it lives already: several clients' waiters share it, and a client
-- whose waiters sleep longer between tries (many of its tasks wait, so it spaces their
-- rechecks out) asks for a longer life than another client's next try would; shortening
-- it would drop the sleeping waiters' places.
--
-- `GT` sets a later expiry in one command, the common case (a waiter's next try asks for
-- the life its last one did, some of which has passed). It takes a key without an expiry
-- for one that never expires, so a set just created gets its expiry from the `NX`.
local function live_at_least(key, lifetime)
  if redis.call('pexpire', key, lifetime, 'gt') == 0 then
    redis.call('pexpire', key, lifetime, 'nx')
  end
end

-- Promises that `owner` may sleep until `until_ms` (server ms); the set lives at least
-- `lifetime` ms after this promise (it only bounds an abandoned set's life).
local function promise(naps, owner, until_ms, lifetime)
  redis.call('zadd', naps, until_ms, owner)
  live_at_least(naps, lifetime)
end

-- The owners told they may sleep past `expiry` (server ms: the lock's new expiry), taken
-- out of `naps`: the caller tells each of them to try again. At most MAX_BATCH of them
-- (the earliest promises): a set dlock wrote has one entry per waiting owner, and a
-- larger one is not read whole in one call.
local function overslept_at(naps, expiry)
  local late = redis.call('zrangebyscore', naps, '(' .. expiry, '+inf', 'limit', 0, MAX_BATCH)
  if #late > 0 then
    redis.call('zrem', naps, unpack(late))
  end
  return late
end

-- `overslept_at` for an expiry `expires_in` ms from now, for a caller that has not read
-- the clock: it costs one EXISTS, and no clock, when nobody waits.
local function overslept(naps, expires_in)
  if redis.call('exists', naps) == 0 then
    return {}
  end
  return overslept_at(naps, now_ms() + expires_in)
end
