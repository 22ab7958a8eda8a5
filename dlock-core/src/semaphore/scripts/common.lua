-- Shared by every semaphore script (prepended to each one when it is registered).
--
-- The grants hash (one per semaphore, `dlock:sem:<prefix>{tag}:<name>`):
--   <grant>     the permits of one grant (one guard); a grant is "<client-id>:<owner-id>"
--   <grant>:t   that grant's deadline: the first server millisecond at which its permits
--               return (scripts/clock.lua's hold_deadline)
-- A grant id never ends in ':t'. The hash expires at its latest deadline (so a semaphore
-- whose holders all died leaves nothing but its capacity), and every script first
-- reclaims the grants whose deadline passed. The permits held are the sum over the live
-- grants: nothing else counts them, so no counter can drift from the grants.
-- The capacity is a string key of its own (`dlock:semcap:<prefix>{tag}:...`), without a TTL.
-- Releases and reclaims publish the permits available on the channel named like the
-- grants hash.

-- Reclaims the grants of `key` whose deadline passed. Returns the permits held by the
-- live grants, the earliest and the latest live deadline (nil and 0 when none is live),
-- and the permits reclaimed. Deletes the hash when no grant is left. It reads the whole
-- hash, so it first checks its size: a hash dlock wrote has two fields for each of at
-- most MAX_HOLDERS grants; a larger one is refused (an error, before anything is
-- written), never read in one call.
local function sem_reclaim(key, now)
  local size = redis.call('hlen', key)
  if size > 2 * MAX_HOLDERS then
    error({err = 'ERR dlock: the semaphore hash ' .. key .. ' has ' .. size
      .. ' fields, more than dlock writes for ' .. MAX_HOLDERS .. ' grants; it is not read in one call'})
  end
  local fields = redis.call('hgetall', key)
  local values = {}
  for i = 1, #fields, 2 do
    values[fields[i]] = fields[i + 1]
  end
  local held, earliest, latest, reclaimed = 0, nil, 0, 0
  for field, value in pairs(values) do
    if string.sub(field, -2) == ':t' then
      local grant = string.sub(field, 1, -3)
      local deadline = tonumber(value)
      local permits = tonumber(values[grant]) or 0
      if deadline <= now then
        redis.call('hdel', key, grant, field)
        reclaimed = reclaimed + permits
      else
        held = held + permits
        if earliest == nil or deadline < earliest then
          earliest = deadline
        end
        if deadline > latest then
          latest = deadline
        end
      end
    end
  end
  if earliest == nil and #fields > 0 then
    redis.call('del', key)
  end
  return held, earliest, latest, reclaimed
end

-- The Redis type at `key` when it is neither absent nor `expected`, else nil.
local function sem_foreign(key, expected)
  local found = redis.call('type', key).ok
  if found ~= 'none' and found ~= expected then
    return found
  end
  return nil
end

-- Publishes the permits available now (capacity `cap` - `held`, at least 0).
local function sem_publish(command, channel, cap, held)
  -- The command comes from dlock's two, whatever the caller passed.
  command = command == 'spublish' and 'spublish' or 'publish'
  redis.call(command, channel, math.max(0, (cap or 0) - held))
end
