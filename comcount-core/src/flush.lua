-- One flush of a comcount counter (see the flush protocol).
-- KEYS[1] the interval key EXPECT, KEYS[2] the interval key EXPECT-1, KEYS[3] the fence key.
-- ARGV[1] SEQ, ARGV[2] amount, ARGV[3] interval (ms), ARGV[4] EXPECT, ARGV[5] fence life (ms).
-- Reply: {outcome, N, phase (ms), total of N-1 or nil}; outcome 0 applied, 1 duplicate,
-- 2 stale, 3 fenced, 4 wrong interval. Every check comes before the first write.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local interval = tonumber(ARGV[3])
local n = math.floor(now / interval)
local phase = now - n * interval
if n ~= tonumber(ARGV[4]) then
  return {4, n, phase, false}
end
local previous = false
if n > 0 then
  previous = redis.call('GET', KEYS[2])
end
local fence = redis.call('GET', KEYS[3])
if fence then
  local sep = string.find(fence, ':', 1, true)
  if not sep then
    return redis.error_reply('comcount: fence ' .. KEYS[3] .. ' is not a fence')
  end
  local seq = tonumber(ARGV[1])
  local fenced_seq = tonumber(string.sub(fence, 1, sep - 1))
  if seq == fenced_seq then
    return {1, n, phase, previous}
  end
  if seq < fenced_seq then
    return {2, n, phase, previous}
  end
  if tonumber(string.sub(fence, sep + 1)) >= n then
    return {3, n, phase, previous}
  end
end
redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], 3 * interval)
redis.call('SET', KEYS[3], ARGV[1] .. ':' .. n, 'PX', ARGV[5])
return {0, n, phase, previous}
