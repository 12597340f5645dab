//! Mutation testing of the flush script, which `cargo mutants` cannot see: each mutant is one
//! textual edit of `comcount_core::script::SOURCE`, and is killed when some test of
//! `tests/tests/script.rs` fails with it (the conformance suite run on the script through
//! EVAL, and the script's own tests), against a Redis server this harness starts, or when the
//! Lua check of `tests/tests/lua.rs` (`tests/lua/check.lua` under `lua5.4` and `lua5.1`) fails
//! with it: some edits show only under Lua 5.4, where `/` gives a float.
//!
//! ```sh
//! cargo run -p comcount-tests --example script_mutants            # every mutant
//! cargo run -p comcount-tests --example script_mutants -- window  # those whose name has "window"
//! cargo run -p comcount-tests --example script_mutants -- filler fence  # either word
//! ```
//!
//! It prints one line per mutant, killed or survived, with the tests that failed (a Lua check
//! case as `lua5.4: its name`), and exits with an error when a mutant survives or the
//! unmutated script fails.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::sync::OnceLock;

use comcount_core::script::SOURCE;
use comcount_tests::server::RedisServer;

/// A mutant: its name, the text it replaces (which must occur exactly once) and the
/// replacement.
struct Mutant {
    name: &'static str,
    from: &'static str,
    to: &'static str,
}

const fn m(name: &'static str, from: &'static str, to: &'static str) -> Mutant {
    Mutant { name, from, to }
}

const SET_FENCE: &str =
    "redis.call('SET', fence_key, ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[4])\n";

