-- Release one hold (or all holds) of a reentrant lock, idempotently.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel (same slot as KEYS[1])
-- KEYS[3]  the release memo for this release operation (same slot as KEYS[1])
-- ARGV[1]  owner field
-- ARGV[2]  'one' to drop one hold, 'all' to drop every hold of the owner
-- ARGV[3]  memo lifetime in milliseconds
-- ARGV[4]  publish command: 'publish' or 'spublish'
--
-- Returns -1 when the owner does not hold the lock, 0 when the lock is now free (waiters
-- were notified), n > 0 when the owner still holds it n times.
--
-- A release whose reply was lost is retried with the same memo key: the memo returns the
-- first outcome instead of reporting "not held" for a release that actually succeeded, and
-- a retry never touches a lock another owner acquired in the meantime.
local memo = redis.call('get', KEYS[3])
if memo then
  return tonumber(memo)
end

local count = redis.call('hget', KEYS[1], ARGV[1])
if not count then
  return -1
end

local remaining = tonumber(count) - 1
if ARGV[2] == 'all' then
  remaining = 0
end

if remaining > 0 then
  redis.call('hset', KEYS[1], ARGV[1], remaining)
else
  redis.call('hdel', KEYS[1], ARGV[1])
  if redis.call('exists', KEYS[1]) == 0 then
    redis.call(ARGV[4], KEYS[2], 'unlocked')
  end
end

redis.call('set', KEYS[3], remaining, 'px', ARGV[3])
return remaining
