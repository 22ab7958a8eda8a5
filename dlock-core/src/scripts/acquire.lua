-- Acquire or re-enter a reentrant lock.
--
-- KEYS[1]  the lock hash: field = owner, value = hold count
-- ARGV[1]  lease in milliseconds (the client validated it; checked again before any write,
--          because a PEXPIRE that fails after HSET would leave a lock that never expires)
-- ARGV[2]  owner field "<client-id>:<owner-id>"
--
-- Returns nil when the lock is now held by the owner, otherwise the remaining time to live
-- of the other owner's lock in milliseconds (-1 when it has no expiry).
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > 31622400000 then
  return redis.error_reply('ERR dlock acquire: lease must be 1..31622400000 ms, got ' .. tostring(ARGV[1]))
end

if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], lease)
  return nil
end

if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  -- Re-entry never shortens what an outer acquisition asked for.
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
  return nil
end

return redis.call('pttl', KEYS[1])
