-- One flush of a comcount counter, or of one partition of a counter family: adds a
-- participant's amounts to the totals of the interval the server's clock is in, at most once
-- per participant and interval, and answers with the totals of the interval before.
--
-- KEYS (all share one hash tag; interval numbers stop at 0, so names may repeat): 2*R+3 of
-- them for a reach R of 1 ..= MAX_REACH, the interval keys of EXPECT-R-1 up to EXPECT+R, then
-- the participant's fence key. With R = 1, five:
--   KEYS[1] the interval key of EXPECT-2   KEYS[2] of EXPECT-1   KEYS[3] of EXPECT
--   KEYS[4] the interval key of EXPECT+1   KEYS[5] the participant's fence key
-- ARGV (numbers are plain decimal integers: digits only, no sign, no leading zero):
--   ARGV[1] SEQ, the flush's sequence number      1 ..= 2^53-1 (every copy of one flush carries
--           the same SEQ; a participant's next flush a larger one, from the wall clock at start)
--   ARGV[2] interval length I in ms               1 ..= floor(2^53/3)
--   ARGV[3] EXPECT, the interval aimed at         0 ..= 2^53-1
--   ARGV[4] fence life in ms                      1 ..= 2^53-1
--   ARGV[5] the layout of the interval keys: 'c' or 'f'
--   then the entries, as the layout says
--
-- Layouts:
--   'c'  a single counter. ARGV[6] is empty (the one entry's key) and ARGV[7] the amount,
--        0 ..= 2^63-1 (compared as digits). An interval key holds the total as a plain
--        integer (GET, INCRBY).
--   'f'  one partition of a family. ARGV[6] is the entries packed as one MessagePack array:
--        key, amount, key, amount, ... with 1 ..= MAX_ENTRIES entries, each key a string of
--        1 ..= MAX_KEY_LEN bytes, each amount an integer 0 ..= 2^53-1 or a string of digits
--        up to 2^63-1; a key that comes twice adds both amounts. An interval key is a hash:
--        each participant's entries for the interval are one field, named by its fence key and
--        holding ARGV[6] as sent. Once the interval has ended, the flushes of the next one sum
--        the fields into the field '' (packed alike: a key's total is the sum of its amounts
--        there); the field '+' holds the packed names of the fields summed so far, or '' once
--        all of them are. A run sums whole fields, one at least, until it has summed
--        FOLD_BUDGET entries, those of the totals it resumes from included. A lone field is the
--        totals as it stands, and is copied.
--
-- The server's interval is N = floor(TIME in ms / I), its phase TIME - N*I. The flush may land
-- in the window EXPECT-R <= N <= EXPECT+R; it writes KEYS[N-EXPECT+R+2] and reads the key
-- before it for the totals of N-1 (none when N is 0). The fence holds "SEQ:N" of the
-- participant's last applied flush.
--
-- Outcomes, in the order they are checked:
--   error  a key or argument count, an argument is not as above
--   4      wrong interval: N is outside the window
--   error  N-1's key is not the layout's: 'c': a plain integer up to 2^63-1; 'f': a hash
--   error  'f': a field of N-1 that is to be summed holds no entries
--   error  the fence is not "SEQ:N"
--   1      duplicate: the fence holds this SEQ (applied before, in the fence's N)
--   2      stale: the fence holds a later SEQ
--   3      fenced: the fence holds an earlier SEQ applied in N or later
--   error  'c': N's key is not an integer, or its total would pass 2^63-1 (INCRBY refuses
--          either, as the first write); 'f': N's key is not a hash
--   0      applied: 'c': INCRBY the total of N; 'f': write the sums of N-1 worked out for the
--          reply, if any, and this participant's field of N. PEXPIRE the interval key 3*I,
--          SET the fence to "SEQ:N" with the fence life.
-- Every check comes before the first write: an error or any outcome but 0 leaves every key as
-- it was, and an applied flush adds every amount or none. A family's sums are exact, and never
-- larger than what its participants sent: a key whose sum would pass 2^63-1 holds 2^63-1.
--
-- Reply: {outcome, N, phase in ms, interval counted in or nil, then the totals of N-1}; the
-- interval counted in is N when applied, the fence's interval for a duplicate, nil otherwise.
-- 'c': the total of N-1, nil where there is none. 'f': the packed totals of N-1 (a key's total
-- is the sum of its amounts there; while N-1 is still being summed, a part of its fields),
-- nil where there are none. A wrong interval carries no totals. An applied 'c' flush adds a
-- sixth item: the total of N just after its INCRBY, which N's total can only pass (an integer,
-- or its digits from 2^53 up).
-- Error replies start with "ERR comcount:".
local MAX_ENTRIES = 1000
local MAX_KEY_LEN = 256
local MAX_TOTAL = '9223372036854775807'
-- Lua's numbers hold every integer below 2^53 exactly.
local EXACT = 9007199254740992
local FOLD_BUDGET = 6000
local MAX_REACH = 3

