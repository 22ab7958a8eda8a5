-- Renew read holds of read-write locks (the watchdog's batch; contract in sync/watchdog.rs).
--
-- KEYS[i]    lock hash i
-- ARGV[1]    lease in ms
-- ARGV[i+1]  the owner of a read hold in KEYS[i] (its read count's field)
--
-- Moves each owner's deadline to at least hold_deadline(now, lease). An owner whose
-- deadline passed is never revived (0): its hold may already have let a writer in.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease > MAX_LEASE_MS then
  return redis.error_reply('ERR dlock rw renew: lease must be 1..' .. MAX_LEASE_MS .. ' ms, got ' .. tostring(ARGV[1]))
end
local now = now_ms()
local renewed = {}
for i, key in ipairs(KEYS) do
  renewed[i] = rw_renew(key, ARGV[i + 1], ARGV[i + 1], lease, now)
end
return renewed
