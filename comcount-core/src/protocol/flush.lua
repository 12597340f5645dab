-- One flush of a comcount counter, or of one partition of a counter family: adds a
-- participant's amounts to the totals of the interval the server's clock is in, at most once
-- per participant and interval, and answers with the totals of the interval before. A run
-- costs a constant and a term per entry it carries: it reads and writes the flush's own keys,
-- nothing else.
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
--   then the entries, pairs of a key and an amount 0 ..= 2^63-1 (compared as digits):
--   'c'  a single counter: one entry, ARGV[6] empty and ARGV[7] the amount. An interval key
--        holds the total as a plain integer (GET, INCRBY).
--   'f'  one partition of a family: 1 ..= MAX_ENTRIES entries from ARGV[6] on, each key
--        1 ..= MAX_KEY_LEN bytes; a key that comes twice adds both amounts. An interval key is
--        a hash with a field per family key holding its total as a plain integer (HMGET,
--        HSET); a total that would pass 2^63-1 stops there.
--
-- The server's interval is N = floor(TIME in ms / I), its phase TIME - N*I. The flush may land
-- in the window EXPECT-R <= N <= EXPECT+R; it writes KEYS[N-EXPECT+R+2] and reads the key
-- before it for the totals of N-1 (none when N is 0). The fence holds "SEQ:N" of the
-- participant's last applied flush.
--
-- Outcomes, in the order they are checked:
--   error  a key or argument count, an argument is not as above
--   4      wrong interval: N is outside the window
--   error  N-1's key is not the layout's ('c': a plain integer up to 2^63-1; 'f': a hash,
--          whose fields are not read but for the reply)
--   error  the fence is not "SEQ:N"
--   1      duplicate: the fence holds this SEQ (applied before, in the fence's N)
--   2      stale: the fence holds a later SEQ
--   3      fenced: the fence holds an earlier SEQ applied in N or later
--   error  N's key is not the layout's; 'c': its total would pass 2^63-1
--   error  NOPERM: the user's ACL denies a write that comes after the first (PEXPIRE, SET,
--          HDEL), checked before the first where the server has redis.acl_check_cmd
--   error  as the server said it: the server refused the first write (READONLY, OOM,
--          NOREPLICAS, MISCONF, NOPERM, ...)
--   0      applied: 'c': INCRBY the total of N; 'f': HSET each key's new total in N. PEXPIRE
--          the interval key 3*I, SET the fence to "SEQ:N" with the fence life.
-- Every check comes before the first write: an error or any outcome but 0 leaves every key as
-- it was, and an applied flush adds every amount or none.
--
-- Reply: {outcome, N, phase in ms, interval counted in or nil, the fence, then the totals of
-- N-1, one per entry in the order sent, nil where there is none}; the interval counted in is
-- N when applied, the fence's interval for a duplicate, nil otherwise. The fence is what it
-- held as the run read it, before any write: "SEQ:N" of the participant's last applied flush
-- (this SEQ for a duplicate, a later one for stale, an earlier one for fenced or applied), 0
-- when it held nothing, nil for a wrong interval, which does not read it. So an applied flush
-- settles an earlier flush k of the participant whose copies all went unanswered, when no
-- flush between them was applied and the fence has lived since k: k was applied, in the
-- fence's N, iff the fence holds k, not if it holds an earlier SEQ or nothing, and every copy
-- of k is stale from now on. A wrong interval carries no totals. An applied 'c' flush adds one
-- more item: the total of N just after its INCRBY, which N's total can only pass (an integer,
-- or its digits from 2^53 up).
-- Error replies of the script's own start with "ERR comcount:".
--
-- Lua 5.1 (Redis, Valkey) and 5.4 alike: every integer is worked out with +, -, * and
-- math.floor, never with /, whose result is a float under 5.4.
local MAX_ENTRIES = 1000
local MAX_KEY_LEN = 256
local MAX_TOTAL = '9223372036854775807'
local MAX_REACH = 3
-- A family batch of more entries than this is written to a hash table, not a listpack.
local TABLE_FROM = 32
local unpack = unpack or table.unpack

