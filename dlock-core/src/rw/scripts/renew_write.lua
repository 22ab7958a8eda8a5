-- Renew write holds of read-write locks (the watchdog's batch; contract in sync/watchdog.rs).
--
-- KEYS[i]    lock hash i
-- ARGV[1]    lease in ms
-- ARGV[i+1]  the write field "<owner>:w" of a write hold in KEYS[i]
--
-- As renew_read.lua, for the owner of the write field.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > MAX_LEASE_MS then
  return redis.error_reply('ERR dlock rw renew: lease must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end
local now = now_ms()
local renewed = {}
for i, key in ipairs(KEYS) do
  local field = ARGV[i + 1]
  renewed[i] = rw_renew(key, string.sub(field, 1, -3), field, lease, now)
end
return renewed
