-- Runs comcount's flush script under this Lua interpreter, against the stand-in for Redis in
-- redis_stub.lua, and checks every reply and key exactly: a counter's outcomes and the fence's
-- SEQ each tells, its landed total either side of 2^53 and up to 2^63-1, overflow; a family
-- batch's totals crossing 2^53, sums of 16 to 19 digits, saturation at 2^63-1, a key sent
-- twice, a batch written through a hash table; keys of another type. Totals from 2^53 up must
-- come back as their exact digits, and nothing the script hands the server may be a float
-- (under 5.4, '5.0' is not '5').
--
--   lua5.4 tests/lua/check.lua comcount-core/src/protocol/flush.lua
--   lua5.1 tests/lua/check.lua comcount-core/src/protocol/flush.lua
--   lua5.4 tests/lua/check.lua flush.lua counter     only the cases whose name has 'counter'
--
-- Prints a line per case, then 'N passed, M failed', and exits non-zero on any failure.

local script_path, only = arg[1], arg[2]
if not script_path then
  io.stderr:write('usage: lua check.lua path/to/flush.lua [part of a case name]\n')
  os.exit(2)
end
local here = string.match(arg[0], '^(.*)[/\\]') or '.'
local stub = dofile(here .. '/redis_stub.lua')
local chunk = assert(loadfile(script_path))

-- The server's clock: interval N = 1700000000 of 1000 ms, 250.123 ms into it.
local N, I, PHASE = 1700000000, 1000, 250
local NIL = {}
local unpack = unpack or table.unpack

local function digits(x)
  return string.format('%d', x)
end

local function fresh()
  return stub.server(N * I + PHASE, 123)
end

