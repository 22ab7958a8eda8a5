-- Shared by every read-write lock script (prepended to each one when it is registered,
-- after scripts/naps.lua).
--
-- The lock hash (one per lock):
--   mode         'read' or 'write'
--   <owner>      that owner's read holds
--   <owner>:w    that owner's write holds (only one owner has them, and only in mode 'write')
--   <owner>:t    that owner's deadline: server time in ms after which its holds are void
--   <owner>:f    the fencing token minted when that owner took the write lock (while it
--                has write holds, and only with tokens on)
-- An owner is "<client-id>:<owner-id>", so it never ends in ':w', ':t' or ':f' and is never
-- 'mode'.
-- The hash expires at the latest deadline, so a lock whose owners all died vanishes on its
-- own, and every script first drops the owners whose deadline passed: a crashed reader
-- frees the lock on its own lease, whatever the other readers' leases are.

-- The kind of lock that holds `key` when it is a hash of another kind than a read-write
-- lock ('fair' or 'lock': lock names are shared by those kinds, each refusing the others'
-- hashes), else nil. A read-write lock's hash always has its 'mode'.
local function rw_foreign(key)
  local marks = redis.call('hmget', key, 'mode', '!fair')
  if marks[1] then
    return nil
  elseif marks[2] then
    return 'fair'
  end
  return 'lock'
end

-- Drops the owners of `key` whose deadline passed. Returns the live owners' deadlines
-- (owner -> ms) and whether one of them holds the write lock. Deletes the hash when no
-- owner is left.
local function rw_purge(key, now)
  local fields = redis.call('hgetall', key)
  local deadlines = {}
  local writer = false
  local any = false
  for i = 1, #fields, 2 do
    local field = fields[i]
    if string.sub(field, -2) == ':t' then
      local owner = string.sub(field, 1, -3)
      local deadline = tonumber(fields[i + 1])
      if deadline <= now then
        redis.call('hdel', key, owner, owner .. ':w', owner .. ':f', field)
      else
        deadlines[owner] = deadline
        any = true
      end
    end
  end
  if not any then
    redis.call('del', key)
    return deadlines, false
  end
  for owner in pairs(deadlines) do
    if redis.call('hexists', key, owner .. ':w') == 1 then
      writer = true
    end
  end
  return deadlines, writer
end

-- The latest of `deadlines`, or 0 when there is none.
local function rw_latest(deadlines)
  local latest = 0
  for _, deadline in pairs(deadlines) do
    if deadline > latest then
      latest = deadline
    end
  end
  return latest
end

-- Renews the hold `field` of `owner` in `key` for `lease` ms (the watchdog's contract: 1
-- renewed, 0 not held, the Redis type when the key holds something else).
local function rw_renew(key, owner, field, lease, now)
  local found = redis.call('type', key).ok
  if found ~= 'hash' then
    if found == 'none' then
      return 0
    end
    return found
  end
  local deadline = tonumber(redis.call('hget', key, owner .. ':t'))
  if deadline == nil or deadline <= now or redis.call('hexists', key, field) == 0 then
    -- Its lease ran out (or it is gone): never revived. The purge drops it with every
    -- other owner whose deadline passed, and the hash when nobody is left.
    if deadline ~= nil and deadline <= now then
      rw_purge(key, now)
    end
    return 0
  end
  if deadline < now + lease then
    redis.call('hset', key, owner .. ':t', now + lease)
  end
  if redis.call('pttl', key) < lease then
    redis.call('pexpire', key, lease)
  end
  return 1
end
