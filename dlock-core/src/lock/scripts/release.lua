-- Give back one hold of a reentrant lock (or all of an owner's holds), idempotently, and
-- hand off a lock that becomes free (docs/PROTOCOL.md: release, withdraw, leave, undo).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's waiter registry (see handoff.lua; same slot as KEYS[1])
-- KEYS[3]  'one': the release memo for this release operation; 'withdraw', 'leave': unused;
--          'undo': the marker of the re-entry to undo (all in the slot of KEYS[1])
-- KEYS[4]  what the lock's waiters were told (see naps.lua; same slot)
-- KEYS[5]  with a next task (see ARGV[7]), or when the hold was contended (others may
--          wait): the fencing-token counter of the lock's slot anchor (see acquire.lua;
--          same slot), for the token of the owner the lock goes to. Without it a waiter of
--          another client is given the lock without a token (and takes it with a try of
--          its own if it wants one): the common, uncontended release passes no such key
-- ARGV[1]  owner field
-- ARGV[2]  'one': a guard gives back its hold;
--          'withdraw': an acquisition of a fresh owner ended without a guard (cancelled,
--                 timed out, failed), or a task given the lock by a release stopped
--                 waiting before it learnt so: every hold an unanswered try (or that
--                 release) may have given it goes (no guard of the owner exists), it
--                 leaves the registry, and a lock it leaves free is passed on;
--          'leave': a message for an owner that no longer waits on its client (it
--                 stopped, or took the lock by a try of its own before the message came):
--                 it leaves the registry, and a free lock is passed on; its holds, if
--                 any, are its guard's and are left alone;
--          'undo': a re-entry whose outcome is unknown is abandoned: its hold is given
--                 back only if its marker shows it was applied
-- ARGV[3]  memo lifetime in milliseconds
-- ARGV[4]  publish command: 'publish' or 'spublish'
-- ARGV[5]  how long the lock is given to the waiter it is passed to until that waiter
--          extends it, in ms
-- ARGV[6]  '0' on the first send of this release, which cannot find its own memo;
--          anything else (a retry, a replay on a new master) looks for it
-- The next four only when the releasing client has a task waiting for this lock next
-- (the common release has none, and every argument costs a Lua string per call):
-- ARGV[7]  that task's owner field (a fresh owner id, which has never tried in Redis)
-- ARGV[8]  '1' when that task may have the lock next even if others wait (the client's
--          bound on consecutive local grants is not reached), else '0'
-- ARGV[9]  the lease in ms of that task (as acquire.lua's ARGV[1])
-- ARGV[10] '1': mint a fencing token for that task; '0': no token
--
-- Returns -1 when there is nothing of the owner's to give back (or the key holds another
-- type, or another kind's lock), n > 0 when the owner still holds it n times, and when the
-- lock is now free of the owner: 0 if nobody it could go to waits for it;
-- {0, 'given', token} when the task of ARGV[7] holds it now, as if its own
-- acquire had taken it (its hold, its lease from now, its token, the last element only
-- with ARGV[10] = '1'), and nobody else waited; {0, 'kept', token} when that task holds
-- it and others wait (they were not told); or {0, 'passed'} when the lock went to the
-- longest-waiting live waiter. 'untold' follows the answer ({-1, 'untold'},
-- {0, 'passed', 'untold'}...) when passing the lock on stopped at its bound with waiters
-- left untold (see handoff.lua): the client sends this owner's 'leave', which goes on.
--
-- Which owner a freed lock goes to, and how (a local grant to the client's next task, a
-- grant to another client's waiter, or nobody), is docs/PROTOCOL.md's
-- "Every transition"; the functions are handoff.lua's.
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
-- - a retry that finds the owner's hold gone but the task of ARGV[7] holding answers as
--   the send that gave it the lock did (the task has not tried yet, so nothing else can
--   have given it the lock);
-- - 'withdraw' deletes every hold of the owner, which is idempotent by itself; 'leave' gives
--   back no hold;
-- - an undo deletes its marker, which makes it count once.
local mode = ARGV[2]
local owner = ARGV[1]
local stops_waiting = mode == 'withdraw' or mode == 'leave'
local next_task = ARGV[7]
if next_task and not stops_waiting then
  -- Checked before anything is written, as acquire.lua checks its own lease.
  local lease = tonumber(ARGV[9])
  if lease == nil or lease < 1 or lease > MAX_LEASE_MS or not string.find(ARGV[9], '^[1-9]%d*$') then
    return redis.error_reply('ERR dlock release: the lease of the next task must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[9]))
  end
else
  next_task = nil
end
if mode == 'undo' then
  if redis.call('del', KEYS[3]) == 0 then
    return -1
  end
elseif mode == 'one' and ARGV[6] ~= '0' then
  local memo = redis.call('get', KEYS[3])
  if memo then
    return tonumber(memo)
  end
end

-- A guard's release first, before the shared functions are defined below (each
-- definition costs Redis a closure per call): nothing more is needed unless the lock
-- becomes free while others wait. (A hash of another kind of lock, or another type of
-- value, has no field of this owner: nothing of it is touched.)
local handed = nil
if not stops_waiting then
  local count = redis.pcall('hget', KEYS[1], owner)
  if not count or type(count) == 'table' then
    if next_task and not count and ARGV[6] ~= '0' and redis.call('hexists', KEYS[1], next_task) == 1 then
      -- A retry of a send that gave the lock to the client's next task: the same answer.
      local reply = {0, redis.call('exists', KEYS[2]) == 1 and 'kept' or 'given'}
      if ARGV[10] == '1' then
        reply[3] = tonumber(redis.call('hget', KEYS[1], next_task .. ':f'))
      end
      return reply
    end
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
  local others = redis.call('exists', KEYS[2]) == 1
  local give = next_task and (ARGV[8] == '1' or not others)
  local token = nil
  if give and ARGV[10] == '1' then
    -- The next task's token (the next of the counter), before anything is written. A
    -- counter that is not a number (written by someone else) gives no token: the task is
    -- not given the lock, and its own try reports the counter; this release still counts.
    token = redis.pcall('incr', KEYS[5])
    give = type(token) == 'number'
  end
  redis.call('del', KEYS[1])
  if give then
    -- The client's next task takes it as its own acquire would have (acquire.lua's
    -- take): its hold, its token and its lease.
    local reply = {0, 'given'}
    if token then
      redis.call('hset', KEYS[1], next_task, '1', next_task .. ':f', string.format('%d', token))
      reply[3] = token
    else
      redis.call('hset', KEYS[1], next_task, '1')
    end
    redis.call('pexpire', KEYS[1], ARGV[9])
    if not others then
      return reply
    end
    reply[2] = 'kept'
    handed = reply
  elseif not others then
    return 0
  end
end

-- @shared

if stops_waiting then
  -- The owner's holds and a grant's mark; a key of another type, or another kind of
  -- lock's hash (which never has this owner nor a grant's mark), is left alone.
  local found = redis.pcall('hmget', KEYS[1], owner, '!next')
  if found.err then
    return -1
  end
  redis.call('zrem', KEYS[2], owner)
  redis.call('zrem', KEYS[4], owner)
  if found[1] and mode ~= 'withdraw' then
    -- The owner holds the lock: its guard gives it back.
    return -1
  end
  if not found[1] then
    -- Nothing of the owner's: a free lock goes to the next live waiter; one held by
    -- another owner, or kept by a minimum hold (whoever's: the owner's own finished hold
    -- included), stays.
    if found[2] then
      -- Given to another, and the owner may have been the one told to try when that
      -- grant lapses: the next waiter is told instead.
      tell_runner_up(KEYS[2], KEYS[4], ARGV[4], now_ms(), math.max(redis.call('pttl', KEYS[1]), 0), found[2])
      return with_untold(-1)
    elseif redis.call('exists', KEYS[1]) == 1 then
      return -1
    end
    grant_to_oldest(KEYS[1], KEYS[2], KEYS[4], ARGV[4], ARGV[5], KEYS[5])
    return with_untold(-1)
  end
  -- Every hold of an owner whose acquisition ended without a guard goes.
  redis.call('del', KEYS[1])
  if redis.call('exists', KEYS[2]) == 0 then
    return 0
  end
end

if handed then
  -- The waiters promised a sleep past the new hold's lease are told to try again (its
  -- lease may be shorter than the last one's, see naps.lua).
  wake_overslept(KEYS[2], KEYS[4], ARGV[4], tonumber(ARGV[9]))
  return handed
end
if grant_to_oldest(KEYS[1], KEYS[2], KEYS[4], ARGV[4], ARGV[5], KEYS[5]) then
  return with_untold({0, 'passed'})
end
return with_untold(0)
