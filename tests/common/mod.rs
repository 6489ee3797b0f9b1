//! Harness pieces shared by the controller tests: ports, waiting for a server, and the
//! controller command line they all start from.

// Each test binary uses a different subset of these.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A port nothing listens on right now (the OS picks it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Wait up to 30 s for a server to accept connections on `addr`.
pub fn wait_for(addr: &str) {
    let t0 = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{addr} did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tern controller --state STATE` with the API token and the shared data folder set and its
/// output silenced; callers add the provider and `--listen` arguments.
pub fn controller_command(state: &Path, token: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
    c.arg("controller")
        .arg("--state")
        .arg(state)
        .env("TERN_TOKEN", token)
        .env(
            "TERN_DATA",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}
