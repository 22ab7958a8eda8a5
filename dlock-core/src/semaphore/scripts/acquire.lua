-- Take `n` permits of a semaphore as one grant, or say how long to wait.
--
-- KEYS[1]  the grants hash (its name is also the semaphore's channel)
-- KEYS[2]  the capacity
-- ARGV[1]  grant id "<client-id>:<owner-id>", one per acquisition (retries reuse it)
-- ARGV[2]  n: permits wanted (1..capacity, checked by the client)
-- ARGV[3]  lease in ms (1..MAX_LEASE_MS)
-- ARGV[4]  the capacity the caller's handle was created with
-- ARGV[5]  publish command: 'publish' or 'spublish'
--
-- Returns nil when the grant is taken (also when an earlier try of the same acquisition
-- took it and its reply was lost: the deadline is then counted from now); a positive
-- number of ms until the earliest live deadline when too few permits are free;
-- 'drift:<stored>' when the stored capacity differs from ARGV[4] (nothing is granted);
-- 'crowded:<n>' when a new grant would make more than n = MAX_HOLDERS;
-- 'wrongtype:<type>' when a key holds another type of value (nothing is written).
--
-- Reclaims expired grants first, and publishes when it did: the permits it freed may let
-- other waiters in even when this caller is still short.
local n = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local permits = tonumber(ARGV[4])
if lease == nil or lease < 1 or lease > MAX_LEASE_MS then
  return redis.error_reply('ERR dlock semaphore acquire: lease must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[3]))
end
if n == nil or permits == nil or n < 1 or permits < 1 or n > permits then
  return redis.error_reply('ERR dlock semaphore acquire: need 1 <= n <= permits, got ' .. tostring(ARGV[2]) .. ' of ' .. tostring(ARGV[4]))
end
local foreign = sem_foreign(KEYS[1], 'hash') or sem_foreign(KEYS[2], 'string')
if foreign then
  return 'wrongtype:' .. foreign
end

local now = now_ms()
local held, earliest, latest, reclaimed = sem_reclaim(KEYS[1], now)
local cap = tonumber(redis.call('get', KEYS[2]))
if cap == nil then
  redis.call('set', KEYS[2], permits)
  cap = permits
end

local grant = ARGV[1]
local function take()
  local deadline = hold_deadline(now, lease)
  redis.call('hset', KEYS[1], grant, n, grant .. ':t', deadline)
  redis.call('pexpire', KEYS[1], math.max(latest, deadline) - now)
end

local reply = nil
if cap ~= permits then
  reply = 'drift:' .. cap
elseif redis.call('hexists', KEYS[1], grant) == 1 then
  -- An earlier try of this acquisition was applied (its reply was lost).
  take()
elseif held + n > cap then
  -- held > 0 here (n <= cap), so some grant is live and `earliest` is set.
  reply = math.max(1, earliest - now)
elseif redis.call('hlen', KEYS[1]) >= 2 * MAX_HOLDERS then
  -- A new grant beside MAX_HOLDERS live ones is refused: the reclaim reads every grant,
  -- and this bound keeps each call short.
  reply = 'crowded:' .. MAX_HOLDERS
else
  take()
  held = held + n
end
if reclaimed > 0 then
  sem_publish(ARGV[5], KEYS[1], cap, held)
end
return reply
