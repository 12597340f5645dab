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

const FENCE_CHECK: &str =
    "  if seq == fenced_seq then\n    return {1, n, phase, previous, fenced_n}\n  end\n";
const APPLY: &str = "redis.call('INCRBY', KEYS[slot], ARGV[2])\n";

const MUTANTS: &[Mutant] = &[
    // The argument checks.
    m(
        "no key or argument count check",
        "if #KEYS ~= 5 or #ARGV ~= 5 then",
        "if false then",
    ),
    m(
        "no argument count check",
        "if #KEYS ~= 5 or #ARGV ~= 5 then",
        "if #KEYS ~= 5 then",
    ),
    m(
        "no key count check",
        "if #KEYS ~= 5 or #ARGV ~= 5 then",
        "if #ARGV ~= 5 then",
    ),
    m(
        "no argument checks",
        "if bad then\n  return bad",
        "if false then\n  return bad",
    ),
    m(
        "no sequence number check",
        "local bad = check(1, 'sequence number', '1', '9007199254740991')\n  or ",
        "local bad = ",
    ),
    m(
        "no amount check",
        "  or check(2, 'amount', '0', '9223372036854775807')\n",
        "",
    ),
    m(
        "no interval check",
        "  or check(3, 'interval ms', '1', '3002399751580330')\n",
        "",
    ),
    m(
        "no expected interval check",
        "  or check(4, 'expected interval', '0', '9007199254740991')\n",
        "",
    ),
    m(
        "no fence life check",
        "  or check(5, 'fence life ms', '1', '9007199254740991')\n",
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
        "amount may reach 2^63",
        "'9223372036854775807'",
        "'9223372036854775808'",
    ),
    m(
        "interval may be 0",
        "check(3, 'interval ms', '1',",
        "check(3, 'interval ms', '0',",
    ),
    m(
        "fence life may be 0",
        "check(5, 'fence life ms', '1',",
        "check(5, 'fence life ms', '0',",
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
        "previous total read from the interval itself",
        "redis.call('GET', KEYS[slot - 1])",
        "redis.call('GET', KEYS[slot])",
    ),
    m(
        "phase reported as 0",
        "local phase = now - n * interval",
        "local phase = 0",
    ),
    // The fence.
    m("no fence check", "if fence then", "if false then"),
    m("no duplicate check", FENCE_CHECK, ""),
    m(
        "duplicate reports the current interval",
        "return {1, n, phase, previous, fenced_n}",
        "return {1, n, phase, previous, n}",
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
    // The writes.
    m(
        "INCRBY before the fence is read",
        "local fence = redis.call('GET', KEYS[5])\n",
        "redis.call('INCRBY', KEYS[slot], ARGV[2])\nlocal fence = redis.call('GET', KEYS[5])\n",
    ),
    m(
        "INCRBY before the window check",
        "if n < expect - 1 or n > expect + 1 then",
        "redis.call('INCRBY', KEYS[3], ARGV[2])\nif n < expect - 1 or n > expect + 1 then",
    ),
    m(
        "PEXPIRE before INCRBY",
        "redis.call('INCRBY', KEYS[slot], ARGV[2])\nredis.call('PEXPIRE', KEYS[slot], 3 * interval)\n",
        "redis.call('PEXPIRE', KEYS[slot], 3 * interval)\nredis.call('INCRBY', KEYS[slot], ARGV[2])\n",
    ),
    m(
        "fence set before INCRBY",
        "redis.call('INCRBY', KEYS[slot], ARGV[2])\nredis.call('PEXPIRE', KEYS[slot], 3 * interval)\nredis.call('SET', KEYS[5], ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[5])\n",
        "redis.call('SET', KEYS[5], ARGV[1] .. ':' .. string.format('%d', n), 'PX', ARGV[5])\nredis.call('INCRBY', KEYS[slot], ARGV[2])\nredis.call('PEXPIRE', KEYS[slot], 3 * interval)\n",
    ),
    m("no INCRBY", APPLY, ""),
    m(
        "INCRBY by 1",
        "redis.call('INCRBY', KEYS[slot], ARGV[2])",
        "redis.call('INCRBY', KEYS[slot], 1)",
    ),
    m(
        "no PEXPIRE",
        "redis.call('PEXPIRE', KEYS[slot], 3 * interval)\n",
        "",
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
        "no fence",
        "redis.call('SET', KEYS[5]",
        "-- redis.call('SET', KEYS[5]",
    ),
    m("fence never expires", ", 'PX', ARGV[5])", ")"),
    m(
        "fence holds the wrong interval",
        "string.format('%d', n)",
        "string.format('%d', n - 1)",
    ),
    m(
        "applied reports no interval counted in",
        "return {0, n, phase, previous, n}",
        "return {0, n, phase, previous, false}",
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
