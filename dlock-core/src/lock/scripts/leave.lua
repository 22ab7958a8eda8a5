-- A client stops waiting for a lock: it leaves the lock's waiter registry, and passes on
-- a wake-up a release may have sent it meanwhile.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel, also the name of its waiter registry
-- ARGV[1]  the client id
-- ARGV[2]  publish command: 'publish' or 'spublish'
-- ARGV[3]  '1' when the client stops waiting without having acquired the lock (a
--          wake-up sent to it would be lost), '0' when its last waiter acquired it
-- ARGV[4]  how long the lock stays reserved for the client the wake-up goes to, in ms
--
-- Returns 1 when the wake-up was passed on to the next waiting client, else 0.
--
-- A client that is no longer registered may have been chosen by a release (which removes
-- the client it wakes and reserves the lock for it, see release.lua). If the lock is
-- free or reserved for this client, that wake-up found nobody to use it: the next
-- registered client gets it, so the lock does not sit idle until the reservation expires
-- or the waiters' next recheck.
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 or ARGV[3] ~= '1' then
  return 0
end
local reserved = redis.pcall('hget', KEYS[1], '!next')
if type(reserved) == 'table' then
  return 0
end
if reserved ~= ARGV[1] and redis.call('exists', KEYS[1]) == 1 then
  return 0
end
local oldest = redis.call('zpopmin', KEYS[2])
if oldest[1] == nil then
  redis.call('del', KEYS[1])
  return 0
end
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], '!next', oldest[1])
redis.call('pexpire', KEYS[1], ARGV[4])
redis.call(ARGV[2], KEYS[2], oldest[1])
return 1