-- The keys of a flush aimed at expect with reach R: interval keys of expect-R-1 ..= expect+R,
-- stopping at 0, then the fence key.
local function keys(base, expect, reach)
  local out = {}
  for m = expect - reach - 1, expect + reach do
    out[#out + 1] = base .. ':' .. digits(math.max(m, 0))
  end
  out[#out + 1] = base .. ':f:00000000000000ab'
  return out
end

local function counter_key(m)
  return '{c}:' .. digits(m)
end

local function family_key(m)
  return '{f@0}:' .. digits(m)
end

local COUNTER_FENCE = '{c}:f:00000000000000ab'
local FAMILY_FENCE = '{f@0}:f:00000000000000ab'

-- Runs one flush and returns its reply as text; fails on anything the server would pass on
-- inexactly. o: entries (required), layout ('c'), seq ('1000'), interval (I), expect (N),
-- life ('5000'), reach (1).
local function flush(server, o)
  local layout = o.layout or 'c'
  local expect = o.expect or N
  local base = layout == 'c' and '{c}' or '{f@0}'
  local argv = { o.seq or '1000', o.interval or digits(I), digits(expect), o.life or '5000', layout }
  for _, item in ipairs(o.entries) do
    argv[#argv + 1] = item
  end
  local reply, problems = server:run(chunk, keys(base, expect, o.reach or 1), argv)
  if #problems > 0 then
    error('the server would not pass this on exactly: ' .. table.concat(problems, '; ') ..
      ' (reply ' .. reply .. ')', 0)
  end
  return reply
end

-- The text of a reply: numbers are integer replies, strings bulk strings, NIL a nil.
local function want(items)
  local out = {}
  for i, item in ipairs(items) do
    if item == NIL then
      out[i] = 'nil'
    elseif type(item) == 'number' then
      out[i] = digits(item)
    else
      out[i] = string.format('%q', item)
    end
  end
  return '[' .. table.concat(out, ', ') .. ']'
end

local function equal(got, expected, what)
  if got ~= expected then
    error(what .. ': expected ' .. tostring(expected) .. ', got ' .. tostring(got), 0)
  end
end

local function starts(got, prefix, what)
  if string.sub(got, 1, #prefix) ~= prefix then
    error(what .. ': expected ' .. prefix .. '..., got ' .. got, 0)
  end
end

-- The error reply that names key as holding what the script never writes.
local function foreign(key, what)
  return '(error) ERR comcount: ' .. key .. ' is not ' .. what .. '; '
end

local passed, failed = 0, 0
local function case(name, run)
  if only and not string.find(name, only, 1, true) then
    return
  end
  local ok, err = pcall(run)
  if ok then
    passed = passed + 1
    print('ok    ' .. name)
  else
    failed = failed + 1
    print('FAIL  ' .. name .. ': ' .. tostring(err))
  end
end

print('flush script ' .. script_path .. ' under ' .. _VERSION)

-- A counter: outcomes.

case('counter applied, no total before', function()
  local s = fresh()
  equal(flush(s, { entries = { '', '5' } }), want { 0, N, PHASE, N, 0, NIL, 5 }, 'reply')
  equal(s:snapshot(), counter_key(N) .. ' "5" px 3000; ' .. COUNTER_FENCE .. ' "1000:' ..
    digits(N) .. '" px 5000', 'keys')
end)

case('counter applied, with the total before', function()
  local s = fresh()
  s.data[counter_key(N - 1)] = '42'
  s.data[counter_key(N)] = '8'
  equal(flush(s, { entries = { '', '5' } }), want { 0, N, PHASE, N, 0, '42', 13 }, 'reply')
  equal(s.data[counter_key(N)], '13', 'total of N')
end)

case('counter duplicate: nothing written, the fence with its own SEQ', function()
  local s = fresh()
  s.data[counter_key(N - 1)] = '42'
  flush(s, { entries = { '', '5' } })
  local before = s:snapshot()
  equal(flush(s, { entries = { '', '5' } }), want { 1, N, PHASE, N, '1000:' .. digits(N), '42' }, 'reply')
  equal(s:snapshot(), before, 'keys')
end)

case('counter stale: the fence holds a later flush, which comes back', function()
  local s = fresh()
  s.data[counter_key(N - 1)] = '42'
  s.data[COUNTER_FENCE] = '2000:' .. digits(N - 1)
  local before = s:snapshot()
  equal(flush(s, { entries = { '', '5' } }), want { 2, N, PHASE, NIL, '2000:' .. digits(N - 1), '42' }, 'reply')
  equal(s:snapshot(), before, 'keys')
end)

case('counter fenced: an earlier flush applied in N, which comes back', function()
  local s = fresh()
  s.data[COUNTER_FENCE] = '900:' .. digits(N)
  local before = s:snapshot()
  equal(flush(s, { entries = { '', '5' } }), want { 3, N, PHASE, NIL, '900:' .. digits(N), NIL }, 'reply')
  equal(s:snapshot(), before, 'keys')
end)

case('counter applied after an earlier flush in N-1 tells that fence', function()
  local s = fresh()
  s.data[COUNTER_FENCE] = '900:' .. digits(N - 1)
  equal(flush(s, { entries = { '', '5' } }), want { 0, N, PHASE, N, '900:' .. digits(N - 1), NIL, 5 }, 'reply')
  equal(s.data[COUNTER_FENCE], '1000:' .. digits(N), 'fence')
end)

case('counter wrong interval, either side of the window', function()
  local s = fresh()
  local wrong = want { 4, N, PHASE, NIL, NIL }
  equal(flush(s, { entries = { '', '5' }, expect = N + 2 }), wrong, 'above')
  equal(flush(s, { entries = { '', '5' }, expect = N - 2 }), wrong, 'below')
  equal(s:snapshot(), '', 'keys')
  -- A wrong interval does not read the fence, and tells nothing of it.
  s.data[COUNTER_FENCE] = '900:' .. digits(N - 1)
  local before = s:snapshot()
  equal(flush(s, { entries = { '', '5' }, expect = N + 2 }), wrong, 'with a fence')
  equal(s:snapshot(), before, 'keys with a fence')
end)

case('counter fence SEQ up to 2^53-1 comes back as it was', function()
  local s = fresh()
  s.data[COUNTER_FENCE] = '9007199254740990:' .. digits(N - 1)
  equal(flush(s, { entries = { '', '5' }, seq = '9007199254740991' }),
    want { 0, N, PHASE, N, '9007199254740990:' .. digits(N - 1), NIL, 5 }, 'applied')
  equal(flush(s, { entries = { '', '5' }, seq = '9007199254740991' }),
    want { 1, N, PHASE, N, '9007199254740991:' .. digits(N), NIL }, 'duplicate')
  equal(flush(s, { entries = { '', '5' }, seq = '9007199254740990' }),
    want { 2, N, PHASE, NIL, '9007199254740991:' .. digits(N), NIL }, 'stale')
end)

case('counter at reach 3 lands in the key of N', function()
  local s = fresh()
  s.data[counter_key(N - 1)] = '7'
  equal(flush(s, { entries = { '', '5' }, expect = N - 3, reach = 3 }),
    want { 0, N, PHASE, N, 0, '7', 5 }, 'reply')
  equal(s.data[counter_key(N)], '5', 'total of N')
end)

case('counter in interval 0 of the longest interval: PEXPIRE 3*I exact', function()
  local s = fresh()
  equal(flush(s, { entries = { '', '5' }, interval = '3002399751580330', expect = 0 }),
    want { 0, 0, N * I + PHASE, 0, 0, NIL, 5 }, 'reply')
  equal(s.expiry[counter_key(0)], '9007199254740990', 'expiry')
end)

-- A counter: the landed total, exact up to 2^63-1.

case('counter landed total 2^53-1 is an integer', function()
  local s = fresh()
  s.data[counter_key(N)] = '9007199254740990'
  equal(flush(s, { entries = { '', '1' } }), want { 0, N, PHASE, N, 0, NIL, 9007199254740991 },
    'reply')
end)

case('counter landed total 2^53 is its digits', function()
  local s = fresh()
  s.data[counter_key(N)] = '9007199254740991'
  equal(flush(s, { entries = { '', '1' } }),
    want { 0, N, PHASE, N, 0, NIL, '9007199254740992' }, 'reply')
end)

case('counter landed total 2^53+1 is its digits', function()
  local s = fresh()
  s.data[counter_key(N)] = '9007199254740992'
  equal(flush(s, { entries = { '', '1' } }),
    want { 0, N, PHASE, N, 0, NIL, '9007199254740993' }, 'reply')
  equal(s.data[counter_key(N)], '9007199254740993', 'total of N')
end)

case('counter amount 2^53+1 onto no total', function()
  local s = fresh()
  equal(flush(s, { entries = { '', '9007199254740993' } }),
    want { 0, N, PHASE, N, 0, NIL, '9007199254740993' }, 'reply')
end)

case('counter landed totals 2^63-2 and 2^63-1', function()
  local s = fresh()
  s.data[counter_key(N)] = '9223372036854775000'
  equal(flush(s, { entries = { '', '806' } }),
    want { 0, N, PHASE, N, 0, NIL, '9223372036854775806' }, 'reply')
  s.data[COUNTER_FENCE] = nil
  equal(flush(s, { entries = { '', '1' } }),
    want { 0, N, PHASE, N, 0, NIL, '9223372036854775807' }, 'reply')
end)

case('counter overflow past 2^63-1 is an error and writes nothing', function()
  local s = fresh()
  s.data[counter_key(N)] = '9223372036854775807'
  local before = s:snapshot()
  equal(flush(s, { entries = { '', '1' } }), '(error) ERR comcount: the total of ' ..
    counter_key(N) .. ' would overflow past 9223372036854775807; nothing was written', 'reply')
  equal(s:snapshot(), before, 'keys')
  s.data[counter_key(N)] = '5'
  before = s:snapshot()
  starts(flush(s, { entries = { '', '9223372036854775807' } }),
    '(error) ERR comcount: the total of ' .. counter_key(N) .. ' would overflow', 'reply')
  equal(s:snapshot(), before, 'keys')
end)

case('counter amount past 2^63-1 is refused', function()
  local s = fresh()
  starts(flush(s, { entries = { '', '9223372036854775808' } }),
    '(error) ERR comcount: ARGV[7] (amount) is "9223372036854775808"', 'reply')
  starts(flush(s, { entries = { '', '05' } }), '(error) ERR comcount: ARGV[7] (amount)', 'reply')
  equal(s:snapshot(), '', 'keys')
end)

-- A counter: keys of another type.

case('counter keys of another type give ERR comcount:', function()
  local what = "a counter's total"
  local setups = {
    { counter_key(N), { x = '1' }, foreign(counter_key(N), what) },
    { counter_key(N), 'abc', foreign(counter_key(N), what) },
    { counter_key(N - 1), { x = '1' }, foreign(counter_key(N - 1), what) },
    { counter_key(N - 1), '-1', foreign(counter_key(N - 1), what) },
    { counter_key(N - 1), '9223372036854775808', foreign(counter_key(N - 1), what) },
    { COUNTER_FENCE, { x = '1' }, foreign(COUNTER_FENCE, 'a fence') },
    { COUNTER_FENCE, 'abc', foreign(COUNTER_FENCE, 'a fence') },
  }
  for _, setup in ipairs(setups) do
    local s = fresh()
    s.data[setup[1]] = setup[2]
    local before = s:snapshot()
    starts(flush(s, { entries = { '', '5' } }), setup[3], before)
    equal(s:snapshot(), before, 'keys')
  end
end)

case("counter write refused by the server comes back as the server's", function()
  local s = fresh()
  s.refuse_writes = "READONLY You can't write against a read only replica."
  equal(flush(s, { entries = { '', '5' } }),
    "(error) READONLY You can't write against a read only replica.", 'reply')
  equal(s:snapshot(), '', 'keys')
end)

-- A family: batches.

case('family batch with totals crossing 2^53, one total per entry', function()
  local s = fresh()
  s.data[family_key(N - 1)] = { a = '1', c = '3' }
  s.data[family_key(N)] = { a = '9007199254740991', b = '5' }
  equal(flush(s, { layout = 'f', entries = { 'a', '2', 'b', '3', 'c', '7' } }),
    want { 0, N, PHASE, N, 0, '1', NIL, '3' }, 'reply')
  equal(s:snapshot(), family_key(N - 1) .. ' {"a"="1" "c"="3"}; ' .. family_key(N) ..
    ' {"a"="9007199254740993" "b"="8" "c"="7"} px 3000; ' .. FAMILY_FENCE .. ' "1000:' ..
    digits(N) .. '" px 5000', 'keys')
end)

case('family sums of 16 to 19 digits', function()
  local s = fresh()
  s.data[family_key(N)] = { a = '123456789012345678', b = '4611686018427387904',
    c = '999999999999999999', d = '999999999999999', e = '9007199254740992' }
  flush(s, { layout = 'f', entries = { 'a', '876543210987654321', 'b', '4611686018427387903',
    'c', '1', 'd', '999999999999999', 'e', '9007199254740993' } })
  local h = s.data[family_key(N)]
  equal(h.a, '999999999999999999', 'a')
  equal(h.b, '9223372036854775807', 'b')
  equal(h.c, '1000000000000000000', 'c')
  equal(h.d, '1999999999999998', 'd')
  equal(h.e, '18014398509481985', 'e')
end)

case('family totals stop at 9223372036854775807', function()
  local s = fresh()
  s.data[family_key(N)] = { a = '9223372036854775807', b = '9000000000000000000',
    d = '9223372036854775806' }
  flush(s, { layout = 'f', entries = { 'a', '1', 'b', '9000000000000000000',
    'c', '9223372036854775807', 'd', '1', 'e', '9223372036854775807' } })
  local h = s.data[family_key(N)]
  for _, field in ipairs { 'a', 'b', 'c', 'd', 'e' } do
    equal(h[field], '9223372036854775807', field)
  end
end)

case('family key sent twice adds both amounts', function()
  local s = fresh()
  s.data[family_key(N - 1)] = { a = '4' }
  s.data[family_key(N)] = { a = '10' }
  equal(flush(s, { layout = 'f', entries = { 'a', '5', 'b', '9007199254740990', 'a', '7',
    'b', '3', 'c', '9007199254740993', 'c', '1' } }),
    want { 0, N, PHASE, N, 0, '4', NIL, '4', NIL, NIL, NIL }, 'reply')
  local h = s.data[family_key(N)]
  equal(h.a, '22', 'a')
  equal(h.b, '9007199254740993', 'b')
  equal(h.c, '9007199254740994', 'c')
end)

case('family duplicate, stale and fenced carry one total per entry', function()
  local s = fresh()
  s.data[family_key(N - 1)] = { a = '9007199254740993', c = '3' }
  flush(s, { layout = 'f', entries = { 'a', '2', 'b', '3', 'c', '7' } })
  local before = s:snapshot()
  local entries = { 'a', '2', 'b', '3', 'c', '7' }
  equal(flush(s, { layout = 'f', entries = entries }),
    want { 1, N, PHASE, N, '1000:' .. digits(N), '9007199254740993', NIL, '3' }, 'duplicate')
  equal(flush(s, { layout = 'f', entries = entries, seq = '999' }),
    want { 2, N, PHASE, NIL, '1000:' .. digits(N), '9007199254740993', NIL, '3' }, 'stale')
  equal(s:snapshot(), before, 'keys')
  s.data[FAMILY_FENCE] = '900:' .. digits(N)
  before = s:snapshot()
  equal(flush(s, { layout = 'f', entries = entries }),
    want { 3, N, PHASE, NIL, '900:' .. digits(N), '9007199254740993', NIL, '3' }, 'fenced')
  equal(s:snapshot(), before, 'keys')
end)

case('family applied after an earlier flush in N-1 tells that fence', function()
  local s = fresh()
  s.data[family_key(N - 1)] = { b = '6' }
  s.data[FAMILY_FENCE] = '900:' .. digits(N - 1)
  equal(flush(s, { layout = 'f', entries = { 'a', '2', 'b', '3' } }),
    want { 0, N, PHASE, N, '900:' .. digits(N - 1), NIL, '6' }, 'reply')
  equal(s.data[FAMILY_FENCE], '1000:' .. digits(N), 'fence')
end)

case('family wrong interval carries no totals', function()
  local s = fresh()
  equal(flush(s, { layout = 'f', entries = { 'a', '2' }, expect = N + 2 }),
    want { 4, N, PHASE, NIL, NIL }, 'reply')
end)

case('family of 40 keys is written through a hash table, without the filler field', function()
  local s = fresh()
  s.data[family_key(N)] = { k1 = '9007199254740991' }
  local entries, totals = {}, {}
  for j = 1, 40 do
    entries[2 * j - 1], entries[2 * j] = 'k' .. j, digits(j)
    totals[j] = NIL
  end
  local reply = flush(s, { layout = 'f', entries = entries })
  equal(reply, want { 0, N, PHASE, N, 0, unpack(totals) }, 'reply')
  local h, fields = s.data[family_key(N)], 0
  for _ in pairs(h) do
    fields = fields + 1
  end
  equal(fields, 40, 'fields')
  equal(h[''], nil, 'filler field')
  equal(h.k1, '9007199254740992', 'k1')
  equal(h.k40, '40', 'k40')
end)

case('family of 1000 keys of 19-digit totals; 1001 refused', function()
  local s = fresh()
  local h = {}
  local entries = {}
  for j = 1, 1000 do
    h['k' .. j] = '9000000000000000000'
    entries[2 * j - 1], entries[2 * j] = 'k' .. j, '123456789012345678'
  end
  s.data[family_key(N)] = h
  flush(s, { layout = 'f', entries = entries })
  for j = 1, 1000 do
    equal(s.data[family_key(N)]['k' .. j], '9123456789012345678', 'k' .. j)
  end
  entries[2001], entries[2002] = 'k1001', '1'
  starts(flush(s, { layout = 'f', entries = entries, seq = '1001' }),
    '(error) ERR comcount: layout f takes 1..=1000 entries, got 1001; split the flush', 'reply')
end)

-- A family: keys of another type.

case('family keys of another type give ERR comcount:', function()
  local what = 'a hash of totals'
  local setups = {
    { family_key(N), '5', foreign(family_key(N), what) },
    { family_key(N), { a = '1.5' }, foreign(family_key(N), what) },
    { family_key(N - 1), '5', foreign(family_key(N - 1), what) },
    { FAMILY_FENCE, { x = '1' }, foreign(FAMILY_FENCE, 'a fence') },
  }
  for _, setup in ipairs(setups) do
    local s = fresh()
    s.data[setup[1]] = setup[2]
    local before = s:snapshot()
    starts(flush(s, { layout = 'f', entries = { 'a', '2', 'b', '3' } }), setup[3], before)
    equal(s:snapshot(), before, 'keys')
  end
end)

case('bad layout and key counts give ERR comcount:', function()
  local s = fresh()
  starts(flush(s, { layout = 'x', entries = { 'a', '2' } }),
    '(error) ERR comcount: ARGV[5] (layout) is "x"', 'layout')
  starts(flush(s, { layout = 'c', entries = { 'a', '2' } }),
    '(error) ERR comcount: ARGV[6] (key) is "a"', 'counter key')
  local reply = s:run(chunk, { 'a', 'b', 'c', 'd' }, { '1', '1000', '0', '5000', 'c', '', '1' })
  starts(reply, '(error) ERR comcount: expected 5, 7 or 9 keys, got 4', 'keys')
  equal(s:snapshot(), '', 'keys')
end)

print(passed .. ' passed, ' .. failed .. ' failed')
os.exit(failed == 0 and 0 or 1)
