-- Shared by every read-write lock script (prepended to each one when it is registered,
-- after scripts/naps.lua).
--
-- The lock hash (one per lock):
--   mode         'read' or 'write'
--   <owner>      that owner's read holds
--   <owner>:w    that owner's write holds (only one owner has them, and only in mode 'write')
--   <owner>:t    that owner's deadline: the first server millisecond at which its holds are
--                void (scripts/clock.lua's hold_deadline)
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
-- (owner -> ms), whether one of them holds the write lock, and how many they are.
-- Deletes the hash when no owner is left. It reads the whole hash, so it first checks
-- its size: a hash dlock wrote has 'mode' and at most four fields for each of at most
-- MAX_HOLDERS owners; a larger one is refused (an error, before anything is written),
-- never read in one call.
local function rw_purge(key, now)
  local size = redis.call('hlen', key)
  if size > 4 * MAX_HOLDERS + 1 then
    error({err = 'ERR dlock: the read-write lock hash ' .. key .. ' has ' .. size
      .. ' fields, more than dlock writes for ' .. MAX_HOLDERS .. ' holders; it is not read in one call'})
  end
  local fields = redis.call('hgetall', key)
  local deadlines = {}
  local writes = {}
  local holders = 0
  for i = 1, #fields, 2 do
    local field = fields[i]
    local suffix = string.sub(field, -2)
    if suffix == ':t' then
      local owner = string.sub(field, 1, -3)
      local deadline = tonumber(fields[i + 1])
      if deadline <= now then
        redis.call('hdel', key, owner, owner .. ':w', owner .. ':f', field)
      else
        deadlines[owner] = deadline
        holders = holders + 1
      end
    elseif suffix == ':w' then
      writes[#writes + 1] = string.sub(field, 1, -3)
    end
  end
  if holders == 0 then
    redis.call('del', key)
    return deadlines, false, 0
  end
  local writer = false
  for _, owner in ipairs(writes) do
    if deadlines[owner] then
      writer = true
    end
  end
  return deadlines, writer, holders
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
  local renewed_until = hold_deadline(now, lease)
  if deadline < renewed_until then
    redis.call('hset', key, owner .. ':t', renewed_until)
  end
  if redis.call('pttl', key) < lease then
    redis.call('pexpire', key, lease)
  end
  return 1
end
