//! The accept loop both servers share, and what bounds a connection: a cap on how many are
//! open at once (at the cap, the oldest connection not in the middle of a request is closed to
//! make room; only when every one is, the newcomer gets a fixed 503 and is closed before
//! anything is read from it), deadlines on the TLS handshake and request headers (the same
//! deadline bounds a kept-alive connection's idle time), on a request's body and on a response
//! the client stops taking, and accept errors (out of file descriptors above all) waited out
//! instead of ending the server or spinning.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// Bounds on the connections a server keeps: see the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once: one more closes the oldest that is not in a request, or is
    /// refused at once when all are.
    pub max_connections: usize,
    /// Connections open at once from one client address, under the same rule among its own
    /// connections, so one client cannot take every slot (behind a proxy every client has the
    /// proxy's address: raise it to `max_connections` there).
    pub max_per_address: usize,
    /// The TLS handshake must finish within this long of the connection opening, and each
    /// request's headers must arrive within this long of the connection (or handshake) or of
    /// the previous response (so it is also the idle keep-alive).
    pub header_timeout: Duration,
    /// A request's body must have arrived this long after its headers, and a response the
    /// client takes nothing of for this long is abandoned (the connection closed).
    pub body_timeout: Duration,
}

/// The default `header_timeout`.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default `body_timeout`.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// The most connections the default cap allows, whatever the open-files limit.
pub const MAX_CONNECTIONS_CEILING: usize = 8192;

impl Default for ConnectionLimits {
    fn default() -> Self {
        let max_connections = default_max_connections();
        ConnectionLimits {
            max_connections,
            max_per_address: default_per_address(max_connections),
            header_timeout: HEADER_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
        }
    }
}

/// Half the process's soft open-files limit (`ulimit -n`; 512 under the common 1,024), at
/// least 16 and at most [`MAX_CONNECTIONS_CEILING`]: the other half stays for the store,
/// the clients to the cloud and the listener, so clients cannot take the last descriptors.
pub fn default_max_connections() -> usize {
    let soft = open_files_limit().unwrap_or(u64::MAX);
    usize::try_from(soft / 2)
        .unwrap_or(usize::MAX)
        .clamp(16, MAX_CONNECTIONS_CEILING)
}

/// Half the cap (at least one): a flood from one address leaves the other half to the rest.
pub fn default_per_address(max_connections: usize) -> usize {
    (max_connections / 2).max(1)
}

/// The soft open-files limit (`RLIMIT_NOFILE`); `None` when unlimited.
pub fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// The whole answer to a connection over the cap, sent without reading its request.
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
content-length: 52\r\n\
retry-after: 1\r\n\
connection: close\r\n\
\r\n\
{\"error\": \"too many connections; try again shortly\"}";

/// Serve `router` on `listener` (in TLS when `tls` is given) within `limits`; returns only if
/// the runtime stops it.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    limits: ConnectionLimits,
) -> io::Result<()> {
    let open = Arc::new(Open::new(limits.max_connections, limits.max_per_address));
    let tls = tls.map(TlsAcceptor::from);
    let mut backoff = AcceptBackoff::default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => {
                backoff.succeeded();
                accepted
            }
            Err(e) => {
                if let Some(pause) = backoff.failed(&e) {
                    tokio::time::sleep(pause).await;
                }
                continue;
            }
        };
        let Some(slot) = open.admit(peer.ip()) else {
            tracing::debug!(
                "refusing {peer}: at the cap of {} connections ({} from one address), each in a \
                 request",
                limits.max_connections,
                limits.max_per_address
            );
            refuse(stream, tls.is_none());
            continue;
        };
        tokio::spawn(connection(
            stream,
            slot,
            tls.clone(),
            router.clone(),
            limits,
        ));
    }
}

/// The open connections, oldest first: the cap counts them, and at the cap the oldest idle
/// one makes room.
#[derive(Debug)]
struct Open {
    most: usize,
    most_per_address: usize,
    table: Mutex<OpenTable>,
}

#[derive(Debug, Default)]
struct OpenTable {
    next: u64,
    conns: BTreeMap<u64, Arc<Conn>>,
    /// Open connections by client address.
    per_address: HashMap<IpAddr, usize>,
}

