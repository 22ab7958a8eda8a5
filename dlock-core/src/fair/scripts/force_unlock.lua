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
local refusal, found = fair_refusal(KEYS[1])
if refusal then
  return refusal
end
redis.call('del', KEYS[1])
purge(KEYS[2], KEYS[3], now_ms())
wake(head_of(KEYS[2]), ARGV[1], ARGV[2])
if found == 'none' then
  return 0
end
return 1
