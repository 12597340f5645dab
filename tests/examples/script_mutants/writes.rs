//! Mutants of what the script works out and writes: a family's new totals and writes, a
//! counter's write, the errors it names or passes on, both layouts' expiry and fence, and the
//! reply.

use crate::{Mutant, m};

const SET_FENCE: &str =
    "redis.call('SET', fence_key, ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[4])\n";

pub(crate) const MUTANTS: &[Mutant] = &[
    // A family's new totals, all worked out before the first write.
    m(
        "the current totals read from the interval before",
        "redis.pcall('HMGET', key, unpack(fields))",
        "redis.pcall('HMGET', key_before, unpack(fields))",
    ),
    m(
        "an error reading the current totals ignored",
        "    if current.err then",
        "    if false then",
    ),
    m(
        "every entry taken as a key's first",
        "    if total == nil then",
        "    if true then",
    ),
    m(
        "a stored total not checked",
        "if total and not (total == '0' or string.find(total, '^[1-9]%d*$')) then",
        "if false then",
    ),
    m(
        "a new key's total not its amount",
        "      if not total then\n        total = amount\n",
        "      if not total then\n        total = '0'\n",
    ),
    m(
        "short sums of 16-digit totals",
        "#total < 16 and",
        "#total < 17 and",
    ),
    m(
        "short sums of 16-digit amounts",
        "#amount < 16 then",
        "#amount < 17 then",
    ),
    m(
        "a short sum when either is short",
        "#total < 16 and #amount < 16",
        "#total < 16 or #amount < 16",
    ),
    m(
        "a short sum written as Lua prints a number",
        "string.format('%d', tonumber(total) + tonumber(amount))",
        "tostring(tonumber(total) + tonumber(amount))",
    ),
    m(
        "the digit sum drops its carry",
        "carry = math.floor(d / 10)",
        "carry = 0",
    ),
    m(
        "the digit sum keeps the whole of each digit's sum",
        "digits[#digits + 1] = d - 10 * carry",
        "digits[#digits + 1] = d",
    ),
    m(
        "the digit sum stops at the shorter number",
        "while a > 0 or b > 0 or carry > 0 do",
        "while a > 0 and b > 0 do",
    ),
    m(
        "the digit sum drops a last carry",
        "while a > 0 or b > 0 or carry > 0 do",
        "while a > 0 or b > 0 do",
    ),
    m(
        "the digit sum stops at the end of the total",
        "while a > 0 or b > 0 or carry > 0 do",
        "while a > 0 or carry > 0 do",
    ),
    m(
        "the digit sum stops at the end of the amount",
        "while a > 0 or b > 0 or carry > 0 do",
        "while b > 0 or carry > 0 do",
    ),
    m(
        "the digit sum not reversed",
        "total = string.reverse(table.concat(digits))",
        "total = table.concat(digits)",
    ),
    m(
        "no cap at the largest total",
        "        if greater(total, MAX_TOTAL) then\n          total = MAX_TOTAL\n        end\n",
        "",
    ),
    m(
        "the cap compared the wrong way",
        "if greater(total, MAX_TOTAL) then",
        "if greater(MAX_TOTAL, total) then",
    ),
    m(
        "the cap one below the largest",
        "        total = MAX_TOTAL\n",
        "        total = '9223372036854775806'\n",
    ),
    m(
        "a key's running total not kept",
        "    totals[field] = total\n",
        "",
    ),
    m("the changed keys not counted", "      k = k + 2\n", ""),
    m(
        "a changed key not recorded",
        "      changes[k - 1] = field\n",
        "",
    ),
    m(
        "the last changed key's total left out",
        "  for i = 2, k, 2 do",
        "  for i = 2, k - 2, 2 do",
    ),
    m(
        "each key written with the next key's total",
        "changes[i] = totals[changes[i - 1]]",
        "changes[i] = totals[changes[i + 1] or changes[1]]",
    ),
    // A family's writes: a large batch through a hash table, errors as the server said them.
    m(
        "no filler field",
        "  if k > 2 * TABLE_FROM then",
        "  if false then",
    ),
    m(
        "the filler field from 32 keys",
        "  if k > 2 * TABLE_FROM then",
        "  if k >= 2 * TABLE_FROM then",
    ),
    m(
        "the filler field from 17 keys",
        "  if k > 2 * TABLE_FROM then",
        "  if k > TABLE_FROM then",
    ),
    m(
        "a filler a listpack holds",
        "string.rep('-', 1025)",
        "string.rep('-', 64)",
    ),
    m(
        "the filler field left in",
        "      redis.call('HDEL', key, '')\n",
        "",
    ),
    m(
        "the filler field deleted after a refused write",
        "      if type(written) ~= 'table' then",
        "      if true then",
    ),
    m(
        "a family's write error ignored",
        "    if type(written) == 'table' then",
        "    if false then",
    ),
    m(
        "a family's keys named as a counter's",
        "local what = family and 'a hash of totals' or ",
        "local what = ",
    ),
    // A counter's write, and errors: the key's own named, the server's passed on.
    m(
        "no INCRBY",
        "landed = redis.pcall('INCRBY', key, ARGV[7])",
        "landed = 0",
    ),
    m(
        "INCRBY by 1",
        "redis.pcall('INCRBY', key, ARGV[7])",
        "redis.pcall('INCRBY', key, 1)",
    ),
    m(
        "an INCRBY error taken as a total",
        "    if type(landed) == 'table' then",
        "    if false then",
    ),
    m(
        "an overflow passed on as the server said it",
        "    if string.find(landed.err, 'overflow', 1, true) then",
        "    if false then",
    ),
    m(
        "a counter's total of another type passed on as the server said it",
        "      return foreign(key, what, landed)",
        "      return landed",
    ),
    m(
        "a counter's write error named as a foreign key",
        "foreign(key, what, landed)",
        "foreign(key, what)",
    ),
    m(
        "a counter's write error not returned",
        "      return foreign(key, what, landed)\n",
        "",
    ),
    m(
        "a key of another type passed on as the server said it",
        "  if refusal and string.sub(refusal.err, 1, 10) ~= 'WRONGTYPE '\n      and not string.find(refusal.err, 'not an integer', 1, true) then",
        "  if refusal then",
    ),
    m(
        "the server's error named as a foreign key",
        "1, true) then\n    return refusal\n",
        "1, true) then\n",
    ),
    m(
        "the server's error dropped",
        "1, true) then\n    return refusal\n",
        "1, true) then\n    return\n",
    ),
    m(
        "every error taken as about the key",
        "  if refusal and string.sub",
        "  if false and string.sub",
    ),
    m(
        "WRONGTYPE not taken as about the key",
        "string.sub(refusal.err, 1, 10) ~= 'WRONGTYPE '",
        "true",
    ),
    m(
        "not an integer not taken as about the key",
        "\n      and not string.find(refusal.err, 'not an integer', 1, true)",
        "",
    ),
    // Both layouts' expiry and fence, and the reply.
    m(
        "no PEXPIRE",
        "redis.call('PEXPIRE', key, 3 * interval)\n",
        "",
    ),
    m(
        "expiry set on the interval before",
        "redis.call('PEXPIRE', key, 3 * interval)",
        "redis.call('PEXPIRE', KEYS[n - expect + reach + 1], 3 * interval)",
    ),
    m(
        "interval key lives 2 intervals",
        "3 * interval)",
        "2 * interval)",
    ),
    m(
        "interval key lives 4 intervals",
        "3 * interval)",
        "4 * interval)",
    ),
    m(
        "expiry set before the writes",
        "\nlocal landed\n",
        "\nredis.call('PEXPIRE', key, 3 * interval)\nlocal landed\n",
    ),
    m(
        "fence set before the writes",
        "\nlocal landed\n",
        "\nredis.call('SET', fence_key, ARGV[1] .. ':' .. n, 'PX', ARGV[4])\nlocal landed\n",
    ),
    m("no fence", SET_FENCE, ""),
    m("fence never expires", ", 'PX', ARGV[4])", ")"),
    m(
        "fence lives an interval",
        "'PX', ARGV[4])",
        "'PX', ARGV[2])",
    ),
    m(
        "fence holds the wrong interval",
        "ARGV[1] .. ':' .. string.format('%d', n)",
        "ARGV[1] .. ':' .. string.format('%d', n - 1)",
    ),
    m(
        "fence holds the expected interval for the sequence number",
        "'SET', fence_key, ARGV[1] .. ':'",
        "'SET', fence_key, ARGV[3] .. ':'",
    ),
    m(
        "applied reports no interval counted in",
        "local outcome, counted_in = 0, n\n",
        "local outcome, counted_in = 0, false\n",
    ),
    m(
        "a family's reply built as a counter's",
        "if not family then\n  return {",
        "if true then\n  return {",
    ),
    m(
        "a counter's reply without the fence",
        "counted_in, fence or 0, before, landed}",
        "counted_in, false, before, landed}",
    ),
    m(
        "a counter's reply tells an empty fence as none",
        "counted_in, fence or 0, before, landed}",
        "counted_in, fence, before, landed}",
    ),
    m(
        "a family's reply without the fence",
        "local reply = {outcome, n, phase, counted_in, fence or 0}",
        "local reply = {outcome, n, phase, counted_in, false}",
    ),
    m(
        "a family's reply tells an empty fence as none",
        "local reply = {outcome, n, phase, counted_in, fence or 0}",
        "local reply = {outcome, n, phase, counted_in, fence}",
    ),
    m(
        "a family's totals shifted onto the fence's SEQ",
        "  reply[5 + j] = before",
        "  reply[4 + j] = before",
    ),
    m(
        "a wrong interval's reply one item short",
        "return {4, n, phase, false, false}",
        "return {4, n, phase, false}",
    ),
    m(
        "an applied counter flush brings back no landed total",
        "before, landed}",
        "before}",
    ),
    m(
        "a landed total from 2^53 not read back",
        "  if landed and landed >= 9007199254740992 then",
        "  if false then",
    ),
    m(
        "a family's flush reads a landed total it has not",
        "  if landed and landed >= 9007199254740992 then",
        "  if landed >= 9007199254740992 then",
    ),
    m(
        "a landed total of 2^53 not read back",
        "landed >= 9007199254740992",
        "landed > 9007199254740992",
    ),
    m(
        "a landed total read back from the interval before",
        "    landed = redis.call('GET', key)",
        "    landed = redis.call('GET', KEYS[n - expect + reach + 1])",
    ),
    // The ACL check of the writes after the first.
    m(
        "ACL: no write after the first checked",
        "  if redis.acl_check_cmd and not redis.acl_check_cmd(command, ...) then",
        "  if false then",
    ),
    m(
        "ACL: the fence's SET not checked",
        " or denied('SET', fence_key, '1', 'PX', '1')",
        "",
    ),
    m(
        "ACL: the expiry not checked",
        "denied('PEXPIRE', key, '1') or ",
        "",
    ),
    m(
        "ACL: the hash conversion's HDEL not checked",
        "local refusal = denied('HDEL', key, '')",
        "local refusal = nil",
    ),
];
