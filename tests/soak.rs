//! The fault-injection soak (`tern bench soak`), bounded to 150 s of wall time: flapping spot
//! capacity, 10 % throttling, 2 % transient errors, a fifth of notices lost and a fifth late,
//! the controller SIGKILLed every 4–10 s, and an agent sending garbage. A fresh seed every run
//! (printed, so a failure can be replayed with `tern bench soak --seed N`).

use std::process::Command;

#[test]
fn the_soak_keeps_every_promise() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.subsec_nanos() % 10_000);
    eprintln!("soak seed {seed}");
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["bench", "soak", "--seconds", "150", "--json", "--seed"])
        .arg(seed.to_string())
        .output()
        .expect("tern bench soak");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "seed {seed}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a line")).expect("json");
    eprintln!("soak: {r}");
    assert_eq!(
        r["feasible_met_deadline"], r["feasible_jobs"],
        "seed {seed}: a job on-demand could finish missed its deadline: {r}"
    );
    for zero in [
        "orphaned_instances",
        "duplicate_launches",
        "jobs_over_launch_budget",
        "garbage_accepted",
        "server_errors",
    ] {
        assert_eq!(r[zero], 0, "seed {seed}: {zero}: {r}");
    }
    assert_eq!(r["samples_lost_beyond_checkpoint"], 0.0, "seed {seed}: {r}");
    assert!(
        r["kills"].as_u64() >= Some(3),
        "seed {seed}: too few kills: {r}"
    );
    assert!(r["garbage_sent"].as_u64() >= Some(20), "seed {seed}: {r}");
    assert!(
        r["launched_instances"].as_u64() > Some(0),
        "seed {seed}: {r}"
    );
}
