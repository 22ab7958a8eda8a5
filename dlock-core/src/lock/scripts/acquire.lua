-- Acquire a reentrant lock for a new owner, or re-enter it for an owner that holds it.
--
-- KEYS[1]  the lock hash: field = owner, value = hold count (one per live guard)
-- KEYS[2]  the fencing-token counter of the lock's slot anchor (same slot; never expires)
-- KEYS[3]  the lock's waiter registry (see handoff.lua; same slot)
-- KEYS[4]  what its waiters were told (see naps.lua; same slot)
-- KEYS[5]  a re-entry only: this acquisition's marker (same slot as KEYS[1]); its presence
--          is what makes the call a re-entry (a fresh owner sends four keys: every key
--          and argument costs the server a Lua string per call)
-- ARGV[1]  lease in milliseconds; for a re-entry 0 leaves the expiry as it is (the client
--          validated it; checked again before any write, because a PEXPIRE that fails
--          after HSET would leave a lock that never expires)
-- ARGV[2]  owner field "<client-id>:<owner-id>": a new owner id, used by this acquisition
--          only, or for a re-entry the owner whose scope the caller runs in
-- ARGV[3]  '1': mint a fencing token on a fresh grant; '0': no token (no INCR)
-- ARGV[4]  the registry's lifetime in ms, lengthened by every registration: a fresh owner
--          that finds the lock busy registers as waiting; 0 registers nothing (a single
--          try, which does not wait)
-- ARGV[5]  '1' when an earlier try of this acquisition may have registered the owner: a
--          grant then takes it out of the registry; '0' otherwise
-- ARGV[6]  publish command: 'publish' or 'spublish'
-- ARGV[7]  a re-entry only: the marker's lifetime in milliseconds
--
-- Returns {token} when a fresh owner now holds the lock with fencing on (the token minted
-- for it, kept in the hash field "<owner>:f" and deleted with the owner's last hold); nil
-- when the owner now holds the lock otherwise (a re-entry shares its outer hold's token,
-- which the client already has); when another owner has it, the time in ms until it can
-- change hands: the holder's remaining lease, or the remaining life of a grant to another
-- waiter (a grant nobody extends lapses then, and the waiter tries again);
-- 'notheld' when a re-entry finds the owner's hold gone; 'kind:<kind>' when the name is
-- held as a fair or read-write lock; 'wrongtype:<type>' when the key holds another type
-- of value (nothing is written in these cases).
--
-- Both kinds are idempotent, so a call retried after a lost reply adds no second hold: a
-- fresh owner id belongs to one acquisition only, so finding it means the call was applied;
-- a re-entry finds its marker. The marker also lets an abandoned re-entry be undone once.
-- A retry sets the expiry as the first attempt would have, counted from the retry: the
-- client's deadline is counted from it.
local lease = tonumber(ARGV[1])
local reenter = KEYS[5] ~= nil
local lowest = 1
if reenter then
  lowest = 0
end
-- The lease goes to PEXPIRE as the client wrote it: a number would be formatted back to
-- text with '%.17g' on every call, which costs Redis 7.0 more than the command. So it
-- must be written as PEXPIRE reads it (no sign, no leading zero, no exponent).
if lease == nil or lease < lowest or lease > MAX_LEASE_MS or not string.find(ARGV[1], '^[1-9]%d*$') and ARGV[1] ~= '0' then
  return redis.error_reply('ERR dlock acquire: lease must be ' .. lowest .. '..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end

-- The hold of a fresh owner: its count, its fencing token and its lease. A token is the
-- next of the counter: it only ever grows (no TTL, not touched by release, force unlock
-- or expiry), so the tokens of one lock strictly increase.
-- (Every value written is text: see the lease above; '%d' formats an integer cheaply.)
local function take()
  local token = nil
  if ARGV[3] == '1' then
    token = redis.call('incr', KEYS[2])
    redis.call('hset', KEYS[1], ARGV[2], '1', ARGV[2] .. ':f', string.format('%d', token))
  else
    redis.call('hset', KEYS[1], ARGV[2], '1')
  end
  redis.call('pexpire', KEYS[1], ARGV[1])
  if token then
    return {token}
  end
  return nil
end

-- The common case first, before the shared functions are defined below (each definition
-- costs Redis a closure per call): a free lock, taken by an owner that never waited for
-- it. Nobody can have been told to sleep past its lease: a waiter is told the expiry of
-- the lock as it stands, a free lock's waiters were told an expiry that has passed, and a
-- lock freed early by its holder is given to a waiter or the client's next task (see
-- release.lua), not free.
local free = not reenter and redis.call('exists', KEYS[1]) == 0
if free and ARGV[5] ~= '1' then
  return take()
end

-- @shared

-- A fresh owner takes the lock: out of the waiters, its hold, and the waiters told they
-- may sleep past its lease are told to try again.
local function grant()
  if ARGV[5] == '1' then
    redis.call('zrem', KEYS[3], ARGV[2])
    redis.call('zrem', KEYS[4], ARGV[2])
  end
  local reply = take()
  wake_overslept(KEYS[3], KEYS[4], ARGV[6], lease)
  return reply
end

if free then
  return grant()
end

-- One read for the owner's hold and the other kinds' markers.
local found = redis.pcall('hmget', KEYS[1], ARGV[2], 'mode', '!fair')
if found.err then
  return 'wrongtype:' .. redis.call('type', KEYS[1]).ok
end
local mine = found[1] ~= false

if not reenter then
  if mine then
    -- An earlier attempt of this acquisition was applied (its reply was lost, or the
    -- replicas did not confirm it in time), or a release gave it the lock and the
    -- client did not learn so or could not use it (see release.lua). The client counts the lease from this
    -- attempt, so the expiry must start now too, or the lock would end before the
    -- holder's deadline.
    redis.call('pexpire', KEYS[1], ARGV[1])
    -- The hold is the owner's now as if this try had taken it: out of the waiters, as
    -- every try that ends holding (a release would otherwise grant the lock again to an
    -- owner that holds it, maybe done with it by then), and no '!next' left from a grant
    -- (see handoff.lua).
    if ARGV[5] == '1' then
      redis.call('zrem', KEYS[3], ARGV[2])
      redis.call('zrem', KEYS[4], ARGV[2])
    end
    redis.call('hdel', KEYS[1], '!next')
    -- Its lease may end before what a waiter was told (a grant's lapse, the last holder's
    -- lease): that waiter is told to try again, as for any hold (see naps.lua).
    wake_overslept(KEYS[3], KEYS[4], ARGV[6], lease)
    -- The same token as the first attempt: the one stored with the hold. A hold a
    -- release gave the owner without one (nobody had minted a token of this lock yet)
    -- gets its token now.
    if ARGV[3] ~= '1' then
      return nil
    end
    local token = redis.call('hget', KEYS[1], ARGV[2] .. ':f')
    if not token then
      token = redis.call('incr', KEYS[2])
      redis.call('hset', KEYS[1], ARGV[2] .. ':f', string.format('%d', token))
    end
    return {tonumber(token)}
  end
  if found[2] then
    return 'kind:read_write'
  elseif found[3] then
    return 'kind:fair'
  end
  local ttl = redis.call('pttl', KEYS[1])
  if ARGV[4] ~= '0' then
    local time = redis.call('time')
    register(KEYS[3], ARGV[2], time, ARGV[4])
    promise(KEYS[4], ARGV[2], ms_of(time) + ttl, ARGV[4])
  end
  return ttl
end

if not mine then
  return 'notheld'
end
-- A retried re-entry finds its marker: its hold is there already.
if redis.call('exists', KEYS[5]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[5], 1, 'px', ARGV[7])
end
-- A re-entry never shortens the expiry, and only lengthens it when it asked for a lease.
if lease > 0 and redis.call('pttl', KEYS[1]) < lease then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return nil
