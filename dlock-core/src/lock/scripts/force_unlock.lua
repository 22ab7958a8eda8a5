-- Delete a lock whoever holds it, tell its holders' clients, and pass it to the
-- longest-waiting live waiter.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's waiter registry (see handoff.lua)
-- KEYS[3]  what the lock's waiters were told (see naps.lua)
-- ARGV[1]  publish command: 'publish' or 'spublish'
-- ARGV[2]  how long the lock is given to the waiter it is passed to until that waiter
--          extends it, in ms (without a fencing token: a waiter that wants one takes the
--          lock with a try, which mints it)
--
-- Returns 1 when a lock was deleted, 0 when there was none ({1, 'untold'} or {0, 'untold'}
-- when the hand-off stopped at its bound with waiters left untold: see handoff.lua),
-- 'kind:<kind>' when the name
-- is held as a fair or read-write lock (their own force unlock tells their waiters), and
-- 'wrongtype:<type>' when the key holds another type of value, or a hash that is not in
-- the lock's layout: that is application data, not a lock, and is left alone.
--
-- A holder's client learns at once that its hold is gone ('lost:<owner>' on its wake
-- channel) when a task of it waits for the lock behind that hold, so that task need not
-- wait for a recheck to find the lock free.
local found = redis.call('type', KEYS[1]).ok
if found == 'none' then
  grant_to_oldest(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], nil)
  return with_untold(0)
end
if found ~= 'hash' then
  return 'wrongtype:' .. found
end
local kind = kind_of(KEYS[1])
if kind ~= 'lock' then
  return 'kind:' .. kind
end
-- Only a hash in the lock's layout is deleted: an application's hash at this name (no
-- owner fields, or other fields beside them) is left alone, as any other type is. A
-- lock's hash has one owner and its token, or one mark: four fields cover every layout,
-- and a larger hash is not a lock (nor read whole in one call).
if redis.call('hlen', KEYS[1]) > 4 then
  return 'wrongtype:hash'
end
local fields = redis.call('hkeys', KEYS[1])
for _, field in ipairs(fields) do
  if field ~= '!next' and field ~= '!held' and not string.match(field, '^[^:]+:%d+$')
      and not string.match(field, '^[^:]+:%d+:f$') then
    return 'wrongtype:hash'
  end
end
for _, field in ipairs(fields) do
  if string.sub(field, 1, 1) ~= '!' and string.sub(field, -2) ~= ':f' then
    tell(ARGV[1], KEYS[2], field, 'lost')
  end
end
redis.call('del', KEYS[1])
grant_to_oldest(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], nil)
return with_untold(1)
