-- Give back one hold of a reentrant lock (or all of an owner's holds), idempotently.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel (same slot as KEYS[1])
-- KEYS[3]  'one': the release memo for this release operation; 'all': unused;
--          'undo': the marker of the re-entry to undo (all in the slot of KEYS[1])
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
-- Each mode counts once however often it is retried (after a lost reply, or replayed on a
-- new master), and a retry never touches a lock another owner acquired in the meantime
-- (owner fields are never reused):
-- - giving back an owner's last hold deletes the lock; a retry finds nothing of the owner's
--   and answers -1, which the client, knowing it retried, takes as that first success.
--   No memo is written: this is the common case, and a memo per release would keep a key
--   per release alive in Redis for seconds;
-- - giving back one of several holds (a re-entered lock) is a decrement, which a retry would
--   repeat: its outcome is kept in the memo, which a retry answers from;
-- - 'all' deletes every hold of the owner, which is idempotent by itself;
-- - an undo deletes its marker, which makes it count once.
local mode = ARGV[2]
if mode == 'undo' then
  if redis.call('del', KEYS[3]) == 0 then
    return -1
  end
elseif mode == 'one' then
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
if remaining > 0 and mode ~= 'all' then
  redis.call('hset', KEYS[1], ARGV[1], remaining)
  if mode == 'one' then
    redis.call('set', KEYS[3], remaining, 'px', ARGV[3])
  end
  return remaining
end

-- The owner's last hold: the hash holds nothing else (one owner at a time, its hold count
-- and its fencing token), so the whole lock goes.
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], 'unlocked')
return 0
