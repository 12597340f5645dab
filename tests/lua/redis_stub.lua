-- A stand-in for the part of Redis's scripting API that comcount's flush script uses, so that
-- the script runs under a plain Lua interpreter: 5.1 as Redis and Valkey embed it, or 5.4 as
-- Dragonfly does. It keeps strings and hashes as Redis does, every value a string; answers
-- TIME from a clock the test sets; records expiry without applying it; runs TIME, GET, SET
-- (PX), INCRBY, PEXPIRE, HMGET, HSET and HDEL with Redis's error replies, INCRBY exact up to
-- 2^63-1 under either interpreter; and converts a script's arguments and reply as Redis does.
-- What a server would pass on inexactly is recorded as a problem, and a run with a problem
-- fails: a number argument that does not convert to integer digits ('1e+17', '0.5') or, under
-- 5.4, is a float (which a host may send as '5.0'); a number in the reply that is not integral
-- or, under 5.4, is a float; a command or option this stand-in does not model.
--
--   local stub = dofile('redis_stub.lua')
--   local server = stub.server(clock_ms)         -- server.data[key] = 'digits' or {field = v}
--   local reply, problems = server:run(chunk, KEYS, ARGV)
--
-- A reply comes back as text: integers as digits, bulk strings quoted, nil as nil, arrays in
-- brackets, '(error) ...' for an error reply, '+OK' for a status.

local M = {}

-- Lua 5.3 and later tell integers from floats; 5.1 has floats only.
M.integers = math.type ~= nil
M.version = _VERSION

local MAX = '9223372036854775807'
local MIN_MAGNITUDE = '9223372036854775808'
local NOT_INTEGER = 'ERR value is not an integer or out of range'
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local OVERFLOW = 'ERR increment or decrement would overflow'

