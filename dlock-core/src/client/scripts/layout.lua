-- The layout version recorded for a key prefix: the one already there, or ARGV[1],
-- recorded now when none is (the first client of a prefix records its own).
-- KEYS[1]: dlock:layout:<prefix>; ARGV[1]: this client's layout version.
local recorded = redis.call('GET', KEYS[1])
if recorded then
    return recorded
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
