-- Take several reentrant locks at once for one new owner, or none of them.
--
-- KEYS[1..n]  the lock hashes, all in one cluster slot; the same layout as a single lock
--             (field = owner, value = hold count, "<owner>:f" = its fencing token), so a
--             lock taken here excludes and is excluded by a plain lock of the same name,
--             and is renewed and released by the lock's own scripts, key by key
-- KEYS[n+1..2n]  the fencing-token counter of each lock (KEYS[n+i] for KEYS[i]), same slot
-- KEYS[2n+1..3n]  the waiter registry of each lock (see lock/scripts/handoff.lua), same
--             slot
-- KEYS[3n+1..4n]  what each lock's waiters were told (see scripts/naps.lua), same slot
-- ARGV[1]     lease in milliseconds (1..MAX_LEASE_MS; checked before any write)
-- ARGV[2]     owner field "<client-id>:<owner-id>", a fresh owner used by this acquisition
--             only
-- ARGV[3]     '1': mint a fencing token for each lock; '0': no tokens (no INCR)
-- ARGV[4]     the registry's lifetime in ms; 0 registers nothing (a single try)
-- ARGV[5]     '1' when an earlier try of this acquisition may have registered the owner
--             in some lock's registry, else '0'
-- ARGV[6]     publish command: 'publish' or 'spublish'
-- ARGV[7]     how long a lock passed on is given to its next waiter until that waiter
--             extends it, in ms
--
-- Returns {'ok', token_1, ..., token_n} when the owner now holds every lock (one hold
-- each, expiring after the lease; the tokens are 0 with tokens off); {'busy', i, ttl} when
-- another owner holds KEYS[i]: of the held keys, the one whose owner's lease ends first,
-- and the time in ms until it can change hands, so the caller naps until then and listens
-- on that lock's channel. Nothing of the owner's is left then but its registration as a
-- waiter of KEYS[i]: it leaves every other registry, and a lock given to it that it
-- cannot take now goes to that lock's next waiter ({'busy', i, ttl, 'untold'} when that
-- hand-off stopped at its bound with waiters left untold: the client then sends each
-- lock's 'leave', see lock/scripts/handoff.lua). 'wrongtype:<i>:<type>' when KEYS[i]
-- holds another type of value, 'kind:<i>:<kind>' when it is held as a fair or read-write
-- lock (nothing is written in these cases).
--
-- Idempotent: the owner is fresh, so finding it in a hash means an earlier attempt of this
-- acquisition was applied (its reply was lost); a retry counts it as free and sets the
-- expiry again from now, as the client counts the lease from the retry, and keeps the
-- tokens the first attempt minted.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > MAX_LEASE_MS then
  return redis.error_reply('ERR dlock multi acquire: lease must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end

local n = #KEYS / 4
local owner = ARGV[2]
local blocker, blocker_ttl = nil, nil
-- Locks a release gave this owner (its hold; see lock/scripts/handoff.lua's
-- grant_to_oldest).
local given = {}
for i = 1, n do
  local key = KEYS[i]
  local found = redis.pcall('hmget', key, owner, 'mode', '!fair')
  if found.err then
    return 'wrongtype:' .. i .. ':' .. redis.call('type', key).ok
  end
  if found[2] then
    return 'kind:' .. i .. ':read_write'
  elseif found[3] then
    return 'kind:' .. i .. ':fair'
  end
  if found[1] then
    given[i] = true
  elseif redis.call('exists', key) == 1 then
    local ttl = redis.call('pttl', key)
    if blocker == nil or (ttl >= 0 and (blocker_ttl < 0 or ttl < blocker_ttl)) then
      blocker, blocker_ttl = i, ttl
    end
  end
end
local registered = ARGV[5] == '1'

-- Every lock's hold for the owner, with its fencing token (the one an earlier attempt
-- minted, if any); {'ok', token...}.
local function take_all()
  local granted = {'ok'}
  for i = 1, n do
    local key = KEYS[i]
    if given[i] then
      -- A lock given to the owner is its hold now like the others: no '!next' left beside
      -- it, which would read as a grant lapsing soon (as lock/scripts/acquire.lua does
      -- for a hold it finds its own).
      redis.call('hdel', key, '!next')
    end
    local token = 0
    if ARGV[3] == '1' then
      token = tonumber(redis.call('hget', key, owner .. ':f'))
      if not token then
        token = redis.call('incr', KEYS[n + i])
      end
      redis.call('hset', key, owner, 1, owner .. ':f', token)
    else
      redis.call('hset', key, owner, 1)
    end
    redis.call('pexpire', key, lease)
    granted[i + 1] = token
  end
  return granted
end

-- The common case first, before the shared functions are defined below (each definition
-- costs Redis a closure per call): every lock free, taken by an owner that never waited,
-- with no waiter of any of them told to sleep past the lease.
if blocker == nil and not registered then
  local told = false
  for i = 1, n do
    if redis.call('exists', KEYS[3 * n + i]) == 1 then
      told = true
      break
    end
  end
  if not told then
    return take_all()
  end
end

-- @shared

if blocker ~= nil then
  for i = 1, n do
    local registry = KEYS[2 * n + i]
    if i ~= blocker then
      if registered then
        redis.call('zrem', registry, owner)
        redis.call('zrem', KEYS[3 * n + i], owner)
      end
      -- A lock passed to the owner that it cannot take with the others now goes to
      -- that lock's next waiter (a hold of the owner's found here was given, or taken
      -- by an earlier attempt whose locks are not all this owner's any more).
      if given[i] then
        redis.call('del', KEYS[i])
        grant_to_oldest(KEYS[i], registry, KEYS[3 * n + i], ARGV[6], ARGV[7], KEYS[n + i])
      end
    end
  end
  -- The owner waits for the blocking lock like a single lock's waiter: a release of it
  -- wakes the longest-waiting live owner.
  if ARGV[4] ~= '0' then
    local time = redis.call('time')
    register(KEYS[2 * n + blocker], owner, time, ARGV[4])
    promise(KEYS[3 * n + blocker], owner, ms_of(time) + blocker_ttl, ARGV[4])
  end
  return with_untold({'busy', blocker, blocker_ttl})
end

if registered then
  for i = 1, n do
    redis.call('zrem', KEYS[2 * n + i], owner)
    redis.call('zrem', KEYS[3 * n + i], owner)
  end
end
local granted = take_all()
for i = 1, n do
  wake_overslept(KEYS[2 * n + i], KEYS[3 * n + i], ARGV[6], lease)
end
return granted
