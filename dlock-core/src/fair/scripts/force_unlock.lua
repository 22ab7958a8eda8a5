-- Delete a fair lock whoever holds it, and wake the head of its queue.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (see queue.lua)
-- KEYS[3]  the entry deadlines
-- ARGV[1]  wake channel prefix
-- ARGV[2]  publish command
--
-- Returns 1 when a lock was deleted, 0 when there was none, 'kind:<kind>' when the name is
-- held as a lock or a read-write lock (their own force unlock tells their waiters),
-- 'wrongtype:<type>' when the key holds another type of value (application data, left
-- alone).
local found = redis.call('type', KEYS[1]).ok
if found ~= 'none' and found ~= 'hash' then
  return 'wrongtype:' .. found
end
if found == 'hash' then
  local marks = redis.call('hmget', KEYS[1], '!fair', 'mode')
  if marks[2] then
    return 'kind:read_write'
  elseif not marks[1] then
    return 'kind:lock'
  end
end
redis.call('del', KEYS[1])
purge(KEYS[2], KEYS[3], now_ms())
wake(head_of(KEYS[2]), ARGV[1], ARGV[2])
if found == 'none' then
  return 0
end
return 1
