-- Acquire a read or write hold of a read-write lock (see the layout at the top).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiting writers: sorted set, writer owner -> server deadline of its entry
-- KEYS[3]  re-entries: this acquisition's marker; fresh owners: KEYS[1] (unused)
-- KEYS[4]  the fencing-token counter of the lock's slot anchor (never expires)
-- KEYS[5]  what the waiters were told (see scripts/naps.lua)
-- KEYS[6]  the lock's unlock channel
-- ARGV[1]  lease in ms (1..MAX_LEASE_MS; a re-entry may pass 0: the deadline stays)
-- ARGV[2]  owner "<client-id>:<owner-id>"
-- ARGV[3]  'read' or 'write'
-- ARGV[4]  'fresh' (a new owner id, used by this acquisition only) or 'reenter' (an owner
--          whose scope the caller runs in: a re-entrant read or write, or a downgrade)
-- ARGV[5]  re-entries: marker lifetime in ms
-- ARGV[6]  fresh writers: lifetime in ms of the waiting entry left when the lock is busy
--          (0: a single try, no entry)
-- ARGV[7]  '1': mint a fencing token when a fresh writer takes the lock; '0': no token
-- ARGV[8]  fresh owners that wait: how long in ms the promise of a busy answer is kept
--          (see scripts/naps.lua); 0: a single try, which is promised nothing
-- ARGV[9]  publish command: 'publish' or 'spublish'
--
-- Returns {token} when a fresh writer holds the lock with tokens on (a retry returns the
-- token of the first grant); nil when the hold is taken otherwise (reads, re-entries,
-- tokens off); a busy hint in ms (how long before the next try is
-- worth it at the latest) when it is not; 'notheld' when a re-entry finds its owner gone;
-- 'upgrade' when a write re-entry finds an owner that only reads; 'crowded:<n>' when a
-- fresh reader finds MAX_HOLDERS owners; 'kind:<kind>' when the name is held as a lock or
-- a fair lock; 'wrongtype:<type>' when the key holds another
-- type of value (nothing is written in these cases).
--
-- Writer preference: while a live writer waits, new readers are refused (re-entrant reads
-- and downgrades pass), so a flood of readers cannot starve writers. A waiting writer
-- refreshes its entry at every try; a dead one's entry lapses after its lifetime.
--
-- Idempotent like the reentrant lock's acquire: a fresh owner found holding means an
-- earlier attempt of the same acquisition was applied; a re-entry finds its marker.
local lease = tonumber(ARGV[1])
local owner = ARGV[2]
local write = ARGV[3] == 'write'
local reenter = ARGV[4] == 'reenter'
local lowest = 1
if reenter then
  lowest = 0