const MUTANTS: &[Mutant] = &[
    // The key and argument counts.
    m(
        "no key count check",
        "if #KEYS < 5 or #KEYS > 2 * MAX_REACH + 3 or #KEYS % 2 == 0 then",
        "if false then",
    ),
    m(
        "key count: an even one accepted",
        " or #KEYS % 2 == 0 then",
        " then",
    ),
    m(
        "key count: more than the furthest reach accepted",
        " or #KEYS > 2 * MAX_REACH + 3",
        "",
    ),
    m(
        "key count: three accepted",
        "if #KEYS < 5 or",
        "if #KEYS < 3 or",
    ),
    m(
        "a reach of 4 accepted",
        "local MAX_REACH = 3",
        "local MAX_REACH = 4",
    ),
    m(
        "no argument count check",
        "if #ARGV < 7 or #ARGV % 2 == 0 then",
        "if false then",
    ),
    m(
        "argument count: 5 accepted",
        "if #ARGV < 7 or",
        "if #ARGV < 5 or",
    ),
    m(
        "argument count: a lone entry refused",
        "if #ARGV < 7 or",
        "if #ARGV < 9 or",
    ),
    m(
        "argument count: an even one accepted",
        " or #ARGV % 2 == 0 then",
        " then",
    ),
    // The numeric arguments: which are checked, and their ranges.
    m(
        "no sequence number check",
        "if not (string.find(ARGV[1], '^[1-9]%d*$') and seq <= 9007199254740991) then",
        "if false then",
    ),
    m(
        "no interval check",
        "if not (string.find(ARGV[2], '^[1-9]%d*$') and interval <= 3002399751580330) then",
        "if false then",
    ),
    m(
        "no expected interval check",
        "if not (ARGV[3] == '0' or string.find(ARGV[3], '^[1-9]%d*$') and expect <= 9007199254740991) then",
        "if false then",
    ),
    m(
        "no fence life check",
        "if not (string.find(ARGV[4], '^[1-9]%d*$')\n    and (#ARGV[4] < 16 or tonumber(ARGV[4]) <= 9007199254740991)) then",
        "if false then",
    ),
    m(
        "sequence number may be 0",
        "(string.find(ARGV[1], '^[1-9]%d*$') and",
        "((ARGV[1] == '0' or string.find(ARGV[1], '^[1-9]%d*$')) and",
    ),
    m(
        "sequence number may reach 2^53",
        "seq <= 9007199254740991",
        "seq <= 9007199254740992",
    ),
    m(
        "interval may be 0",
        "(string.find(ARGV[2], '^[1-9]%d*$') and",
        "((ARGV[2] == '0' or string.find(ARGV[2], '^[1-9]%d*$')) and",
    ),
    m(
        "the interval's error names a larger maximum",
        "'3002399751580330')",
        "'3002399751580331')",
    ),
    m("expected interval may not be 0", "(ARGV[3] == '0' or ", "("),
    m(
        "expected interval may reach 2^53",
        "expect <= 9007199254740991",
        "expect <= 9007199254740992",
    ),
    m(
        "fence life may be 0",
        "if not (string.find(ARGV[4], '^[1-9]%d*$')\n",
        "if not ((ARGV[4] == '0' or string.find(ARGV[4], '^[1-9]%d*$'))\n",
    ),
    m(
        "fence life may reach 2^53",
        "tonumber(ARGV[4]) <= 9007199254740991",
        "tonumber(ARGV[4]) <= 9007199254740992",
    ),
    // Each number's pattern, then its range.
    m(
        "the interval's pattern dropped",
        "(string.find(ARGV[2], '^[1-9]%d*$') and interval",
        "(interval",
    ),
    m(
        "the fence life's pattern dropped",
        "(string.find(ARGV[4], '^[1-9]%d*$')\n    and",
        "(true\n    and",
    ),
    m(
        "sequence number: leading zeros accepted",
        "string.find(ARGV[1], '^[1-9]%d*$')",
        "string.find(ARGV[1], '^%d+$')",
    ),
    m(
        "expected interval: leading zeros accepted",
        "string.find(ARGV[3], '^[1-9]%d*$')",
        "string.find(ARGV[3], '^%d+$')",
    ),
    m(
        "fence life: leading zeros accepted",
        "string.find(ARGV[4], '^[1-9]%d*$')",
        "string.find(ARGV[4], '^%d+$')",
    ),
    m(
        "interval: leading zeros accepted",
        "string.find(ARGV[2], '^[1-9]%d*$')",
        "string.find(ARGV[2], '^%d+$')",
    ),
    m(
        "sequence number: the pattern open at its start",
        "string.find(ARGV[1], '^[1-9]%d*$')",
        "string.find(ARGV[1], '[1-9]%d*$')",
    ),
    m(
        "fence life: the pattern open at its end",
        "string.find(ARGV[4], '^[1-9]%d*$')",
        "string.find(ARGV[4], '^[1-9]%d*')",
    ),
    m(
        "expected interval: the pattern open at its end",
        "string.find(ARGV[3], '^[1-9]%d*$')",
        "string.find(ARGV[3], '^[1-9]%d*')",
    ),
    m(
        "expected interval: no range",
        " and expect <= 9007199254740991) then",
        ") then",
    ),
    m(
        "fence life: no range",
        "\n    and (#ARGV[4] < 16 or tonumber(ARGV[4]) <= 9007199254740991)) then",
        ") then",
    ),
    m(
        "a fence life of 16 digits taken as in range",
        "#ARGV[4] < 16 or",
        "#ARGV[4] < 17 or",
    ),
    m(
        "interval: the range flipped",
        "interval <= 3002399751580330",
        "interval > 3002399751580330",
    ),
    m(
        "interval may pass floor(2^53/3)",
        "interval <= 3002399751580330",
        "interval <= 3002399751580331",
    ),
    // greater(): lengths, then digits.
    m(
        "greater: lengths not compared first",
        "  if #a ~= #b then",
        "  if false then",
    ),
    m(
        "greater: longer digit strings taken as smaller",
        "    return #a > #b",
        "    return #a < #b",
    ),
    m(
        "greater: digits compared backwards",
        "      return x > y",
        "      return x < y",
    ),
    m(
        "greater: equal digit strings taken as greater",
        "  end\n  return false\nend",
        "  end\n  return true\nend",
    ),
    m(
        "greater: the first digit skipped",
        "  for i = 1, #a do",
        "  for i = 2, #a do",
    ),
    m(
        "greater: the last digit skipped",
        "  for i = 1, #a do",
        "  for i = 1, #a - 1 do",
    ),
    // The pattern of a plain decimal integer: amounts, a counter's total, a family's totals.
    m("amount: '0' refused", "(amount == '0' or ", "(false or "),
    m(
        "a counter's previous total '0' refused",
        "(before == '0' or ",
        "(false or ",
    ),
    m(
        "a stored total '0' refused",
        "(total == '0' or ",
        "(false or ",
    ),
    m(
        "amount: leading zeros accepted",
        "string.find(amount, '^[1-9]%d*$')",
        "string.find(amount, '^%d+$')",
    ),
    m(
        "a stored total with a leading zero accepted",
        "string.find(total, '^[1-9]%d*$')",
        "string.find(total, '^%d+$')",
    ),
    m(
        "amount: no pattern",
        "(amount == '0' or string.find(amount, '^[1-9]%d*$'))",
        "(true)",
    ),
    m(
        "amount: the pattern open at its end",
        "string.find(amount, '^[1-9]%d*$')",
        "string.find(amount, '^[1-9]%d*')",
    ),
    m(
        "a stored total's pattern open at its end",
        "string.find(total, '^[1-9]%d*$')",
        "string.find(total, '^[1-9]%d*')",
    ),
    // The layout and the entry count.
    m(
        "any layout but c is a family",
        "local family = layout == 'f'",
        "local family = layout ~= 'c'",
    ),
    m(
        "the entries counted one too many",
        "math.floor((#ARGV - 5) / 2)",
        "math.floor((#ARGV - 3) / 2)",
    ),
    m(
        "layout c takes more entries",
        "if count ~= 1 then",
        "if count < 1 then",
    ),
    m(
        "no layout c entry count check",
        "if count ~= 1 then",
        "if false then",
    ),
    m(
        "1001 entries accepted",
        "local MAX_ENTRIES = 1000",
        "local MAX_ENTRIES = 1001",
    ),
    m(
        "999 entries at most",
        "local MAX_ENTRIES = 1000",
        "local MAX_ENTRIES = 999",
    ),
    m(
        "no entry limit",
        "if count > MAX_ENTRIES then",
        "if false then",
    ),
    // Each entry's key length.
    m(
        "a counter's key may be any",
        "min_key, max_key = 0, 0",
        "min_key, max_key = 0, MAX_KEY_LEN",
    ),
    m(
        "a family key may be empty",
        "min_key, max_key = 1, MAX_KEY_LEN",
        "min_key, max_key = 0, MAX_KEY_LEN",
    ),
    m(
        "a family key may be 257 bytes",
        "local MAX_KEY_LEN = 256",
        "local MAX_KEY_LEN = 257",
    ),
    m(
        "a family key may be 255 bytes at most",
        "local MAX_KEY_LEN = 256",
        "local MAX_KEY_LEN = 255",
    ),
    m(
        "no key length check",
        "  if #key < min_key or #key > max_key then",
        "  if false then",
    ),
    m("no shortest key", "#key < min_key or ", ""),
    m("no longest key", " or #key > max_key then", " then"),
    m(
        "a key's error names the amount",
        "'ERR comcount: ARGV[' .. (4 + 2 * j) .. '] (key) is '",
        "'ERR comcount: ARGV[' .. (5 + 2 * j) .. '] (key) is '",
    ),
    m(
        "an entry's key read from its amount",
        "local key, amount = ARGV[4 + 2 * j], ARGV[5 + 2 * j]",
        "local key, amount = ARGV[5 + 2 * j], ARGV[5 + 2 * j]",
    ),
    m(
        "an entry's amount read from its key",
        "local key, amount = ARGV[4 + 2 * j], ARGV[5 + 2 * j]",
        "local key, amount = ARGV[4 + 2 * j], ARGV[4 + 2 * j]",
    ),
    m(
        "the amounts taken as the keys",
        "  fields[j] = key\n",
        "  fields[j] = amount\n",
    ),
    // Each entry's amount: the pattern, then the length or greater().
    m(
        "no amount check",
        "  if not ((amount == '0' or string.find(amount, '^[1-9]%d*$'))\n      and (#amount < 19 or not greater(amount, MAX_TOTAL))) then",
        "  if false then",
    ),
    m(
        "amounts of 19 digits skip the range check",
        "#amount < 19 or",
        "#amount < 20 or",
    ),
    m(
        "amount: no range",
        "(#amount < 19 or not greater(amount, MAX_TOTAL))",
        "(true)",
    ),
    m(
        "amount: the range flipped",
        "not greater(amount, MAX_TOTAL)",
        "greater(amount, MAX_TOTAL)",
    ),
    m(
        "an amount's error names the key",
        "out_of_range(5 + 2 * j, 'amount',",
        "out_of_range(4 + 2 * j, 'amount',",
    ),
    m(
        "an amount's error dropped",
        "    return out_of_range(5 + 2 * j, 'amount', '0', MAX_TOTAL)\n",
        "",
    ),
    m(
        "the largest amount refused",
        "'amount', '0', MAX_TOTAL)",
        "'amount', '0', '9223372036854775806')",
    ),
    m(
        "amount may reach 2^63",
        "local MAX_TOTAL = '9223372036854775807'",
        "local MAX_TOTAL = '9223372036854775808'",
    ),
    // The server's clock and the window.
    m(
        "the server's clock without its microseconds",
        " + math.floor(tonumber(time[2]) / 1000)",
        "",
    ),
    m(
        "the server's interval rounded to the nearest",
        "local n = math.floor(now / interval)",
        "local n = math.floor(now / interval + 0.5)",
    ),
    m(
        "phase reported as 0",
        "local phase = now - n * interval",
        "local phase = 0",
    ),
    m(
        "no window check",
        "if n < expect - reach or n > expect + reach then",
        "if false then",
    ),
    m(
        "window widened below",
        "if n < expect - reach or",
        "if n < expect - reach - 1 or",
    ),
    m(
        "window widened above",
        "or n > expect + reach then",
        "or n > expect + reach + 1 then",
    ),
    m(
        "window narrowed below",
        "if n < expect - reach or",
        "if n < expect - 1 or",
    ),
    m(
        "window narrowed above",
        "or n > expect + reach then",
        "or n > expect + 1 then",
    ),
    m(
        "window: the reach taken as 1",
        "local reach = math.floor((#KEYS - 3) / 2)",
        "local reach = 1",
    ),
    m(
        "a wrong interval carries a total",
        "return {4, n, phase, false, false}",
        "return {4, n, phase, false, false, false}",
    ),
    m(
        "wrong key for the interval",
        "KEYS[n - expect + reach + 2],",
        "KEYS[reach + 2],",
    ),
    m(
        "the fence read from an interval key",
        "  KEYS[#KEYS]\n",
        "  KEYS[#KEYS - 1]\n",
    ),
    // The totals of N-1, and the reply that carries them.
    m(
        "interval 0 reads the keys before it",
        "if n > 0 then",
        "if true then",
    ),
    m(
        "a family's previous totals read from the interval itself",
        "redis.pcall('HMGET', key_before, unpack(fields))",
        "redis.pcall('HMGET', key, unpack(fields))",
    ),
    m(
        "the totals of N-1 read from two intervals before",
        "local key_before, key, fence_key = KEYS[n - expect + reach + 1],",
        "local key_before, key, fence_key = KEYS[n - expect + reach],",
    ),
    m(
        "a family's previous totals skipped",
        "    before = redis.pcall('HMGET', key_before, unpack(fields))\n",
        "",
    ),
    m(
        "a family's previous total read for the first key only",
        "'HMGET', key_before, unpack(fields))",
        "'HMGET', key_before, fields[1])",
    ),
    m(
        "a counter's previous total read from the interval itself",
        "redis.pcall('GET', key_before)",
        "redis.pcall('GET', key)",
    ),
    m(
        "a counter's previous total skipped",
        "    before = redis.pcall('GET', key_before)\n",
        "",
    ),
    m(
        "a counter's previous total not checked",
        "  if before and not family and not",
        "  if false and not family and not",
    ),
    m(
        "a counter's previous total past the largest accepted",
        "(#before < 19 or not greater(before, MAX_TOTAL))",
        "(true)",
    ),
    m(
        "a counter's previous total of 19 digits taken as short",
        "#before < 19 or",
        "#before < 20 or",
    ),
    m(
        "a counter's previous total with a leading zero accepted",
        "string.find(before, '^[1-9]%d*$')",
        "string.find(before, '^%d+$')",
    ),
    m(
        "an error reading the totals of N-1 ignored",
        "  if type(before) == 'table' and before.err then",
        "  if false then",
    ),
    m(
        "the last entry's total left out",
        "for j = 1, count do\n  reply[5 + j]",
        "for j = 1, count - 1 do\n  reply[5 + j]",
    ),
    // The fence.
    m(
        "an error reading the fence ignored",
        "if type(fence) == 'table' and fence.err then",
        "if false then",
    ),
    m("no fence check", "if fence then", "if false then"),
    m(
        "no broken fence check",
        "  if not fenced_seq then",
        "  if false then",
    ),
    m(
        "no duplicate check",
        "  if seq == fenced_seq then\n",
        "  if false then\n",
    ),
    m(
        "duplicate reports the current interval",
        "outcome, counted_in = 1, fenced_n",
        "outcome, counted_in = 1, n",
    ),
    m(
        "no stale check",
        "if seq < fenced_seq then",
        "if false then",
    ),
    m(
        "stale check flipped",
        "if seq < fenced_seq then",
        "if seq > fenced_seq then",
    ),
    m(
        "stale reports an interval counted in",
        "outcome, counted_in = 2, false",
        "outcome, counted_in = 2, fenced_n",
    ),
    m("no fenced check", "if fenced_n >= n then", "if false then"),
    m(
        "fenced check strict",
        "if fenced_n >= n then",
        "if fenced_n > n then",
    ),
    m(
        "fenced check flipped",
        "if fenced_n >= n then",
        "if fenced_n <= n then",
    ),
    m(
        "fenced reports an interval counted in",
        "outcome, counted_in = 3, false",
        "outcome, counted_in = 3, n",
    ),
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
        "    return refusal\n",
        "",
    ),
    m(
        "the server's error dropped",
        "    return refusal\n",
        "    return\n",
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
    // Equivalent, not listed:
    // - the amount check without `#amount < 19 or`, or a counter's previous total's without
    //   `#before < 19 or`: greater() is false for a shorter digit string anyway.
    // - the fence life check without `#ARGV[4] < 16 or`, or with `< 15`: tonumber is exact
    //   there, and such a life in range.
    // - `#ARGV < 6` for `#ARGV < 7`: 6 arguments are even, refused as such.
    // - the entry count as `math.floor((#ARGV - 4) / 2)`: #ARGV is odd there.
    // - no short sum (`elseif false`): the digit sum is exact at every length.
    // - a new key's total summed as '0' plus its amount: that is the amount.
    // - a total equal to MAX_TOTAL capped: to itself.
    // - a family's reply item without `or false`: HMGET answers false, never nil, for a field
    //   that holds no total, and `before` is false or a table.
];

