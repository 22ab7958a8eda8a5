-- Renew semaphore grants (the watchdog's batch; contract in sync/watchdog.rs).
--
-- KEYS[i]    grants hash i
-- ARGV[1]    lease in ms
-- ARGV[i+1]  a grant id in KEYS[i]
--
-- Moves each grant's deadline to at least hold_deadline(now, lease): 1 renewed, 0 when
-- the grant is gone or its deadline passed (an expired grant is never revived: its
-- permits may already be someone else's), the Redis type when the key holds another type
-- of value.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > MAX_LEASE_MS then
  return redis.error_reply('ERR dlock semaphore renew: lease must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end
local now = now_ms()
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
      local renewed_until = hold_deadline(now, lease)
      if deadline < renewed_until then
        redis.call('hset', key, grant .. ':t', renewed_until)
      end
      if redis.call('pttl', key) < lease then
        redis.call('pexpire', key, lease)
      end
      renewed[i] = 1
    end
  end
end
return renewed
