//! Clients that hold connections without finishing requests, against the real `tern
//! controller` and `tern sim serve` processes over real sockets: many half-sent requests
//! under a 1,024 open-files limit, running out of descriptors, a trickled body, an idle
//! kept-alive connection, stalled TLS handshakes. The timeouts are set short by flag so each
//! test takes a few seconds.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common;

use common::{Reaper, free_port, quiet, wait_for};

const TOKEN: &str = "slow-clients-token";
/// Slack on every deadline below, for a loaded two-core CI machine.
const SLACK: Duration = Duration::from_secs(3);

/// `tern ARGS` with the API token, its open-files limit set to `fds` (soft and hard, as a
/// service manager would) when given.
fn tern_limited(fds: Option<u32>, args: &[&str]) -> Child {
    let mut c = Command::new("sh");
    let limit = fds.map_or(String::new(), |n| format!("ulimit -n {n} || exit 1; "));
    c.arg("-c")
        .arg(format!("{limit}exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .env("TERN_TOKEN", TOKEN);
    quiet(&mut c).spawn().expect("tern")
}

/// `tern controller` on the in-process simulated cloud at a fresh address, with `extra` flags;
/// the address once it accepts connections.
fn controller(dir: &std::path::Path, fds: Option<u32>, extra: &[&str]) -> (Reaper, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let state = dir.join("state.db");
    let mut args = vec![
        "controller",
        "--provider",
        "sim",
        "--listen",
        &addr,
        "--state",
        state.to_str().expect("path"),
    ];
    args.extend_from_slice(extra);
    let reaper = Reaper(vec![tern_limited(fds, &args)]);
    wait_for(&addr);
    (reaper, addr)
}

/// Let this test process open `n` descriptors (its soft limit raised toward the hard one).
fn room_for(n: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    if now.current.is_some_and(|c| c < n) {
        let want = now.maximum.map_or(n, |m| m.min(n));
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(want),
                maximum: now.maximum,
            },
        )
        .expect("raising the open-files limit");
        assert!(
            want >= n,
            "this test needs {n} open files, the hard limit is {want}"
        );
    }
}

/// `count` connections that each send half a request (no blank line) and stall.
fn half_sent_requests(addr: &str, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|i| {
            let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connection {i}: {e}"));
            // A refused connection may be closed already: its write can fail.
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: stall\r\nX-Slow: ");
            s
        })
        .collect()
}

/// Whether the server closes `s` within `within`, and what it sent before; `None` when the
/// connection is still open then.
fn closed_by_server(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.checked_sub(t0.elapsed())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        match s.read(&mut buf) {
            Ok(0) => return Some(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // Reset: the server closed with our bytes unread.
            Err(_) => return Some(got),
        }
    }
}

/// The status of `GET path` on a fresh connection, if an answer comes within a second.
fn get_status(addr: &str, path: &str) -> Option<u16> {
    let sock = addr.parse().expect("addr");
    let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(1)).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let got = closed_by_server(&mut s, Duration::from_secs(1))?;
    let head = String::from_utf8_lossy(&got);
    head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// How long until `GET path` answers 200; panics after `limit`.
fn ok_within(addr: &str, path: &str, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        if get_status(addr, path) == Some(200) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < limit,
            "{path} did not answer 200 within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// CPU seconds `pid` has used (user and system), from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which is in parentheses): utime and stime are the 12th
    // and 13th, in clock ticks (100 a second on Linux).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 / 100.0
}

