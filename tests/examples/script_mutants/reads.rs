//! Mutants of what the script reads and decides from: the server's clock and the window, the
//! totals of N-1 that the reply carries, and the fence.

use crate::{Mutant, m};

pub(crate) const MUTANTS: &[Mutant] = &[
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
];
