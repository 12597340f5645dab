-- One flush of a comcount counter, or of one partition of a counter family: adds a
-- participant's amounts to the totals of the interval the server's clock is in, at most once
-- per participant and interval, and answers with the totals of the interval before.
--
-- KEYS (all share one hash tag; interval numbers stop at 0, so names may repeat):
--   KEYS[1] the interval key of EXPECT-2   KEYS[2] of EXPECT-1   KEYS[3] of EXPECT
--   KEYS[4] the interval key of EXPECT+1   KEYS[5] the participant's fence key
-- ARGV (numbers are plain decimal integers: digits only, no sign, no leading zero):
--   ARGV[1] SEQ, the flush's sequence number      1 ..= 2^53-1 (every copy of one flush carries
--           the same SEQ; a participant's next flush a larger one, from the wall clock at start)
--   ARGV[2] interval length I in ms               1 ..= floor(2^53/3)
--   ARGV[3] EXPECT, the interval aimed at         0 ..= 2^53-1
--   ARGV[4] fence life in ms                      1 ..= 2^53-1
--   ARGV[5] the layout of the interval keys: 'c' or 'f'
--   ARGV[6], ARGV[7], ... the entries, as pairs of a key and the amount to add to it; an
--           amount is 0 ..= 2^63-1 (compared as digits)
--
-- Layouts:
--   'c'  a single counter: exactly one entry, whose key is empty. An interval key holds the
--        total as a plain integer (GET, INCRBY).
--   'f'  one partition of a family: 1 ..= MAX_ENTRIES entries, each key 1 ..= MAX_KEY_LEN
--        bytes and none twice. An interval key is a hash with a field per key holding its
--        total (HMGET, HSET). A flush of more than TABLE_FROM entries keeps the hash a hash
--        table, not a listpack (which looks fields up by scanning).
--
-- The server's interval is N = floor(TIME in ms / I), its phase TIME - N*I. The flush may land
-- in the window EXPECT-1 <= N <= EXPECT+1; it writes KEYS[N-EXPECT+3] and reads the key before
-- it for the totals of N-1 (none when N is 0). The fence holds "SEQ:N" of the participant's last
-- applied flush.
--
-- Outcomes, in the order they are checked:
--   error  a key or argument count, an argument or the fence is not as above
--   4      wrong interval: N is outside the window
--   1      duplicate: the fence holds this SEQ (applied before, in the fence's N)
--   2      stale: the fence holds a later SEQ
--   3      fenced: the fence holds an earlier SEQ applied in N or later
--   error  a total of N would pass 2^63-1 ('c': INCRBY refuses it, as the first write; 'f':
--          the new totals are worked out from one HMGET of N's hash before any write), or a
--          field of N's hash holds no total
--   0      applied: add each amount to its total of N ('c': INCRBY; 'f': one HSET of the new
--          totals, keys whose total does not change left out, or of the amounts as they came
--          when N's hash does not exist yet), PEXPIRE the interval key 3*I, SET the fence to
--          "SEQ:N" with the fence life
-- Every check, the overflow included, comes before the first write: an error or any outcome but
-- 0 leaves every key as it was, and an applied flush adds every amount or none.
--
-- Reply: {outcome, N, phase in ms, interval counted in or nil, then one total of N-1 per entry,
-- in the entries' order, nil where there is none}; the interval counted in is N when applied,
-- the fence's interval for a duplicate, nil otherwise. A wrong interval carries no totals.
-- Error replies start with "ERR comcount:".
local MAX_ENTRIES = 1000
local MAX_KEY_LEN = 256
local MAX_TOTAL = '9223372036854775807'
local TABLE_FROM = 32

if #KEYS ~= 5 then
  return redis.error_reply('ERR comcount: expected 5 keys, got ' .. #KEYS ..
    '; send the keys of this version of the script')
end
if #ARGV < 7 or #ARGV % 2 == 0 then
  return redis.error_reply('ERR comcount: expected 5 arguments, then pairs of a key and ' ..
    'an amount, got ' .. #ARGV .. ' arguments; send the arguments of this version of the script')
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

-- The sum of digit strings a and b.
local function sum(a, b)
  local digits, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then
      d = d + string.byte(a, i) - 48
    end
    if j > 0 then
      d = d + string.byte(b, j) - 48
    end
    digits[#digits + 1] = d % 10
    carry = (d - d % 10) / 10
    i, j = i - 1, j - 1
  end
  return string.reverse(table.concat(digits))
end

-- A shortened copy of s for an error message.
local function quote(s)
  if #s > 24 then
    s = string.sub(s, 1, 24) .. '...'
  end
  return '"' .. s .. '"'
end

-- Checks ARGV[i] against min ..= max (digit strings); returns nil or an error reply.
local function check(i, name, min, max)
  local s = ARGV[i]
  if (s == '0' or string.match(s, '^[1-9]%d*$')) and not greater(min, s) and not greater(s, max)
  then
    return nil
  end
  return redis.error_reply('ERR comcount: ARGV[' .. i .. '] (' .. name .. ') is ' .. quote(s) ..
    ', not a plain decimal integer in ' .. min .. '..=' .. max ..
    '; nothing was written, send it within that range')
end

local bad = check(1, 'sequence number', '1', '9007199254740991')
  or check(2, 'interval ms', '1', '3002399751580330')
  or check(3, 'expected interval', '0', '9007199254740991')
  or check(4, 'fence life ms', '1', '9007199254740991')
if bad then
  return bad
end

local layout = ARGV[5]
local count = (#ARGV - 5) / 2
local family = layout == 'f'
local min_key, max_key
if layout == 'c' then
  if count ~= 1 then
    return redis.error_reply('ERR comcount: layout c takes one entry, got ' .. count ..
      '; send a counter one key and amount pair')
  end
  min_key, max_key = 0, 0
elseif family then
  if count > MAX_ENTRIES then
    return redis.error_reply('ERR comcount: layout f takes 1..=' .. MAX_ENTRIES ..
      ' entries, got ' .. count .. '; split the flush')
  end
  min_key, max_key = 1, MAX_KEY_LEN
else
  return redis.error_reply('ERR comcount: ARGV[5] (layout) is ' .. quote(layout) ..
    ', not c or f; nothing was written, send c for a counter or f for a family')
end

-- The entries: keys (the fields of a family's hashes) and amounts.
local fields, seen = {}, {}
for j = 1, count do
  local key, amount = ARGV[4 + 2 * j], ARGV[5 + 2 * j]
  if #key < min_key or #key > max_key then
    return redis.error_reply('ERR comcount: ARGV[' .. (4 + 2 * j) .. '] (key) is ' ..
      quote(key) .. ', ' .. #key .. ' bytes, outside ' .. min_key .. '..=' .. max_key ..
      ' for layout ' .. layout .. '; nothing was written')
  end
  if seen[key] then
    return redis.error_reply('ERR comcount: ARGV[' .. (4 + 2 * j) .. '] (key) ' ..
      quote(key) .. ' comes twice; nothing was written, send each key once')
  end
  seen[key] = true
  fields[j] = key
  -- Up to 18 digits cannot pass the largest amount: only longer ones need the full check.
  if not (#amount < 19 and (amount == '0' or string.match(amount, '^[1-9]%d*$'))) then
    bad = check(5 + 2 * j, 'amount', '0', MAX_TOTAL)
    if bad then
      return bad
    end
  end
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local interval = tonumber(ARGV[2])
local expect = tonumber(ARGV[3])
local n = math.floor(now / interval)
local phase = now - n * interval
if n < expect - 1 or n > expect + 1 then
  return {4, n, phase, false}
end
local slot = n - expect + 3

-- The totals of N-1, one per entry.
local previous
if n == 0 then
  previous = {}
  for j = 1, count do
    previous[j] = false
  end
elseif family then
  previous = redis.call('HMGET', KEYS[slot - 1], unpack(fields))
else
  previous = {redis.call('GET', KEYS[slot - 1])}
end

local function answer(outcome, counted_in)
  local reply = {outcome, n, phase, counted_in}
  for j = 1, count do
    reply[4 + j] = previous[j]
  end
  return reply
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
    return answer(1, fenced_n)
  end
  if seq < fenced_seq then
    return answer(2, false)
  end
  if fenced_n >= n then
    return answer(3, false)
  end
end

if family then
  -- Writes field and total pairs to N's hash. A large batch writes it as a hash table, not a
  -- listpack: a listpack finds a field by scanning, so a flush of hundreds of fields would
  -- cost Redis time in the square of their number. A field too long for a listpack makes
  -- Redis convert the hash before it writes; it is the empty field, no key's, and goes at
  -- once, and the hash stays a hash table.
  local function write(...)
    if count > TABLE_FROM then
      redis.call('HSET', KEYS[slot], '', string.rep('-', 1025), ...)
      redis.call('HDEL', KEYS[slot], '')
    else
      redis.call('HSET', KEYS[slot], ...)
    end
  end
  if redis.call('EXISTS', KEYS[slot]) == 0 then
    -- No total yet: the new totals are the amounts, written as they came.
    write(unpack(ARGV, 6))
  else
    -- Every new total is worked out, and checked, before the first write: one that would
    -- pass the largest total, or a field that holds no total, refuses the whole flush. Then
    -- one HSET writes them all.
    local current = redis.call('HMGET', KEYS[slot], unpack(fields))
    local changes, k = {}, 0
    for j = 1, count do
      local total, amount = current[j], ARGV[5 + 2 * j]
      local new = amount
      if total then
        if not (total == '0' or string.match(total, '^[1-9]%d*$')) then
          return redis.error_reply('ERR comcount: field ' .. quote(fields[j]) .. ' of ' ..
            KEYS[slot] .. ' is ' .. quote(total) .. ', not a total; is another program ' ..
            'writing under this prefix? Delete the key or change the prefix')
        end
        if amount == '0' then
          new = nil
        elseif #total < 16 and #amount < 16 then
          -- Both below 10^15: their sum is exact in Lua's numbers.
          new = string.format('%d', tonumber(total) + tonumber(amount))
        else
          new = sum(total, amount)
          if greater(new, MAX_TOTAL) then
            return redis.error_reply('ERR comcount: the total of ' .. quote(fields[j]) ..
              ' in ' .. KEYS[slot] .. ' would overflow past ' .. MAX_TOTAL ..
              '; nothing was written')
          end
        end
      end
      if new then
        changes[k + 1], changes[k + 2], k = fields[j], new, k + 2
      end
    end
    if k > 0 then
      write(unpack(changes))
    end
  end
else
  redis.call('INCRBY', KEYS[slot], ARGV[7])
end
redis.call('PEXPIRE', KEYS[slot], 3 * interval)
redis.call('SET', KEYS[5], ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[4])
return answer(0, n)
