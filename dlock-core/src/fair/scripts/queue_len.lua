-- How many waiters are queued for a fair lock and alive (their entry's deadline, in server
-- time, has not passed). Reads only.
--
-- KEYS[1]  the entry deadlines (see queue.lua)
return redis.call('zcount', KEYS[1], '(' .. now_ms(), '+inf')
