-- Set a semaphore's capacity: the only way it changes.
--
-- KEYS[1]  the grants hash (its name is also the semaphore's channel)
-- KEYS[2]  the capacity
-- ARGV[1]  the new capacity (>= 1)
-- ARGV[2]  publish command: 'publish' or 'spublish'
--
-- Live grants are never revoked: after a shrink below the permits held, nothing is
-- granted until enough come back. Publishes, so that waiters re-check at once after a
-- grow. Returns 'ok', or 'wrongtype:<type>' when a key holds another type of value.
local permits = tonumber(ARGV[1])
if permits == nil or permits < 1 then
  return redis.error_reply('ERR dlock semaphore set_permits: need permits >= 1, got ' .. tostring(ARGV[1]))
end
local foreign = sem_foreign(KEYS[1], 'hash') or sem_foreign(KEYS[2], 'string')
if foreign then
  return 'wrongtype:' .. foreign
end
local held = sem_reclaim(KEYS[1], now_ms())
redis.call('set', KEYS[2], permits)
sem_publish(ARGV[2], KEYS[1], permits, held)
return 'ok'