fn main() -> ExitCode {
    let filters: Vec<String> = std::env::args().skip(1).collect();
    // Every mutant, not only those the filters pick: a change of the script that leaves one
    // behind shows at once.
    let stale: Vec<&str> = MUTANTS
        .iter()
        .filter(|mutant| SOURCE.matches(mutant.from).count() != 1)
        .map(|mutant| mutant.name)
        .collect();
    if !stale.is_empty() {
        eprintln!("the text of these mutants does not occur exactly once in the script: {stale:?}");
        return ExitCode::FAILURE;
    }
    let server = RedisServer::standalone();
    let dir = std::env::temp_dir().join(format!("comcount-script-mutants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let failed = run_tests(&server, &dir.join("unmutated.lua"), SOURCE);
    if !failed.is_empty() {
        eprintln!("the unmutated script fails {failed:?}: fix that first");
        return ExitCode::FAILURE;
    }
    let mut survivors = Vec::new();
    println!("| mutant | result | failing tests |");
    println!("| --- | --- | --- |");
    for (i, mutant) in MUTANTS.iter().enumerate() {
        if !filters.is_empty() && !filters.iter().any(|f| mutant.name.contains(f.as_str())) {
            continue;
        }
        let source = SOURCE.replacen(mutant.from, mutant.to, 1);
        let failed = run_tests(&server, &dir.join(format!("mutant-{i}.lua")), &source);
        let result = if failed.is_empty() {
            survivors.push(mutant.name);
            "SURVIVED"
        } else {
            "killed"
        };
        println!("| {} | {result} | {} |", mutant.name, failed.join(", "));
    }
    std::fs::remove_dir_all(&dir).ok();
    if survivors.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("survivors: {survivors:?}");
        ExitCode::FAILURE
    }
}

/// Runs the script's tests with `source` as the script; returns the names of those that
/// failed.
fn run_tests(server: &RedisServer, file: &Path, source: &str) -> Vec<String> {
    std::fs::write(file, source).unwrap();
    let lua = lua_check(file);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["test", "-p", "comcount-tests", "--test", "script"])
        .env("REDIS_URL", server.url())
        .env("COMCOUNT_SCRIPT_SOURCE", file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let tests: Vec<String> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(String::from)
        .collect();
    if tests.is_empty() && !output.status.success() {
        // It did not get as far as running the tests.
        let stderr = String::from_utf8_lossy(&output.stderr);
        panic!("cargo test failed: {stderr}");
    }
    let mut failed = tests;
    failed.extend(lua);
    failed
}

/// Runs the Lua check on the script in `file` under both interpreters; returns the cases that
/// failed, each as `interpreter: case`.
fn lua_check(file: &Path) -> Vec<String> {
    // The cases' names, from the first run (the unmutated script's, where every case passes):
    // a failure's line goes on with its error after the name, and names may hold ": ".
    static CASES: OnceLock<Vec<String>> = OnceLock::new();
    let check = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/check.lua");
    let mut failed = Vec::new();
    for interpreter in ["lua5.4", "lua5.1"] {
        let output = Command::new(interpreter)
            .arg(&check)
            .arg(file)
            .output()
            .unwrap_or_else(|e| panic!("{interpreter}: {e} (apt-get install lua5.4 lua5.1)"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let cases = CASES.get_or_init(|| {
            stdout
                .lines()
                .filter_map(|line| line.strip_prefix("ok    "))
                .map(String::from)
                .collect()
        });
        let before = failed.len();
        failed.extend(stdout.lines().filter_map(|line| {
            let rest = line.strip_prefix("FAIL  ")?;
            let name = cases
                .iter()
                .filter(|case| rest.starts_with(&format!("{case}: ")))
                .max_by_key(|case| case.len())
                .map_or(rest, String::as_str);
            Some(format!("{interpreter}: {name}"))
        }));
        if failed.len() == before && !output.status.success() {
            // The chunk did not load, or the check stopped before its summary.
            failed.push(interpreter.to_owned());
        }
    }
    failed
}
