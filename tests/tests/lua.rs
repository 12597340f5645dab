//! The flush script under plain Lua interpreters: `tests/lua/check.lua` runs
//! `comcount-core/src/protocol/flush.lua` against a stand-in for Redis's scripting API
//! (`tests/lua/redis_stub.lua`) under Lua 5.4, as Dragonfly embeds it, and under Lua 5.1, as
//! Redis and Valkey do. Under 5.4 `/` always gives a float, which a reply or a stored total
//! would carry as "5.0": every case checks replies and keys exactly, totals from 2^53 up to
//! 2^63-1 included, and fails on a float handed to the server.
//!
//! Both interpreters must be installed (`apt-get install lua5.4 lua5.1`): a missing one fails
//! the test rather than skipping it.

use std::io::ErrorKind;
use std::path::Path;
use std::process::Command;

/// Runs the check under `interpreter` and fails with its output unless every case passed.
fn check(interpreter: &str) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let check = manifest.join("lua/check.lua");
    let script = manifest.join("../comcount-core/src/protocol/flush.lua");
    let output = match Command::new(interpreter).arg(&check).arg(&script).output() {
        Ok(output) => output,
        Err(error) if error.kind() == ErrorKind::NotFound => panic!(
            "{interpreter} is not installed; the flush script is checked under Lua 5.4 and 5.1: \
             apt-get install lua5.4 lua5.1"
        ),
        Err(error) => panic!("running {interpreter}: {error}"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{interpreter} {} {} exited with {}:\n{stdout}{stderr}",
        check.display(),
        script.display(),
        output.status,
    );
    assert!(
        stdout.contains(" passed, 0 failed"),
        "{interpreter} ran no summary:\n{stdout}{stderr}"
    );
}

#[test]
fn the_flush_script_is_exact_under_lua_5_4() {
    check("lua5.4");
}

#[test]
fn the_flush_script_is_exact_under_lua_5_1() {
    check("lua5.1");
}
