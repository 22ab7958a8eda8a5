-- The server's clock in milliseconds: every deadline comes from it, never from a client.
local function now_ms()
  local time = redis.call('time')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
