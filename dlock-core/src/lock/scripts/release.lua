-- Give back one hold of a reentrant lock (or all of an owner's holds), idempotently.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel, also the name of its waiter registry (a sorted set:
--          client id -> registration time, see acquire.lua; same slot as KEYS[1])
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
-- ARGV[5]  '1' when a task of the releasing client waits for this lock next, else '0'
-- ARGV[6]  '1' when that task may have the lock next even if other clients wait (the
--          client's bound on consecutive local hand-offs is not reached), else '0'
-- ARGV[7]  the registry's lifetime in ms
-- ARGV[8]  how long the lock stays reserved for the client it is passed to, in ms
--
-- Returns -1 when there is nothing of the owner's to give back (or the key holds another
-- type), n > 0 when the owner still holds it n times, and when the lock is now free: 0 if
-- no other client is registered as waiting (or only this one, which was woken), or
-- {0, 'kept'} when others wait but the client's own next task has it next, or
-- {0, 'passed'} when the oldest other waiting client was woken and this client, if its
-- next task waits, was registered behind the others.
--
-- One release wakes one client: the message names the client to wake, so the others
-- stay asleep (a release used to wake a waiter in every client, all but one of which
-- then found the lock taken). The lock is reserved for that client for ARGV[8] ms (the
-- hash holds only the field '!next' = its id): a new caller of any other client, which
-- needs no pub/sub hop, would otherwise take the lock first nearly every time, and the
-- woken client would go back to the end of the line. A reservation nobody takes (the
-- client died) only delays the others by its lifetime; they nap until it expires.
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
if redis.call('exists', KEYS[2]) == 0 then
  return 0
end
local local_next = ARGV[5] == '1'
if local_next and ARGV[6] == '1' then
  return {0, 'kept'}
end
-- The releasing client's registry entry: its id, the owner field up to the first ':'.
local me = string.match(ARGV[1], '^[^:]*')
if local_next then
  redis.call('zrem', KEYS[2], me)
end
local oldest = redis.call('zpopmin', KEYS[2])
if oldest[1] == nil then
  return 0
end
redis.call('hset', KEYS[1], '!next', oldest[1])
redis.call('pexpire', KEYS[1], ARGV[8])
redis.call(ARGV[4], KEYS[2], oldest[1])
if local_next then
  local now = redis.call('time')
  redis.call('zadd', KEYS[2], now[1] * 1000 + math.floor(now[2] / 1000), me)
  redis.call('pexpire', KEYS[2], ARGV[7])
end
return {0, 'passed'}
