-- The server's clock in milliseconds: every deadline comes from it, never from a client.
-- `ms_of` reads a TIME reply, for a caller that also needs its microseconds.
local function ms_of(time)
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function now_ms()
  return ms_of(redis.call('time'))
end

-- The deadline of a hold taken or renewed for `lease` ms by a script that read `now`: the
-- first server millisecond at which the hold is void (a hold is live while now_ms() is
-- below it). `now` is rounded down, so it may lie up to 1 ms before the request arrived,
-- and the client counts its lease from when it sent the request: a deadline of
-- `now + lease` could void a hold while its holder's guard still promises it; one
-- millisecond more never can.
local function hold_deadline(now, lease)
  return now + lease + 1
end