if #KEYS < 5 or #KEYS > 2 * MAX_REACH + 3 or #KEYS % 2 == 0 then
  return redis.error_reply('ERR comcount: expected 5, 7 or 9 keys, got ' .. #KEYS ..
    '; send the keys of this version of the script')
end
if #ARGV < 6 then
  return redis.error_reply('ERR comcount: expected at least 6 arguments, got ' .. #ARGV ..
    ' arguments; send the arguments of this version of the script')
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

-- Whether s is a plain decimal integer: digits only, no sign, no leading zero.
local function plain(s)
  return s == '0' or string.match(s, '^[1-9]%d*$') ~= nil
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
  if plain(s) and not greater(min, s) and not greater(s, max) then
    return nil
  end
  return redis.error_reply('ERR comcount: ARGV[' .. i .. '] (' .. name .. ') is ' .. quote(s) ..
    ', not a plain decimal integer in ' .. min .. '..=' .. max ..
    '; nothing was written, send it within that range')
end

-- Whether a packed amount or total is one: an integer below 2^53, or digits up to 2^63-1.
local function amount_ok(a)
  if type(a) == 'number' then
    return a >= 0 and a < EXACT and a % 1 == 0
  end
  return type(a) == 'string' and plain(a) and not greater(a, MAX_TOTAL)
end

-- How many items the MessagePack array header at the start of s announces, or nil when s
-- does not start with one (a map's header included: Lua reads a map keyed 1, 2, ... as an
-- array).
local function array_len(s)
  local first = type(s) == 'string' and string.byte(s, 1)
  if not first then
    return nil
  elseif first >= 0x90 and first <= 0x9f then
    return first - 0x90
  elseif first == 0xdc and #s >= 3 then
    local b1, b2 = string.byte(s, 2, 3)
    return b1 * 256 + b2
  elseif first == 0xdd and #s >= 5 then
    local b1, b2, b3, b4 = string.byte(s, 2, 5)
    return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  end
  return nil
end

-- The packed array in s, or nil when s is not exactly one MessagePack array, or holds a nil:
-- a nil leaves a hole in the Lua table, where # may stop, and the items after it would be
-- neither checked nor summed, yet kept in the field as sent.
local function unpacked(s)
  local len = array_len(s)
  if not len then
    return nil
  end
  local ok, rest, array = pcall(cmsgpack.unpack_one, s)
  if not (ok and rest == -1 and type(array) == 'table') then
    return nil
  end
  for i = 1, len do
    if array[i] == nil then
      return nil
    end
  end
  return array
end

local bad = check(1, 'sequence number', '1', '9007199254740991')
  or check(2, 'interval ms', '1', '3002399751580330')
  or check(3, 'expected interval', '0', '9007199254740991')
  or check(4, 'fence life ms', '1', '9007199254740991')
if bad then
  return bad
end

