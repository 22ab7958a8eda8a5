-- Extend a hold a release granted (see handoff.lua's grant_to_oldest) to its owner's
-- lease: the grant is short, and its owner holds the lock from the grant's message on.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's waiter registry (see handoff.lua; same slot)
-- KEYS[3]  what the lock's waiters were told (see naps.lua; same slot)
-- ARGV[1]  the lease in milliseconds
-- ARGV[2]  owner field
-- ARGV[3]  publish command: 'publish' or 'spublish'
--
-- Returns 1 when the owner still holds the lock (its expiry is now the lease from now, or
-- the grant's if that is later),
-- 0 when it does not (the grant lapsed: the hold is lost), and the Redis type name when the
-- key holds another type of value.
--
-- From now on the hold is one like any other: '!next' goes. The owner's lease may end
-- before what earlier waiters were told they may sleep until (the last holder's lease):
-- they are told to try again, as for any hold taken with a shorter lease (naps.lua), so
-- that none sleeps past this hold's end should its holder never release it.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > MAX_LEASE_MS or not string.find(ARGV[1], '^[1-9]%d*$') then
  return redis.error_reply('ERR dlock extend: lease must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end
local held = redis.pcall('hexists', KEYS[1], ARGV[2])
if type(held) == 'table' and held.err then
  return redis.call('type', KEYS[1]).ok
end
if held == 0 then
  return 0
end
-- Never shortens (GT): the owner's guard holds the lock until the grant's deadline
-- whatever its lease, so a lease shorter than what is left of the grant leaves the grant's
-- expiry as it is.
redis.call('pexpire', KEYS[1], ARGV[1], 'GT')
redis.call('hdel', KEYS[1], '!next')
wake_overslept(KEYS[2], KEYS[3], ARGV[3], redis.call('pttl', KEYS[1]))
return 1
