//! Mutants of what the script checks before it reads a key: the key and argument counts,
//! each number's pattern and range, the layout, and each entry's key and amount.

use crate::{Mutant, m};

pub(crate) const MUTANTS: &[Mutant] = &[
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
];
