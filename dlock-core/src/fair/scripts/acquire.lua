-- Take a fair lock for one waiter, or keep the waiter's place in the queue (one call is
-- both the try and the heartbeat).
--
-- KEYS[1]  the lock hash (the reentrant lock's layout: field = owner, value = hold count)
-- KEYS[2]  the queue (see queue.lua)
-- KEYS[3]  the entry deadlines (see queue.lua)
-- KEYS[4]  the fencing-token counter of the lock's slot anchor (never expires)
-- KEYS[5]  what the waiters were told (see scripts/naps.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the waiter: the owner field it will hold
-- ARGV[3]  'wait': enqueue (once) and keep the entry alive; 'try': never enqueue
-- ARGV[4]  entry timeout in milliseconds: the entry dies this long after the waiter's last call
-- ARGV[5]  wake channel prefix
-- ARGV[6]  publish command: 'publish' or 'spublish'
-- ARGV[7]  '1': mint a fencing token on a fresh grant (kept in "<owner>:f", the reentrant
--          lock's field); '0': no token (no INCR)
--
-- Returns {token} when the waiter holds the lock now with tokens on (a retry returns the
-- token of the first grant), nil when it holds it with tokens off; otherwise how long to wait at most before
-- the next call, in ms: the lock's remaining time for the head (or a try with nobody
-- queued), the smaller of the head's remaining entry time and the lock's remaining time for
-- everyone else, never below 1; -1 when the lock has no expiry. 'kind:<kind>' when the name
-- is held as a lock or a read-write lock, 'wrongtype:<type>' when the key holds another
-- type of value (nothing is written in these cases).
--
-- The hash carries the marker field '!fair' while the fair lock is held, so that the
-- other kinds that share lock names refuse it (and it refuses theirs).
--
-- Idempotent, so a call retried after a lost reply is safe: a waiter already holding the
-- lock is granted again (its expiry restarts, as the client counts its lease from the
-- retry), and a queued waiter keeps its place.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > MAX_LEASE_MS then
  return redis.error_reply('ERR dlock fair acquire: lease must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end
local entry = tonumber(ARGV[4])
if entry == nil or entry < 1 or entry > MAX_LEASE_MS then
  return redis.error_reply('ERR dlock fair acquire: entry timeout must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[4]))
end
local me = ARGV[2]

-- The hold of the waiter whose turn it is: the fair lock's marker, its count and its
-- fencing token (the counter only grows: no TTL, untouched by release, force unlock or
-- expiry, so the tokens of one lock strictly increase), and its lease.
local function take()
  local token = nil
  if ARGV[7] == '1' then
    token = redis.call('incr', KEYS[4])
    redis.call('hset', KEYS[1], '!fair', 1, me, 1, me .. ':f', token)
  else
    redis.call('hset', KEYS[1], '!fair', 1, me, 1)
  end
  redis.call('pexpire', KEYS[1], lease)
  if token then
    return {token}
  end
  return nil
end

-- The common case first, before the shared functions are defined below (each definition
-- costs Redis a closure per call): a free lock with nobody queued (so nobody was told
-- to wait either).
if redis.call('exists', KEYS[1]) == 0 and redis.call('exists', KEYS[2]) == 0 then
  return take()
end

-- @shared

local refusal, found = fair_refusal(KEYS[1])
if refusal then
  return refusal
end
local free = found == 'none'

local now = now_ms()
purge(KEYS[2], KEYS[3], now)

-- The reply to a waiter holding the lock: its fencing token (minted at the grant), or
-- nil with tokens off.
local function granted()
  local token = ARGV[7] == '1' and tonumber(redis.call('hget', KEYS[1], me .. ':f'))
  if not token then
    return nil
  end
  return {token}
end

if not free and redis.call('hexists', KEYS[1], me) == 1 then
  redis.call('pexpire', KEYS[1], lease)
  return granted()
end

local head = head_of(KEYS[2])
if free and (head == nil or head == me) then
  redis.call('zrem', KEYS[2], me)
  redis.call('zrem', KEYS[3], me)
  redis.call('zrem', KEYS[5], me)
  local reply = take()
  -- Waiters told they could sleep past this lease try again (the new head takes the lock
  -- when it runs out, though nobody releases it).
  for _, waiter in ipairs(overslept_at(KEYS[5], now + lease)) do
    wake(waiter, ARGV[5], ARGV[6])
  end
  return reply
end
if free then
  -- The lock is free but the head has not taken it: it expired without a release, or the
  -- head was just purged and its successor has not heard. Tell the head.
  wake(head, ARGV[5], ARGV[6])
end

if ARGV[3] == 'wait' then
  if not redis.call('zscore', KEYS[2], me) then
    local tail = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
    local place = 0
    if tail[2] then
      place = tonumber(tail[2]) + 1
    end
    redis.call('zadd', KEYS[2], place, me)
    if head == nil then
      head = me
    end
  end
  redis.call('zadd', KEYS[3], now + entry, me)
  -- An abandoned queue vanishes once its longest-lived entry would have.
  local keep = math.max(redis.call('pttl', KEYS[2]), entry)
  redis.call('pexpire', KEYS[2], keep)
  redis.call('pexpire', KEYS[3], keep)
end

local nap = -1
if not free then
  nap = redis.call('pttl', KEYS[1])
end
-- (Both sets always change and expire together; a head without a deadline would be
-- another version's data, and is left to the recheck.)
local head_deadline = head ~= nil and head ~= me and redis.call('zscore', KEYS[3], head)
if head_deadline then
  local until_dead = tonumber(head_deadline) - now
  if nap < 0 or until_dead < nap then
    nap = until_dead
  end
end
if nap < 1 and nap ~= -1 then
  nap = 1
end
if ARGV[3] == 'wait' then
  promise(KEYS[5], me, now + nap, math.max(redis.call('pttl', KEYS[2]), entry))
end
return nap
