-- The highest token that has written an application key through the fenced writes.
--
-- KEYS[1]  the bookkeeping hash `dlock:fenced:<prefix>{tag}:<key>`
--
-- Returns 'fence:<token>', 'none' when no fenced write reached the key, or
-- 'wrongtype:fence:<type>' when the bookkeeping key holds another type of value.
local found = redis.call('type', KEYS[1])['ok']
if found ~= 'none' and found ~= 'hash' then
  return 'wrongtype:fence:' .. found
end
local seen = redis.call('hget', KEYS[1], 'fence')
if seen then
  return 'fence:' .. seen
end
return 'none'
