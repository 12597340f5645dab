//! Mutation testing of the flush script, which `cargo mutants` cannot see: each mutant is one
//! textual edit of `comcount_core::script::SOURCE`, and is killed when some test of
//! `tests/tests/script.rs` fails with it (the conformance suite run on the script through
//! EVAL, and the script's own tests), against a Redis server this harness starts.
//!
//! ```sh
//! cargo run -p comcount-tests --example script_mutants            # every mutant
//! cargo run -p comcount-tests --example script_mutants -- window  # those whose name has "window"
//! cargo run -p comcount-tests --example script_mutants -- lone budget  # either word
//! ```
//!
//! It prints one line per mutant, killed or survived, with the tests that failed, and exits
//! with an error when a mutant survives or the unmutated script fails.

use std::path::Path;
use std::process::{Command, ExitCode};

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

const FENCE_CHECK: &str =
    "  if seq == fenced_seq then\n    return {1, n, phase, fenced_n, previous}\n  end\n";
const SET_FENCE: &str =
    "redis.call('SET', fence_key, ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[4])\n";
const WRITE_SUMS: &str = "  if progress then\n    redis.call('HSET', KEYS[slot - 1], '', previous, '+', progress)\n  end\n";
const READ_FENCE: &str = "\nlocal fence, err = read('a fence', 'GET', fence_key)\n";
const TYPE_CHECK: &str = "  local kind = redis.call('TYPE', KEYS[slot])['ok']\n";
const WRITES: &str = "\nif family then\n  local kind";

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
        "no argument count check",
        "if #ARGV < 6 then",
        "if false then",
    ),
    m(
        "argument count: 5 accepted",
        "if #ARGV < 6 then",
        "if #ARGV < 5 then",
    ),
    // The numeric arguments.
    m(
        "no argument checks",
        "if bad then\n  return bad\nend\n\nlocal layout",
        "if false then\n  return bad\nend\n\nlocal layout",
    ),
    m(
        "no sequence number check",
        "local bad = check(1, 'sequence number', '1', '9007199254740991')\n  or ",
        "local bad = ",
    ),
    m(
        "no interval check",
        "  or check(2, 'interval ms', '1', '3002399751580330')\n",
        "",
    ),
    m(
        "no expected interval check",
        "  or check(3, 'expected interval', '0', '9007199254740991')\n",
        "",
    ),
    m(
        "no fence life check",
        "  or check(4, 'fence life ms', '1', '9007199254740991')\n",
        "",
    ),
    m(
        "sequence number may be 0",
        "check(1, 'sequence number', '1',",
        "check(1, 'sequence number', '0',",
    ),
    m(
        "sequence number may reach 2^53",
        "check(1, 'sequence number', '1', '9007199254740991')",
        "check(1, 'sequence number', '1', '9007199254740992')",
    ),
    m(
        "interval may be 0",
        "check(2, 'interval ms', '1',",
        "check(2, 'interval ms', '0',",
    ),
    m(
        "fence life may be 0",
        "check(4, 'fence life ms', '1',",
        "check(4, 'fence life ms', '0',",
    ),
    m(
        "leading zeros accepted",
        "string.match(s, '^[1-9]%d*$')",
        "string.match(s, '^%d+$')",
    ),
    m(
        "digits compared backwards",
        "      return x > y",
        "      return x < y",
    ),
    m(
        "longer digit strings taken as smaller",
        "    return #a > #b",
        "    return #a < #b",
    ),
    m(
        "equal digit strings taken as greater",
        "  end\n  return false\nend",
        "  end\n  return true\nend",
    ),
    // The layout, and a counter's key and amount.
    m(
        "any layout but c is a family",
        "local family = layout == 'f'",
        "local family = layout ~= 'c'",
    ),
    m(
        "layout c takes more arguments",
        "if #ARGV ~= 7 then",
        "if #ARGV < 7 then",
    ),
    m(
        "no layout c argument count check",
        "if #ARGV ~= 7 then",
        "if false then",
    ),
    m(
        "a counter's key may be any",
        "if ARGV[6] ~= '' then",
        "if false then",
    ),
    m(
        "no counter amount check",
        "  if not (#amount < 19 and plain(amount)) then",
        "  if false then",
    ),
    m(
        "counter amounts of 19 digits skip the full check",
        "#amount < 19 and",
        "#amount < 20 and",
    ),
    m(
        "counter amounts with a leading zero accepted",
        "(#amount < 19 and plain(amount))",
        "(#amount < 19 and string.match(amount, '^%d+$'))",
    ),
    m(
        "a counter amount's error names the key",
        "check(7, 'amount',",
        "check(6, 'amount',",
    ),
    m(
        "the largest counter amount refused",
        "check(7, 'amount', '0', MAX_TOTAL)",
        "check(7, 'amount', '0', '9223372036854775806')",
    ),
    m(
        "amount may reach 2^63",
        "local MAX_TOTAL = '9223372036854775807'",
        "local MAX_TOTAL = '9223372036854775808'",
    ),
    // A family's packed entries.
    m(
        "layout f takes more arguments",
        "if #ARGV ~= 6 then",
        "if #ARGV < 6 then",
    ),
    m(
        "entries that are not packed reach the loop",
        "if not entries or #entries % 2 ~= 0 or #entries < 2",
        "if #entries % 2 ~= 0 or #entries < 2",
    ),
    m(
        "bytes after the array accepted",
        "  if not (ok and rest == -1 and type(array) == 'table') then",
        "  if not (ok and type(array) == 'table') then",
    ),
    m(
        "an odd count of items accepted",
        "if not entries or #entries % 2 ~= 0 or #entries < 2",
        "if not entries or #entries < 2",
    ),
    m("no entry accepted", "#entries < 2 or", "#entries < 0 or"),
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
        " or #entries > 2 * MAX_ENTRIES then",
        " then",
    ),
    m(
        "the entry limit counts items",
        "#entries > 2 * MAX_ENTRIES then",
        "#entries > MAX_ENTRIES then",
    ),
    m(
        "no key type check",
        "if type(key) ~= 'string' or #key < 1",
        "if #key < 1",
    ),
    m("a family key may be empty", "#key < 1 or", "#key < 0 or"),
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
        " or #key < 1 or #key > MAX_KEY_LEN then",
        " then",
    ),
    m(
        "a key's error counts items",
        "'ERR comcount: entry ' .. ((j + 1) / 2) .. ' has a key",
        "'ERR comcount: entry ' .. j .. ' has a key",
    ),
    m(
        "no family amount check",
        "    if not (type(amount) == 'number' and amount >= 0",
        "    if false and not (type(amount) == 'number' and amount >= 0",
    ),
    m(
        "a negative amount passes the quick check",
        "amount >= 0 and amount < EXACT",
        "amount < EXACT",
    ),
    m(
        "2^53 as a number passes the quick check",
        "amount < EXACT and amount % 1 == 0)",
        "amount <= EXACT and amount % 1 == 0)",
    ),
    m(
        "a fraction passes the quick check",
        "and amount % 1 == 0)",
        ")",
    ),
    m(
        "a negative amount passes the full check",
        "return a >= 0 and a < EXACT",
        "return a < EXACT",
    ),
    m(
        "2^53 as a number passes the full check",
        "a < EXACT and a % 1 == 0",
        "a <= EXACT and a % 1 == 0",
    ),
    m("a fraction passes the full check", "and a % 1 == 0\n", "\n"),
    m(
        "the largest exact amount refused",
        "local EXACT = 9007199254740992",
        "local EXACT = 9007199254740991",
    ),
    m(
        "a digit amount may pass the largest",
        "plain(a) and not greater(a, MAX_TOTAL)",
        "plain(a)",
    ),
    m(
        "the largest digit amount refused",
        "not greater(a, MAX_TOTAL)",
        "greater(MAX_TOTAL, a)",
    ),
    m(
        "a digit amount may have a leading zero",
        "and plain(a) and",
        "and string.match(a, '^%d+$') and",
    ),
    m(
        "a digit amount may hold letters",
        "type(a) == 'string' and plain(a) and",
        "type(a) == 'string' and",
    ),
    m(
        "an amount of another type read as digits",
        "return type(a) == 'string' and plain(a)",
        "return plain(a)",
    ),
    m(
        "an amount's error counts items",
        "'ERR comcount: entry ' .. ((j + 1) / 2) .. ' (key '",
        "'ERR comcount: entry ' .. j .. ' (key '",
    ),
    // The window.
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
        "wrong key for the interval",
        "local slot = n - expect + reach + 2",
        "local slot = reach + 2",
    ),
    m(
        "window: the reach taken as 1",
        "local reach = (#KEYS - 3) / 2",
        "local reach = 1",
    ),
    m(
        "the fence read from an interval key",
        "local fence_key = KEYS[#KEYS]",
        "local fence_key = KEYS[#KEYS - 1]",
    ),
    m(
        "phase reported as 0",
        "local phase = now - n * interval",
        "local phase = 0",
    ),
    m(
        "a wrong interval carries a total",
        "return {4, n, phase, false}",
        "return {4, n, phase, false, false}",
    ),
    // The totals of the interval before.
    m(
        "interval 0 reads the keys before it",
        "if n > 0 then",
        "if true then",
    ),
    m(
        "the previous totals read from the interval itself",
        "  local key = KEYS[slot - 1]\n",
        "  local key = KEYS[slot]\n",
    ),
    m(
        "a counter's previous total read from the interval itself",
        "read(\"a counter's total\", 'GET', key)",
        "read(\"a counter's total\", 'GET', KEYS[slot])",
    ),
    m(
        "the summed totals not brought back",
        "    previous = fields[1]\n",
        "    previous = false\n",
    ),
    m(
        "the sums and their progress read swapped",
        "read('a hash', 'HMGET', key, '', '+')",
        "read('a hash', 'HMGET', key, '+', '')",
    ),
    m(
        "a partly summed interval never resumed",
        "if fields[2] ~= '' and",
        "if not fields[2] and",
    ),
    m(
        "no check that the interval before exists",
        " and redis.call('EXISTS', key) == 1 then",
        " then",
    ),
    m(
        "the interval before summed only when missing",
        "redis.call('EXISTS', key) == 1",
        "redis.call('EXISTS', key) == 0",
    ),
    m(
        "a field that holds no entries is not an error",
        "      if not totals then\n        return state\n      end\n",
        "",
    ),
    m(
        "the progress of a sum not kept",
        "previous, progress = totals, state",
        "previous = totals",
    ),
    // Summing the fields of an ended interval.
    m(
        "a field of an odd count of items summed",
        "if not entries or #entries % 2 ~= 0 then",
        "if not entries then",
    ),
    m(
        "a field that is not packed summed",
        "if not entries or #entries % 2 ~= 0 then",
        "if false then",
    ),
    m(
        "every amount taken as a new key",
        "      if s == nil then",
        "      if true then",
    ),
    m(
        "a key's first amount not counted",
        "        sums[k] = a\n",
        "        sums[k] = 0\n",
    ),
    m("the keys not counted", "        keys = keys + 1\n", ""),
    m(
        "the order of the keys not kept",
        "        order[keys] = k\n",
        "",
    ),
    m(
        "a sum past 2^53 kept as a number",
        "if t < EXACT then",
        "if true then",
    ),
    m(
        "a sum of 2^53 kept as a number",
        "if t < EXACT then",
        "if t <= EXACT then",
    ),
    m(
        "a number summed as digits unconverted",
        "    if type(s) == 'number' then",
        "    if false then",
    ),
    m(
        "an amount summed as digits unconverted",
        "    if type(a) == 'number' then",
        "    if false then",
    ),
    m(
        "no cap at the largest total",
        "    if greater(s, MAX_TOTAL) then\n      s = MAX_TOTAL\n    end\n",
        "",
    ),
    m(
        "the sum drops its carry",
        "carry = (d - d % 10) / 10",
        "carry = 0",
    ),
    m(
        "the sum stops at the shorter number",
        "while i > 0 or j > 0 or carry > 0 do",
        "while i > 0 and j > 0 do",
    ),
    m(
        "a field's entries counted as items",
        "return #entries / 2",
        "return #entries",
    ),
    m(
        "a resumed sum starts from nothing",
        "local resumed = fold('', totals)",
        "local resumed = 0",
    ),
    m(
        "a broken sum resumed",
        "    if type(resumed) == 'table' then",
        "    if false then",
    ),
    m(
        "a broken progress record resumed",
        "    if not names then",
        "    if false then",
    ),
    m(
        "the fields summed before summed again",
        " and not seen[name] then",
        " then",
    ),
    m(
        "the field '' summed as a participant's",
        "if name ~= '' and name ~= '+'",
        "if name ~= '+'",
    ),
    m(
        "the field '+' summed as a participant's",
        "name ~= '+' and not seen",
        "not seen",
    ),
    m(
        "no lone field copied",
        "if not totals and #pending == 1 then",
        "if false then",
    ),
    m(
        "a lone field copied over a resumed sum",
        "if not totals and #pending == 1 then",
        "if #pending == 1 then",
    ),
    m(
        "the first of several fields copied",
        "if not totals and #pending == 1 then",
        "if not totals and #pending >= 1 then",
    ),
    m(
        "a lone field's copy not written",
        "return redis.call('HGET', key, pending[1]), ''",
        "return redis.call('HGET', key, pending[1]), false",
    ),
    m(
        "a map read as an array",
        "  elseif first >= 0x90 and first <= 0x9f then\n    return first - 0x90",
        "  elseif first >= 0x80 and first <= 0x9f then\n    return first % 16",
    ),
    m(
        "an array of 16 or more read as a map",
        "  elseif first == 0xdc and #s >= 3 then",
        "  elseif false then",
    ),
    m(
        "a nil item in the entries taken",
        "    if array[i] == nil then\n      return nil",
        "    if false then\n      return nil",
    ),
    m(
        "a nil item looked for only up to the table's length",
        "  for i = 1, len do",
        "  for i = 1, #array do",
    ),
    m(
        "no budget",
        "    if budget <= 0 and i > 1 then",
        "    if false then",
    ),
    m(
        "the budget overspent by a field",
        "    if budget <= 0 and i > 1 then",
        "    if budget < 0 and i > 1 then",
    ),
    m(
        "no field summed once the budget is spent",
        "    if budget <= 0 and i > 1 then",
        "    if budget <= 0 then",
    ),
    m(
        "the resumed totals not counted against the budget",
        "    budget = budget - resumed\n",
        "",
    ),
    m(
        "a budget of 6001",
        "local FOLD_BUDGET = 6000",
        "local FOLD_BUDGET = 6001",
    ),
    m(
        "a budget of 5999",
        "local FOLD_BUDGET = 6000",
        "local FOLD_BUDGET = 5999",
    ),
    m("the budget not spent", "    budget = budget - count\n", ""),
    m("a sum cut short marked whole", "      left = true\n", ""),
    m(
        "a whole sum marked cut short",
        "  if left then\n",
        "  if true then\n",
    ),
    m(
        "a field summed but not recorded",
        "    names[#names + 1] = pending[i]\n",
        "",
    ),
    m(
        "the sums packed amount first",
        "packed[2 * i - 1], packed[2 * i] = k, sums[k]",
        "packed[2 * i - 1], packed[2 * i] = sums[k], k",
    ),
    m(
        "the last key's sum left out",
        "  for i = 1, keys do",
        "  for i = 1, keys - 1 do",
    ),
    // The fence.
    m("no fence check", "if fence then", "if false then"),
    m("no duplicate check", FENCE_CHECK, ""),
    m(
        "duplicate reports the current interval",
        "return {1, n, phase, fenced_n, previous}",
        "return {1, n, phase, n, previous}",
    ),
    m(
        "a duplicate brings back no totals",
        "return {1, n, phase, fenced_n, previous}",
        "return {1, n, phase, fenced_n, false}",
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
        "a stale flush brings back no totals",
        "return {2, n, phase, false, previous}",
        "return {2, n, phase, false, false}",
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
        "a fenced flush brings back no totals",
        "return {3, n, phase, false, previous}",
        "return {3, n, phase, false, false}",
    ),
    m(
        "no broken fence check",
        "  if not fenced_seq then",
        "  if false then",
    ),
    // A family's writes.
    m(
        "no check that the interval key is a hash",
        "if kind ~= 'none' and kind ~= 'hash' then",
        "if false then",
    ),
    m(
        "a missing interval key taken as not a hash",
        "if kind ~= 'none' and kind ~= 'hash' then",
        "if kind ~= 'hash' then",
    ),
    m(
        "the type of the interval before checked",
        "redis.call('TYPE', KEYS[slot])",
        "redis.call('TYPE', KEYS[slot - 1])",
    ),
    m(
        "the sums written before the fence is read",
        READ_FENCE,
        "\nif progress then\n  redis.call('HSET', KEYS[slot - 1], '', previous, '+', progress)\nend\nlocal fence, err = read('a fence', 'GET', fence_key)\n",
    ),
    m(
        "the sums written before the type check",
        TYPE_CHECK,
        "  if progress then\n    redis.call('HSET', KEYS[slot - 1], '', previous, '+', progress)\n  end\n  local kind = redis.call('TYPE', KEYS[slot])['ok']\n",
    ),
    m("the sums not written", WRITE_SUMS, ""),
    m(
        "the sums written to the interval itself",
        "redis.call('HSET', KEYS[slot - 1], '', previous",
        "redis.call('HSET', KEYS[slot], '', previous",
    ),
    m(
        "the sums written without their progress",
        "'', previous, '+', progress)",
        "'', previous)",
    ),
    m(
        "no HSET of the participant's field",
        "  redis.call('HSET', KEYS[slot], fence_key, ARGV[6])\n",
        "",
    ),
    m(
        "the participant's field written to the interval before",
        "redis.call('HSET', KEYS[slot], fence_key, ARGV[6])",
        "redis.call('HSET', KEYS[slot - 1], fence_key, ARGV[6])",
    ),
    m(
        "the participant's field named by another key",
        "KEYS[slot], fence_key, ARGV[6]",
        "KEYS[slot], KEYS[1], ARGV[6]",
    ),
    m(
        "HSET before the fence is read",
        READ_FENCE,
        "\nif family then\n  redis.call('HSET', KEYS[slot], fence_key, ARGV[6])\nend\nlocal fence, err = read('a fence', 'GET', fence_key)\n",
    ),
    // A counter's writes, and both layouts' expiry and fence.
    m(
        "INCRBY before the fence is read",
        READ_FENCE,
        "\nredis.call('INCRBY', KEYS[slot], ARGV[7])\nlocal fence, err = read('a fence', 'GET', fence_key)\n",
    ),
    m(
        "INCRBY before the window check",
        "if n < expect - reach or n > expect + reach then",
        "redis.call('INCRBY', KEYS[3], ARGV[7])\nif n < expect - reach or n > expect + reach then",
    ),
    m(
        "fence set before the writes",
        WRITES,
        "\nredis.call('SET', fence_key, ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[4])\nif family then\n  local kind",
    ),
    m(
        "no INCRBY",
        "redis.pcall('INCRBY', KEYS[slot], ARGV[7])",
        "false",
    ),
    m(
        "INCRBY by 1",
        "redis.pcall('INCRBY', KEYS[slot], ARGV[7])",
        "redis.pcall('INCRBY', KEYS[slot], 1)",
    ),
    m(
        "an INCRBY error passed on as the server wrote it",
        "  if type(total) == 'table' and total.err then\n    if string.find",
        "  if false then\n    if string.find",
    ),
    m(
        "a fence of another type passed on as the server wrote it",
        "local fence, err = read('a fence', 'GET', fence_key)\nif err then",
        "local fence, err = read('a fence', 'GET', fence_key)\nif false then",
    ),
    m(
        "a counter's previous key of another type passed on as the server wrote it",
        "read(\"a counter's total\", 'GET', key)\n    if err then",
        "read(\"a counter's total\", 'GET', key)\n    if false then",
    ),
    m(
        "a counter's previous total that is not an integer brought back",
        "    if total and not amount_ok(total)",
        "    if false and not amount_ok(total)",
    ),
    m(
        "a family's previous key of another type passed on as the server wrote it",
        "'HMGET', key, '', '+')\n    if err then",
        "'HMGET', key, '', '+')\n    if false then",
    ),
    m(
        "no PEXPIRE",
        "redis.call('PEXPIRE', KEYS[slot], 3 * interval)\n",
        "",
    ),
    m(
        "expiry set on the interval before",
        "redis.call('PEXPIRE', KEYS[slot], 3 * interval)",
        "redis.call('PEXPIRE', KEYS[slot - 1], 3 * interval)",
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
    m("no fence", SET_FENCE, ""),
    m("fence never expires", ", 'PX', ARGV[4])", ")"),
    m(
        "fence holds the wrong interval",
        "ARGV[1] .. ':' .. string.format('%d', n)",
        "ARGV[1] .. ':' .. string.format('%d', n - 1)",
    ),
    m(
        "applied reports no interval counted in",
        "return {0, n, phase, n, previous}",
        "return {0, n, phase, false, previous}",
    ),
    m(
        "an applied flush brings back no totals",
        "return {0, n, phase, n, previous}",
        "return {0, n, phase, n, false}",
    ),
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
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["test", "-p", "comcount-tests", "--test", "script"])
        .env("REDIS_URL", server.url())
        .env("COMCOUNT_SCRIPT_SOURCE", file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failed: Vec<String> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(String::from)
        .collect();
    if failed.is_empty() && !output.status.success() {
        // It did not get as far as running the tests.
        let stderr = String::from_utf8_lossy(&output.stderr);
        panic!("cargo test failed: {stderr}");
    }
    failed
}
