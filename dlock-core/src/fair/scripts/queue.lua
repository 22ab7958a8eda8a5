-- Shared by every fair-lock script (prepended to each, after scripts/naps.lua): the purge
-- of dead queue entries, and the wake-up of the queue's head.
--
-- The queue is two sorted sets in the lock key's slot:
--   queue     waiter -> place (enqueue order: the last place + 1)
--   deadlines waiter -> server time in ms after which the entry is dead
-- A waiter is an owner field "<client-id>:<owner-id>". It is woken on its client's channel
-- "<wake prefix><client-id>" by a message naming it ('wake:<waiter>'): one channel per
-- client and lock carries the wake-ups of all that client's waiters, so it stays
-- subscribed while any of them waits (and briefly after), and a waiter that comes while
-- it is subscribed hears its wake-up from its first try on, with no subscription of its
-- own to wait for and no try to repeat once it is confirmed. Every deadline comes from
-- redis.call('time'), never from a client.

-- Removes the entries whose deadline has passed (not only the head's), at most MAX_BATCH
-- per call (the longest dead first); nobody else's deadline is touched. Dead entries
-- left by the bound are taken by the next calls: a dead head makes its waiters try again
-- at once (its deadline is their nap).
local function purge(queue, deadlines, now)
  local dead = redis.call('zrangebyscore', deadlines, '-inf', now, 'limit', 0, MAX_BATCH)
  if #dead > 0 then
    redis.call('zrem', queue, unpack(dead))
    redis.call('zrem', deadlines, unpack(dead))
  end
end

-- The first waiter in the queue, or nil.
local function head_of(queue)
  return redis.call('zrange', queue, 0, 0)[1]
end

-- Tells `waiter` (if any) to try again now, on its client's channel.
local function wake(waiter, prefix, publish)
  if waiter then
    local client = string.match(waiter, '^[^:]*')
    -- The command comes from dlock's two, whatever the caller passed.
    redis.call(publish == 'spublish' and 'spublish' or 'publish', prefix .. client, 'wake:' .. waiter)
  end
end

-- What `key` holds, as TYPE names it, and the answer that refuses it when it is not a
-- free or fair lock: 'wrongtype:<type>' for another type of value, 'kind:<kind>' for
-- another kind of lock's hash (a fair lock's carries '!fair'; lock names are shared by the
-- kinds, each refusing the others').
local function fair_refusal(key)
  local found = redis.call('type', key).ok
  if found ~= 'none' and found ~= 'hash' then
    return 'wrongtype:' .. found, found
  end
  if found == 'hash' then
    local marks = redis.call('hmget', key, '!fair', 'mode')
    if marks[2] then
      return 'kind:read_write', found
    elseif not marks[1] then
      return 'kind:lock', found
    end
  end
  return nil, found
end
