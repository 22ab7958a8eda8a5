-- Renew the leases of many held locks in one call (the watchdog's batch).
--
-- KEYS[i]    lock hash i
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  owner field for KEYS[i]
--
-- Returns an array: 1 where the owner still holds the lock (its expiry is now at least the
-- lease), 0 where it does not (the lock is lost), and the Redis type name where the key
-- holds another type of value. A key of another type affects only its own entry: the
-- other locks of the batch are renewed all the same.
-- The lease goes to PEXPIRE as written (see acquire.lua), so it must be written as
-- PEXPIRE reads it.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > MAX_LEASE_MS or not string.find(ARGV[1], '^[1-9]%d*$') then
  return redis.error_reply('ERR dlock renew: lease must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end

local renewed = {}
for i, key in ipairs(KEYS) do
  local held = redis.pcall('hexists', key, ARGV[i + 1])
  if type(held) == 'table' and held.err then
    renewed[i] = redis.call('type', key).ok
  elseif held == 1 then
    -- Never shortens: GT sets the expiry only when it moves it later (a key without
    -- one keeps none).
    redis.call('pexpire', key, ARGV[1], 'GT')
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