-- -1, 0 or 1 as digit string a (no leading zero) is less than, equal to or greater than b.
local function compare(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y and -1 or 1
    end
  end
  return 0
end

-- Whether s is negative and its digits, as Redis's string2ll reads a 64-bit integer; nil when
-- it is none ('+1', '01', '-0', ' 1', '1.0', out of range).
local function parse(s)
  local sign, digits = string.match(s, '^(%-?)(%d+)$')
  if not digits then
    return nil
  end
  local negative = sign == '-'
  if digits == '0' then
    if negative then
      return nil
    end
    return false, '0'
  end
  if string.byte(digits, 1) == 48 then
    return nil
  end
  if compare(digits, negative and MIN_MAGNITUDE or MAX) > 0 then
    return nil
  end
  return negative, digits
end

-- The sum of digit strings a and b, worked out digit by digit.
local function add_digits(a, b)
  local out, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then
      d = d + string.byte(a, i) - 48
    end
    if j > 0 then
      d = d + string.byte(b, j) - 48
    end
    if d >= 10 then
      d, carry = d - 10, 1
    else
      carry = 0
    end
    out[#out + 1] = string.char(48 + d)
    i, j = i - 1, j - 1
  end
  return string.reverse(table.concat(out))
end

-- a - b for digit strings with a >= b.
local function subtract_digits(a, b)
  local out, borrow, i, j = {}, 0, #a, #b
  while i > 0 do
    local d = string.byte(a, i) - 48 - borrow
    if j > 0 then
      d = d - (string.byte(b, j) - 48)
    end
    if d < 0 then
      d, borrow = d + 10, 1
    else
      borrow = 0
    end
    out[#out + 1] = string.char(48 + d)
    i, j = i - 1, j - 1
  end
  local s = (string.gsub(string.reverse(table.concat(out)), '^0+', ''))
  if s == '' then
    return '0'
  end
  return s
end

-- The sum of two 64-bit integers given as parse() reads them, as a string; nil past the range.
local function add(a_negative, a, b_negative, b)
  local negative, digits
  if a_negative == b_negative then
    negative, digits = a_negative, add_digits(a, b)
  elseif compare(a, b) >= 0 then
    negative, digits = a_negative, subtract_digits(a, b)
  else
    negative, digits = b_negative, subtract_digits(b, a)
  end
  if digits == '0' then
    negative = false
  end
  if compare(digits, negative and MIN_MAGNITUDE or MAX) > 0 then
    return nil
  end
  return (negative and '-' or '') .. digits
end

-- A Lua number as it is written in a message.
local function show(x)
  if M.integers then
    return tostring(x)
  end
  return string.format('%.17g', x)
end

-- A Lua value as the client would see it in the reply; problems gets what a server would not
-- pass on exactly.
local function render(value, problems, where)
  local kind = type(value)
  if kind == 'number' then
    if M.integers and math.type(value) == 'float' then
      problems[#problems + 1] = where .. ' is a float, ' .. tostring(value) ..
        ', which a Lua 5.4 server sends as a double, not an integer'
      return 'float(' .. tostring(value) .. ')'
    end
    if value ~= math.floor(value) or value >= 2 ^ 63 or value < -(2 ^ 63) then
      problems[#problems + 1] = where .. ' is ' .. show(value) ..
        ', not an integer a server can send as one'
      return 'float(' .. show(value) .. ')'
    end
    return string.format('%d', value)
  elseif kind == 'string' then
    return string.format('%q', value)
  elseif kind == 'boolean' then
    return value and '1' or 'nil'
  elseif kind == 'nil' then
    return 'nil'
  elseif kind == 'table' then
    if type(value.err) == 'string' then
      return '(error) ' .. value.err
    end
    if type(value.ok) == 'string' then
      return '+' .. value.ok
    end
    -- An array stops at its first nil, as Redis's conversion does.
    local items, i = {}, 1
    while value[i] ~= nil do
      items[i] = render(value[i], problems, where .. '[' .. i .. ']')
      i = i + 1
    end
    return '[' .. table.concat(items, ', ') .. ']'
  end
  problems[#problems + 1] = where .. ' is a ' .. kind .. ', which no reply carries'
  return '(' .. kind .. ')'
end

-- Redis's argument conversion: strings as they are, a number as "%.17g" writes it (Redis 7.0,
-- and Dragonfly for a float; Redis 7.2 writes an integral double as its integer), an integer
-- of 5.4 as its digits. A conversion that is not integer digits ('1e+17', '0.5') is a problem,
-- and under 5.4 so is any float: a host that writes it with Lua's own tostring sends '5.0'.
local function argument(value, problems, where)
  if type(value) == 'string' then
    return value
  end
  if type(value) == 'number' then
    if M.integers and math.type(value) == 'integer' then
      return tostring(value)
    end
    local text = string.format('%.17g', value)
    if M.integers then
      problems[#problems + 1] = where .. ' is a float, ' .. tostring(value)
    elseif not string.match(text, '^%-?%d+$') then
      problems[#problems + 1] = where .. ' is ' .. text .. ', not integer digits'
    end
    return text
  end
  return nil
end

-- An integer reply as the script sees it: an integer under 5.4, a float (exact below 2^53)
-- under 5.1.
local function integer(digits)
  return tonumber(digits)
end

local function failure(message)
  return { err = message }
end

local function arity(name)
  return failure("ERR wrong number of arguments for '" .. string.lower(name) .. "' command")
end

local Server = {}
Server.__index = Server

-- A server with no keys whose clock reads clock_ms, plus extra_us microseconds.
function M.server(clock_ms, extra_us)
  return setmetatable({
    data = {},
    expiry = {},
    clock_ms = clock_ms or 0,
    extra_us = extra_us or 0,
    -- When set, the error every write is refused with (READONLY ..., OOM ...).
    refuse_writes = nil,
    log = {},
    problems = {},
  }, Server)
end

local commands = {}
local writes = { SET = true, INCRBY = true, PEXPIRE = true, HSET = true, HDEL = true }

function commands.TIME(server, args)
  if #args ~= 0 then
    return arity('TIME')
  end
  local seconds = math.floor(server.clock_ms / 1000)
  local micros = (server.clock_ms - seconds * 1000) * 1000 + server.extra_us
  return { string.format('%d', seconds), string.format('%d', micros) }
end

function commands.GET(server, args)
  if #args ~= 1 then
    return arity('GET')
  end
  local value = server.data[args[1]]
  if type(value) == 'table' then
    return failure(WRONGTYPE)
  end
  return value or false
end

function commands.SET(server, args)
  if #args < 2 then
    return arity('SET')
  end
  local key, value, px = args[1], args[2], nil
  local i = 3
  while i <= #args do
    if string.upper(args[i]) == 'PX' and args[i + 1] then
      local negative, digits = parse(args[i + 1])
      if negative == nil then
        return failure(NOT_INTEGER)
      end
      if negative or digits == '0' then
        return failure("ERR invalid expire time in 'set' command")
      end
      px = digits
      i = i + 2
    else
      server.problems[#server.problems + 1] = 'SET option ' .. args[i] .. ' is not modelled'
      return failure('ERR syntax error')
    end
  end
  server.data[key] = value
  server.expiry[key] = px
  return { ok = 'OK' }
end

function commands.INCRBY(server, args)
  if #args ~= 2 then
    return arity('INCRBY')
  end
  local key = args[1]
  local by_negative, by = parse(args[2])
  if by_negative == nil then
    return failure(NOT_INTEGER)
  end
  local value = server.data[key]
  if type(value) == 'table' then
    return failure(WRONGTYPE)
  end
  local negative, digits = parse(value or '0')
  if negative == nil then
    return failure(NOT_INTEGER)
  end
  local total = add(negative, digits, by_negative, by)
  if not total then
    return failure(OVERFLOW)
  end
  server.data[key] = total
  return integer(total)
end

function commands.PEXPIRE(server, args)
  if #args < 2 then
    return arity('PEXPIRE')
  end
  if #args > 2 then
    server.problems[#server.problems + 1] = 'PEXPIRE options are not modelled'
    return failure('ERR Unsupported option ' .. args[3])
  end
  local key = args[1]
  local negative, digits = parse(args[2])
  if negative == nil then
    return failure(NOT_INTEGER)
  end
  if server.data[key] == nil then
    return 0
  end
  if negative or digits == '0' then
    server.data[key], server.expiry[key] = nil, nil
  else
    server.expiry[key] = digits
  end
  return 1
end

function commands.HMGET(server, args)
  if #args < 2 then
    return arity('HMGET')
  end
  local hash = server.data[args[1]]
  if type(hash) == 'string' then
    return failure(WRONGTYPE)
  end
  local values = {}
  for i = 2, #args do
    values[i - 1] = hash and hash[args[i]] or false
  end
  return values
end

function commands.HSET(server, args)
  if #args < 3 or #args % 2 == 0 then
    return arity('HSET')
  end
  local key = args[1]
  local hash = server.data[key]
  if type(hash) == 'string' then
    return failure(WRONGTYPE)
  end
  if not hash then
    hash = {}
    server.data[key] = hash
  end
  local added = 0
  for i = 2, #args, 2 do
    if hash[args[i]] == nil then
      added = added + 1
    end
    hash[args[i]] = args[i + 1]
  end
  return added
end

function commands.HDEL(server, args)
  if #args < 2 then
    return arity('HDEL')
  end
  local key = args[1]
  local hash = server.data[key]
  if type(hash) == 'string' then
    return failure(WRONGTYPE)
  end
  local removed = 0
  if hash then
    for i = 2, #args do
      if hash[args[i]] ~= nil then
        hash[args[i]] = nil
        removed = removed + 1
      end
    end
    if next(hash) == nil then
      server.data[key], server.expiry[key] = nil, nil
    end
  end
  return removed
end

-- Runs one command with the script's raw arguments: its reply, an error reply as {err=...}.
function Server:command(name, ...)
  local raw = { ... }
  local count = select('#', ...)
  if type(name) ~= 'string' then
    return failure('ERR Please specify at least one argument for this redis lib call')
  end
  local upper = string.upper(name)
  local args = {}
  for i = 1, count do
    local text = argument(raw[i], self.problems, upper .. ' argument ' .. i)
    if text == nil then
      return failure('ERR Lua redis lib command arguments must be strings or integers')
    end
    args[i] = text
  end
  self.log[#self.log + 1] = upper .. ' ' .. table.concat(args, ' ')
  local run = commands[upper]
  if not run then
    self.problems[#self.problems + 1] = 'command ' .. upper .. ' is not modelled'
    return failure("ERR unknown command '" .. name .. "'")
  end
  if writes[upper] and self.refuse_writes then
    return failure(self.refuse_writes)
  end
  return run(self, args)
end

-- The redis table a script sees.
function Server:api()
  local server = self
  return {
    call = function(...)
      local reply = server:command(...)
      if type(reply) == 'table' and reply.err then
        error(reply)
      end
      return reply
    end,
    pcall = function(...)
      return server:command(...)
    end,
    error_reply = function(message)
      return { err = message }
    end,
    status_reply = function(message)
      return { ok = message }
    end,
  }
end

-- Runs chunk, a loaded script, with KEYS and ARGV: its reply as text, and the problems seen.
function Server:run(chunk, keys, argv)
  self.problems, self.log = {}, {}
  KEYS, ARGV, redis = keys, argv, self:api()
  local ok, result = pcall(chunk)
  KEYS, ARGV, redis = nil, nil, nil
  if not ok then
    if type(result) == 'table' and type(result.err) == 'string' then
      return '(error) ' .. result.err, self.problems
    end
    self.problems[#self.problems + 1] = 'the script raised a Lua error: ' .. tostring(result)
    return '(error) ' .. tostring(result), self.problems
  end
  return render(result, self.problems, 'reply'), self.problems
end

-- Every key, its value and recorded expiry, as one line of text.
function Server:snapshot()
  local names = {}
  for name in pairs(self.data) do
    names[#names + 1] = name
  end
  table.sort(names)
  local out = {}
  for _, name in ipairs(names) do
    local value = self.data[name]
    local text
    if type(value) == 'string' then
      text = string.format('%q', value)
    else
      local fields = {}
      for field in pairs(value) do
        fields[#fields + 1] = field
      end
      table.sort(fields)
      for i, field in ipairs(fields) do
        fields[i] = string.format('%q=%q', field, value[field])
      end
      text = '{' .. table.concat(fields, ' ') .. '}'
    end
    if self.expiry[name] then
      text = text .. ' px ' .. self.expiry[name]
    end
    out[#out + 1] = name .. ' ' .. text
  end
  return table.concat(out, '; ')
end

return M