impl OpenTable {
    /// The oldest connection in no request (of `from` only, when given), told to close and
    /// taken off the table; `None` when every such one is in a request.
    fn shed_oldest_idle(&mut self, from: Option<IpAddr>) -> Option<()> {
        let id = self
            .conns
            .iter()
            .find(|(_, c)| from.is_none_or(|a| c.addr == a) && c.busy.load(Ordering::Acquire) == 0)
            .map(|(id, _)| *id)?;
        let victim = self.conns.remove(&id)?;
        self.left(victim.addr);
        victim.shed.notify_one();
        Some(())
    }

    fn left(&mut self, addr: IpAddr) {
        if let Some(n) = self.per_address.get_mut(&addr) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&addr);
            }
        }
    }
}

/// One open connection as the cap sees it.
#[derive(Debug)]
struct Conn {
    /// The client's address.
    addr: IpAddr,
    /// Requests of it being answered now.
    busy: AtomicUsize,
    /// Told to close, to make room.
    shed: Notify,
}

/// A connection's place in [`Open`], given up when dropped.
#[derive(Debug)]
struct Slot {
    open: Arc<Open>,
    id: u64,
    conn: Arc<Conn>,
}

impl Open {
    fn new(most: usize, most_per_address: usize) -> Self {
        Open {
            most: most.max(1),
            most_per_address: most_per_address.clamp(1, most.max(1)),
            table: Mutex::new(OpenTable::default()),
        }
    }

