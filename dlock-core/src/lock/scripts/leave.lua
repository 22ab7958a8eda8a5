-- A client stops waiting for a lock: it leaves the lock's waiter registry, and passes on
-- a wake-up a release may have sent it meanwhile.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel, also the name of its waiter registry
-- ARGV[1]  the client id
-- ARGV[2]  publish command: 'publish' or 'spublish'
-- ARGV[3]  '1' when the client stops waiting without having acquired the lock (a
--          wake-up sent to it would be lost), '0' when its last waiter acquired it
--
-- Returns 1 when the wake-up was passed on to the next waiting client, else 0.
--
-- A client that is no longer registered may have been chosen by a release (which removes
-- the client it wakes). If the lock is still free, that wake-up found nobody to use it:
-- the next registered client gets it, so the lock does not sit idle until the waiters'
-- next recheck.
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 or ARGV[3] ~= '1' then
  return 0
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
local oldest = redis.call('zpopmin', KEYS[2])
if oldest[1] == nil then
  return 0
end
redis.call(ARGV[2], KEYS[2], oldest[1])
return 1
