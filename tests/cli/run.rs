//! Running the `tern` binary as a user would, shared by the command tests.

use std::process::{Command, Output};

/// `tern ARGS`, without a price database from the environment.
pub fn tern(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .env_remove("TERN_DB")
        .output()
        .expect("run tern")
}

/// The last line of stdout as JSON (`--json` prints one object there).
pub fn last_json(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().last().expect("some output");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {line}"))
}