    /// A place for a new connection from `addr`: free, or taken from the oldest connection
    /// that is in no request (still in its handshake or headers, or idle between requests),
    /// which is told to close: first among `addr`'s own when it is at its address's cap, then
    /// among all at the cap; `None` when every candidate is in a request.
    fn admit(self: &Arc<Self>, addr: IpAddr) -> Option<Slot> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if table.per_address.get(&addr).copied().unwrap_or(0) >= self.most_per_address {
            table.shed_oldest_idle(Some(addr))?;
        }
        if table.conns.len() >= self.most {
            table.shed_oldest_idle(None)?;
        }
        let id = table.next;
        table.next += 1;
        let conn = Arc::new(Conn {
            addr,
            busy: AtomicUsize::new(0),
            shed: Notify::new(),
        });
        table.conns.insert(id, conn.clone());
        *table.per_address.entry(addr).or_default() += 1;
        Some(Slot {
            open: self.clone(),
            id,
            conn,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.open.table.lock().unwrap_or_else(|p| p.into_inner());
        if table.conns.remove(&self.id).is_some() {
            table.left(self.conn.addr);
        }
    }
}

/// Marks its connection busy while a request is answered.
struct Busy(Arc<Conn>);

impl Busy {
    fn new(conn: &Arc<Conn>) -> Self {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Busy(conn.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection over the cap: the fixed 503 if the socket takes it at once (plain HTTP only:
/// TLS would need a handshake), then closed; never waits and never reads.
fn refuse(stream: TcpStream, plain: bool) {
    if plain {
        let _ = stream.try_write(REFUSED);
    }
}

/// One connection, holding `slot` until it closes or is told to make room.
async fn connection(
    stream: TcpStream,
    slot: Slot,
    tls: Option<TlsAcceptor>,
    router: Router,
    limits: ConnectionLimits,
) {
    let peer = stream.peer_addr().ok();
    let conn = slot.conn.clone();
    let served = async {
        match tls {
            None => http(stream, &conn, router, limits).await,
            Some(acceptor) => {
                match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => http(tls, &conn, router, limits).await,
                    Ok(Err(e)) => tracing::debug!("TLS handshake with {peer:?} failed: {e}"),
                    Err(_) => tracing::debug!("TLS handshake with {peer:?} timed out"),
                }
            }
        }
    };
    tokio::select! {
        () = served => {}
        () = slot.conn.shed.notified() => {
            tracing::debug!("closed {peer:?}, idle at the connection cap, to make room");
        }
    }
    drop(slot);
}

/// HTTP/1.1 on `io` until the client or a deadline closes it.
async fn http<I>(io: I, conn: &Arc<Conn>, router: Router, limits: ConnectionLimits)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let body_timeout = limits.body_timeout;
    let conn = conn.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let busy = Busy::new(&conn);
        let deadline = Instant::now() + body_timeout;
        let request = request.map(|body| axum::body::Body::new(BodyDeadline::new(body, deadline)));
        let answer = router.clone().oneshot(request);
        async move {
            let answered = answer.await;
            // Busy until the answer's body is written (or the connection is gone).
            answered.map(|response| response.map(|body| Holding::body(body, busy)))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let io = TokioIo::new(WriteStall::new(io, limits.body_timeout));
    if let Err(e) = builder.serve_connection(io, service).with_upgrades().await {
        tracing::debug!("connection closed: {e}");
    }
}

/// What to do about accept errors: a client that gave up before it was accepted is skipped;
/// anything else (out of file descriptors, of memory, of buffers) is waited out, 5 ms after
/// the first and doubling to 200 ms, so the loop neither ends nor spins, and takes the next
/// connection soon after descriptors free up. Logged once per run of errors.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    failures: u32,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(5);
    const MOST: Duration = Duration::from_millis(200);

    /// The pause before accepting again after `e`; `None` for a client's own failure.
    pub fn failed(&mut self, e: &io::Error) -> Option<Duration> {
        if matches!(
            e.kind(),
            io::ErrorKind::ConnectionAborted
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionRefused
                | io::ErrorKind::Interrupted
        ) {
            return None;
        }
        if self.failures == 0 {
            tracing::warn!(
                "accepting connections: {e}; retrying every {} ms at most until it works",
                Self::MOST.as_millis()
            );
        }
        let pause = Self::FIRST
            .saturating_mul(1 << self.failures.min(16))
            .min(Self::MOST);
        self.failures = self.failures.saturating_add(1);
        Some(pause)
    }

    /// A connection came: the next failure starts a new run.
    pub fn succeeded(&mut self) {
        if self.failures > 0 {
            tracing::warn!(
                "accepting connections again after {} failed tries",
                self.failures
            );
            self.failures = 0;
        }
    }
}

/// An answer's body that keeps its connection marked busy until hyper drops it.
struct Holding {
    body: axum::body::Body,
    _busy: Busy,
}

impl Holding {
    fn body(body: axum::body::Body, busy: Busy) -> axum::body::Body {
        axum::body::Body::new(Holding { body, _busy: busy })
    }
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request body that fails once its deadline has passed, so a handler reading it answers
/// (and the connection, its body unread, closes) instead of waiting on a client that
/// trickles it.
struct BodyDeadline<B> {
    inner: B,
    deadline: Instant,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> BodyDeadline<B> {
    fn new(inner: B, deadline: Instant) -> Self {
        BodyDeadline {
            inner,
            deadline,
            timer: None,
        }
    }
}

/// The error a late body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
pub struct BodyTimedOut;

impl<B> HttpBody for BodyDeadline<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(Some(Err(BodyTimedOut.into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A stream whose writes fail once one has waited `limit` for the client to take anything.
struct WriteStall<I> {
    io: I,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> WriteStall<I> {
    fn new(io: I, limit: Duration) -> Self {
        WriteStall {
            io,
            limit,
            stalled: None,
        }
    }

    /// After a write made no progress: pending, or an error once the stall has lasted.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client took none of the response in time",
        )))
    }

    /// What a write returned, with the stall timer kept or cleared.
    fn track<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteStall<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteStall<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.track(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.track(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.track(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.track(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_whole_answer() {
        let text = std::str::from_utf8(REFUSED).expect("ascii");
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        assert!(head.starts_with("HTTP/1.1 503 "));
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .expect("length")
            .parse()
            .expect("number");
        assert_eq!(length, body.len());
        let json: serde_json::Value = serde_json::from_str(body).expect("json");
        assert!(json["error"].is_string());
    }

    #[test]
    fn accept_errors_back_off_to_a_ceiling_and_start_over() {
        let mut b = AcceptBackoff::default();
        let emfile = io::Error::from_raw_os_error(24);
        let pauses: Vec<_> = (0..10).map(|_| b.failed(&emfile).expect("pause")).collect();
        assert_eq!(pauses[0], AcceptBackoff::FIRST);
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*pauses.last().expect("last"), AcceptBackoff::MOST);
        let aborted = io::Error::from(io::ErrorKind::ConnectionAborted);
        assert_eq!(b.failed(&aborted), None);
        b.succeeded();
        assert_eq!(b.failed(&emfile), Some(AcceptBackoff::FIRST));
    }

    #[tokio::test]
    async fn a_write_nobody_takes_fails_after_the_limit_and_one_taken_goes_through() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limit = Duration::from_millis(150);
        let (near, _far) = tokio::io::duplex(64);
        let mut stalled = WriteStall::new(near, limit);
        let t0 = std::time::Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(5), stalled.write_all(&[7u8; 1024]))
            .await
            .expect("the stall limit ends the write")
            .expect_err("nobody reads the far end");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() >= limit, "{:?}", t0.elapsed());

        // A reader taking a little at a time, each sooner than the limit: never cut off.
        let (near, mut far2) = tokio::io::duplex(64);
        let mut slow = WriteStall::new(near, limit);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while got.len() < 1024 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let n = far2.read(&mut buf).await.expect("read");
                got.extend_from_slice(&buf[..n]);
            }
            got.len()
        });
        slow.write_all(&[7u8; 1024])
            .await
            .expect("a reader that keeps up");
        assert_eq!(reader.await.expect("reader"), 1024);
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room_and_busy_ones_never_do() {
        let open = Arc::new(Open::new(3, 3));
        let slots: Vec<Slot> = (0..3).map(|_| open.admit(HOME).expect("room")).collect();
        // The oldest is in a request: the next oldest, idle, is told to close.
        let busy = Busy::new(&slots[0].conn);
        let fourth = open.admit(HOME).expect("room made");
        let told = |s: &Slot| {
            let notified = s.conn.shed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable()
        };
        assert!(!told(&slots[0]));
        assert!(told(&slots[1]));
        assert!(!told(&slots[2]));
        // Every one left in a request: refused.
        let _busy = [Busy::new(&slots[2].conn), Busy::new(&fourth.conn)];
        assert!(open.admit(HOME).is_none());
        // A request answered frees its connection to make room again.
        drop(busy);
        assert!(open.admit(HOME).is_some());
        // Closed connections give their place back.
        drop(slots);
        drop(fourth);
        let table = open.table.lock().expect("lock");
        assert!(table.conns.len() <= 1);
    }

    const HOME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn one_address_at_its_cap_makes_room_among_its_own_and_never_takes_another_s() {
        let flood = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 9));
        let open = Arc::new(Open::new(4, 2));
        let first: Vec<Slot> = (0..2).map(|_| open.admit(flood).expect("room")).collect();
        let other = open.admit(HOME).expect("room for another address");
        // A third from the flood closes the flood's own oldest idle connection.
        let third = open.admit(flood).expect("room among its own");
        let told = |s: &Slot| {
            let notified = s.conn.shed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable()
        };
        assert!(told(&first[0]) && !told(&first[1]) && !told(&other));
        // Its own all in requests: refused, while another address still gets in.
        let _busy = [Busy::new(&first[1].conn), Busy::new(&third.conn)];
        assert!(open.admit(flood).is_none());
        let _again = open.admit(HOME).expect("the other address is answered");
        let table = open.table.lock().expect("lock");
        assert_eq!(table.per_address.get(&flood), Some(&2));
        assert_eq!(table.per_address.get(&HOME), Some(&2));
    }

    #[tokio::test]
    async fn a_connection_stays_busy_until_its_answer_is_written() {
        let conn = Arc::new(Conn {
            addr: HOME,
            busy: AtomicUsize::new(0),
            shed: Notify::new(),
        });
        let body = Holding::body(axum::body::Body::from("answer"), Busy::new(&conn));
        assert_eq!(conn.busy.load(Ordering::Acquire), 1);
        assert_eq!(body.size_hint().exact(), Some(6));
        let bytes = axum::body::to_bytes(body, 64).await.expect("body");
        assert_eq!(&bytes[..], b"answer");
        assert_eq!(conn.busy.load(Ordering::Acquire), 0);
    }

    #[test]
    fn the_default_cap_leaves_half_the_descriptors() {
        let cap = default_max_connections();
        assert!((16..=MAX_CONNECTIONS_CEILING).contains(&cap));
        if let Some(soft) = open_files_limit() {
            assert!(cap as u64 <= (soft / 2).max(16));
        }
    }
}