#[test]
fn half_sent_requests_under_1024_open_files_leave_healthz_answering() {
    room_for(4096);
    let dir = tempfile::tempdir().expect("dir");
    // The defaults: a cap of half of 1,024, a 10 s header deadline.
    let (_reaper, addr) = controller(dir.path(), Some(1024), &[]);
    assert_eq!(get_status(&addr, "/healthz"), Some(200));

    let t0 = Instant::now();
    let stalled = half_sent_requests(&addr, 1100);
    let opened = t0.elapsed();
    // /healthz answers now, long before any header deadline frees a slot, while the clients
    // still hold their 1,100 sockets: the oldest stalled connections made room.
    let waited = ok_within(&addr, "/healthz", SLACK);
    // Each connection past the cap closed one stalled connection (no answer); 512 are open.
    // (The closing runs on each victim's task: wait a moment for the last ones.)
    for s in &stalled {
        s.set_nonblocking(true).expect("nonblocking");
    }
    let count_closed = |stalled: &[TcpStream]| {
        stalled
            .iter()
            .filter(|s| {
                let mut s: &TcpStream = s;
                match s.read(&mut [0u8; 16]) {
                    Ok(0) => true,
                    Ok(_) => false,
                    Err(e) => e.kind() != ErrorKind::WouldBlock,
                }
            })
            .count()
    };
    let t1 = Instant::now();
    let mut closed = count_closed(&stalled);
    while closed < 1100 - 512 && t1.elapsed() < SLACK {
        std::thread::sleep(Duration::from_millis(50));
        closed = count_closed(&stalled);
    }
    assert!(
        closed >= 1100 - 512,
        "{closed} of 1100 stalled connections closed; over the cap of 512 they make room"
    );
    eprintln!(
        "opened 1100 in {opened:?}, {closed} closed to make room; /healthz answered {waited:?} later"
    );
    assert!(
        opened + waited < Duration::from_secs(10),
        "answered only after the header deadline"
    );
    drop(stalled);
}

#[test]
fn the_accept_loop_waits_out_running_out_of_descriptors() {
    room_for(4096);
    let dir = tempfile::tempdir().expect("dir");
    // A cap above the open-files limit: accepting really fails with EMFILE.
    let (mut reaper, addr) = controller(
        dir.path(),
        Some(1024),
        &["--header-timeout", "3", "--max-connections", "5000"],
    );
    assert_eq!(get_status(&addr, "/healthz"), Some(200));
    let pid = reaper.0[0].id();

    let stalled = half_sent_requests(&addr, 1100);
    // The server holds every descriptor it may; the rest wait in the listen queue.
    std::thread::sleep(Duration::from_millis(300));
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    std::thread::sleep(Duration::from_millis(1000));
    let spent = cpu_seconds(pid) - cpu0;
    let window = t0.elapsed().as_secs_f64();
    assert!(
        spent < 0.5 * window,
        "the server used {spent:.2} s of CPU in {window:.2} s out of descriptors: a spinning accept loop"
    );
    assert!(
        reaper.0[0].try_wait().expect("wait").is_none(),
        "the controller exited"
    );
    // Once the header deadline frees descriptors, it serves again.
    ok_within(&addr, "/healthz", Duration::from_secs(3) + SLACK);
    assert!(reaper.0[0].try_wait().expect("wait").is_none());
    drop(stalled);
}

#[test]
fn a_trickled_body_and_an_idle_kept_alive_connection_are_closed() {
    let dir = tempfile::tempdir().expect("dir");
    let (_reaper, addr) = controller(
        dir.path(),
        None,
        &["--header-timeout", "1", "--body-timeout", "1"],
    );

    // A body sent a byte every 100 ms: always moving, never done.
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.write_all(
        format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .expect("head");
    let mut trickle = s.try_clone().expect("clone");
    let feeder = std::thread::spawn(move || {
        for _ in 0..80 {
            std::thread::sleep(Duration::from_millis(100));
            if trickle.write_all(b" ").is_err() {
                return;
            }
        }
    });
    let t0 = Instant::now();
    let answer = closed_by_server(&mut s, Duration::from_secs(1) + SLACK)
        .expect("a trickled body kept its connection past the body timeout");
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.starts_with("HTTP/1.1 4"),
        "answer to a late body: {text}"
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(500),
        "cut off early: {:?}",
        t0.elapsed()
    );
    feeder.join().expect("feeder");

    // A kept-alive connection after its answer, then nothing.
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .expect("request");
    let mut buf = [0u8; 512];
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let n = s.read(&mut buf).expect("answer");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    let t0 = Instant::now();
    assert!(
        closed_by_server(&mut s, Duration::from_secs(1) + SLACK).is_some(),
        "an idle kept-alive connection stayed open"
    );
    eprintln!("idle connection closed after {:?}", t0.elapsed());
}