if #KEYS < 5 or #KEYS > 2 * MAX_REACH + 3 or #KEYS % 2 == 0 then
  return redis.error_reply('ERR comcount: expected 5, 7 or 9 keys, got ' .. #KEYS ..
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

-- A shortened copy of s for an error message.
local function quote(s)
  if #s > 24 then
    s = string.sub(s, 1, 24) .. '...'
  end
  return '"' .. s .. '"'
end

-- The error reply for ARGV[i], which is not a plain decimal integer in min ..= max.
local function out_of_range(i, name, min, max)
  return redis.error_reply('ERR comcount: ARGV[' .. i .. '] (' .. name .. ') is ' ..
    quote(ARGV[i]) .. ', not a plain decimal integer in ' .. min .. '..=' .. max ..
    '; nothing was written, send it within that range')
end

-- The four numbers. The pattern takes a plain decimal integer but '0', which only EXPECT may
-- be. Every maximum is below 2^53, where tonumber is exact, and a longer digit string is a
-- number of 2^53 or more, so one comparison decides the range; a fence life is never needed
-- as a number, and one of up to 15 digits is in range.
local seq, interval, expect = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if not (string.find(ARGV[1], '^[1-9]%d*$') and seq <= 9007199254740991) then
  return out_of_range(1, 'sequence number', '1', '9007199254740991')
end
if not (string.find(ARGV[2], '^[1-9]%d*$') and interval <= 3002399751580330) then
  return out_of_range(2, 'interval ms', '1', '3002399751580330')
end
if not (ARGV[3] == '0' or string.find(ARGV[3], '^[1-9]%d*$') and expect <= 9007199254740991) then
  return out_of_range(3, 'expected interval', '0', '9007199254740991')
end
if not (string.find(ARGV[4], '^[1-9]%d*$')
    and (#ARGV[4] < 16 or tonumber(ARGV[4]) <= 9007199254740991)) then
  return out_of_range(4, 'fence life ms', '1', '9007199254740991')
end

local layout = ARGV[5]
local family = layout == 'f'
local count = math.floor((#ARGV - 5) / 2)
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

-- The entries. A family's keys, in the order sent, are gathered for HMGET.
local fields = family and {}
for j = 1, count do
  local key, amount = ARGV[4 + 2 * j], ARGV[5 + 2 * j]
  if #key < min_key or #key > max_key then
    return redis.error_reply('ERR comcount: ARGV[' .. (4 + 2 * j) .. '] (key) is ' ..
      quote(key) .. ', ' .. #key .. ' bytes, outside ' .. min_key .. '..=' .. max_key ..
      ' for layout ' .. layout .. '; nothing was written')
  end
  if family then
    fields[j] = key
  end
  if not ((amount == '0' or string.find(amount, '^[1-9]%d*$'))
      and (#amount < 19 or not greater(amount, MAX_TOTAL))) then
    return out_of_range(5 + 2 * j, 'amount', '0', MAX_TOTAL)
  end
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local n = math.floor(now / interval)
local phase = now - n * interval
local reach = math.floor((#KEYS - 3) / 2)
if n < expect - reach or n > expect + reach then
  return {4, n, phase, false, false}
end
local key_before, key, fence_key = KEYS[n - expect + reach + 1], KEYS[n - expect + reach + 2],
  KEYS[#KEYS]

-- The error reply for name, a key under this prefix that holds what this script never writes
-- instead of what. Given refusal, a command's error reply on name: refusal itself, unless it is
-- the server's own about the key (a key of another type, or a string that is no integer);
-- every other error (READONLY, OOM, NOREPLICAS, NOPERM, ...) is about the server, not the
-- key, and goes back as it came.
local function foreign(name, what, refusal)
  if refusal and string.sub(refusal.err, 1, 10) ~= 'WRONGTYPE '
      and not string.find(refusal.err, 'not an integer', 1, true) then
    return refusal
  end
  return redis.error_reply('ERR comcount: ' .. name .. ' is not ' .. what .. '; is another ' ..
    'program writing under this prefix? Delete the key or change the prefix')
end

local what = family and 'a hash of totals' or "a counter's total"

-- The totals of N-1: a counter's total, a family's HMGET reply (none when N is 0).
local before = false
if n > 0 then
  if family then
    before = redis.pcall('HMGET', key_before, unpack(fields))
  else
    before = redis.pcall('GET', key_before)
  end
  if type(before) == 'table' and before.err then
    return foreign(key_before, what, before)
  end
  -- A counter's total is a plain integer up to 2^63-1, as INCRBY leaves it.
  if before and not family and not ((before == '0' or string.find(before, '^[1-9]%d*$'))
      and (#before < 19 or not greater(before, MAX_TOTAL))) then
    return foreign(key_before, what)
  end
end

local fence = redis.pcall('GET', fence_key)
if type(fence) == 'table' and fence.err then
  return foreign(fence_key, 'a fence', fence)
end
-- The outcome, and the interval the flush is counted in: applied in N unless the fence says
-- otherwise.
local outcome, counted_in = 0, n
if fence then
  local fenced_seq, fenced_n = string.match(fence, '^(%d+):(%d+)$')
  if not fenced_seq then
    return foreign(fence_key, 'a fence')
  end
  fenced_seq = tonumber(fenced_seq)
  fenced_n = tonumber(fenced_n)
  if seq == fenced_seq then
    outcome, counted_in = 1, fenced_n
  elseif seq < fenced_seq then
    outcome, counted_in = 2, false
  elseif fenced_n >= n then
    outcome, counted_in = 3, false
  end
end

-- Redis checks a script's commands against the user's ACL one by one as they run, so a user
-- denied a write that comes after the first would leave a flush counted without its fence,
-- free to be counted again by a replayed copy. Every write after the first is checked before
-- the first, with its keys (Redis 7.0 and later, Valkey; an older server runs without the
-- check, and its user needs every command of the script granted).
local function denied(command, ...)
  if redis.acl_check_cmd and not redis.acl_check_cmd(command, ...) then
    return redis.error_reply('NOPERM comcount: this user has no permissions to run the ' ..
      "'" .. string.lower(command) .. "' command on " .. select(1, ...) .. ', which a ' ..
      'flush runs after its first write; nothing was written')
  end
end

local landed
if outcome == 0 then
  local refusal = denied('PEXPIRE', key, '1') or denied('SET', fence_key, '1', 'PX', '1')
  if refusal then
    return refusal
  end
  if family then
    -- Every new total is worked out before the first write. Below 10^15 a sum is exact in a Lua
    -- number; a longer one is added as digits, and stops at the largest total.
    local current = redis.pcall('HMGET', key, unpack(fields))
    if current.err then
      return foreign(key, what, current)
    end
    local totals, changes, k = {}, {}, 0
    for j = 1, count do
      local field, amount = fields[j], ARGV[5 + 2 * j]
      local total = totals[field]
      if total == nil then
        total = current[j]
        if total and not (total == '0' or string.find(total, '^[1-9]%d*$')) then
          return foreign(key, what)
        end
        k = k + 2
        changes[k - 1] = field
      end
      if not total then
        total = amount
      elseif #total < 16 and #amount < 16 then
        total = string.format('%d', tonumber(total) + tonumber(amount))
      else
        -- The sum of two digit strings, digit by digit from the last.
        local digits, carry, a, b = {}, 0, #total, #amount
        while a > 0 or b > 0 or carry > 0 do
          local d = carry
          if a > 0 then
            d = d + string.byte(total, a) - 48
          end
          if b > 0 then
            d = d + string.byte(amount, b) - 48
          end
          carry = math.floor(d / 10)
          digits[#digits + 1] = d - 10 * carry
          a, b = a - 1, b - 1
        end
        total = string.reverse(table.concat(digits))
        if greater(total, MAX_TOTAL) then
          total = MAX_TOTAL
        end
      end
      totals[field] = total
    end
    for i = 2, k, 2 do
      changes[i] = totals[changes[i - 1]]
    end
    -- A listpack finds a field by scanning, so a hash written hundreds of fields at once is made
    -- a hash table first: a field too long for a listpack converts it. That field is the empty
    -- one, no key's, and goes at once.
    local written
    if k > 2 * TABLE_FROM then
      local refusal = denied('HDEL', key, '')
      if refusal then
        return refusal
      end
      written = redis.pcall('HSET', key, '', string.rep('-', 1025), unpack(changes))
      if type(written) ~= 'table' then
        redis.call('HDEL', key, '')
      end
    else
      written = redis.pcall('HSET', key, unpack(changes))
    end
    if type(written) == 'table' then
      return foreign(key, what, written)
    end
  else
    -- The first write: INCRBY refuses a total that is not an integer, or that would overflow.
    landed = redis.pcall('INCRBY', key, ARGV[7])
    if type(landed) == 'table' then
      if string.find(landed.err, 'overflow', 1, true) then
        return redis.error_reply('ERR comcount: the total of ' .. key .. ' would overflow ' ..
          'past ' .. MAX_TOTAL .. '; nothing was written')
      end
      return foreign(key, what, landed)
    end
  end
  redis.call('PEXPIRE', key, 3 * interval)
  redis.call('SET', fence_key, ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[4])
  -- Lua's number is exact below 2^53; a larger total is read back as its digits.
  if landed and landed >= 9007199254740992 then
    landed = redis.call('GET', key)
  end
end

-- The reply. A counter's ends with its total of N after an applied INCRBY: landed, nil
-- otherwise, where the reply stops.
if not family then
  return {outcome, n, phase, counted_in, fence or 0, before, landed}
end
local reply = {outcome, n, phase, counted_in, fence or 0}
for j = 1, count do
  reply[5 + j] = before and before[j] or false
end
return reply