local layout = ARGV[5]
local family = layout == 'f'
if layout == 'c' then
  if #ARGV ~= 7 then
    return redis.error_reply('ERR comcount: layout c takes 7 arguments, got ' .. #ARGV ..
      ' arguments; send a counter one key and amount pair')
  end
  if ARGV[6] ~= '' then
    return redis.error_reply('ERR comcount: ARGV[6] (key) is ' .. quote(ARGV[6]) ..
      ', not empty as layout c takes; nothing was written')
  end
  -- Up to 18 digits cannot pass the largest amount: only longer ones need the full check.
  local amount = ARGV[7]
  if not (#amount < 19 and plain(amount)) then
    bad = check(7, 'amount', '0', MAX_TOTAL)
    if bad then
      return bad
    end
  end
elseif family then
  if #ARGV ~= 6 then
    return redis.error_reply('ERR comcount: layout f takes 6 arguments, got ' .. #ARGV ..
      ' arguments; send a family its entries packed in one argument')
  end
  local entries = unpacked(ARGV[6])
  if not entries or #entries % 2 ~= 0 or #entries < 2 or #entries > 2 * MAX_ENTRIES then
    return redis.error_reply('ERR comcount: ARGV[6] (entries) is not one MessagePack array ' ..
      'of 1..=' .. MAX_ENTRIES .. ' key and amount pairs; nothing was written')
  end
  for j = 1, #entries, 2 do
    local key, amount = entries[j], entries[j + 1]
    if type(key) ~= 'string' or #key < 1 or #key > MAX_KEY_LEN then
      return redis.error_reply('ERR comcount: entry ' .. ((j + 1) / 2) .. ' has a key that ' ..
        'is not a string of 1..=' .. MAX_KEY_LEN .. ' bytes; nothing was written')
    end
    if not (type(amount) == 'number' and amount >= 0 and amount < EXACT and amount % 1 == 0)
      and not amount_ok(amount) then
      return redis.error_reply('ERR comcount: entry ' .. ((j + 1) / 2) .. ' (key ' ..
        quote(key) .. ') has an amount that is not an integer in 0..=' .. MAX_TOTAL ..
        '; nothing was written, send it within that range')
    end
  end
else
  return redis.error_reply('ERR comcount: ARGV[5] (layout) is ' .. quote(layout) ..
    ', not c or f; nothing was written, send c for a counter or f for a family')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local interval = tonumber(ARGV[2])
local expect = tonumber(ARGV[3])
local n = math.floor(now / interval)
local phase = now - n * interval
local reach = (#KEYS - 3) / 2
if n < expect - reach or n > expect + reach then
  return {4, n, phase, false}
end
local slot = n - expect + reach + 2
local fence_key = KEYS[#KEYS]

-- Sums what is left of the fields of the ended interval at key, within the budget: returns
-- the totals to write to '' and the names summed, or nil and an error reply. Nothing is
-- written here, so that every check comes before the first write.
local function summed(key, totals, done)
  local sums, order, keys = {}, {}, 0
  -- The slow way, for sums that reach 2^53: digit strings, capped at the largest total.
  local function add_digits(k, s, a)
    if type(s) == 'number' then
      s = string.format('%d', s)
    end
    if type(a) == 'number' then
      a = string.format('%d', a)
    end
    s = sum(s, a)
    if greater(s, MAX_TOTAL) then
      s = MAX_TOTAL
    end
    sums[k] = s
  end
  local function fold(name, packed)
    local entries = unpacked(packed)
    if not entries or #entries % 2 ~= 0 then
      return redis.error_reply('ERR comcount: field ' .. quote(name) .. ' of ' .. key ..
        ' holds no entries; is another program writing under this prefix? Delete the key ' ..
        'or change the prefix')
    end
    -- The fields were checked as they were written: what is summed here needs no check but
    -- its shape. A sum below 2^53 is exact; the first one that is not goes to digits.
    for j = 1, #entries, 2 do
      local k, a = entries[j], entries[j + 1]
      local s = sums[k]
      if s == nil then
        keys = keys + 1
        order[keys] = k
        sums[k] = a
      else
        local t = s + a
        if t < EXACT then
          sums[k] = t
        else
          add_digits(k, s, a)
        end
      end
    end
    return #entries / 2
  end
  -- The names summed into totals so far, then those summed now. The totals resumed from count
  -- against the budget, as the fields summed now do; each run sums one field at least.
  local names, seen, budget = {}, {}, FOLD_BUDGET
  if totals then
    local resumed = fold('', totals)
    if type(resumed) == 'table' then
      return nil, resumed
    end
    budget = budget - resumed
    names = unpacked(done)
    if not names then
      return nil, redis.error_reply('ERR comcount: field "+" of ' .. key .. ' is not a ' ..
        'list of fields; is another program writing under this prefix? Delete the key or ' ..
        'change the prefix')
    end
    for i = 1, #names do
      seen[names[i]] = true
    end
  end
  local pending = {}
  for _, name in ipairs(redis.call('HKEYS', key)) do
    if name ~= '' and name ~= '+' and not seen[name] then
      pending[#pending + 1] = name
    end
  end
  -- One participant's entries are the totals as they stand.
  if not totals and #pending == 1 then
    return redis.call('HGET', key, pending[1]), ''
  end
  local left = false
  for i = 1, #pending do
    if budget <= 0 and i > 1 then
      left = true
      break
    end
    local count = fold(pending[i], redis.call('HGET', key, pending[i]))
    if type(count) == 'table' then
      return nil, count
    end
    budget = budget - count
    names[#names + 1] = pending[i]
  end
  local packed = {}
  for i = 1, keys do
    local k = order[i]
    packed[2 * i - 1], packed[2 * i] = k, sums[k]
  end
  local state = ''
  if left then
    state = cmsgpack.pack(names)
  end
  return cmsgpack.pack(packed), state
end

-- The error reply for a key under this prefix that holds what this script never writes.
local function foreign(key, what)
  return redis.error_reply('ERR comcount: ' .. key .. ' is not ' .. what .. '; is another ' ..
    'program writing under this prefix? Delete the key or change the prefix')
end

-- Whether err, an error reply's text, is the server's own about the key's type or value: a
-- key of another type, or a string that is no integer. Every other error (READONLY, OOM,
-- NOREPLICAS, NOPERM, ...) is about the server, not the key, and goes back as it came.
local function about_the_key(err)
  return string.sub(err, 1, 10) == 'WRONGTYPE ' or string.find(err, 'not an integer', 1, true)
end

-- Reads a key with a command that fails on a key of another type: the reply, or nil and the
-- error reply, which names the key when it holds what this script never writes.
local function read(what, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if about_the_key(reply.err) then
      return nil, foreign(key, what)
    end
    return nil, reply
  end
  return reply
end

-- The totals of N-1: a counter's integer, or a family's packed totals, summed as far as the
-- budget allows where its fields are not all summed yet (written only if the flush is applied).
local previous, progress = false, nil
if n > 0 then
  local key = KEYS[slot - 1]
  if family then
    local fields, err = read('a hash', 'HMGET', key, '', '+')
    if err then
      return err
    end
    previous = fields[1]
    if fields[2] ~= '' and redis.call('EXISTS', key) == 1 then
      local totals, state = summed(key, fields[1], fields[2])
      if not totals then
        return state
      end
      previous, progress = totals, state
    end
  else
    local total, err = read("a counter's total", 'GET', key)
    if err then
      return err
    end
    if total and not amount_ok(total) then
      return foreign(key, "a counter's total")
    end
    previous = total
  end
end

local fence, err = read('a fence', 'GET', fence_key)
if err then
  return err
end
if fence then
  local fenced_seq, fenced_n = string.match(fence, '^(%d+):(%d+)$')
  if not fenced_seq then
    return foreign(fence_key, 'a fence')
  end
  local seq = tonumber(ARGV[1])
  fenced_seq = tonumber(fenced_seq)
  fenced_n = tonumber(fenced_n)
  if seq == fenced_seq then
    return {1, n, phase, fenced_n, previous}
  end
  if seq < fenced_seq then
    return {2, n, phase, false, previous}
  end
  if fenced_n >= n then
    return {3, n, phase, false, previous}
  end
end

local total
if family then
  local kind = redis.call('TYPE', KEYS[slot])['ok']
  if kind ~= 'none' and kind ~= 'hash' then
    return foreign(KEYS[slot], 'a hash')
  end
  if progress then
    redis.call('HSET', KEYS[slot - 1], '', previous, '+', progress)
  end
  redis.call('HSET', KEYS[slot], fence_key, ARGV[6])
else
  -- The first write: INCRBY refuses a total that is not an integer, or that would overflow.
  total = redis.pcall('INCRBY', KEYS[slot], ARGV[7])
  if type(total) == 'table' and total.err then
    if string.find(total.err, 'overflow', 1, true) then
      return redis.error_reply('ERR comcount: the total of ' .. KEYS[slot] .. ' would ' ..
        'overflow past ' .. MAX_TOTAL .. '; nothing was written')
    end
    if about_the_key(total.err) then
      return foreign(KEYS[slot], "a counter's total")
    end
    return total
  end
end
redis.call('PEXPIRE', KEYS[slot], 3 * interval)
redis.call('SET', fence_key, ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[4])
if family then
  return {0, n, phase, n, previous}
end
-- Lua's number is exact below 2^53; a larger total is read back as its digits.
if total >= EXACT then
  total = redis.call('GET', KEYS[slot])
end
return {0, n, phase, n, previous, total}
