-- Renew semaphore grants (the watchdog's batch; contract in sync/watchdog.rs).
--
-- KEYS[i]    grants hash i
-- ARGV[1]    lease in ms
-- ARGV[i+1]  a grant id in KEYS[i]
--
-- Moves each grant's deadline to at least now + lease: 1 renewed, 0 when the grant is
-- gone or its deadline passed (an expired grant is never revived: its permits may already
-- be someone else's), the Redis type when the key holds another type of value.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > MAX_LEASE_MS then
  return redis.error_reply('ERR dlock semaphore renew: lease must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end
local now = sem_now()
local renewed = {}
for i, key in ipairs(KEYS) do
  local grant = ARGV[i + 1]
  local found = redis.call('type', key).ok
  if found ~= 'hash' then
    if found == 'none' then
      renewed[i] = 0
    else
      renewed[i] = found
    end
  else
    local deadline = tonumber(redis.call('hget', key, grant .. ':t'))
    if deadline == nil or deadline <= now or redis.call('hexists', key, grant) == 0 then
      renewed[i] = 0
    else
      if deadline < now + lease then
        redis.call('hset', key, grant .. ':t', now + lease)
      end
      if redis.call('pttl', key) < lease then
        redis.call('pexpire', key, lease)
      end
      renewed[i] = 1
    end
  end
end
return renewed
