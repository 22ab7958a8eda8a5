-- A fenced write: applies a write to an application key only when the writer's fencing
-- token is at least the highest token that has written that key, and records the token.
--
-- KEYS[1]  the application key (a string, or nothing)
-- KEYS[2]  its bookkeeping hash `dlock:fenced:<prefix>{tag}:<key>`, field `fence`: the
--          highest token that has written the key (no TTL; see fenced/mod.rs)
-- KEYS[3]  `incrby`: this call's memo `dlock:fencedop:<prefix>{tag}:<client>:<op>`;
--          `set`: the bookkeeping hash again (unused; keeps the key count fixed)
-- ARGV[1]  'set' or 'incrby'
-- ARGV[2]  the token, in decimal without leading zeros (compared as text, so every u64
--          is exact: Lua numbers are doubles, exact only below 2^53)
-- ARGV[3]  `set`: the value; `incrby`: the delta
-- ARGV[4]  `incrby`: the memo's lifetime in ms (covers every retry of one call)
--
-- Returns 'ok:<new value>' (`set`: 'ok:'), 'done:<value>' when this `incrby` call was
-- already applied (a retry after a lost reply: its first result, nothing applied again),
-- 'stale:<highest token>' (nothing written), or 'wrongtype:app:<type>' /
-- 'wrongtype:fence:<type>' when a key holds another type of value (nothing written).
-- A non-integer value under `incrby` raises INCRBY's own error before anything is written.

local function foreign(key, wanted)
  local found = redis.call('type', key)['ok']
  if found ~= 'none' and found ~= wanted then
    return found
  end
  return nil
end

-- Whether decimal `a` >= decimal `b` (both without leading zeros).
local function at_least(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a >= b
end

local incr = ARGV[1] == 'incrby'
if incr then
  local done = redis.call('get', KEYS[3])
  if done then
    return 'done:' .. done
  end
end
local found = foreign(KEYS[1], 'string')
if found then
  return 'wrongtype:app:' .. found
end
found = foreign(KEYS[2], 'hash')
if found then
  return 'wrongtype:fence:' .. found
end
local seen = redis.call('hget', KEYS[2], 'fence')
if seen and not at_least(ARGV[2], seen) then
  return 'stale:' .. seen
end
local result = ''
if incr then
  result = redis.call('incrby', KEYS[1], ARGV[3])
  redis.call('set', KEYS[3], result, 'px', ARGV[4])
else
  redis.call('set', KEYS[1], ARGV[3])
end
redis.call('hset', KEYS[2], 'fence', ARGV[2])
return 'ok:' .. result
