-- Give back one grant of a semaphore, idempotently per grant id (the release contract of
-- sync/release.rs).
--
-- KEYS[1]  the grants hash (its name is also the semaphore's channel)
-- KEYS[2]  the capacity
-- KEYS[3]  the release memo
-- ARGV[1]  grant id
-- ARGV[2]  memo lifetime in ms
-- ARGV[3]  publish command: 'publish' or 'spublish'
-- ARGV[5]  '0' on the op's first send (see sync/release.rs), else '1'
--
-- Returns 0 when the grant's permits went back to the pool, -1 when the grant was not
-- there (already released, reclaimed after its deadline, or never applied): then nothing
-- changes, so a double release or a release after expiry cannot inflate the pool.
-- Publishes the permits available whenever permits came back (this grant's or expired
-- ones reclaimed on the way).
-- (A first send, ARGV[5] = '0', cannot find its own memo.)
if ARGV[5] ~= '0' then
  local memo = redis.call('get', KEYS[3])
  if memo then
    return tonumber(memo)
  end
end
local outcome = -1
if redis.call('type', KEYS[1]).ok == 'hash' then
  local now = now_ms()
  local held, _, _, reclaimed = sem_reclaim(KEYS[1], now)
  local grant = ARGV[1]
  local permits = tonumber(redis.call('hget', KEYS[1], grant))
  if permits then
    -- The memo written below is the only key a release may create, also on a full
    -- server: its name must be a release memo's and its size and lifetime within
    -- dlock's bounds (MAX_MEMO_NAME, MAX_MEMO_MS), whatever the caller passed. Checked
    -- before the grant goes, and only when there is one to give back.
    if string.sub(KEYS[3], 1, 14) ~= 'dlock:release:' or #KEYS[3] > MAX_MEMO_NAME then
      return redis.error_reply('ERR dlock release: KEYS[3] is not a release memo name')
    end
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
-- Only a release that gave permits back is remembered: a retry of one that found nothing
-- finds nothing again, and a caller cannot make memos without grants to give back.
if outcome == 0 then
  redis.call('set', KEYS[3], outcome, 'px', math.max(1, math.min(tonumber(ARGV[2]) or 1, MAX_MEMO_MS)))
end
return outcome
