-- Give back one grant of a semaphore, idempotently per grant id (the release contract of
-- sync/release.rs).
--
-- KEYS[1]  the grants hash (its name is also the semaphore's channel)
-- KEYS[2]  the capacity
-- KEYS[3]  the release memo
-- ARGV[1]  grant id
-- ARGV[2]  memo lifetime in ms
-- ARGV[3]  publish command: 'publish' or 'spublish'
--
-- Returns 0 when the grant's permits went back to the pool, -1 when the grant was not
-- there (already released, reclaimed after its deadline, or never applied): then nothing
-- changes, so a double release or a release after expiry cannot inflate the pool.
-- Publishes the permits available whenever permits came back (this grant's or expired
-- ones reclaimed on the way).
local memo = redis.call('get', KEYS[3])
if memo then
  return tonumber(memo)
end
local outcome = -1
if redis.call('type', KEYS[1]).ok == 'hash' then
  local now = sem_now()
  local held, _, _, reclaimed = sem_reclaim(KEYS[1], now)
  local grant = ARGV[1]
  local permits = tonumber(redis.call('hget', KEYS[1], grant))
  if permits then
    redis.call('hdel', KEYS[1], grant, grant .. ':t')
    held = held - permits
    if held <= 0 then
      redis.call('del', KEYS[1])
    end
    outcome = 0
  end
  if permits or reclaimed > 0 then
    local cap = redis.call('get', KEYS[2])
    sem_publish(ARGV[3], KEYS[1], tonumber(cap), held)
  end
end
redis.call('set', KEYS[3], outcome, 'px', ARGV[2])
return outcome
