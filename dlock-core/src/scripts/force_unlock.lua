-- Delete a lock whoever holds it and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel
-- ARGV[1]  publish command: 'publish' or 'spublish'
--
-- Returns 1 when a lock was deleted, 0 when there was none.
if redis.call('del', KEYS[1]) == 1 then
  redis.call(ARGV[1], KEYS[2], 'unlocked')
  return 1
end
return 0
