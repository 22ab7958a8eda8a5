-- Give back one hold of a reentrant lock (or all of an owner's holds), idempotently.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel (same slot as KEYS[1])
-- KEYS[3]  'one' / 'all': the release memo for this release operation;
--          'undo': the marker of the re-entry to undo (both in the slot of KEYS[1])
-- ARGV[1]  owner field
-- ARGV[2]  'one': a guard gives back its hold;
--          'all': an acquisition of a fresh owner whose outcome is unknown is abandoned
--                 (no guard of that owner exists, so its holds are at most this one);
--          'undo': a re-entry whose outcome is unknown is abandoned: its hold is given
--                 back only if its marker shows it was applied
-- ARGV[3]  memo lifetime in milliseconds
-- ARGV[4]  publish command: 'publish' or 'spublish'
--
-- Returns -1 when there is nothing of the owner's to give back (or the key holds another
-- type), 0 when the lock is now free (waiters were notified), n > 0 when the owner still
-- holds it n times.
--
-- A release whose reply was lost is retried with the same memo key: the memo returns the
-- first outcome instead of reporting "not held" for a release that actually succeeded, and
-- a retry never touches a lock another owner acquired in the meantime. An undo needs no
-- memo: deleting its marker is what makes it count once.
local mode = ARGV[2]
if mode == 'undo' then
  if redis.call('del', KEYS[3]) == 0 then
    return -1
  end
else
  local memo = redis.call('get', KEYS[3])
  if memo then
    return tonumber(memo)
  end
end

local count = redis.pcall('hget', KEYS[1], ARGV[1])
if not count or (type(count) == 'table' and count.err) then
  return -1
end

local remaining = tonumber(count) - 1
if mode == 'all' then
  remaining = 0
end

if remaining > 0 then
  redis.call('hset', KEYS[1], ARGV[1], remaining)
else
  -- The owner's fencing token (if any) goes with its last hold.
  redis.call('hdel', KEYS[1], ARGV[1], ARGV[1] .. ':f')
  if redis.call('exists', KEYS[1]) == 0 then
    redis.call(ARGV[4], KEYS[2], 'unlocked')
  end
end

if mode ~= 'undo' then
  redis.call('set', KEYS[3], remaining, 'px', ARGV[3])
end
return remaining
