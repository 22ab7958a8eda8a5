-- Give back a reentrant lock's last hold without freeing the lock: it stays taken until
-- its minimum hold ends (the attribute's `min_hold`, ShedLock's lockAtLeastFor), so that a
-- job run once per tick across nodes is not run again by a node whose tick comes late.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's waiter registry (see handoff.lua)
-- KEYS[3]  what the lock's waiters were told (see naps.lua)
-- ARGV[1]  owner field
-- ARGV[2]  what is left of the minimum hold, in milliseconds (> 0)
-- ARGV[3]  publish command: 'publish' or 'spublish'
--
-- Only if the owner field is still ours and holds the lock once (no re-entry alive): the
-- field, its fencing token and any '!next' beside them go, the hash keeps '!held' = the
-- field (so the lock stays busy for everybody, and a retry of this script knows it was
-- applied), and the key expires after ARGV[2] ms. The waiters told they could sleep past
-- that are told to try again: they napped until the expiry they were told when they
-- tried, which the shorter hold moved closer; they now nap until the new one, and the
-- first takes the lock then.
--
-- Returns 0 when applied (now or by an earlier try), -1 when the lock is not ours (lease
-- ran out, force-unlocked, another owner, or the key holds another type), n > 1 when the
-- owner holds it n times (nothing changed: the caller releases its one hold normally).
if redis.pcall('hget', KEYS[1], '!held') == ARGV[1] then
  return 0
end
local count = redis.pcall('hget', KEYS[1], ARGV[1])
if not count or (type(count) == 'table' and count.err) then
  return -1
end
count = tonumber(count)
if count > 1 then
  return count
end
-- The marker first: deleting the last field first would delete the key. A '!next' left
-- by the grant that gave the owner this hold (see handoff.lua) goes with the hold it
-- described: beside '!held' it would name a grant that is over.
redis.call('hset', KEYS[1], '!held', ARGV[1])
redis.call('hdel', KEYS[1], ARGV[1], ARGV[1] .. ':f', '!next')
redis.call('pexpire', KEYS[1], ARGV[2])
wake_overslept(KEYS[2], KEYS[3], ARGV[3], tonumber(ARGV[2]))
return 0
