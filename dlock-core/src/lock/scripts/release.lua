-- Give back one hold of a reentrant lock (or all of an owner's holds), idempotently, and
-- pass a lock that becomes free to the longest-waiting live waiter.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's waiter registry (see handoff.lua; same slot as KEYS[1])
-- KEYS[3]  'one': the release memo for this release operation; 'all', 'leave': unused;
--          'undo': the marker of the re-entry to undo (all in the slot of KEYS[1])
-- KEYS[4]  what the lock's waiters were told (see naps.lua; same slot)
-- ARGV[1]  owner field ('<client-id>:*' for the 'leave' of a lock kept for a client's
--          next task that did not take it)
-- ARGV[2]  'one': a guard gives back its hold;
--          'all': an acquisition of a fresh owner ended without a guard (cancelled,
--                 timed out, failed): every hold an unanswered try of it may have taken
--                 goes (no guard of the owner exists), it leaves the registry, and a lock
--                 it leaves free or reserved for it is passed on;
--          'leave': a message for an owner that no longer waits on its client (it
--                 stopped, or took the lock by a try of its own before the message came):
--                 it leaves the registry, and a lock free or reserved for it is passed
--                 on; its holds, if any, are its guard's and are left alone;
--          'undo': a re-entry whose outcome is unknown is abandoned: its hold is given
--                 back only if its marker shows it was applied
-- ARGV[3]  memo lifetime in milliseconds
-- ARGV[4]  publish command: 'publish' or 'spublish'
-- ARGV[5]  '1' when a task of the releasing client waits for this lock next, else '0'
-- ARGV[6]  '1' when that task may have the lock next even if others wait (the client's
--          bound on consecutive local hand-offs is not reached), else '0'
-- ARGV[7]  how long the lock stays reserved for the waiter it is passed to, in ms
-- ARGV[8]  '0' on the first send of this release, which cannot find its own memo;
--          anything else (a retry, a replay on a new master) looks for it
--
-- Returns -1 when there is nothing of the owner's to give back (or the key holds another
-- type, or another kind's lock), n > 0 when the owner still holds it n times, and when the
-- lock is now free: 0 if nobody else waits for it (or it was passed on by an 'all'), or
-- {0, 'kept'} when others wait but the client's own next task has it next (it is reserved
-- for any task of the client, '!next' = '<client-id>:*', for ARGV[7] ms), or
-- {0, 'passed'} when the longest-waiting live waiter was told and the lock is reserved
-- for it.
--
-- One release wakes one waiter: the message names it, on its client's channel. The lock
-- is reserved for it for ARGV[7] ms (the hash holds only the field '!next' = that owner):
-- a new caller elsewhere, which needs no pub/sub hop, would otherwise take the lock first
-- nearly every time, and the woken waiter would go back to the end of the line. A waiter
-- whose client is gone is passed over (see handoff.lua); a reservation nobody takes lapses,
-- and the next waiter was told to try then (so was whoever tried meanwhile).
--
-- Each mode counts once however often it is retried (after a lost reply, or replayed on a
-- new master), and a retry never touches a lock another owner acquired in the meantime
-- (owner fields are never reused):
-- - giving back an owner's last hold deletes the lock; a retry finds nothing of the owner's
--   and answers -1, which the client, knowing it retried, takes as that first success.
--   No memo is written: this is the common case, and a memo per release would keep a key
--   per release alive in Redis for seconds;
-- - giving back one of several holds (a re-entered lock) is a decrement, which a retry would
--   repeat: its outcome is kept in the memo, which a retry answers from (a first send
--   skips the lookup: the common last release reads no memo either);
-- - 'all' deletes every hold of the owner, which is idempotent by itself; 'leave' gives
--   back no hold;
-- - an undo deletes its marker, which makes it count once.
local mode = ARGV[2]
local owner = ARGV[1]
local abandon = mode == 'all' or mode == 'leave'
if mode == 'undo' then
  if redis.call('del', KEYS[3]) == 0 then
    return -1
  end
