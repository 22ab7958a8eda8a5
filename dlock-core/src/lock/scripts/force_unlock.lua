-- Delete a lock whoever holds it and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel
-- ARGV[1]  publish command: 'publish' or 'spublish'
--
-- Returns 1 when a lock was deleted, 0 when there was none, and 'wrongtype:<type>' when the
-- key holds another type of value: that is application data, not a lock, and is left alone.
local found = redis.call('type', KEYS[1]).ok
if found == 'none' then
  return 0
end
if found ~= 'hash' then
  return 'wrongtype:' .. found
end
redis.call('del', KEYS[1])
redis.call(ARGV[1], KEYS[2], 'unlocked')
return 1
