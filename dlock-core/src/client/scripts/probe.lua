-- Which of the commands dlock needs its caller's Redis user may not run: asked of the
-- server's ACL (redis.acl_check_cmd, Redis 7), which runs none of them.
--
-- KEYS[1]  a key of the client's (it routes the call; nothing is read or written)
-- ARGV     one group per command: its number of words n, then n words: the command (a
--          subcommand after '|': 'pubsub|numsub') and arguments as the command takes
--          them, a key and a channel of the client's among them (the check reads its
--          arguments as the command would: each must be there)
--
-- Returns the commands the user may not run, in ARGV's order; a command this server does
-- not know counts as allowed (the script that sends it would fail anyway).
local denied = {}
local at = 1
while at <= #ARGV do
  local n = tonumber(ARGV[at])
  local name = ARGV[at + 1]
  local words = {}
  local command, subcommand = string.match(name, '^([^|]+)|?(.*)$')
  words[1] = command
  if subcommand ~= '' then
    words[2] = subcommand
  end
  for i = at + 2, at + n do
    words[#words + 1] = ARGV[i]
  end
  local known, allowed = pcall(redis.acl_check_cmd, unpack(words))
  if known and not allowed then
    denied[#denied + 1] = name
  end
  at = at + n + 1
end
return denied