elseif mode == 'one' and ARGV[8] ~= '0' then
  local memo = redis.call('get', KEYS[3])
  if memo then
    return tonumber(memo)
  end
end

-- A guard's release first, before the shared functions are defined below (each
-- definition costs Redis a closure per call): nothing more is needed unless the lock
-- becomes free while others wait. (A hash of another kind of lock, or another type of
-- value, has no field of this owner: nothing of it is touched.)
if not abandon then
  local count = redis.pcall('hget', KEYS[1], owner)
  if not count or type(count) == 'table' then
    return -1
  end
  -- (The common count, '1', is compared as text: no conversion.)
  local remaining = 0
  if count ~= '1' then
    remaining = tonumber(count) - 1
  end
  if remaining > 0 then
    -- A memo is the only key a release may create, also on a full server: its name must
    -- be a release memo's and its size and lifetime within dlock's bounds (MAX_MEMO_NAME,
    -- MAX_MEMO_MS), whatever the caller passed. Checked here, before anything is written,
    -- and only here: the common last release writes no memo and pays nothing for it.
    if mode == 'one' and (string.sub(KEYS[3], 1, 14) ~= 'dlock:release:' or #KEYS[3] > MAX_MEMO_NAME) then
      return redis.error_reply('ERR dlock release: KEYS[3] is not a release memo name')
    end
    redis.call('hset', KEYS[1], owner, string.format('%d', remaining))
    if mode == 'one' then
      local memo_ms = math.max(1, math.min(tonumber(ARGV[3]) or 1, MAX_MEMO_MS))
      redis.call('set', KEYS[3], string.format('%d', remaining), 'px', string.format('%d', memo_ms))
    end
    return remaining
  end
  -- The owner's last hold: the hash holds nothing else (one owner at a time, its hold
  -- count and its fencing token), so the whole lock goes.
  redis.call('del', KEYS[1])
  if redis.call('exists', KEYS[2]) == 0 then
    return 0
  end
end

-- @shared

if abandon then
  -- The owner's holds and the reservation; a key of another type, or another kind of
  -- lock's hash (which never has this owner nor a reservation), is left alone.
  local found = redis.pcall('hmget', KEYS[1], owner, '!next')
  if found.err then
    return -1
  end
  redis.call('zrem', KEYS[2], owner)
  redis.call('zrem', KEYS[4], owner)
  if found[1] and mode ~= 'all' then
    -- The owner holds the lock: its guard gives it back.
    return -1
  end
  if not found[1] then
    -- Nothing of the owner's: a lock that is free, or reserved for the owner, which will
    -- not take it, goes to the next live waiter; one held by another owner stays.
    if found[2] == owner then
      -- (For a pass-on, `owner` is '<client-id>:*': the reservation a release kept.)
      redis.call('del', KEYS[1])
    elseif found[2] then
      -- Reserved for another, and the owner may have been the one told to try when
      -- that reservation lapses: the next waiter is told instead.
      tell_runner_up(KEYS[2], KEYS[4], ARGV[4], now_ms(), math.max(redis.call('pttl', KEYS[1]), 0))
      return -1
    elseif redis.call('exists', KEYS[1]) == 1 then
      return -1
    end
    hand_off(KEYS[1], KEYS[2], KEYS[4], ARGV[4], ARGV[7])
    return -1
  end
  -- Every hold of an owner whose acquisition ended without a guard goes.
  redis.call('del', KEYS[1])
  if redis.call('exists', KEYS[2]) == 0 then
    return 0
  end
end

if ARGV[5] == '1' and ARGV[6] == '1' then
  -- Kept for the client's next task: reserved for any task of the client, so that no
  -- other client takes it meanwhile with a shorter lease than the waiters were told; if
  -- that task does not take it, the client passes it on ('leave' for '<client-id>:*').
  reserve(KEYS[1], KEYS[2], KEYS[4], ARGV[4], ARGV[7], string.match(owner, '^[^:]*') .. ':*')
  return {0, 'kept'}
end
if hand_off(KEYS[1], KEYS[2], KEYS[4], ARGV[4], ARGV[7]) then
  return {0, 'passed'}
end
return 0
