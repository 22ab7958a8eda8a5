-- Give back one hold of a fair lock, or leave the queue, idempotently (the release contract
-- of sync/release.rs). When the lock is free afterwards and the head is new or the lock was
-- just freed, the head is woken.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (see queue.lua)
-- KEYS[3]  the entry deadlines
-- KEYS[4]  'one' / 'leave': this operation's memo; 'undo': the re-entry's marker
-- KEYS[5]  what the waiters were told (see scripts/naps.lua)
-- ARGV[1]  owner field (the waiter)
-- ARGV[2]  'one': a guard gives back its hold;
--          'leave': an acquisition that will not produce a guard is abandoned: its queue
--                   entry goes, and so does every hold of its owner (no guard of that owner
--                   exists, so they are at most the one an unanswered try may have taken);
--          'undo': a re-entry whose outcome is unknown is abandoned: its hold goes only if
--                  its marker shows it was applied
-- ARGV[3]  wake channel prefix
-- ARGV[4]  memo lifetime in milliseconds
-- ARGV[5]  publish command
-- ARGV[7]  '0' on the op's first send (see sync/release.rs), else '1'
--
-- Returns -1 when the owner held nothing (or the key holds another type), 0 when its last
-- hold is gone, n > 0 when it still holds the lock n times.
local mode = ARGV[2]
local me = ARGV[1]
-- A memo is the only key a release may create, also on a full server: its name must be a
-- release memo's and its size and lifetime within dlock's bounds (MAX_MEMO_NAME,
-- MAX_MEMO_MS), whatever the caller passed.
if mode ~= 'undo' and (string.sub(KEYS[4], 1, 14) ~= 'dlock:release:' or #KEYS[4] > MAX_MEMO_NAME) then
  return redis.error_reply('ERR dlock release: KEYS[4] is not a release memo name')
end
if mode == 'undo' then
  if redis.call('del', KEYS[4]) == 0 then
    return -1
  end
elseif ARGV[7] ~= '0' then
  -- (A first send, ARGV[7] = '0', cannot find its own memo.)
  local memo = redis.call('get', KEYS[4])
  if memo then
    return tonumber(memo)
  end
end

-- A guard's release with nobody queued first, before the shared functions are defined
-- below (each definition costs Redis a closure per call): there is no head to wake.
if mode ~= 'leave' and redis.call('exists', KEYS[2]) == 0 then
  local count = redis.pcall('hget', KEYS[1], me)
  if not count or (type(count) == 'table' and count.err) then
    return -1
  end
  local remaining = tonumber(count) - 1
  if remaining > 0 then
    redis.call('hset', KEYS[1], me, remaining)
  else
    redis.call('del', KEYS[1])
  end
  if mode ~= 'undo' then
    redis.call('set', KEYS[4], remaining, 'px', math.max(1, math.min(tonumber(ARGV[4]) or 1, MAX_MEMO_MS)))
  end
  return remaining
end

-- @shared

local head_before = head_of(KEYS[2])
if mode == 'leave' then
  redis.call('zrem', KEYS[2], me)
  redis.call('zrem', KEYS[3], me)
  redis.call('zrem', KEYS[5], me)
end

local remaining = -1
local count = redis.pcall('hget', KEYS[1], me)
if count and not (type(count) == 'table' and count.err) then
  remaining = tonumber(count) - 1
  if mode == 'leave' then
    remaining = 0
  end
  if remaining > 0 then
    redis.call('hset', KEYS[1], me, remaining)
  else
    -- One owner at a time: with its last hold the lock goes (its fencing token and the
    -- '!fair' marker with it).
    redis.call('del', KEYS[1])
  end
end

if redis.call('exists', KEYS[1]) == 0 then
  purge(KEYS[2], KEYS[3], now_ms())
  local head = head_of(KEYS[2])
  if remaining == 0 or head ~= head_before then
    wake(head, ARGV[3], ARGV[5])
  end
end

if mode ~= 'undo' and remaining >= 0 then
  redis.call('set', KEYS[4], remaining, 'px', math.max(1, math.min(tonumber(ARGV[4]) or 1, MAX_MEMO_MS)))
end
return remaining
