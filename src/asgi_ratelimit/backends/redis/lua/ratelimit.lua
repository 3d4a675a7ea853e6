-- asgi_ratelimit: decide every limit of one request in one atomic step.
--
-- The arithmetic mirrors src/asgi_ratelimit/algorithms/*.py operation for operation, in the
-- same order, on integer microseconds (Lua numbers are doubles: exact below 2^53; past it,
-- big integers, see "Exact integers past 2^53"), so the Redis and memory backends give the
-- same answers for every limit. GCRA and the leaky bucket store their
-- backlog *relative* to the instant it was written ("backlog at"), never now * amount, which
-- would pass 2^53; the token bucket clamps its refill before multiplying for the same reason.
--
-- KEYS[i]   - where check i's state is (on Redis Cluster, all keys of one call in one slot):
--             the sliding log's own key, prefix{bucket}:<identity tag>:<limit code>; for the
--             other kinds the start of their hashes' names, prefix{bucket}:<limit code> (see
--             "Where states live"); after the checks' keys, the block key of each check that
--             has a block
-- ARGV[1]   - one string: a head, struct "<BBddd": mode, want_state, margin_ms, now, n:
--             mode 1 "hit" (decide; store only if every check passes), 2 "peek" (decide,
--             store nothing) or 3 "refund" (give back the costs of a "hit" made at now);
--             want_state 1 to return each check's stored state when the request is denied;
--             margin_ms added to every TTL (0 with the server's clock);
--             now in integer microseconds, or -1 to use the server's TIME; n checks.
--             Then each check's field in those hashes, 8 bytes each, in order; then each
--             check: five little-endian doubles (struct "<ddddd"): algorithm code
--             (1 fixed_window, 2 sliding_window_log, 3 sliding_window_counter, 4 token_bucket,
--             5 gcra, 6 leaky_bucket; + 16 for a check with a block), amount, period_us,
--             burst, cost; for a check with a block (Block in backends/_protocol.py), then
--             reset_us, count and count durations_us. One argument, not one a part: Redis
--             makes a Lua string and a table slot of each (about 1,000 instructions).
-- returns   - one binary string: two doubles (struct "<dd"): now_us and flags (1: all
--             allowed; 2: the numbers that follow are integers; 4: a number passes 2^53,
--             and all are sent as text after its length: "n n n n n n n;..."; 8, with 1
--             and 2: every check passes with no wait and no delay, and four integers a
--             check follow: remaining, reset_us, ttl_us, next_us; 16, with 8: three, the
--             ttl being the reset, as it is for every kind but the sliding window
--             counter; 32, with 8: a bucket kind's check sends one integer instead, its
--             backlog, from which its remaining, reset_us (its ttl) and next_us follow, see
--             bucket_numbers), else seven
--             numbers per check, eight-byte integers ("<i8", when every one is whole) or
--             doubles: allowed (1/0), remaining, reset_us, retry_us (inf if it can never
--             pass), delay_us, ttl_us, next_us (until more quota than remaining, when
--             allowed); a check that would pass in a call that counts nothing (a peek, or
--             another check refused) reports what is left now; then, when asked for and
--             denied, each check's stored state (see pack_state), each preceded by its length
--             as a double. Binary numbers in one struct.pack because that is the cheapest
--             reply a script can make (measured with callgrind on redis-server 7.0: about
--             500 instructions a number, where an array of integers costs 1,000 and text
--             1,200-3,000), and exact for fractions and infinity.

local floor, ceil, fmod, huge = math.floor, math.ceil, math.fmod, math.huge

local tostring, sub, match, format = tostring, string.sub, string.match, string.format
local pack, unpack_struct = struct.pack, struct.unpack
-- Globals read once: a global costs a table lookup a use (redis.call two).
local tonumber, type, unpack, error = tonumber, type, unpack, error
local redis_call, redis_pcall = redis.call, redis.pcall

-- The exact text of a number (what %.17g writes), for the sliding log's entries. Writing
-- numbers is costly inside Redis (string.format about 1.2 us a call, tostring about 0.35 us),
-- so zero is answered without it, now once per call, and tostring (%.14g, exact for integers
-- below 1e14) does the rest; a larger integer is written in two halves. NOW is set once per
-- call (below), its text when first needed: the absolute time is the one big number the log
-- stores.
local NOW, NOW_TEXT = nil, nil

local function written(x)
  if x == floor(x) then
    if x < 1e14 and x > -1e14 then return tostring(x) end
    if x >= 1e14 and x < 1e17 then
      local high = floor(x / 1e8)
      local low = x - high * 1e8  -- exact: both are integers below 2^53
      -- x / 1e8 may round up to the next integer: put low back in [0, 1e8).
      if low < 0 then
        high, low = high - 1, low + 1e8
      elseif low >= 1e8 then
        high, low = high + 1, low - 1e8
      end
      return tostring(high) .. sub(tostring(low + 1e8), 2)
    end
  end
  return string.format('%.17g', x)
end

local function fmt(x)
  if x == 0 and 1 / x > 0 then return '0' end  -- not -0, which %.17g writes "-0"
  if x == NOW then
    if not NOW_TEXT then NOW_TEXT = written(x) end
    return NOW_TEXT
  end
  return written(x)
end

-- Python's float floor division (Objects/floatobject.c): exact, unlike floor(a / b). The
-- usual arguments (times, periods, scaled levels) are integers below 2^52: for them Lua's
-- own a % b (a - floor(a / b) * b, no function call) is exact but when a / b rounds across
-- an integer, and then off by b, which is put back; the quotient (a - m) / b is exact.
local HALF = 2^52

local function floordiv(a, b)
  if b > 0 and a % 1 == 0 and b % 1 == 0 and a < HALF and a > -HALF and b < HALF then
    local m = a % b
    if m < 0 then m = m + b elseif m >= b then m = m - b end
    return (a - m) / b
  end
  local mod = fmod(a, b)
  local div = (a - mod) / b
  if mod ~= 0 and ((b < 0) ~= (mod < 0)) then
    div = div - 1
  end
  if div ~= 0 then
    local whole = floor(div)
    if div - whole > 0.5 then
      whole = whole + 1
    end
    return whole
  end
  return 0
end

-- ceil(x) for x > 0 in the interpreter's own operations (x % 1 is its fraction): a call of
-- math.ceil costs a few hundred instructions inside Redis, and these run on every check.
local function ceil_div(n, d)
  if n <= 0 then
    return 0
  end
  local q = n / d
  local whole = q - q % 1
  if whole < q then return whole + 1 end
  if whole ~= whole then return q end  -- q infinite: inf % 1 is not a number
  return whole
end

-- algorithms/base.py scaled_cost: cost * scale in whole units, rounded up.
local function scaled_cost(cost, scale)
  local x = cost * scale
  local whole = x - x % 1
  if whole < x then return whole + 1 end
  if whole ~= whole then return x end
  return whole
end

-- Exact integers past 2^53 ------------------------------------------------------------------
-- Python's ints have no bound; a limit whose burst * period_us reaches 2^53 (1000000/day)
-- makes the bucket kinds' numbers pass it, and the sliding counter's weighted product. Those
-- take these non-negative big integers: little-endian limbs of 24 bits, so that a limb
-- product plus carries stays below 2^53, exact in a double. Limits below the bound never
-- touch them (the usual path is unchanged).
local BASE = 16777216  -- 2^24
local EXACT = 2^53

local function trim(t)
  local n = #t
  while n > 0 and t[n] == 0 do
    t[n] = nil
    n = n - 1
  end
  return t
end

-- A non-negative integral double (exact at any size) as a big integer.
local function big(x)
  local t = {}
  while x > 0 do
    local q = floor(x / BASE)
    t[#t + 1] = x - q * BASE
    x = q
  end
  return t
end

-- The double nearest a big integer (exact below 2^53).
local function num(a)
  local x = 0
  for i = #a, 1, -1 do x = x * BASE + a[i] end
  return x
end

local function cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function add(a, b)
  local t, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    local v = (a[i] or 0) + (b[i] or 0) + carry
    if v >= BASE then t[i], carry = v - BASE, 1 else t[i], carry = v, 0 end
  end
  if carry > 0 then t[#t + 1] = carry end
  return t
end

-- a - b, for a >= b.
local function minus(a, b)
  local t, borrow = {}, 0
  for i = 1, #a do
    local v = a[i] - (b[i] or 0) - borrow
    if v < 0 then t[i], borrow = v + BASE, 1 else t[i], borrow = v, 0 end
  end
  return trim(t)
end

local function mul(a, b)
  local t = {}
  for i = 1, #a + #b do t[i] = 0 end
  for i = 1, #a do
    local ai, carry = a[i], 0
    for j = 1, #b do
      local v = t[i + j - 1] + ai * b[j] + carry  -- below 2^24 + 2^48 + 2^25
      carry = floor(v / BASE)
      t[i + j - 1] = v - carry * BASE
    end
    local k = i + #b
    while carry > 0 do
      local v = t[k] + carry
      carry = floor(v / BASE)
      t[k] = v - carry * BASE
      k = k + 1
    end
  end
  return trim(t)
end

-- floor(a / d) (big) and a mod d (a double), for an integral double 1 <= d < 2^53: each
-- step takes a quotient estimated in doubles, shrunk so that it never overshoots (num()
-- and the division each round by less than 2^-50), and subtracts it exactly; the rest
-- shrinks by about 2^47 a step, so a few steps end it.
local function divmod_big(a, d)
  local q, r, bd = {}, a, big(d)
  while cmp(r, bd) >= 0 do
    local guess = floor(num(r) / d * (1 - 2^-48)) - 1
    if guess < 1 then guess = 1 end
    local g = big(guess)
    r = minus(r, mul(g, bd))
    q = add(q, g)
  end
  return q, num(r)
end

-- ceil(a / d), as a double when exact, else big (for the reply and the TTL).
local function ceil_big(a, d)
  local q, r = divmod_big(a, d)
  if r > 0 then q = add(q, {1}) end
  return q
end

-- A big integer's value for the reply: a double while exact, else the big integer itself.
local function out(a)
  if #a <= 2 then return num(a) end
  local x = num(a)
  if x < EXACT then return x end
  return a
end

-- Decimal text of a big integer, and back (a stored state).
local function big_text(a)
  if #a == 0 then return '0' end
  local parts = {}
  while #a > 0 do
    local q, r = divmod_big(a, 1e7)
    parts[#parts + 1] = r
    a = q
  end
  local text = format('%d', parts[#parts])
  for i = #parts - 1, 1, -1 do text = text .. format('%07d', parts[i]) end
  return text
end

local function big_of_text(text)
  local a, ten7 = {}, big(1e7)
  local head = #text % 7
  if head == 0 then head = 7 end
  local at = 1
  while at <= #text do
    a = add(mul(a, ten7), big(tonumber(sub(text, at, at + head - 1))))
    at = at + head
    head = 7
  end
  return a
end

-- scaled_cost with the exact product (Python multiplies an int cost exactly; a fractional
-- one in doubles, then rounds up, as here).
local function scaled_cost_big(cost, scale)
  if cost == floor(cost) then return mul(big(cost), big(scale)) end
  return big(ceil(cost * scale))
end

-- fixed window -------------------------------------------------------------------------------
local function fixed_window(state, now, amount, period, burst, cost, into)
  local window = floordiv(now, period)
  local count = 0
  if state and state[1] == window then
    count = state[2]
  end
  local until_next = (window + 1) * period - now
  local reset = 0
  -- cost <= amount - count, not count + cost <= amount: a tiny cost must not vanish in a sum.
  if cost <= amount - count then
    count = count + cost
    if count ~= 0 then reset = until_next end
    -- The whole quota comes back at once, when the window ends: more quota then.
    into[1], into[2], into[3] = window, count, nil
    return true, amount - count, reset, 0, 0, into, reset, reset
  end
  local retry = huge
  if cost <= amount then retry = until_next end
  if count ~= 0 then reset = until_next end
  return false, amount - count, reset, retry, 0, nil, 0
end

-- sliding window log: state {entries = {{ts, cost, original index or false}, ...}} ---------------
-- Microseconds until a request of cost (at most amount) fits in the log.
local function log_wait(entries, cost, amount, used, period, now)
  if cost <= amount - used then return 0 end
  -- The smallest k such that the request fits once the oldest k entries have left.
  local function fits_without(k)
    local left = 0
    for j = k + 1, #entries do left = left + entries[j][2] end
    return cost <= amount - left
  end
  local to_free = used + cost - amount
  local k = 0
  while k < #entries and to_free > 0 do
    to_free = to_free - entries[k + 1][2]
    k = k + 1
  end
  while k < #entries and not fits_without(k) do k = k + 1 end
  while k > 1 and fits_without(k - 1) do k = k - 1 end
  local index = k
  if index == 0 then index = #entries end  -- Python's entries[-1]
  return entries[index][1] + period - now
end

local function sliding_window_log(state, now, amount, period, burst, cost)
  local horizon = now - period
  local entries = {}
  local used = 0
  if state then
    for _, entry in ipairs(state.entries) do
      if entry[1] > horizon then
        entries[#entries + 1] = entry
        used = used + entry[2]
      end
    end
  end
  local reset = 0
  if cost <= amount - used then
    if cost ~= 0 then
      entries[#entries + 1] = {now, cost, false}
      used = used + cost
    end
    if #entries > 0 then reset = entries[#entries][1] + period - now end
    local wanted = floor(amount - used) + 1  -- one more than is left
    local more = 0
    if wanted <= amount then more = log_wait(entries, wanted, amount, used, period, now) end
    return true, amount - used, reset, 0, 0, {entries = entries, orig = state and state.orig or 0}, reset, more
  end
  if #entries > 0 then reset = entries[#entries][1] + period - now end
  local retry = huge
  if cost <= amount then retry = log_wait(entries, cost, amount, used, period, now) end
  return false, amount - used, reset, retry, 0, nil, 0
end

-- sliding window counter -----------------------------------------------------------------------
-- floor(previous * (period - elapsed) / period) as Python computes it: a product exact below
-- 2^53 and one correctly rounded division. Past 2^53 (limits of a billion a year), an integral
-- previous (a Python int) takes the exact quotient q and remainder r of the big product, then
-- Python's rounding of q + r/period to a double: up to q + 1 when the rest of the way, (period
-- - r) / period, is at most half an ulp of q (ties go to q + 1, the even one). A fractional
-- previous is a Python float: the same double operations as here.
local function estimate(current, previous, elapsed, period)
  local product = previous * (period - elapsed)
  if product < EXACT or previous % 1 ~= 0 then
    local q = product / period
    return current + (q - q % 1)  -- floor(q): x % 1 is x's fraction, and no call
  end
  local q, r = divmod_big(mul(big(previous), big(period - elapsed)), period)
  q = num(q)  -- at most previous: exact
  if q >= 1 then
    local half_ulp = 2 ^ (floor(math.log(q) / math.log(2)) - 53)
    -- log2 of a power of two may round down: use the exact binade of q
    while 2 * half_ulp * 2 ^ 52 > q do half_ulp = half_ulp / 2 end
    while 4 * half_ulp * 2 ^ 52 <= q do half_ulp = half_ulp * 2 end
    if (period - r) <= half_ulp * period then q = q + 1 end
  end
  return current + q
end

-- The smallest e in [low, high] where a monotone predicate holds (it holds at high): the
-- closed-form guess when it is right, else a binary search (at most ~50 steps).
local function first_true(predicate, guess, low, high)
  if low < guess and guess <= high and predicate(guess) and not predicate(guess - 1) then
    return guess
  end
  if predicate(low) then
    return low
  end
  local below, at = low, high
  while at - below > 1 do
    local middle = floor((below + at) / 2)
    if predicate(middle) then at = middle else below = middle end
  end
  return at
end

local function guess_at(allowance, count, period)
  if count < 1 then return 0 end
  local x = period - (allowance - allowance % 1 + 1) * period / count
  return x - x % 1 + 1  -- (floor(x) + 1, as in estimate)
end

-- Microseconds until a request of cost passes (cost <= amount - estimate).
local function wait_until_fits(cost, amount, current, previous, elapsed, period)
  local function fits(cur, prev)
    return function(e) return cost <= amount - estimate(cur, prev, e, period) end
  end
  if fits(current, previous)(elapsed) then
    return 0
  end
  local target = amount - cost
  if cost <= amount - current then
    local guess = guess_at(target - current, previous, period)
    local at = first_true(fits(current, previous), guess, elapsed, period)
    if at < period then
      return at - elapsed
    end
  end
  if current == 0 then
    return period - elapsed
  end
  local guess = guess_at(target, current, period)
  local at = first_true(fits(0, current), guess, 0, period)
  return period - elapsed + at
end

-- The reset time of an allowed request, once the current window holds count >= 1: the
-- quota is full again at the first e of the next window where count, carried over, weighs
-- 0. wait_until_fits(amount, ...) gives the same answer through the general search; this
-- inline path (the closed-form guess, checked at e and e - 1) runs on every allowed request.
local function full_again(count, elapsed, period)
  local guess = guess_at(0, count, period)
  if 0 < guess and guess <= period and estimate(0, count, guess, period) <= 0
      and estimate(0, count, guess - 1, period) > 0 then
    return period - elapsed + guess
  end
  return nil
end

-- Microseconds until more than remaining is left (algorithms/sliding_window_counter.py
-- _more_quota_in): a closed form for whole counts, checked at e and e - 1, else the search.
local function more_quota_in(remaining, amount, current, previous, elapsed, period)
  local wanted = remaining - remaining % 1 + 1  -- (floor(x) is x - x % 1, as in estimate)
  if wanted > amount then return 0 end
  if current % 1 == 0 and previous % 1 == 0 and remaining == wanted - 1 then
    local weight = amount - remaining - (amount - remaining) % 1 - current
    if weight >= 1 then
      local at
      if weight * period < EXACT then
        at = period + 1 - ceil_div(weight * period, previous)
      else  -- Python's exact integer ceiling
        at = period + 1 - num(ceil_big(mul(big(weight), big(period)), previous))
      end
      if at >= period then return period - elapsed end
      local goal = amount - wanted
      if estimate(current, previous, at, period) <= goal
          and estimate(current, previous, at - 1, period) > goal then
        return at - elapsed
      end
    elseif weight == 0 and current >= 1 then
      return period - elapsed + 1
    end
  end
  return wait_until_fits(wanted, amount, current, previous, elapsed, period)
end

local function sliding_window_counter(state, now, amount, period, burst, cost, into)
  local window = floordiv(now, period)
  local elapsed = now - window * period
  local current, previous = 0, 0
  if state then
    if state[1] == window then
      current, previous = state[2], state[3]
    elseif state[1] == window - 1 then
      previous = state[2]
    end
  end
  local est = estimate(current, previous, elapsed, period)
  if cost <= amount - est then
    current = current + cost
    local reset = current >= 1 and full_again(current, elapsed, period)
    if not reset then reset = wait_until_fits(amount, amount, current, previous, elapsed, period) end
    local ttl = period - elapsed
    if current ~= 0 then ttl = 2 * period - elapsed end
    local remaining = amount - est - cost
    local more = more_quota_in(remaining, amount, current, previous, elapsed, period)
    into[1], into[2], into[3] = window, current, previous
    return true, remaining, reset, 0, 0, into, ttl, more
  end
  local retry = huge
  if cost <= amount then
    retry = wait_until_fits(cost, amount, current, previous, elapsed, period)
  end
  local reset = wait_until_fits(amount, amount, current, previous, elapsed, period)
  return false, math.max(0, amount - est), reset, retry, 0, nil, 0
end

-- The bucket kinds below inline backlog_now, scaled_cost and ceil_div on a passing check's
-- operands (finite, not negative; a whole scaled cost, else the helper): a Lua function call
-- costs about 400 instructions inside Redis, and these run on every check. ceil(x) of such
-- an x is x - x % 1 (its floor), plus one when that is below x.

-- token bucket: state {level scaled by period, last update} -------------------------------------
local function token_bucket(state, now, amount, period, burst, cost, into)
  local full = burst * period
  local level, last
  if not state then
    level, last = full, now
  else
    level, last = state[1], state[2]
    if now > last then
      local gain = (now - last) * amount
      if gain >= full then level = full else level = math.min(full, level + gain) end
      last = now
    end
  end
  local needed = cost * period
  if needed % 1 ~= 0 then needed = scaled_cost(cost, period) end
  if needed <= level then
    level = level - needed
    local q = (full - level) / amount
    local reset = q - q % 1
    if reset < q then reset = reset + 1 end
    local remaining = floordiv(level, period)
    -- The next whole token: the level reaches (remaining + 1) * period.
    local more = 0
    if level < full then
      q = ((remaining + 1) * period - level) / amount
      more = q - q % 1
      if more < q then more = more + 1 end
    end
    into[1], into[2], into[3] = level, last, nil
    return true, remaining, reset, 0, 0, into, reset, more
  end
  local retry = huge
  if cost <= burst then retry = ceil_div(needed - level, amount) end
  return false, floordiv(level, period), ceil_div(full - level, amount), retry, 0, nil, 0
end

-- GCRA and leaky bucket: state {backlog (scaled by amount) at the instant "at", at} ----------------
local function backlog_now(state, now, amount)
  if not state then return 0 end
  local backlog, at = state[1], state[2]
  local d = now - at
  if d <= 0 then return backlog - d * amount end
  local gain = d * amount
  if gain >= backlog then return 0 end
  return backlog - gain
end

-- A passing bucket check's remaining, reset (also its ttl) and next_us, from its backlog
-- (exact for a fractional or big backlog too): gcra's and the leaky bucket's, and the locals
-- path's reply of seven numbers (a leaky bucket that delays); the client works them out the
-- same way from a reply of backlogs (flag 32).
local function bucket_numbers(backlog, amount, period, burst)
  local full = burst * period
  local q = backlog / amount
  local reset = q - q % 1
  if reset < q then reset = reset + 1 end
  local remaining = floordiv(full - backlog, period)
  -- One more unit fits once the backlog is down to full - (remaining + 1) * period.
  local more = 0
  if remaining < burst then
    q = (backlog - full + (remaining + 1) * period) / amount
    more = q - q % 1
    if more < q then more = more + 1 end
  end
  return remaining, reset, more
end

local function gcra(state, now, amount, period, burst, cost, into)
  local tolerance = burst * period
  local rel = 0
  if state then  -- backlog_now: what is left of it at now, never below 0
    rel = state[1] - (now - state[2]) * amount
    if rel < 0 then rel = 0 end
  end
  local step = cost * period
  if step % 1 ~= 0 then step = scaled_cost(cost, period) end
  local backlog = rel + step
  if backlog <= tolerance then
    local remaining, reset, more = bucket_numbers(backlog, amount, period, burst)
    into[1], into[2], into[3] = backlog, now, nil
    return true, remaining, reset, 0, 0, into, reset, more
  end
  local retry = huge
  if cost <= burst then retry = ceil_div(backlog - tolerance, amount) end
  return false, floordiv(tolerance - rel, period), ceil_div(rel, amount), retry, 0, nil, 0
end

local function leaky_bucket(state, now, amount, period, burst, cost, into)
  local capacity = burst * period
  local queued = 0
  if state then  -- backlog_now, as in gcra
    queued = state[1] - (now - state[2]) * amount
    if queued < 0 then queued = 0 end
  end
  local step = cost * period
  if step % 1 ~= 0 then step = scaled_cost(cost, period) end
  if queued + step <= capacity then
    local q = queued / amount
    local delay = q - q % 1
    if delay < q then delay = delay + 1 end
    local backlog = queued + step
    local remaining, reset, more = bucket_numbers(backlog, amount, period, burst)
    into[1], into[2], into[3] = backlog, now, nil
    return true, remaining, reset, 0, delay, into, reset, more
  end
  local retry = huge
  if cost <= burst then retry = ceil_div(queued + step - capacity, amount) end
  return false, floordiv(capacity - queued, period), ceil_div(queued, amount), retry, 0, nil, 0
end

-- Each decider returns an outcome's eight values (see OUTCOMES below), not a table, and
-- writes an allowed check's new state into `into`, the check's own table (the sliding log
-- excepted): tables a call makes cost the server allocation and garbage collection.
local DECIDE = {fixed_window, sliding_window_log, sliding_window_counter, token_bucket, gcra,
                leaky_bucket}

-- The bucket kinds past 2^53 (burst * period_us >= 2^53): algorithms/*.py step for step on
-- big integers. State: {big level, last} (token bucket) or {big backlog, at} (GCRA, leaky
-- bucket), stored as text "<number> <at>". Times in the outcome may pass 2^53 too (out()).
local ZERO = {}

local function backlog_now_big(state, now, amount)
  if not state then return ZERO end
  local backlog, at = state[1], state[2]
  if now <= at then return add(backlog, mul(big(at - now), big(amount))) end
  local gain = mul(big(now - at), big(amount))
  if cmp(gain, backlog) >= 0 then return ZERO end
  return minus(backlog, gain)
end

local function token_bucket_big(state, now, amount, period, burst, cost, into)
  local full = mul(big(burst), big(period))
  local level, last
  if not state then
    level, last = full, now
  else
    level, last = state[1], state[2]
    if now > last then
      local gained = add(level, mul(big(now - last), big(amount)))
      if cmp(gained, full) < 0 then level = gained else level = full end
      last = now
    end
  end
  local needed = scaled_cost_big(cost, period)
  if cmp(needed, level) <= 0 then
    level = minus(level, needed)
    local reset = out(ceil_big(minus(full, level), amount))
    local remaining = num((divmod_big(level, period)))
    local more = 0
    if cmp(level, full) < 0 then
      more = out(ceil_big(minus(mul(big(remaining + 1), big(period)), level), amount))
    end
    into[1], into[2], into[3] = level, last, nil
    return true, remaining, reset, 0, 0, into, reset, more
  end
  local retry = huge
  if cost <= burst then retry = out(ceil_big(minus(needed, level), amount)) end
  return false, num((divmod_big(level, period))), out(ceil_big(minus(full, level), amount)),
          retry, 0, nil, 0
end

-- GCRA and the leaky bucket: a request of step passes when queued + step <= capacity.
local function bucket_big(state, now, amount, period, burst, cost, into, shapes)
  local capacity = mul(big(burst), big(period))
  local queued = backlog_now_big(state, now, amount)
  local backlog = add(queued, scaled_cost_big(cost, period))
  if cmp(backlog, capacity) <= 0 then
    local delay = 0
    if shapes then delay = out(ceil_big(queued, amount)) end
    local reset = out(ceil_big(backlog, amount))
    local room = minus(capacity, backlog)
    local remaining = num((divmod_big(room, period)))
    local more = 0
    if remaining < burst then  -- one more unit fits once room grows to (remaining + 1) * period
      more = out(ceil_big(minus(mul(big(remaining + 1), big(period)), room), amount))
    end
    into[1], into[2], into[3] = backlog, now, nil
    return true, remaining, reset, 0, delay, into, reset, more
  end
  local retry = huge
  if cost <= burst then retry = out(ceil_big(minus(backlog, capacity), amount)) end
  local remaining
  if cmp(queued, capacity) <= 0 then
    remaining = num((divmod_big(minus(capacity, queued), period)))
  else  -- Python's floor division of a negative room
    remaining = -num(ceil_big(minus(queued, capacity), period))
  end
  return false, remaining, out(ceil_big(queued, amount)), retry, 0, nil, 0
end

local function gcra_big(state, now, amount, period, burst, cost, into)
  return bucket_big(state, now, amount, period, burst, cost, into, false)
end

local function leaky_bucket_big(state, now, amount, period, burst, cost, into)
  return bucket_big(state, now, amount, period, burst, cost, into, true)
end

local DECIDE_BIG = {[4] = token_bucket_big, [5] = gcra_big, [6] = leaky_bucket_big}

local LOG = 2
local LAYOUTS, SHORT_LAYOUTS = {}, {}  -- checks -> a whole reply's layout
local COUNT_LAYOUTS = {}  -- integers -> the layout of common_hit's reply of that many
-- The layout of a reply of `each` integers a check for n checks, kept in `layouts` (called
-- only when it is not there yet: `layouts[n] or integers_layout(layouts, n, each)`).
local function integers_layout(layouts, n, each)
  local layout = '<dd' .. string.rep('i8', each * n)
  layouts[n] = layout
  return layout
end
-- A check's table and its outcome's, by position, kept from call to call and refilled (a
-- function library's definitions outlive calls): a table a call makes costs about 1,000
-- instructions with its share of garbage collection. An outcome is the deciders' eight
-- results: allowed, remaining, reset_us, retry_us, delay_us, the new state (allowed only),
-- ttl_us and next_us (allowed only).
local CHECKS, OUTCOMES = {}, {}
local VALUES = {}  -- the numbers of a reply of integers, refilled the same way
local HIT, REFUND = 1, 3  -- the modes (2: peek)
-- A call's checks, kept from call to call like CHECKS (a table a call makes costs it about
-- 1,000 instructions).
local CALL_CHECKS = {}
local SECONDS, seconds_kept = {}, 0  -- TIME's seconds (text) -> microseconds

-- storage ------------------------------------------------------------------------------------
local function log_item(entry)
  if entry[2] == 1 then return fmt(entry[1]) end
  return fmt(entry[1]) .. ':' .. fmt(entry[2])
end

-- Where states live. The sliding log keeps a list under the check's own key,
-- prefix{bucket}:<identity tag>:<limit code>. Every other kind keeps its state in one field
-- (8 bytes of the identity's hash, given in ARGV[2]) of a small hash that the identities of
-- one bucket share: prefix{bucket}:<limit code>:<n>, n the window (fixed window, sliding
-- window counter) or the generation (the bucket kinds). A hash expires as a whole once no
-- state in it can matter, so no field needs a TTL of its own, and a field costs about 20
-- bytes where a key of its own cost about 150 (the keyspace's entry, name and expiry).

-- The hash of a check's limit (key: prefix{bucket}:<limit code>) for window or generation n.
-- The numbers' text is remembered (a function library keeps it from call to call, emptied
-- past 256): string.format costs about 2,000 instructions inside Redis, a lookup 100.
-- common_hit reads NUMBERS itself (`key .. (NUMBERS[n] or number_text(n))`): a call of
-- hash_of costs about 400 instructions more.
local NUMBERS, numbers_kept = {}, 0
local function number_text(n)
  if numbers_kept >= 256 then NUMBERS, numbers_kept = {}, 0 end
  local text = ':' .. format('%d', n)
  NUMBERS[n] = text
  numbers_kept = numbers_kept + 1
  return text
end
local function hash_of(key, n)
  return key .. (NUMBERS[n] or number_text(n))
end

-- The length of a bucket's generations: longer than a state can matter (the time to be full
-- again, at most burst * period / amount), so a state written in generation g is over
-- before g + 2 begins and a read looks in g and g - 1 only.
local function generation(amount, period, burst)
  return ceil_div(burst * period, amount) + 1
end

-- A count of the windowed kinds: an integer (Redis keeps it in the hash as one, in a few
-- bytes) when it is whole, else a NUL and a double.
local function count_value(n)
  if n == floor(n) and n >= 0 and n < EXACT then return format('%d', n) end
  return '\0' .. pack('<d', n)
end

-- (tonumber of a NUL and binary is nil: checked after it, not with a call before.)
local function count_of(raw)
  local n = tonumber(raw)
  if n then return n end
  return (unpack_struct('<d', raw, 2))
end

-- The sliding window counter's field: the window's count, and a copy of the previous
-- window's (taken when the window's first request came), so that a returning identity costs
-- one read: current * (amount + 1) + previous when exact, else a NUL and two doubles.
local function pair_value(current, previous, amount)
  local m = amount + 1
  if current == floor(current) and previous == floor(previous) and current >= 0
      and previous >= 0 and current < m and previous < m and current * m + previous < EXACT then
    return format('%d', current * m + previous)
  end
  return '\0' .. pack('<dd', current, previous)
end

-- pack_state writes a scaled time, past 2^53, in two exact halves of 8 decimal digits.
local B = 1e8

-- Exact integer division of v < 2^53 by m: v / m is rounded, so the quotient is corrected.
local function divmod(v, m)
  local q = floor(v / m)
  if q * m > v then
    q = q - 1
  elseif (q + 1) * m <= v then
    q = q + 1
  end
  return q, v - q * m
end

local function pair_of(raw, amount)
  local n = tonumber(raw)
  if n then return divmod(n, amount + 1) end
  local current, previous = unpack_struct('<dd', raw, 2)
  return current, previous
end

-- A bucket kind's field in the hash of the generation that starts at `start`: the scaled
-- "theoretical arrival time" relative to it, (at - start) * amount + backlog (for the token
-- bucket the backlog is what it lacks to be full, burst * period - level), one integer while
-- every step is exact; else a NUL and the state's two doubles; past 2^53 (is_big) the text
-- "<number> <at>".
local function bucket_value(code, state, amount, period, burst, start, is_big_check)
  if is_big_check then return big_text(state[1]) .. ' ' .. format('%d', state[2]) end
  local backlog, at = state[1], state[2]
  if code == 4 then backlog = burst * period - backlog end
  if backlog % 1 == 0 and backlog >= 0 and at >= start  -- (x % 1 == 0: whole, finite)
      and 4 * (burst * period + 2 * amount) < EXACT then
    local v = (at - start) * amount + backlog
    if v < EXACT then return format('%d', v) end
  end
  return '\0' .. pack('<dd', state[1], state[2])
end

local function bucket_state(raw, code, amount, period, burst, start, is_big_check, into)
  into[3] = nil
  if is_big_check then
    local number, at = match(raw, '^(%d+) (%-?%d+)$')
    into[1], into[2] = big_of_text(number), tonumber(at)
    return into
  end
  local v = tonumber(raw)
  if not v then  -- a NUL and doubles
    into[1], into[2] = unpack_struct('<dd', raw, 2)
    return into
  end
  -- The backlog at NOW; zero once drained, which decides exactly like no state.
  local rel = v - (NOW - start) * amount
  if rel < 0 then rel = 0 end
  if code == 4 then  -- refilled up to NOW
    into[1], into[2] = burst * period - rel, NOW
  else
    into[1], into[2] = rel, NOW
  end
  return into
end

-- The text of a whole number given to HINCRBY, remembered like NUMBERS' (redis.call writes
-- a number with %.17g, about as costly as string.format).
local INCREMENTS, increments_kept = {}, 0
local function increment(n)
  local text = INCREMENTS[n]
  if not text then
    if increments_kept >= 64 then INCREMENTS, increments_kept = {}, 0 end
    text = format('%d', n)
    INCREMENTS[n] = text
    increments_kept = increments_kept + 1
  end
  return text
end

-- Count a hit of the windowed kinds before deciding it: one HINCRBY of `step` where an HGET
-- and an HSET were, its result less the step being what was there. Only where that is exact
-- (a whole cost, an integer stored, every sum below 2^53) and nothing but this check's own
-- limit can refuse the hit later in this function (no block); a hit refused after all is
-- given back (uncount). The check keeps the step (c[18]), the result (c[19]) and whether the
-- field was new (c[20]). Nil when the stored value is not an integer (it is then read);
-- any other error (an ACL without +hincrby) is raised by sending the command again with
-- redis.call: raised as each version raises it (Redis 6 would turn `error(n)`, a table,
-- into "(null)").
local function count_ahead(c, hash, field, step)
  local n = redis_pcall('HINCRBY', hash, field, INCREMENTS[step] or increment(step))
  if type(n) == 'table' then
    if string.find(n.err, 'not an integer', 1, true) then return nil end
    n = redis_call('HINCRBY', hash, field, INCREMENTS[step] or increment(step))
  end
  c[18], c[19], c[20] = step, n, n == step
  return n - step
end

local function uncount(c)
  local hash, field = c[14], c[9]
  local step = -c[18]
  if redis_call('HINCRBY', hash, field, INCREMENTS[step] or increment(step)) == 0 then
    redis_call('HDEL', hash, field)  -- it was not there (or held nothing): as it was
  end
end

-- A check's state at now (nil when absent); for the bucket kinds the hash it was found in
-- and that generation's number; and the hash a hit at now writes it to (the windowed kinds;
-- a bucket kind's is chosen by store). The bucket kinds look in the previous generation's
-- hash first, where most states of the current one are (see store), then in the current
-- one's, and `ahead` generations on (a refund, made at the instant of its hit, may find the
-- state moved forward since); they keep the generations' length, the current one's number
-- and the number of the one the state was found in for the write (c[21], c[22], c[23]).
-- `counting`: a hit, whose windowed checks may be counted ahead (see count_ahead).
local function load(c, now, ahead, counting)
  local key, code, amount, period, burst, field = c[1], c[2], c[3], c[4], c[5], c[9]
  if code >= 4 then
    -- generation(), and floordiv(now, length) for a whole now below 2^52 (as TIME's is)
    local q = burst * period / amount
    local length = q - q % 1
    if length < q then length = length + 1 end
    length = length + 1
    local g
    if now % 1 == 0 and now < HALF and now >= 0 and length < HALF then
      local m = now % length
      if m >= length then m = m - length elseif m < 0 then m = m + length end
      g = (now - m) / length
    else
      g = floordiv(now, generation(amount, period, burst))
    end
    c[21], c[22], c[23] = length, g, false
    for n = g - 1, g + ahead do
      local hash = hash_of(key, n)
      local raw = redis_call('HGET', hash, field)
      if raw then
        c[23] = n
        local state = c[16]
        local v = not c[7] and tonumber(raw)
        if not v then  -- big integers, or a NUL and doubles
          return bucket_state(raw, code, amount, period, burst, n * length, c[7], state), hash, n
        end
        -- bucket_state of one integer: the backlog at now, zero once drained (which decides
        -- exactly like no state); the token bucket's level refilled up to now
        local rel = v - (now - n * length) * amount
        if rel < 0 then rel = 0 end
        if code == 4 then rel = burst * period - rel end
        state[1], state[2], state[3] = rel, now, nil
        return state, hash, n
      end
    end
    return nil
  end
  if code == 1 then
    local window = floordiv(now, period)
    local home = hash_of(key, window)
    local cost = c[6]
    local count
    if counting and not c[8] and cost > 0 and cost % 1 == 0 and amount + cost < EXACT then
      count = count_ahead(c, home, field, cost)
      if count == 0 then return nil, nil, nil, home end
    end
    if not count then
      local raw = redis_call('HGET', home, field)
      if not raw then return nil, nil, nil, home end
      count = count_of(raw)
    end
    local state = c[16]
    state[1], state[2], state[3] = window, count, nil
    return state, nil, nil, home
  end
  if code == 3 then
    local window = floordiv(now, period)
    local home = hash_of(key, window)
    local cost, m = c[6], amount + 1
    local pair, counted  -- what the field holds: a number, a NUL and doubles, or nil
    if counting and not c[8] and cost > 0 and cost % 1 == 0 and (m + cost) * m < EXACT then
      pair = count_ahead(c, home, field, cost * m)
      counted = pair ~= nil
      if pair == 0 then pair = nil end  -- nothing in this window yet
    end
    if not counted then
      local raw = redis_call('HGET', home, field)
      pair = raw and (tonumber(raw) or raw)
    end
    if pair then
      local state = c[16]
      if type(pair) == 'number' then
        state[1], state[2], state[3] = window, divmod(pair, m)
      else
        state[1], state[2], state[3] = window, pair_of(pair, amount)
      end
      return state, nil, nil, home
    end
    -- The window's first request: the previous window's count.
    local raw = redis_call('HGET', hash_of(key, window - 1), field)
    if not raw then return nil, nil, nil, home end
    local state = c[16]
    state[1], state[2], state[3] = window, 0, (pair_of(raw, amount))
    return state, nil, nil, home
  end
  if code == LOG then
    local raw = redis_call('LRANGE', key, 0, -1)
    if #raw == 0 then return nil end
    local entries = {}
    for i, item in ipairs(raw) do
      local sep = string.find(item, ':', 1, true)
      if sep then
        entries[i] = {tonumber(string.sub(item, 1, sep - 1)), tonumber(string.sub(item, sep + 1)), i}
      else
        entries[i] = {tonumber(item), 1, i}
      end
    end
    return {entries = entries, orig = #raw, text = table.concat(raw, ',')}
  end
  error('unknown algorithm code ' .. code)
end

-- A state as the deny cache reads it (parse_state in _script.py): one integer whenever that
-- is exact, else a NUL and little-endian doubles; text for the sliding log and past 2^53.
local function pack_state(code, state, amount, period, burst)
  if code == 1 or code == 3 then
    local m = amount + 1
    local window, count, previous = state[1], state[2], state[3] or 0
    if window >= 0 and count >= 0 and count < m and count == floor(count)
        and previous >= 0 and previous < m and previous == floor(previous) then
      local v = window * m + count
      if code == 3 then v = v * m + previous end
      if v < EXACT then return format('%d', v) end
    end
  elseif code >= 4 then
    local backlog, at = state[1], state[2]
    if code == 4 then backlog = burst * period - backlog end
    if backlog == floor(backlog) and backlog >= 0 and amount * B + backlog < EXACT then
      local hi = floor(at / B)
      local lo = at - hi * B
      lo = lo * amount + backlog
      local carry = floor(lo / B)
      lo = lo - carry * B
      if lo < 0 then
        carry, lo = carry - 1, lo + B
      elseif lo >= B then
        carry, lo = carry + 1, lo - B
      end
      hi = hi * amount + carry
      if hi == 0 then return format('%d', lo) end
      if hi > 0 and hi < 1e14 then return format('%.0f%08.0f', hi, lo) end
    end
  end
  if state[3] then return '\0' .. pack('<ddd', state[1], state[2], state[3]) end
  return '\0' .. pack('<dd', state[1], state[2])
end

local function snapshot(c, state)
  if not state then return '' end
  if c[2] == LOG then return state.text end
  if c[7] then return big_text(state[1]) .. ' ' .. format('%d', state[2]) end
  return pack_state(c[2], state, c[3], c[4], c[5])
end

local function store_log(key, state, ms)
  -- Entries kept from the stored list are a suffix of it when timestamps only grow: trim
  -- the head and append, instead of rewriting the whole log.
  local kept, added = {}, {}
  for _, entry in ipairs(state.entries) do
    if entry[3] then kept[#kept + 1] = entry[3] else added[#added + 1] = log_item(entry) end
  end
  local suffix = true
  for j, index in ipairs(kept) do
    if index ~= state.orig - #kept + j then suffix = false break end
  end
  if not suffix or #kept == 0 then
    redis_call('DEL', key)
    added = {}
    for _, entry in ipairs(state.entries) do added[#added + 1] = log_item(entry) end
  elseif #kept < state.orig then
    redis_call('LTRIM', key, state.orig - #kept, -1)
  end
  -- In slices: unpack() of thousands of values would overflow Lua's C stack.
  for first = 1, #added, 1000 do
    redis_call('RPUSH', key, unpack(added, first, math.min(first + 999, #added)))
  end
  redis_call('PEXPIRE', key, ms)
end

-- Write what a passing hit leaves in `hash`, the one of its window (the windowed kinds), or
-- in the oldest hash that outlives it (the bucket kinds: see below; moved there from
-- `found` when it was read elsewhere). A hash gets its expiry with its first field: when the
-- window is over (the sliding window counter: the next one too, which reads it), or two
-- generations after its own began.
-- A count made ahead (count_ahead, by the check that read the state: c[10]) is written
-- already unless another check of the same state counted too.
local function store(c, state, ttl, now, margin_ms, found, hash)
  local key, code, amount, period, burst, field = c[1], c[2], c[3], c[4], c[5], c[9]
  if code == LOG then
    store_log(key, state, ceil(ttl / 1000) + margin_ms)
    return
  end
  local e = c[10]
  local value, ends
  if code == 1 then
    ends = (state[1] + 1) * period
    if not (e[18] and e[19] == state[2]) then value = count_value(state[2]) end
  elseif code == 3 then
    ends = (state[1] + 2) * period
    if not (e[18] and e[19] == state[2] * (amount + 1) + state[3]) then
      value = pair_value(state[2], state[3], amount)
    end
  else
    -- The previous generation's hash expires when this generation ends: a state over by
    -- then (ttl: until it is full again) is kept there, so it goes when its hash goes, and
    -- a state that stays in its hash costs no HDEL of its old place and no PEXPIRE of a new
    -- one when generations turn over. Else, or when found in this generation's hash (never
    -- moved back: an HDEL), in this generation's.
    local length, g, n = e[21], e[22], e[22] - 1
    if c[7] or e[23] == g or ttl > (g + 1) * length - now then n = g end
    if n == e[23] then hash = found else hash = hash_of(key, n) end
    ends = (n + 2) * length
    value = bucket_value(code, state, amount, period, burst, n * length, c[7])
  end
  local new = e[18] and e[20]  -- counted ahead into a field that was not there
  if value and redis_call('HSET', hash, field, value) == 1 then new = true end
  -- (Past 2^53 us, 285 years, a hash is kept without an expiry.)
  if new and ends - now < EXACT then
    redis_call('PEXPIRE', hash, format('%d', ceil((ends - now) / 1000) + margin_ms))
  end
  if found and found ~= hash then redis_call('HDEL', found, field) end
end

-- Give back a hit's cost at the instant of the hit (now), where its state is now.
local function refund(c, now)
  local key, code, amount, period, burst, cost, field = c[1], c[2], c[3], c[4], c[5], c[6], c[9]
  if code == LOG then
    redis_call('LREM', key, -1, log_item({now, cost}))
    return
  end
  if code == 1 or code == 3 then
    -- The hit counted in its window; the sliding counter's next window, once used, holds
    -- that count as its previous one.
    local window = floordiv(now, period)
    local hash = hash_of(key, window)
    local raw = redis_call('HGET', hash, field)
    if raw and code == 1 then
      redis_call('HSET', hash, field, count_value(count_of(raw) - cost))
    elseif raw then
      local current, previous = pair_of(raw, amount)
      redis_call('HSET', hash, field, pair_value(current - cost, previous, amount))
    end
    if code == 3 then
      hash = hash_of(key, window + 1)
      raw = redis_call('HGET', hash, field)
      if raw then
        local current, previous = pair_of(raw, amount)
        redis_call('HSET', hash, field, pair_value(current, previous - cost, amount))
      end
    end
    return
  end
  local state, found, n = load(c, now, 1)
  if not state then return end
  if c[7] then  -- as below, on big integers, brought to now first
    local step = scaled_cost_big(cost, period)
    if code == 4 then
      local full = mul(big(burst), big(period))
      local level = add(state[1], step)
      if cmp(level, full) > 0 then level = full end
      state[1] = level
    else
      local backlog = backlog_now_big(state, now, amount)
      if cmp(backlog, step) <= 0 then state[1] = ZERO else state[1] = minus(backlog, step) end
      state[2] = now
    end
  elseif code == 4 then
    state[1] = math.min(burst * period, state[1] + scaled_cost(cost, period))
  else
    state[1] = math.max(0, state[1] - scaled_cost(cost, period))
  end
  local start = n * generation(amount, period, burst)
  redis_call('HSET', found, field, bucket_value(code, state, amount, period, burst, start, c[7]))
end

-- Blocks (Block in backends/_protocol.py; MemoryBackend._start_blocks does the same) ---------
-- A block key holds "until_us violations forget_us": the violations count until forget_us,
-- the later of the block's end and reset_us after the latest violation (kept in the value,
-- not only as the TTL, so that an injected clock decides it exactly as MemoryBackend does).
local block_cache  -- per call (set in main: a function library's definitions outlive calls)

local function block_of(key)
  local found = block_cache[key]
  if not found then
    local raw = redis_call('GET', key)
    local until_us, violations = 0, 0
    if raw then
      local u, v, f = match(raw, '^(%d+) (%d+) (%d+)$')
      if u and tonumber(f) > NOW then until_us, violations = tonumber(u), tonumber(v) end
    end
    found = {until_us, violations}
    block_cache[key] = found
  end
  return found
end

-- A check of a blocked key: refused, nothing left, and passing only once the block is over
-- and its limit (own: its outcome) agrees.
local function blocked(c, state, now, until_us, own)
  local _, _, reset, _, _, _, ttl = (c[7] and DECIDE_BIG or DECIDE)[c[2]](state, now, c[3], c[4],
                                                                           c[5], 0, c[17])
  local wait = until_us - now
  local retry = wait
  if not own[1] and own[4] > wait then retry = own[4] end
  if type(reset) ~= 'table' and reset < wait then reset = wait end
  return false, 0, reset, retry, 0, nil, ttl, 0
end

-- Block the keys whose checks with a block their limit refused (once per key per call);
-- a refusal by the block itself is not a violation.
local function start_blocks(checks, outcomes, now, margin_ms)
  local started = {}
  for i, c in ipairs(checks) do
    local o = outcomes[i]
    if c[8] and not o[1] and o[4] ~= huge then
      local key = c[8][1]
      local until_us = started[key]
      if not until_us then
        local previous = block_of(key)
        if previous[1] <= now then
          local violations = previous[2] + 1
          local durations = c[8][3]
          until_us = now + durations[math.min(violations, #durations)]
          local expires = math.max(until_us, now + c[8][2])
          redis_call('SET', key, format('%d %d %d', until_us, violations, expires), 'PX',
                     ceil((expires - now) / 1000) + margin_ms)
          started[key] = until_us
        end
      end
      if until_us and until_us - now > o[4] then o[4] = until_us - now end
    end
  end
end

-- A common hit, decided on locals --------------------------------------------------------------
-- The commonest call: a hit of any kinds but the sliding log (no block, nothing past 2^53, no
-- state checked twice, a bucket's state stored as one integer, a window's cost whole) that
-- every check passes. It is decided here as load (a window's hit counted ahead), the
-- deciders, store and the reply below decide it, operation for operation, but on locals and
-- a few kept tables instead of a check's and an outcome's tables, and with their helpers
-- inlined where they are short (inside Redis a table access costs about 100 instructions, a
-- function call about 400). The token bucket's level is taken as what it lacks to be full,
-- as its stored value is: its steps are then GCRA's, the same numbers (every one a whole
-- number below 2^53: exact). Anything else returns nil, with every count made ahead given
-- back (uncount): it is then decided the general way (a refused check's reads and counts
-- are made again).
local B_KEY, B_FIELD, B_LENGTH, B_HASH, B_FOUND, B_PLACE, B_VALUE = {}, {}, {}, {}, {}, {}, {}
local B_COUNTED, B_DELAY, B_TTL = {}, {}, {}  -- a window's count made ahead, or false
local B_NUMBERS = {}  -- a reply of seven numbers a check
local CODES_LAYOUTS = {}  -- checks -> the struct layout of their codes alone

-- Give back what the first k checks counted ahead (as uncount does); nil.
local function give_back(k)
  for j = 1, k do
    local step = B_COUNTED[j]
    if step then
      local hash, field = B_HASH[j], B_FIELD[j]
      if redis_call('HINCRBY', hash, field, INCREMENTS[-step] or increment(-step)) == 0 then
        redis_call('HDEL', hash, field)
      end
    end
  end
  return nil
end

local function common_hit(arg, n, one, now, margin_ms, keys, field1, code1, amount1, period1,
                           burst1, cost1)
  if now % 1 ~= 0 or now < 0 or now >= HALF then return nil end
  -- The kept tables in registers: an upvalue's table costs a bytecode more at each of its
  -- two dozen uses a check (GETUPVAL before the GETTABLE or SETTABLE, about 40 instructions).
  local B_KEY, B_FIELD, B_LENGTH, B_HASH, B_FOUND, B_PLACE, B_VALUE = B_KEY, B_FIELD, B_LENGTH,
                                                                      B_HASH, B_FOUND, B_PLACE,
                                                                      B_VALUE
  local B_COUNTED, B_DELAY, B_TTL, EXACT = B_COUNTED, B_DELAY, B_TTL, EXACT
  local at = 27 + 8 * n
  if not one then  -- every check's code, in one unpack, before anything is read (a block
    -- adds 16: a check with a block is not one of these, nor a sliding log's, 2)
    local layout = CODES_LAYOUTS[n]
    if not layout then
      layout = '<d' .. string.rep(string.rep('x', 32) .. 'd', n - 1)
      CODES_LAYOUTS[n] = layout
    end
    if n <= 4 then  -- in locals (a table a call makes costs about 1,000 instructions)
      local a, b, c, d = unpack_struct(layout, arg, at)  -- (then the position after them)
      if a > 6 or a == 2 or n > 1 and (b > 6 or b == 2) or n > 2 and (c > 6 or c == 2)
          or n > 3 and (d > 6 or d == 2) then
        return nil
      end
    else
      local codes = {unpack_struct(layout, arg, at)}
      for i = 1, n do
        local code = codes[i]
        if code > 6 or code == 2 then return nil end
      end
    end
  end
  local reply, shaped, counter = VALUES, false, false  -- (the short reply's numbers)
  local to = 2
  for i = 1, n do
    local field, code, amount, period, burst, cost = field1, code1, amount1, period1, burst1,
                                                     cost1
    if not one then
      code, amount, period, burst, cost = unpack_struct('<ddddd', arg, at)
      field = sub(arg, 19 + 8 * i, 26 + 8 * i)
      at = at + 40
    end
    B_COUNTED[i] = false
    local key = keys[i]
    for j = 1, i - 1 do
      if B_KEY[j] == key and B_FIELD[j] == field then return give_back(i - 1) end
    end
    B_KEY[i], B_FIELD[i] = key, field
    if code == 1 then  -- load's count ahead (count_ahead), fixed_window
      if cost <= 0 or cost % 1 ~= 0 or amount + cost >= EXACT or period >= HALF then
        return give_back(i - 1)
      end
      local m = now % period
      if m >= period then m = m - period elseif m < 0 then m = m + period end
      local window = (now - m) / period
      local hash = key .. (NUMBERS[window] or number_text(window))
      local count = redis_pcall('HINCRBY', hash, field, INCREMENTS[cost] or increment(cost))
      if type(count) == 'table' then  -- (as in count_ahead)
        if string.find(count.err, 'not an integer', 1, true) then return give_back(i - 1) end
        count = redis_call('HINCRBY', hash, field, INCREMENTS[cost] or increment(cost))
      end
      B_HASH[i], B_COUNTED[i] = hash, cost
      if cost > amount - (count - cost) then return give_back(i) end  -- refused
      local ends = (window + 1) * period
      B_FOUND[i], B_LENGTH[i] = count == cost, ends  -- a new field: its hash's expiry
      local reset = ends - now
      reply[to + 1], reply[to + 2], reply[to + 3] = amount - count, reset, reset
      B_DELAY[i], B_TTL[i], B_VALUE[i], to = 0, reset, false, to + 3
    elseif code == 3 then  -- load's count ahead, sliding_window_counter
      local m = amount + 1
      if cost <= 0 or cost % 1 ~= 0 or (m + cost) * m >= EXACT or period >= HALF then
        return give_back(i - 1)
      end
      local r = now % period
      if r >= period then r = r - period elseif r < 0 then r = r + period end
      local window = (now - r) / period
      local hash = key .. (NUMBERS[window] or number_text(window))
      local step = cost * m
      local pair = redis_pcall('HINCRBY', hash, field, INCREMENTS[step] or increment(step))
      if type(pair) == 'table' then  -- (as in count_ahead)
        if string.find(pair.err, 'not an integer', 1, true) then return give_back(i - 1) end
        pair = redis_call('HINCRBY', hash, field, INCREMENTS[step] or increment(step))
      end
      B_HASH[i], B_COUNTED[i] = hash, step
      local current, previous = 0, 0
      if pair ~= step then
        current, previous = divmod(pair - step, m)
      else  -- the window's first request: the previous window's count (pair_of)
        local raw = redis_call('HGET', key .. (NUMBERS[window - 1] or number_text(window - 1)),
                               field)
        if raw then
          if #raw > 16 then return give_back(i) end  -- a NUL and doubles (see below)
          previous = divmod(raw + 0, m)
        end
      end
      local elapsed = now - window * period
      local est = estimate(current, previous, elapsed, period)
      if cost > amount - est then return give_back(i) end  -- refused
      current = current + cost
      local reset = current >= 1 and full_again(current, elapsed, period)
      if not reset then
        reset = wait_until_fits(amount, amount, current, previous, elapsed, period)
      end
      local ttl = period - elapsed
      if current ~= 0 then ttl = 2 * period - elapsed end
      local remaining = amount - est - cost
      local more = more_quota_in(remaining, amount, current, previous, elapsed, period)
      -- store: the pair (pair_value), unless the count made ahead is all of it
      local value = current * m + previous
      if previous >= m or value >= EXACT then return give_back(i) end
      B_FOUND[i], B_LENGTH[i] = pair == step, (window + 2) * period
      reply[to + 1], reply[to + 2], reply[to + 3] = remaining, reset, more
      B_DELAY[i], B_TTL[i], B_VALUE[i], to = 0, ttl, value ~= pair and value, to + 3
      counter = true
    else
      local full = burst * period
      if 4 * (full + 2 * amount) >= EXACT then return give_back(i - 1) end  -- (see bucket_value)
      -- load: generation(), floordiv(now, length), the previous generation's hash first
      local q = full / amount
      local length = q - q % 1
      if length < q then length = length + 1 end
      length = length + 1
      local m = now % length
      if m >= length then m = m - length elseif m < 0 then m = m + length end
      local g = (now - m) / length
      local found, hash = g - 1, key .. (NUMBERS[g - 1] or number_text(g - 1))
      local raw = redis_call('HGET', hash, field)
      if not raw then
        found, hash = g, key .. (NUMBERS[g] or number_text(g))
        raw = redis_call('HGET', hash, field)
      end
      local rel = 0  -- the backlog at now (bucket_state)
      if raw then
        -- A NUL and doubles (17 bytes) is left to the general path; an integer's text (at most
        -- 16 digits below 2^53) is read by the arithmetic itself, as tonumber reads it, without
        -- tonumber's call.
        if #raw > 16 then return give_back(i - 1) end
        rel = raw - (now - found * length) * amount
        if rel < 0 then rel = 0 end
      else
        found = false
      end
      -- the decider
      local step = cost * period
      if step % 1 ~= 0 then step = scaled_cost(cost, period) end
      local backlog = rel + step
      if backlog > full then return give_back(i - 1) end  -- refused
      -- (remaining, reset and next follow from the backlog: the client works them out, see
      -- bucket_numbers)
      local delay = 0
      if code == 6 and rel > 0 then
        q = rel / amount
        delay = q - q % 1
        if delay < q then delay = delay + 1 end
        shaped = true
      end
      -- store: where (see store) and what (bucket_value)
      local place = false
      if cost ~= 0 then
        place = g - 1
        -- (the reset, ceil(backlog / amount), past the end of g: backlog > that end's
        -- distance * amount, exact in doubles below 2^53)
        if found == g or backlog > ((g + 1) * length - now) * amount then place = g end
        local v = (now - place * length) * amount + backlog
        if v >= EXACT then return give_back(i - 1) end
        B_VALUE[i] = v
      end
      B_LENGTH[i], B_HASH[i], B_FOUND[i], B_PLACE[i] = length, hash, found, place
      reply[to + 1] = backlog
      B_DELAY[i], to = delay, to + 1
    end
  end
  for i = 1, n do
    local place, found, field = B_PLACE[i], B_FOUND[i], B_FIELD[i]
    if B_COUNTED[i] then  -- counted already: a new field gives its hash an expiry (store)
      local value = B_VALUE[i]
      if value then redis_call('HSET', B_HASH[i], field, format('%d', value)) end
      if found then
        redis_call('PEXPIRE', B_HASH[i], format('%d', ceil((B_LENGTH[i] - now) / 1000) + margin_ms))
      end
    elseif place then
      local hash = B_HASH[i]
      if place ~= found then hash = hash_of(B_KEY[i], place) end
      if redis_call('HSET', hash, field, format('%d', B_VALUE[i])) == 1 then
        local ends = (place + 2) * B_LENGTH[i]
        redis_call('PEXPIRE', hash, format('%d', ceil((ends - now) / 1000) + margin_ms))
      end
      if found and found ~= place then redis_call('HDEL', B_HASH[i], field) end
    end
  end
  -- The reply. A bucket check sends one number, its backlog (flag 32), from which the client
  -- works out remaining, reset (also the ttl) and next as bucket_numbers does: two numbers
  -- and about twenty bytecodes fewer a check (struct.pack costs about 550 instructions a
  -- number). A window sends remaining, reset_us (also the ttl) and next_us (flags 1 + 2 + 8 +
  -- 16 + 32), or, with a sliding window counter among the checks (whose ttl is not its
  -- reset), remaining, reset_us, ttl_us and next_us (flags 1 + 2 + 8 + 32); when a leaky
  -- bucket delays, every check sends all seven numbers (flags 1 + 2).
  if not shaped and not counter then
    if n == 1 then
      if to == 3 then return pack('<ddi8', now, 59, reply[3]) end
      return pack('<ddi8i8i8', now, 59, reply[3], reply[4], reply[5])
    end
    reply[1], reply[2] = now, 59
    local layout = COUNT_LAYOUTS[to - 2] or integers_layout(COUNT_LAYOUTS, to - 2, 1)
    return pack(layout, unpack(reply, 1, to))
  end
  local numbers = B_NUMBERS
  numbers[1], numbers[2] = now, shaped and 3 or 43
  local out, from = 2, 2
  for i = 1, n do
    if not shaped then
      if B_COUNTED[i] then
        numbers[out + 1], numbers[out + 2], numbers[out + 3], numbers[out + 4] = reply[from + 1],
          reply[from + 2], B_TTL[i], reply[from + 3]
        out, from = out + 4, from + 3
      else
        numbers[out + 1] = reply[from + 1]
        out, from = out + 1, from + 1
      end
    else
      local remaining, reset, more, ttl
      if B_COUNTED[i] then
        remaining, reset, more = reply[from + 1], reply[from + 2], reply[from + 3]
        ttl, from = B_TTL[i], from + 3
      else  -- its amount, period and burst from its part of the argument
        local amount, period, burst = unpack_struct('<xxxxxxxxddd', arg, 27 + 8 * n + 40 * (i - 1))
        remaining, reset, more = bucket_numbers(reply[from + 1], amount, period, burst)
        ttl, from = reset, from + 1
      end
      numbers[out + 1], numbers[out + 2], numbers[out + 3], numbers[out + 4] = 1, remaining,
                                                                              reset, 0
      numbers[out + 5], numbers[out + 6], numbers[out + 7] = B_DELAY[i], ttl, more
      out = out + 7
    end
  end
  local layout
  if shaped then
    layout = LAYOUTS[n] or integers_layout(LAYOUTS, n, 7)
  else
    layout = COUNT_LAYOUTS[out - 2] or integers_layout(COUNT_LAYOUTS, out - 2, 1)
  end
  return pack(layout, unpack(numbers, 1, out))
end

-- main -----------------------------------------------------------------------------------------
local arg = ARGV[1]
-- One check without a block (the commonest call, 74 bytes) is read with the head, in one
-- struct.unpack: its field, then its five numbers.
local one = #arg == 74
local mode, want, margin_ms, clock, n, field1, code1, amount1, period1, burst1, cost1 =
  unpack_struct(one and '<BBdddc8ddddd' or '<BBddd', arg)
local now
if clock < 0 then
  -- Writes after TIME are safe: Redis >= 5 replicates a script's effects, not the script.
  local t = redis_call('TIME')
  -- The seconds change once a second: their value is remembered, so that a call reads
  -- one number (tonumber: about 1,800 instructions), not two.
  local seconds = SECONDS[t[1]]
  if not seconds then
    if seconds_kept >= 16 then SECONDS, seconds_kept = {}, 0 end
    seconds = tonumber(t[1]) * 1000000
    SECONDS[t[1]] = seconds
    seconds_kept = seconds_kept + 1
  end
  now = seconds + t[2]  -- (arithmetic reads the text: tonumber's work, not its call)
else
  now = clock
end
NOW, NOW_TEXT = now, nil
local want_state = want == 1
-- (A call with a sliding log's check, or a check with a block, is not one of these:
-- common_hit reads the codes of a call of several checks itself.)
if mode == HIT and n > 0 and (not one or code1 <= 6 and code1 ~= 2) then
  local reply = common_hit(arg, n, one, now, margin_ms, KEYS, field1, code1, amount1, period1,
                            burst1, cost1)
  if reply then return reply end
end

local checks = CALL_CHECKS
for i = #checks, n + 1, -1 do checks[i] = nil end  -- a longer earlier call's
local blocks = 0
local at = 27 + 8 * n  -- the first check's, after the head and the fields
for i = 1, n do
  local field, code, amount, period, burst, cost = field1, code1, amount1, period1, burst1, cost1
  if not one then
    code, amount, period, burst, cost = unpack_struct('<ddddd', arg, at)
    field = sub(arg, 19 + 8 * i, 26 + 8 * i)
  end
  at = at + 40
  local block = code > 16
  if block then code = code - 16 end
  -- c[7]: whether a bucket kind needs big integers (the product rounds up to 2^53 exactly
  -- when it reaches it); c[8]: its block; c[9]: its field; c[10] the check that holds its
  -- state (itself, or an earlier one of the same state), which keeps in c[11] to c[15] the
  -- state, the state read, where it was found, the hash a hit writes, and the last check
  -- that counts. The check's table of an earlier call, refilled (see CHECKS).
  local c = CHECKS[i]
  if not c then
    c = {}
    c[16], c[17] = {}, {}  -- the state it reads, the state it leaves
    CHECKS[i], OUTCOMES[i] = c, {}
  end
  c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8] = KEYS[i], code, amount, period, burst, cost,
                                                   code >= 4 and burst * period >= EXACT, false
  c[9], c[18] = field, false  -- (c[10] to c[15] are set below; c[18]: see count_ahead)
  checks[i] = c
  if block then  -- its key follows the checks' keys
    blocks = blocks + 1
    local reset, count = unpack_struct('<dd', arg, at)
    local durations = {}
    for j = 1, count do durations[j] = unpack_struct('<d', arg, at + 8 + 8 * j) end
    at = at + 16 + 8 * count
    c[8] = {KEYS[n + blocks], reset, durations}
  end
end
if blocks > 0 then block_cache = {} end

if mode == REFUND then
  for i = 1, n do refund(checks[i], now) end
  return {now, 1}
end

-- The same state may be checked twice in one call: later checks see the earlier ones' new
-- state, and the last one that counts writes it. The first check of a state (its hashes'
-- name, one identity's limit, and its field: two identities of one bucket may check one
-- limit) holds it; a call has a few checks, so a look back costs less than a table.
local counting = mode == HIT
local outcomes = OUTCOMES
local all_allowed = true
for i = 1, n do
  local c = checks[i]
  local e = c
  local key, field = c[1], c[9]
  for j = 1, i - 1 do
    local d = checks[j]
    if d[1] == key and d[9] == field then
      e = d
      break
    end
  end
  if e == c then
    local state, found, _, home = load(c, now, 0, counting)
    c[11], c[12], c[13], c[14], c[15] = state, state, found, home, false
  end
  c[10] = e
  local outcome = outcomes[i]
  outcome[1], outcome[2], outcome[3], outcome[4], outcome[5], outcome[6], outcome[7], outcome[8] =
    (c[7] and DECIDE_BIG or DECIDE)[c[2]](e[11], now, c[3], c[4], c[5], c[6], c[17])
  if c[8] then
    local until_us = block_of(c[8][1])[1]
    if until_us > now then
      outcome[1], outcome[2], outcome[3], outcome[4], outcome[5], outcome[6], outcome[7],
        outcome[8] = blocked(c, e[11], now, until_us, outcome)
    end
  end
  if outcome[1] then
    if outcome[6] ~= nil then
      e[11] = outcome[6]
      if c[6] ~= 0 then e[15] = i end
    end
  else
    all_allowed = false
  end
end

if mode == HIT and all_allowed then
  for i = 1, n do
    local c = checks[i]
    local e = c[10]
    if e[15] == i then store(c, outcomes[i][6], outcomes[i][7], now, margin_ms, e[13], e[14]) end
  end
else
  -- Nothing is counted (a peek, or a check refused the request): what was counted ahead is
  -- given back, and a check that would pass reports what is left now, as a cost of 0 does.
  for i = 1, n do
    local c = checks[i]
    if c[18] then uncount(c) end
    local o = outcomes[i]
    if o[1] and c[6] ~= 0 then
      o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8] =
        (c[7] and DECIDE_BIG or DECIDE)[c[2]](c[10][12], now, c[3], c[4], c[5], 0, c[17])
    end
  end
  if mode == HIT and blocks > 0 then start_blocks(checks, outcomes, now, margin_ms) end
end

local allowed = all_allowed and 1 or 0
local states = want_state and not all_allowed

-- Every number whole (the usual case): eight-byte integers after the head, in one
-- struct.pack (about 0.5k instructions a number; an array reply costs twice that, text
-- more). x % 1 == 0 says whole without a call (false for infinity); a big check's numbers
-- may be big integers (tables), which go as text below. When every check passes with no
-- wait and no delay (the commonest reply by far), four numbers a check say it all (three, in
-- common_hit's reply, when each ttl is its reset).
local whole, short = true, all_allowed
local values = VALUES  -- the short reply's numbers (several checks), gathered on the way
local at = 2
for i = 1, n do
  local o = outcomes[i]
  local remaining, reset, retry, delay, ttl, more = o[2], o[3], o[4], o[5], o[7], o[8] or 0
  local c = checks[i]
  if c[7] then
    if type(reset) == 'table' or type(retry) == 'table' or type(delay) == 'table'
        or type(ttl) == 'table' or type(more) == 'table' then
      whole = false
      break
    end
  end
  -- (A passing bucket check's numbers are whole: floors and ceilings, and no retry.)
  if (c[2] < 4 or c[7] or not o[1]) and (remaining % 1 ~= 0 or reset % 1 ~= 0
      or retry % 1 ~= 0 or delay % 1 ~= 0 or ttl % 1 ~= 0 or more % 1 ~= 0) then
    whole = false
    break
  end
  if retry ~= 0 or delay ~= 0 then short = false end
  if n > 1 then
    values[at + 1], values[at + 2], values[at + 3], values[at + 4] = remaining, reset, ttl, more
    at = at + 4
  end
end
if whole and short then  -- flags 1 + 2 + 8; remaining, reset_us, ttl_us, next_us a check
  if n == 1 then
    local o = outcomes[1]
    return pack('<ddi8i8i8i8', now, 11, o[2], o[3], o[7], o[8] or 0)
  end
  values[1], values[2] = now, 11
  local layout = SHORT_LAYOUTS[n] or integers_layout(SHORT_LAYOUTS, n, 4)
  return pack(layout, unpack(values, 1, at))
end
if whole and n == 1 then
  local o = outcomes[1]
  local reply = pack('<ddi8i8i8i8i8i8i8', now, allowed + 2, o[1] and 1 or 0, o[2], o[3], o[4],
                     o[5], o[7], o[8] or 0)
  if not states then return reply end
  local raw = snapshot(checks[1], checks[1][12])
  return reply .. pack('<d', #raw) .. raw
end
if whole then
  local values = VALUES
  values[1], values[2] = now, allowed + 2
  local at = 2
  for i = 1, n do
    local o = outcomes[i]
    values[at + 1], values[at + 2], values[at + 3], values[at + 4] = o[1] and 1 or 0, o[2], o[3], o[4]
    values[at + 5], values[at + 6], values[at + 7] = o[5], o[7], o[8] or 0
    at = at + 7
  end
  local layout = LAYOUTS[n] or integers_layout(LAYOUTS, n, 7)
  local reply = pack(layout, unpack(values, 1, at))
  if not states then return reply end
  local parts = {reply}
  for _, c in ipairs(checks) do
    local raw = snapshot(c, c[10][12])
    parts[#parts + 1] = pack('<d', #raw) .. raw
  end
  return table.concat(parts)
end

-- A number past 2^53 (a big limit's times): every check's numbers as text, after its length;
-- the head's flags (+4) say so.
local text = nil
for i = 1, #checks do
  local o = outcomes[i]
  if type(o[3]) == 'table' or type(o[4]) == 'table' or type(o[5]) == 'table'
      or type(o[7]) == 'table' or type(o[8]) == 'table' then
    text = {}
    break
  end
end
if text then
  for i = 1, #checks do
    local o = outcomes[i]
    local numbers = {o[1] and '1' or '0'}
    for _, value in ipairs({o[2], o[3], o[4], o[5], o[7], o[8] or 0}) do
      if type(value) == 'table' then
        numbers[#numbers + 1] = big_text(value)
      elseif value == huge then
        numbers[#numbers + 1] = 'inf'
      elseif value == floor(value) and value < EXACT and value > -EXACT then
        numbers[#numbers + 1] = format('%d', value)
      else
        numbers[#numbers + 1] = format('%.17g', value)
      end
    end
    text[i] = table.concat(numbers, ' ')
  end
  local body = table.concat(text, ';')
  local reply = {pack('<dd', now, allowed + 4), pack('<d', #body), body}
  if states then
    for _, c in ipairs(checks) do
      local raw = snapshot(c, c[10][12])
      reply[#reply + 1] = pack('<d', #raw) .. raw
    end
  end
  return table.concat(reply)
end

-- Else doubles, exact for fractions and infinity, in one binary string.
local reply = {pack('<dd', now, allowed)}
for i = 1, #checks do
  local o = outcomes[i]
  reply[i + 1] = pack('<ddddddd', o[1] and 1 or 0, o[2], o[3], o[4], o[5], o[7], o[8] or 0)
end
if states then
  for _, c in ipairs(checks) do
    local raw = snapshot(c, c[10][12])
    reply[#reply + 1] = pack('<d', #raw) .. raw
  end
end
return table.concat(reply)