end
if lease == nil or lease < lowest or lease > MAX_LEASE_MS then
  return redis.error_reply('ERR dlock rw acquire: lease must be ' .. lowest .. '..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end

-- The common case first, before the shared functions are defined below (each definition
-- costs Redis a closure per call): a fresh owner takes a free lock nobody waits for (no
-- waiting writer, no waiter told to sleep).
if not reenter and redis.call('exists', KEYS[1]) == 0 and redis.call('exists', KEYS[2]) == 0
    and redis.call('exists', KEYS[5]) == 0 then
  local time = redis.call('time')
  -- scripts/clock.lua's hold_deadline, written out: it is not defined yet here.
  local deadline = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + lease + 1
  if not write then
    redis.call('hset', KEYS[1], 'mode', 'read', owner, 1, owner .. ':t', deadline)
    redis.call('pexpire', KEYS[1], lease)
    return nil
  end
  redis.call('hset', KEYS[1], 'mode', 'write', owner .. ':w', 1, owner .. ':t', deadline)
  redis.call('pexpire', KEYS[1], lease)
  if ARGV[7] ~= '1' then
    return nil
  end
  -- The counter only grows, so the tokens of one lock strictly increase.
  local token = redis.call('incr', KEYS[4])
  redis.call('hset', KEYS[1], owner .. ':f', token)
  return {token}
end

-- @shared

local found = redis.call('type', KEYS[1]).ok
if found ~= 'none' and found ~= 'hash' then
  return 'wrongtype:' .. found
end
if found == 'hash' then
  local foreign = rw_foreign(KEYS[1])
  if foreign then
    return 'kind:' .. foreign
  end
end

local now = now_ms()
local deadlines, writer, holders = rw_purge(KEYS[1], now)
-- Waiting writers whose entry lapsed, at most MAX_BATCH per call: one left at the head
-- makes a reader's nap 1 ms, and the next try takes the next batch.
local lapsed = redis.call('zrangebyscore', KEYS[2], '-inf', now, 'limit', 0, MAX_BATCH)
if #lapsed > 0 then
  redis.call('zrem', KEYS[2], unpack(lapsed))
end
local latest = rw_latest(deadlines)
local field = owner
if write then
  field = owner .. ':w'
end
local reads = tonumber(redis.call('hget', KEYS[1], owner)) or 0
local writes = tonumber(redis.call('hget', KEYS[1], owner .. ':w')) or 0

-- Extends `owner`'s deadline to `deadline` (never shortens it) and the hash with it.
local function hold_until(deadline)
  local mine = deadlines[owner] or 0
  if deadline > mine then
    redis.call('hset', KEYS[1], owner .. ':t', deadline)
    mine = deadline
  end
  redis.call('pexpire', KEYS[1], math.max(latest, mine) - now)
end

if reenter then
  if reads + writes == 0 then
    return 'notheld'
  end
  if write and writes == 0 then
    return 'upgrade'
  end
  if redis.call('exists', KEYS[3]) == 0 then
    redis.call('hincrby', KEYS[1], field, 1)
    redis.call('set', KEYS[3], 1, 'px', ARGV[5])
  end
  if lease > 0 then
    hold_until(hold_deadline(now, lease))
  end
  return nil
end

-- A fresh owner already holding: an earlier attempt was applied. The client counts the
-- lease from this attempt, so the deadline is counted from now too.
-- A fresh writer's grant: its token (minted once, kept in "<owner>:f"), or nil with
-- tokens off. The counter only grows, so the tokens of one lock strictly increase.
local function granted()
  if ARGV[7] ~= '1' then
    return nil
  end
  local token = tonumber(redis.call('hget', KEYS[1], owner .. ':f'))
  if not token then
    token = redis.call('incr', KEYS[4])
    redis.call('hset', KEYS[1], owner .. ':f', token)
  end
  return {token}
end

if (write and writes > 0) or (not write and reads > 0) then
  hold_until(hold_deadline(now, lease))
  if write then
    redis.call('zrem', KEYS[2], owner)
    return granted()
  end
  return nil
end

-- How long until the holders' leases run out (at least 1 ms): the busy answer, which a
-- fresh owner that waits is promised it may sleep.
local function busy(until_ms)
  local nap = math.max(1, until_ms - now)
  if ARGV[8] ~= '0' then
    promise(KEYS[5], owner, now + nap, ARGV[8])
  end
  return nap
end

-- A fresh owner holds the lock now, which expires `expires_in` ms from now: out of the
-- naps, and the waiters told they could sleep past that expiry try again (each message
-- wakes the readers and one writer of every client that waits).
local function taken(expires_in)
  redis.call('zrem', KEYS[5], owner)
  for _ in ipairs(overslept_at(KEYS[5], now + expires_in)) do
    redis.call(ARGV[9] == 'spublish' and 'spublish' or 'publish', KEYS[6], 'unlocked')
  end
end

if write then
  if next(deadlines) ~= nil then
    local entry = tonumber(ARGV[6])
    if entry > 0 then
      redis.call('zadd', KEYS[2], now + entry, owner)
      if redis.call('pttl', KEYS[2]) < entry then
        redis.call('pexpire', KEYS[2], entry)
      end
    end
    return busy(latest)
  end
  redis.call('zrem', KEYS[2], owner)
  redis.call('hset', KEYS[1], 'mode', 'write', field, 1, owner .. ':t', hold_deadline(now, lease))
  redis.call('pexpire', KEYS[1], lease)
  taken(lease)
  return granted()
end

if writer then
  return busy(latest)
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if #first > 0 then
  -- A writer waits: it goes first. Its release (or its giving up) publishes.
  if latest > now then
    return busy(latest)
  end
  return busy(tonumber(first[2]))
end
if holders >= MAX_HOLDERS then
  return 'crowded:' .. MAX_HOLDERS
end
local deadline = hold_deadline(now, lease)
redis.call('hset', KEYS[1], 'mode', 'read', field, 1, owner .. ':t', deadline)
redis.call('pexpire', KEYS[1], math.max(latest, deadline) - now)
taken(math.max(latest, deadline) - now)
return nil
