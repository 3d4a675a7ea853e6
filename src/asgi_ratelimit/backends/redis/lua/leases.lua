-- Lease a slot of an in-flight limit, atomically: expired leases out, then one more lease
-- if fewer than the limit are live.
--
-- KEYS[1] - the sorted set of one identity's leases in one budget: member = lease token,
--           score = the lease's expiry in microseconds
-- ARGV[1] - the most leases live at once (the limit)
-- ARGV[2] - the lease, in microseconds
-- ARGV[3] - the new lease's token
-- ARGV[4] - now in microseconds, or "" for the server's TIME
-- ARGV[5] - milliseconds the set outlives its newest lease (an injected clock's margin)
-- returns {1, leases live with this one, 0} when granted, else
--         {0, leases live, microseconds until the oldest of them expires}
local now = tonumber(ARGV[4])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local lease = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local live = redis.call('ZCARD', KEYS[1])
if live < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
  -- The set goes when its newest lease does: a key per identity never outlives its leases.
  redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000) + tonumber(ARGV[5]))
  return {1, live + 1, 0}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, live, tonumber(oldest[2]) - now}
