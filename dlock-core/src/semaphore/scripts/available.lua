-- The state of a semaphore after reclaiming its expired grants.
--
-- KEYS[1]  the grants hash (its name is also the semaphore's channel)
-- KEYS[2]  the capacity
-- ARGV[1]  publish command: 'publish' or 'spublish'
--
-- Returns {stored capacity or -1 when none is stored, permits held by live grants}, or
-- 'wrongtype:<type>' when a key holds another type of value. Publishes when it reclaimed.
local foreign = sem_foreign(KEYS[1], 'hash') or sem_foreign(KEYS[2], 'string')
if foreign then
  return 'wrongtype:' .. foreign
end
local held, _, _, reclaimed = sem_reclaim(KEYS[1], now_ms())
local cap = tonumber(redis.call('get', KEYS[2]))
if reclaimed > 0 then
  sem_publish(ARGV[1], KEYS[1], cap, held)
end
return {cap or -1, held}
