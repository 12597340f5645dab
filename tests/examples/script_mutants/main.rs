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

mod checks;
mod reads;
mod writes;

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
// - a family's reply item without `or false`: HMGET answers false, never nil, for a field that
//   holds no total, and `before` is false or a table.

/// Every mutant, part of the script by part: the order they run in, and are numbered by.
const MUTANTS: [&[Mutant]; 3] = [checks::MUTANTS, reads::MUTANTS, writes::MUTANTS];

fn mutants() -> impl Iterator<Item = &'static Mutant> {
    MUTANTS.into_iter().flatten()
}

fn main() -> ExitCode {
    let filters: Vec<String> = std::env::args().skip(1).collect();
    // Every mutant, not only those the filters pick: a change of the script that leaves one
    // behind shows at once.
    let stale: Vec<&str> = mutants()
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
    for (i, mutant) in mutants().enumerate() {
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
