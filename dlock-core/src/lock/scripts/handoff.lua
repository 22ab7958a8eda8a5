-- Shared by the lock's scripts and the multi-lock's (prepended to each): the waiter
-- registry, the hand-off of a free lock (a grant) to the longest-waiting live owner, its
-- runner-up, and the kinds that share a lock name. docs/PROTOCOL.md has
-- the states, acts and messages; this file is their Lua.
--
-- The registry is a sorted set named like the lock's unlock channel: waiting owner
-- ("<client-id>:<owner-id>", the field it will hold) -> server time in µs when it
-- registered, oldest first; one entry per acquisition. Messages go to the waiting owner's
-- client on its own wake channel (the registry's name with '#<client-id>' after the hash
-- tag, so it stays in the lock's slot), and name the owner they are for; PUBLISH answers
-- how many connections received one: none means the client is gone (or not listening),
-- and its owner is passed over.

-- The most registry entries one call looks at before it stops: bounds the work of one
-- call. A search stopped by it with entries left sets `left_untold`, and the script's
-- answer says so ('untold'): the client then sends the lock's 'leave' (release.lua),
-- which goes on from there, until every live waiter that must be told was told.
local MAX_PASSED_OVER = 64
local left_untold = false

-- `reply` with 'untold' after it when a search stopped at MAX_PASSED_OVER.
local function with_untold(reply)
  if not left_untold then
    return reply
  end
  if type(reply) == 'table' then
    reply[#reply + 1] = 'untold'
    return reply
  end
  return {reply, 'untold'}
end

-- The client id of an owner field.
local function client_of(owner)
  return string.match(owner, '^[^:]*')
end

-- The lock name kinds that share the lock's key, from the hash's marker fields ('mode':
-- a read-write lock, '!fair': a fair lock, neither: a lock). `key` must hold a hash.
local function kind_of(key)
  local marks = redis.call('hmget', key, 'mode', '!fair')
  if marks[1] then
    return 'read_write'
  elseif marks[2] then
    return 'fair'
  end
  return 'lock'
end

-- The wake channel of `owner`'s client for the lock whose registry is `registry`.
local function wake_channel(registry, owner)
  local open = string.find(registry, '{', 1, true)
  local close = string.find(registry, '}', open, true)
  local client = string.match(owner, '^[^:]*')
  return string.sub(registry, 1, close) .. '#' .. client .. string.sub(registry, close + 1)
end

-- Tells `owner` `what` ('pass', 'next:<ms>', 'wake' or 'lost'); whether its client
-- received it.
local function tell(publish, registry, owner, what)
  -- The command comes from dlock's two, whatever the caller passed.
  local command = publish == 'spublish' and 'spublish' or 'publish'
  return redis.call(command, wake_channel(registry, owner), what .. ':' .. owner) > 0
end

-- Tells the longest-waiting owner of `registry` whose client still listens, and is not
-- the client of `chosen` (the owner the lock was given to), to try when that grant
-- lapses, `lapse_in` ms after `now` (server ms), unless it was
-- told to try by then already (`naps`); the ones whose client is gone leave the registry.
--
-- Not a waiter of the chosen owner's client: a client that froze after it was told
-- (its connection still open, so it counts as listening) holds every waiter of it, and
-- the runner-up must be one that can act when the lapse comes. A chosen client that
-- lives acts itself: its owner takes the lock, or its cleanup passes it on at once.
local function tell_runner_up(registry, naps, publish, now, lapse_in, chosen)
  local lapse = now + lapse_in
  local message = 'next:' .. lapse_in
  local skipped = chosen and client_of(chosen)
  local at = 0
  local gone = 0
  for _ = 1, MAX_PASSED_OVER do
    local runner_up = redis.call('zrange', registry, at, at)[1]
    if runner_up == nil then
      return
    end
    if client_of(runner_up) == skipped then
      at = at + 1
    else
      local told = redis.call('zscore', naps, runner_up)
      if told and tonumber(told) <= lapse then
        return
      end
      if tell(publish, registry, runner_up, message) then
        -- What it was told, if it waits (XX: never a promise for an owner that left).
        redis.call('zadd', naps, 'xx', lapse, runner_up)
        return
      end
      redis.call('zrem', registry, runner_up)
      gone = gone + 1
    end
  end
  -- Went on from here by the next call only if this one made way (removed the gone):
  -- the chosen client's own waiters stay, and a next call would meet them again.
  left_untold = gone > 0 and redis.call('zrange', registry, at, at)[1] ~= nil
end

-- Whether `owner`'s client listens on its wake channel at this server. A message
-- published here also reaches connections on this server's replicas (a client whose
-- subscription is still on a master that was just demoted), which PUBLISH does not
-- count: only a listener here is known to hear it.
local function listens_here(publish, registry, owner)
  local numsub = publish == 'spublish' and 'shardnumsub' or 'numsub'
  return redis.call('pubsub', numsub, wake_channel(registry, owner))[2] > 0
end

-- Gives the free lock `key` to the longest-waiting owner whose client listens here, as
-- its own try would take it (its hold, and a fencing token when the lock's `counter` is
-- passed and exists), for `grant_ms` ms only: the holder extends it (see `sync::grant`), and a chosen
-- owner that never does (its process froze, died or was cut off after it was told) holds
-- the others up no longer than that. Tells the owner
-- 'held:<lasts_us>:<token>:<owner>': the hold lasts <lasts_us> µs from the server time its
-- registration has as its score, which came after that registering try's send, so its
-- client counts the hold's deadline from that send (no offset between the client's clock
-- and this server's enters, provided this server's clock also wrote the score: a client
-- whose route moved since, as after a failover, takes the lock with a try instead, see
-- sync/grant.rs); <token> is 0 without one. The next waiter is told to try when the grant
-- lapses. Returns the owner, or nil when nobody (alive) waits.
--
-- Every act that frees a lock others wait for hands it off here: a release, a withdraw
-- or a leave that finds it free, a force unlock, a multi-lock passing on a lock it was
-- given but cannot take.
--
-- The hold is written before the message goes out, and only for a listener here: a
-- client that hears 'held' holds the lock, whichever connection the message reached it
-- by. An owner whose client does not listen here is passed over, and told 'pass' all the
-- same: a client listening on a replica (its subscription not yet moved after a
-- failover) hears it and tries.
local function grant_to_oldest(key, registry, naps, publish, grant_ms, counter)
  local time = redis.call('time')
  -- The expiry as an absolute server time (PEXPIREAT), so that what the owner is told is
  -- exactly what Redis keeps, whatever time the script started at.
  local expires_ms = ms_of(time) + tonumber(grant_ms)
  for _ = 1, MAX_PASSED_OVER do
    local oldest = redis.call('zpopmin', registry)
    local owner = oldest[1]
    if owner == nil then
      return nil
    end
    if listens_here(publish, registry, owner) then
      -- A counter that does not exist stays so (a client without tokens never makes
      -- one); one that is not a number, or none passed, gives no token either.
      local token = 0
      if counter and redis.call('exists', counter) == 1 then
        local minted = redis.pcall('incr', counter)
        if type(minted) == 'number' then
          token = minted
        end
      end
      -- '!next' names the owner the lock was given to: a runner-up that turns out to
      -- wait no more has the next waiter told (release.lua's 'leave'). It goes with the
      -- hold.
      if token > 0 then
        redis.call('hset', key, owner, '1', owner .. ':f', string.format('%d', token), '!next', owner)
      else
        redis.call('hset', key, owner, '1', '!next', owner)
      end
      redis.call('pexpireat', key, string.format('%d', expires_ms))
      redis.call('zrem', naps, owner)
      -- Never negative (a registration scored by a master whose clock was ahead of this
      -- one's): the owner then finds too little left and takes the lock with a try.
      local lasts_us = math.max(0, expires_ms * 1000 - tonumber(oldest[2]))
      tell(publish, registry, owner, 'held:' .. string.format('%d', lasts_us) .. ':' .. string.format('%d', token))
      tell_runner_up(registry, naps, publish, ms_of(time), tonumber(grant_ms), owner)
      return owner
    end
    tell(publish, registry, owner, 'pass')
  end
  left_untold = redis.call('exists', registry) == 1
  return nil
end

-- Registers `owner` as waiting since `time` (a TIME reply; keeping its place if it is
-- there already) and makes the registry live at least `lifetime` ms more (it only bounds
-- an abandoned registry's life; see live_at_least). The score is the server time in microseconds, written as
-- the integer it is (16 digits, exact as a double): tries of several clients often reach
-- Redis within one millisecond, and equal scores are ordered by owner field, that is by
-- client id, which would let one client's waiters overtake another's at every such tie.
local function register(registry, owner, time, lifetime)
  redis.call('zadd', registry, 'nx', time[1] .. string.format('%06d', tonumber(time[2])), owner)
  live_at_least(registry, lifetime)
end

-- Tells every waiter of `registry` that was promised a longer sleep than `expires_in` ms
-- (see naps.lua) to try again; a waiter whose client is gone leaves the registry.
local function wake_overslept(registry, naps, publish, expires_in)
  for _, owner in ipairs(overslept(naps, expires_in)) do
    if not tell(publish, registry, owner, 'wake') then
      redis.call('zrem', registry, owner)
    end
  end
end
