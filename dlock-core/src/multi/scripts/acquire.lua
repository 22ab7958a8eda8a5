-- Take several reentrant locks at once for one new owner, or none of them.
--
-- KEYS[1..n]  the lock hashes, all in one cluster slot; the same layout as a single lock
--             (field = owner, value = hold count, "<owner>:f" = its fencing token), so a
--             lock taken here excludes and is excluded by a plain lock of the same name,
--             and is renewed and released by the lock's own scripts, key by key
-- KEYS[n+1..2n]  the fencing-token counter of each lock (KEYS[n+i] for KEYS[i]), same slot
-- KEYS[2n+1..3n]  the waiter registry of each lock (named like its unlock channel; see
--             lock/scripts/acquire.lua), same slot
-- ARGV[1]     lease in milliseconds (1..31622400000; checked before any write)
-- ARGV[2]     owner field "<client-id>:<owner-id>", a fresh owner used by this acquisition
--             only
-- ARGV[3]     '1': mint a fencing token for each lock; '0': no tokens (no INCR)
-- ARGV[4]     the client id, registered as waiting for the blocking lock when busy
-- ARGV[5]     the registry's lifetime in ms; 0 registers nothing (a single try)
--
-- Returns {'ok', token_1, ..., token_n} when the owner now holds every lock (one hold each,
-- expiring after the lease; the tokens are 0 with tokens off); {i, ttl} when another owner holds KEYS[i] and nothing was written but the client's registration as a waiter of it: of the held
-- keys, the one whose owner's lease ends first, and its remaining time to live in ms (-1
-- when it has no expiry), so the caller naps until then and listens on that lock's
-- channel; 'wrongtype:<i>:<type>' when KEYS[i] holds another type of value (nothing is
-- written then).
--
-- Idempotent: the owner is fresh, so finding it in a hash means an earlier attempt of this
-- acquisition was applied (its reply was lost); a retry counts it as free and sets the
-- expiry again from now, as the client counts the lease from the retry, and keeps the
-- tokens the first attempt minted.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > 31622400000 then
  return redis.error_reply('ERR dlock multi acquire: lease must be 1..31622400000 ms, got ' .. tostring(ARGV[1]))
end

local n = #KEYS / 3
local blocker, blocker_ttl = nil, nil
-- Locks a release passed to this client (reserved: field '!next' = the client id).
local reserved = {}
for i = 1, n do
  local key = KEYS[i]
  local mine = redis.pcall('hexists', key, ARGV[2])
  if type(mine) == 'table' and mine.err then
    return 'wrongtype:' .. i .. ':' .. redis.call('type', key).ok
  end
  if mine == 0 and redis.call('hget', key, '!next') == ARGV[4] then
    reserved[i] = true
  elseif mine == 0 and redis.call('exists', key) == 1 then
    local ttl = redis.call('pttl', key)
    if blocker == nil or (ttl >= 0 and (blocker_ttl < 0 or ttl < blocker_ttl)) then
      blocker, blocker_ttl = i, ttl
    end
  end
end
if blocker ~= nil then
  -- The client waits for the blocking lock like a single lock's waiter: a release of it
  -- wakes the longest-waiting client.
  if ARGV[5] ~= '0' then
    local now = redis.call('time')
    local registry = KEYS[2 * n + blocker]
    redis.call('zadd', registry, 'nx', now[1] * 1000 + math.floor(now[2] / 1000), ARGV[4])
    redis.call('pexpire', registry, ARGV[5])
  end
  return {blocker, blocker_ttl}
end

local granted = {'ok'}
for i = 1, n do
  local key = KEYS[i]
  if reserved[i] then
    redis.call('del', key)
  end
  local token = 0
  if ARGV[3] == '1' then
    token = tonumber(redis.call('hget', key, ARGV[2] .. ':f'))
    if not token then
      token = redis.call('incr', KEYS[n + i])
    end
    redis.call('hset', key, ARGV[2], 1, ARGV[2] .. ':f', token)
  else
    redis.call('hset', key, ARGV[2], 1)
  end
  redis.call('pexpire', key, lease)
  granted[i + 1] = token
end
return granted
