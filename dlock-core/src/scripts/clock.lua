-- The server's clock in milliseconds: every deadline comes from it, never from a client.
-- `ms_of` reads a TIME reply, for a caller that also needs its microseconds.
local function ms_of(time)
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function now_ms()
  return ms_of(redis.call('time'))
end