#[test]
fn stalled_tls_handshakes_make_room_for_a_real_client() {
    let dir = tempfile::tempdir().expect("dir");
    let certs = tern::test_certs::write_test_certs(dir.path()).expect("certs");
    let (cert, key) = (
        certs.cert.to_str().expect("path"),
        certs.key.to_str().expect("path"),
    );
    let (_reaper, addr) = controller(
        dir.path(),
        None,
        &[
            "--tls-cert",
            cert,
            "--tls-key",
            key,
            "--max-connections",
            "4",
        ],
    );
    // Four connections that never start their handshake take every slot (for up to the
    // default 10 s header deadline).
    let mut stalled: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(&addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // A real client is served at once: the oldest stalled handshake made room.
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["status", "--json", "--server", &format!("https://{addr}")])
        .env("TERN_CA", &certs.ca)
        .env("TERN_TOKEN", TOKEN)
        .output()
        .expect("status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "served only after the header deadline"
    );
    assert_eq!(
        closed_by_server(&mut stalled[0], Duration::from_secs(1)),
        Some(Vec::new()),
        "the oldest stalled handshake was not closed to make room"
    );
}

#[test]
fn sim_serve_sheds_stalled_connections_and_refuses_when_all_are_in_requests() {
    let addr = format!("127.0.0.1:{}", free_port());
    let _reaper = Reaper(vec![tern_limited(
        None,
        &[
            "sim",
            "serve",
            "--listen",
            &addr,
            "--max-connections",
            "4",
            "--body-timeout",
            "2",
        ],
    )]);
    wait_for(&addr);
    ok_within(&addr, "/now", SLACK);
    // Twenty half-sent requests at a cap of four: the server still answers at once.
    let t0 = Instant::now();
    let stalled = half_sent_requests(&addr, 20);
    ok_within(&addr, "/now", SLACK);
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "answered only after the header deadline"
    );
    drop(stalled);

    // Four requests whose bodies never come are each in a request: a fifth connection is
    // refused with the 503, unread.
    let in_requests: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).expect("connect");
            s.write_all(
                b"POST /provider/list HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
                  Content-Length: 100\r\n\r\n{",
            )
            .expect("head");
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut fifth = TcpStream::connect(&addr).expect("connect");
    let _ = fifth.write_all(b"GET /now HTTP/1.1\r\nHost: t\r\n\r\n");
    let refused = closed_by_server(&mut fifth, Duration::from_secs(1)).expect("not refused");
    let text = String::from_utf8_lossy(&refused);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("too many connections"), "{text}");
    // Their body deadline ends them, and the server answers again.
    ok_within(&addr, "/now", Duration::from_secs(2) + SLACK);
    drop(in_requests);
}

/// `count` connections from the loopback address `from` (127.0.0.2, …), each in a request
/// whose body never comes.
fn requests_in_flight_from(from: &str, addr: &str, count: usize) -> Vec<TcpStream> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    (0..count)
        .map(|_| {
            let s = rt.block_on(async {
                let socket = tokio::net::TcpSocket::new_v4().expect("socket");
                socket
                    .bind(format!("{from}:0").parse().expect("from"))
                    .expect("bind");
                socket
                    .connect(addr.parse().expect("addr"))
                    .await
                    .expect("connect")
            });
            let mut s = s.into_std().expect("std");
            s.set_nonblocking(false).expect("blocking");
            // A refused connection may be closed already: its write can fail.
            let _ = s.write_all(
                b"POST /provider/list HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
                  Content-Length: 100\r\n\r\n{",
            );
            s
        })
        .collect()
}

#[test]
fn a_flood_from_one_address_leaves_another_client_answered() {
    let serve = |extra: &[&str]| {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut args = vec!["sim", "serve", "--listen", &addr, "--max-connections", "4"];
        args.extend_from_slice(extra);
        let reaper = Reaper(vec![tern_limited(None, &args)]);
        wait_for(&addr);
        (reaper, addr)
    };
    // By default one address holds at most half the cap: four requests in flight from
    // 127.0.0.2 hold two slots, and 127.0.0.1 is answered at once.
    let (_reaper, addr) = serve(&[]);
    let flood = requests_in_flight_from("127.0.0.2", &addr, 4);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get_status(&addr, "/now"), Some(200));
    drop(flood);

    // With the whole cap allowed to one address (as behind a proxy), the same flood takes
    // every slot and the other client is refused with the 503.
    let (_reaper, addr) = serve(&["--max-connections-per-address", "4"]);
    let flood = requests_in_flight_from("127.0.0.2", &addr, 4);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get_status(&addr, "/now"), Some(503));
    drop(flood);
}
