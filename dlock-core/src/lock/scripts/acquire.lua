-- Acquire a reentrant lock for a new owner, or re-enter it for an owner that holds it.
--
-- KEYS[1]  the lock hash: field = owner, value = hold count (one per live guard)
-- KEYS[2]  re-entries: this acquisition's marker (same slot as KEYS[1]); fresh: unused
-- KEYS[3]  the fencing-token counter of the lock's slot anchor (same slot; never expires)
-- KEYS[4]  the lock's waiter registry: a sorted set named like the unlock channel (same
--          slot), client id -> server time in ms when it registered, oldest first. A
--          release wakes the oldest registered client only (see release.lua).
-- ARGV[1]  lease in milliseconds; for a re-entry 0 leaves the expiry as it is (the client
--          validated it; checked again before any write, because a PEXPIRE that fails
--          after HSET would leave a lock that never expires)
-- ARGV[2]  owner field "<client-id>:<owner-id>"
-- ARGV[3]  'fresh' (a new owner id, used by this acquisition only) or 'reenter'
-- ARGV[4]  re-entries: marker lifetime in milliseconds
-- ARGV[5]  '1': mint a fencing token on a fresh grant; '0': no token (no INCR)
-- ARGV[6]  the client id: registered as waiting when a fresh owner finds the lock busy,
--          and the client a reservation names when a release passed the lock to it; ''
--          for a caller that never waits for unlock messages
-- ARGV[7]  the registry's lifetime in ms, renewed by every registration (it only bounds
--          the life of an abandoned registry: clients leave it when they stop waiting);
--          0 registers nothing (a single try, which does not wait)
--
-- Returns {token} when a fresh owner now holds the lock with fencing on (the token minted
-- for it, kept in the hash field "<owner>:f" and deleted with the owner's last hold); nil
-- when the owner now holds the lock otherwise (a re-entry shares its outer hold's token,
-- which the client already has); the remaining time to live of another
-- owner's lock in milliseconds (-1 when it has no expiry or is reserved for another
-- client; a fresh owner's client is then registered as waiting, keeping its place if it
-- was already); 'notheld' when a re-entry finds
-- the owner's hold gone; 'wrongtype:<type>' when the key holds another type of value
-- (nothing is written then).
--
-- Both kinds are idempotent, so a call retried after a lost reply adds no second hold: a
-- fresh owner id belongs to one acquisition only, so finding it means the call was applied;
-- a re-entry finds its marker. The marker also lets an abandoned re-entry be undone once.
-- A retry sets the expiry as the first attempt would have, counted from the retry: the
-- client's deadline is counted from it.
local lease = tonumber(ARGV[1])
local reenter = ARGV[3] == 'reenter'
local lowest = 1
if reenter then
  lowest = 0
end
if lease == nil or lease < lowest or lease > 31622400000 then
  return redis.error_reply('ERR dlock acquire: lease must be ' .. lowest .. '..31622400000 ms, got ' .. tostring(ARGV[1]))
end

local function grant()
  if ARGV[5] ~= '1' then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], lease)
    return nil
  end
  -- A fresh grant mints the next token of the counter: it only ever grows (no TTL, not
  -- touched by release, force unlock or expiry), so tokens of one lock strictly increase.
  local token = redis.call('incr', KEYS[3])
  redis.call('hset', KEYS[1], ARGV[2], 1, ARGV[2] .. ':f', token)
  redis.call('pexpire', KEYS[1], lease)
  return {token}
end

if not reenter and redis.call('exists', KEYS[1]) == 0 then
  return grant()
end

local mine = redis.pcall('hexists', KEYS[1], ARGV[2])
if type(mine) == 'table' and mine.err then
  return 'wrongtype:' .. redis.call('type', KEYS[1]).ok
end

if not reenter then
  -- A release passed the lock to a waiting client: it holds nothing but the reservation
  -- (field '!next' = that client's id, expiring soon), which only that client may take.
  local reserved_for = mine == 0 and redis.call('hget', KEYS[1], '!next')
  if reserved_for and reserved_for == ARGV[6] and ARGV[6] ~= '' then
    redis.call('del', KEYS[1])
    return grant()
  end
  if mine == 1 then
    -- An earlier attempt of this acquisition was applied (its reply was lost, or the
    -- replicas did not confirm it in time). The client counts the lease from this
    -- attempt, so the expiry must start now too, or the lock would end before the
    -- holder's deadline.
    redis.call('pexpire', KEYS[1], lease)
    -- The same token as the first attempt: the one stored with the hold.
    local token = redis.call('hget', KEYS[1], ARGV[2] .. ':f')
    if ARGV[5] ~= '1' or not token then
      return nil
    end
    return {tonumber(token)}
  end
  if ARGV[6] ~= '' and ARGV[7] ~= '0' then
    local now = redis.call('time')
    redis.call('zadd', KEYS[4], 'nx', now[1] * 1000 + math.floor(now[2] / 1000), ARGV[6])
    redis.call('pexpire', KEYS[4], ARGV[7])
  end
  if reserved_for then
    -- Reserved for another client, which holds it next: this client is registered and
    -- woken in its turn, so its waiter need not try again when the reservation ends
    -- (-1: no expiry known; it still rechecks every max_wait_recheck).
    return -1
  end
  return redis.call('pttl', KEYS[1])
end

if mine == 0 then
  return 'notheld'
end
-- A retried re-entry finds its marker: its hold is there already.
if redis.call('exists', KEYS[2]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2], 1, 'px', ARGV[4])
end
-- A re-entry never shortens the expiry, and only lengthens it when it asked for a lease.
if lease > 0 and redis.call('pttl', KEYS[1]) < lease then
  redis.call('pexpire', KEYS[1], lease)
end
return nil
