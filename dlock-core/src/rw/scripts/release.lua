-- Give back a read or write hold of a read-write lock, idempotently (the release contract
-- of sync/release.rs); a writer also leaves the waiting writers.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiting writers
-- KEYS[3]  the lock's unlock channel
-- KEYS[4]  'one' / 'withdraw': the release memo; 'undo': the marker of the re-entry to undo
-- KEYS[5]  what the waiters were told (see scripts/naps.lua)
-- ARGV[1]  owner
-- ARGV[2]  'read' or 'write': which hold
-- ARGV[3]  'one': a guard gives back its hold; 'withdraw': an acquisition of a fresh owner
--          was abandoned (its outcome unknown, or a writer gave up waiting): its holds of
--          that kind go, and a writer leaves the waiting writers; 'undo': an abandoned
--          re-entry's hold goes if its marker shows it was applied
-- ARGV[4]  memo lifetime in ms
-- ARGV[5]  publish command: 'publish' or 'spublish'
-- ARGV[7]  '0' on the op's first send (see sync/release.rs), else '1'
--
-- Returns the owner's holds of that kind left (0: none), or -1 when it had none.
--
-- Publishes 'unlocked' when the lock becomes free, when a writer's last write hold goes
-- while its downgraded read holds stay (readers may join now), when the last waiting
-- writer leaves (readers it held back may pass), and for each waiter told it could sleep
-- past the end of the holds left. A lock that becomes free while live writers wait can
-- only go to one of them (new readers are refused while a writer waits): it publishes
-- 'writers:<ms>' instead, which wakes one waiting writer per client and no reader, and
-- tells the readers to try by the time the last of those writers' entries lapses (<ms>
-- ms from now), should none of them take the lock.
local owner = ARGV[1]
local write = ARGV[2] == 'write'
local mode = ARGV[3]
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

-- The command comes from dlock's two, whatever the caller passed.
local publish = ARGV[5] == 'spublish' and 'spublish' or 'publish'
local published = false
local function wake()
  if not published then
    redis.call(publish, KEYS[3], 'unlocked')
    published = true
  end
end

local now = now_ms()

-- The lock is free: the waiting writers go first, if any is live (the set is ordered by
-- entry deadline, so its last entry is the latest to lapse).
local function wake_free()
  if published then
    return
  end
  local last = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
  if last[2] and tonumber(last[2]) > now then
    redis.call(publish, KEYS[3], 'writers:' .. string.format('%d', tonumber(last[2]) - now))
    published = true
  else
    wake()
  end
end

if mode == 'withdraw' then
  redis.call('zrem', KEYS[5], owner)
end
if write and mode == 'withdraw' and redis.call('zrem', KEYS[2], owner) == 1 then
  if redis.call('zcount', KEYS[2], now + 1, '+inf') == 0 then
    wake()
  end
end
if redis.call('type', KEYS[1]).ok ~= 'hash' or rw_foreign(KEYS[1]) then
  return -1
end

local deadlines = rw_purge(KEYS[1], now)
local field = owner
if write then
  field = owner .. ':w'
end
local count = tonumber(redis.call('hget', KEYS[1], field))
if count == nil then
  return -1
end
local remaining = count - 1
if mode == 'withdraw' then
  remaining = 0
end
if remaining > 0 then
  redis.call('hset', KEYS[1], field, remaining)
else
  redis.call('hdel', KEYS[1], field)
  local reads = redis.call('hexists', KEYS[1], owner)
  local writes = redis.call('hexists', KEYS[1], owner .. ':w')
  if writes == 0 then
    -- The owner's fencing token goes with its last write hold.
    redis.call('hdel', KEYS[1], owner .. ':f')
  end
  if reads == 0 and writes == 0 then
    redis.call('hdel', KEYS[1], owner .. ':t')
    deadlines[owner] = nil
  end
  if next(deadlines) == nil then
    redis.call('del', KEYS[1])
    wake_free()
  else
    if write and writes == 0 then
      -- The last write hold went, the owner's read holds stay (a downgrade): readers may
      -- join now.
      redis.call('hset', KEYS[1], 'mode', 'read')
      wake()
    end
    local expiry = rw_latest(deadlines)
    redis.call('pexpire', KEYS[1], math.max(1, expiry - now))
    -- The holds left may end sooner than the one that went (a reader with a longer lease
    -- left): the waiters told they could sleep past their end try again, each woken by a
    -- message of its own (one message wakes one waiting writer per client).
    for _ in ipairs(overslept_at(KEYS[5], expiry)) do
      redis.call(publish, KEYS[3], 'unlocked')
    end
  end
end

if mode ~= 'undo' then
  redis.call('set', KEYS[4], remaining, 'px', math.max(1, math.min(tonumber(ARGV[4]) or 1, MAX_MEMO_MS)))
end
return remaining
