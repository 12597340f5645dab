//! Mutation testing of the flush script, which `cargo mutants` cannot see: each mutant is one
//! textual edit of `comcount_core::script::SOURCE`, and is killed when some test of
//! `tests/tests/script.rs` fails with it (the conformance suite run on the script through
//! EVAL, and the script's own tests), against a Redis server this harness starts.
//!
//! ```sh
//! cargo run -p comcount-tests --example script_mutants            # every mutant
//! cargo run -p comcount-tests --example script_mutants -- window  # those whose name has "window"
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

const FENCE_CHECK: &str = "  if seq == fenced_seq then\n    return answer(1, fenced_n)\n  end\n";
const SET_FENCE: &str =
    "redis.call('SET', KEYS[5], ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[4])\n";
const WRITES: &str = "\nif family then\n  -- Writes field and total pairs";

const MUTANTS: &[Mutant] = &[
    // The key and argument counts.
    m("no key count check", "if #KEYS ~= 5 then", "if false then"),
    m(
        "no argument count check",
        "if #ARGV < 7 or #ARGV % 2 == 0 then",
        "if false then",
    ),
    m(
        "argument count: half a pair accepted",
        "if #ARGV < 7 or #ARGV % 2 == 0 then",
        "if #ARGV < 7 then",
    ),
    m(
        "argument count: no pair accepted",
        "if #ARGV < 7 or",
        "if #ARGV < 5 or",
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
    // The layout and the entries.
    m(
        "any layout but c is a family",
        "local family = layout == 'f'",
        "local family = layout ~= 'c'",
    ),
    m(
        "layout c takes several entries",
        "if count ~= 1 then",
        "if count < 1 then",
    ),
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
    m(
        "no key length check",
        "if #key < min_key or #key > max_key then",
        "if false then",
    ),
    m(
        "no check for a key twice",
        "  if seen[key] then",
        "  if false then",
    ),
    m(
        "no amount check",
        "  if not (#amount < 19",
        "  if false and not (#amount < 19",
    ),
    m(
        "amounts of 19 digits skip the full check",
        "#amount < 19 and",
        "#amount < 20 and",
    ),
    m(
        "amounts with a leading zero accepted",
        "(amount == '0' or string.match(amount, '^[1-9]%d*$'))",
        "(amount == '0' or string.match(amount, '^%d+$'))",
    ),
    m(
        "an amount's error names the key's place",
        "check(5 + 2 * j,",
        "check(4 + 2 * j,",
    ),
    m(
        "amount may reach 2^63",
        "local MAX_TOTAL = '9223372036854775807'",
        "local MAX_TOTAL = '9223372036854775808'",
    ),
    // The window.
    m(
        "no window check",
        "if n < expect - 1 or n > expect + 1 then",
        "if false then",
    ),
    m(
        "window widened below",
        "if n < expect - 1 or",
        "if n < expect - 2 or",
    ),
    m(
        "window widened above",
        "or n > expect + 1 then",
        "or n > expect + 2 then",
    ),
    m(
        "window narrowed below",
        "if n < expect - 1 or",
        "if n < expect or",
    ),
    m(
        "window narrowed above",
        "or n > expect + 1 then",
        "or n > expect then",
    ),
    m(
        "wrong key for the interval",
        "local slot = n - expect + 3",
        "local slot = 3",
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
    // The previous totals.
    m(
        "previous total read from the interval itself",
        "previous = {redis.call('GET', KEYS[slot - 1])}",
        "previous = {redis.call('GET', KEYS[slot])}",
    ),
    m(
        "previous totals read from the interval's own hash",
        "redis.call('HMGET', KEYS[slot - 1], unpack(fields))",
        "redis.call('HMGET', KEYS[slot], unpack(fields))",
    ),
    m(
        "interval 0 reads the keys before it",
        "if n == 0 then",
        "if false then",
    ),
    m(
        "the reply leaves the totals out",
        "reply[4 + j] = previous[j]",
        "reply[4 + j] = false",
    ),
    m(
        "the reply's totals in reverse",
        "reply[4 + j] = previous[j]",
        "reply[4 + j] = previous[count + 1 - j]",
    ),
    // The fence.
    m("no fence check", "if fence then", "if false then"),
    m("no duplicate check", FENCE_CHECK, ""),
    m(
        "duplicate reports the current interval",
        "return answer(1, fenced_n)",
        "return answer(1, n)",
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
        "no broken fence check",
        "  if not fenced_seq then",
        "  if false then",
    ),
    // A family's new totals.
    m(
        "current totals read from the interval before",
        "local current = redis.call('HMGET', KEYS[slot],",
        "local current = redis.call('HMGET', KEYS[slot - 1],",
    ),
    m(
        "no check that a field holds a total",
        "if not (total == '0' or string.match(total, '^[1-9]%d*$')) then",
        "if false then",
    ),
    m(
        "a new key flushed with 0 gets no total",
        "local new = amount\n",
        "local new = amount ~= '0' and amount or nil\n",
    ),
    m(
        "sums of 19 digits in Lua's numbers",
        "if #total < 16 and #amount < 16 then",
        "if #total < 20 and #amount < 20 then",
    ),
    m(
        "no overflow check",
        "if greater(new, MAX_TOTAL) then",
        "if false then",
    ),
    m(
        "the largest total refused",
        "if greater(new, MAX_TOTAL) then",
        "if not greater(MAX_TOTAL, new) then",
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
        "a batch of one change writes nothing",
        "if k > 0 then",
        "if k > 2 then",
    ),
    // The writes.
    m(
        "INCRBY before the fence is read",
        "local fence = redis.call('GET', KEYS[5])\n",
        "redis.call('INCRBY', KEYS[slot], ARGV[7])\nlocal fence = redis.call('GET', KEYS[5])\n",
    ),
    m(
        "HSET before the fence is read",
        "local fence = redis.call('GET', KEYS[5])\n",
        "if family then\n  redis.call('HSET', KEYS[slot], fields[1], ARGV[7])\nend\nlocal fence = redis.call('GET', KEYS[5])\n",
    ),
    m(
        "INCRBY before the window check",
        "if n < expect - 1 or n > expect + 1 then",
        "redis.call('INCRBY', KEYS[3], ARGV[7])\nif n < expect - 1 or n > expect + 1 then",
    ),
    m(
        "fence set before the totals",
        WRITES,
        "\nredis.call('SET', KEYS[5], ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[4])\nif family then\n  -- Writes field and total pairs",
    ),
    m(
        "no INCRBY",
        "  redis.call('INCRBY', KEYS[slot], ARGV[7])\n",
        "",
    ),
    m(
        "INCRBY by 1",
        "redis.call('INCRBY', KEYS[slot], ARGV[7])",
        "redis.call('INCRBY', KEYS[slot], 1)",
    ),
    m(
        "no HSET of a small batch",
        "      redis.call('HSET', KEYS[slot], ...)\n",
        "",
    ),
    m(
        "no HSET of a large batch",
        "      redis.call('HSET', KEYS[slot], '', string.rep('-', 1025), ...)\n",
        "",
    ),
    m(
        "no HSET of the new totals",
        "      write(unpack(changes))\n",
        "",
    ),
    m(
        "a hash that exists written as if new",
        "if redis.call('EXISTS', KEYS[slot]) == 0 then",
        "if true then",
    ),
    m(
        "a new hash written without its first entry",
        "write(unpack(ARGV, 6))",
        "write(unpack(ARGV, 8))",
    ),
    m(
        "a large batch written to a listpack",
        "    if count > TABLE_FROM then",
        "    if false then",
    ),
    m(
        "the hash table's field left in the hash",
        "    redis.call('HDEL', KEYS[slot], '')\n",
        "",
    ),
    m(
        "every batch written to a hash table",
        "local TABLE_FROM = 32",
        "local TABLE_FROM = 0",
    ),
    m(
        "a batch of 33 written to a listpack",
        "local TABLE_FROM = 32",
        "local TABLE_FROM = 33",
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
        "return answer(0, n)",
        "return answer(0, false)",
    ),
];

fn main() -> ExitCode {
    let filter = std::env::args().nth(1).unwrap_or_default();
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
        if !mutant.name.contains(&filter) {
            continue;
        }
        assert_eq!(
            SOURCE.matches(mutant.from).count(),
            1,
            "mutant {:?}: its text must occur once in the script",
            mutant.name
        );
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
