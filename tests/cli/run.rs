//! Running the `tern` binary as a user would, shared by the command tests.

use std::path::Path;
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

/// `tern ARGS` with `token` in `TERN_TOKEN` (and no state file or price database from the
/// environment), in `dir` when given: (success, stdout, stderr).
pub fn tern_as(token: &str, dir: Option<&Path>, args: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
    c.args(args)
        .env("TERN_TOKEN", token)
        .env_remove("TERN_STATE")
        .env_remove("TERN_DB");
    if let Some(d) = dir {
        c.current_dir(d);
    }
    let out = c.output().expect("run tern");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
