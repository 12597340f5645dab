-- One flush of a comcount counter: adds a participant's amount to the total of the interval
-- the server's clock is in, at most once per participant and interval, and answers with the
-- total of the interval before.
--
-- KEYS (all share the counter's hash tag; interval numbers stop at 0, so names may repeat):
--   KEYS[1] the interval key of EXPECT-2   KEYS[2] of EXPECT-1   KEYS[3] of EXPECT
--   KEYS[4] the interval key of EXPECT+1   KEYS[5] the participant's fence key
-- ARGV (each a plain decimal integer: digits only, no sign, no leading zero):
--   ARGV[1] SEQ, the flush's sequence number      1 ..= 2^53-1 (every copy of one flush carries
--           the same SEQ; a participant's next flush a larger one, from the wall clock at start)
--   ARGV[2] amount to add                         0 ..= 2^63-1 (compared as digits)
--   ARGV[3] interval length I in ms               1 ..= floor(2^53/3)
--   ARGV[4] EXPECT, the interval aimed at         0 ..= 2^53-1
--   ARGV[5] fence life in ms                      1 ..= 2^53-1
--
-- The server's interval is N = floor(TIME in ms / I), its phase TIME - N*I. The flush may land
-- in the window EXPECT-1 <= N <= EXPECT+1; it writes KEYS[N-EXPECT+3] and reads the key before
-- it for the total of N-1 (none when N is 0). The fence holds "SEQ:N" of the participant's last
-- applied flush.
--
-- Outcomes, in the order they are checked:
--   error  a key or argument count, an argument or the fence is not as above
--   4      wrong interval: N is outside the window
--   1      duplicate: the fence holds this SEQ (applied before, in the fence's N)
--   2      stale: the fence holds a later SEQ
--   3      fenced: the fence holds an earlier SEQ applied in N or later
--   0      applied: INCRBY the interval key by the amount (an error if the total would
--          overflow), PEXPIRE it 3*I, SET the fence to "SEQ:N" with the fence life
-- Every check, the overflow included, comes before the first write: an error or any outcome but
-- 0 leaves every key as it was.
--
-- Reply: {outcome, N, phase in ms, total of N-1 or nil, interval counted in or nil}; the last
-- is N when applied, the fence's interval for a duplicate, nil otherwise. Error replies start
-- with "ERR comcount:".
if #KEYS ~= 5 or #ARGV ~= 5 then
  return redis.error_reply('ERR comcount: expected 5 keys and 5 arguments, got ' .. #KEYS ..
    ' and ' .. #ARGV .. '; send the keys and arguments of this version of the script')
end

-- Whether digit string a is greater than digit string b, neither with a leading zero.
local function greater(a, b)
  if #a ~= #b then
    return #a > #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return false
end

-- Checks ARGV[i] against min ..= max (digit strings); returns nil or an error reply.
local function check(i, name, min, max)
  local s = ARGV[i]
  if (s == '0' or string.match(s, '^[1-9]%d*$')) and not greater(min, s) and not greater(s, max)
  then
    return nil
  end
  if #s > 24 then
    s = string.sub(s, 1, 24) .. '...'
  end
  return redis.error_reply('ERR comcount: ARGV[' .. i .. '] (' .. name .. ') is "' .. s ..
    '", not a plain decimal integer in ' .. min .. '..=' .. max ..
    '; nothing was written, send it within that range')
end

local bad = check(1, 'sequence number', '1', '9007199254740991')
  or check(2, 'amount', '0', '9223372036854775807')
  or check(3, 'interval ms', '1', '3002399751580330')
  or check(4, 'expected interval', '0', '9007199254740991')
  or check(5, 'fence life ms', '1', '9007199254740991')
if bad then
  return bad
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local interval = tonumber(ARGV[3])
local expect = tonumber(ARGV[4])
local n = math.floor(now / interval)
local phase = now - n * interval
if n < expect - 1 or n > expect + 1 then
  return {4, n, phase, false, false}
end
local slot = n - expect + 3
local previous = false
if n > 0 then
  previous = redis.call('GET', KEYS[slot - 1])
end
local fence = redis.call('GET', KEYS[5])
if fence then
  local fenced_seq, fenced_n = string.match(fence, '^(%d+):(%d+)$')
  if not fenced_seq then
    return redis.error_reply('ERR comcount: fence ' .. KEYS[5] .. ' is not a fence; is ' ..
      'another program writing under this prefix? Delete the key or change the prefix')
  end
  local seq = tonumber(ARGV[1])
  fenced_seq = tonumber(fenced_seq)
  fenced_n = tonumber(fenced_n)
  if seq == fenced_seq then
    return {1, n, phase, previous, fenced_n}
  end
  if seq < fenced_seq then
    return {2, n, phase, previous, false}
  end
  if fenced_n >= n then
    return {3, n, phase, previous, false}
  end
end
redis.call('INCRBY', KEYS[slot], ARGV[2])
redis.call('PEXPIRE', KEYS[slot], 3 * interval)
redis.call('SET', KEYS[5], ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[5])
return {0, n, phase, previous, n}
