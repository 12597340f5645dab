//! A TCP proxy between a client and a Redis server that misbehaves on demand: it delays
//! replies, swallows a reply after letting its command through, cuts a connection halfway
//! through a reply, and resets every connection.
//!
//! Faults act on what the server sends back, since that is where a client loses track of
//! whether its command ran.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What to do with the next reply bytes from the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplyFault {
    None,
    /// Drop the reply and close the connection: the command ran, the client never hears.
    Swallow,
    /// Send half of the reply, then close the connection.
    CutHalfway,
}

#[derive(Debug)]
struct State {
    delay: Duration,
    fault: ReplyFault,
    /// Incremented to close every live connection.
    resets: u64,
}

/// A running proxy; stops accepting when dropped (live connections end with it).
pub struct Proxy {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
    resets: watch::Sender<u64>,
    faults_done: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port, forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            delay: Duration::ZERO,
            fault: ReplyFault::None,
            resets: 0,
        }));
        let (resets, _) = watch::channel(0);
        let faults_done = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream,
            Arc::clone(&state),
            resets.clone(),
            Arc::clone(&faults_done),
        ));
        Ok(Self {
            address,
            state,
            resets,
            faults_done,
            accept,
        })
    }

    /// Where clients connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// A `redis://` URL for the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.address)
    }

    /// Holds every reply from the server back by `delay` (zero for none).
    pub fn delay_replies(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// The next reply is dropped and its connection closed, after its command ran.
    pub fn swallow_next_reply(&self) {
        self.lock().fault = ReplyFault::Swallow;
    }

    /// The next reply is cut off halfway and its connection closed.
    pub fn cut_next_reply_halfway(&self) {
        self.lock().fault = ReplyFault::CutHalfway;
    }

    /// How many one-shot faults (swallow, cut) have struck so far.
    pub fn faults_done(&self) -> u64 {
        self.faults_done.load(Ordering::SeqCst)
    }

    /// Waits until the one-shot faults struck so far reach `done`, at most 10 s; returns
    /// when they did.
    pub async fn struck(&self, done: u64) -> std::time::Instant {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.faults_done() < done {
            assert!(
                std::time::Instant::now() < deadline,
                "the proxy's fault never struck"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        std::time::Instant::now()
    }

    /// Closes every live connection at once; new ones are accepted as before.
    pub fn reset_connections(&self) {
        let next = {
            let mut state = self.lock();
            state.resets += 1;
            state.resets
        };
        self.resets.send_replace(next);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset_connections();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    state: Arc<Mutex<State>>,
    resets: watch::Sender<u64>,
    faults_done: Arc<AtomicU64>,
) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(upstream).await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        tokio::spawn(relay(
            client,
            server,
            Arc::clone(&state),
            resets.subscribe(),
            Arc::clone(&faults_done),
        ));
    }
}

/// Pumps bytes both ways until either side closes, a fault ends the connection, or a reset.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    state: Arc<Mutex<State>>,
    mut resets: watch::Receiver<u64>,
    faults_done: Arc<AtomicU64>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let commands = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let replies = async {
        let mut buf = vec![0u8; 64 * 1024];
        // Replies read but not yet due, in order: each is held back from when it was read, so
        // that a stream of replies is delayed, not spaced out by the delay.
        let mut held: VecDeque<(Instant, Vec<u8>, ReplyFault)> = VecDeque::new();
        let mut open = true;
        loop {
            let due = held.front().map(|(due, _, _)| *due);
            tokio::select! {
                read = server_read.read(&mut buf), if open => match read {
                    Ok(0) | Err(_) => open = false,
                    Ok(n) => {
                        let (delay, fault) = {
                            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
                            let fault = std::mem::replace(&mut s.fault, ReplyFault::None);
                            (s.delay, fault)
                        };
                        held.push_back((Instant::now() + delay, buf[..n].to_vec(), fault));
                    }
                },
                () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    let Some((_, bytes, fault)) = held.pop_front() else {
                        continue;
                    };
                    match fault {
                        ReplyFault::None => {
                            if client_write.write_all(&bytes).await.is_err() {
                                return;
                            }
                        }
                        ReplyFault::Swallow => {
                            faults_done.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        ReplyFault::CutHalfway => {
                            let _ = client_write.write_all(&bytes[..bytes.len().div_ceil(2)]).await;
                            faults_done.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            }
            if !open && held.is_empty() {
                return;
            }
        }
    };
    let reset = async {
        let _ = resets.changed().await;
    };
    // Whichever ends first ends the connection: both halves are dropped, which closes them.
    tokio::select! {
        () = commands => {}
        () = replies => {}
        () = reset => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that answers every line with the same line.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = socket.read(&mut buf).await {
                        if n == 0 || socket.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        address
    }

    async fn roundtrip(stream: &mut TcpStream, message: &[u8]) -> Vec<u8> {
        stream.write_all(message).await.unwrap();
        let mut buf = vec![0u8; message.len()];
        let mut got = 0;
        while got < buf.len() {
            match stream.read(&mut buf[got..]).await.unwrap() {
                0 => break,
                n => got += n,
            }
        }
        buf.truncate(got);
        buf
    }

    #[tokio::test]
    async fn passes_bytes_through_until_told_otherwise() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(roundtrip(&mut stream, b"ping").await, b"ping");
    }

    #[tokio::test]
    async fn swallows_a_reply_and_closes_the_connection() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        proxy.swallow_next_reply();
        assert_eq!(roundtrip(&mut stream, b"lost").await, b"");
        assert_eq!(proxy.faults_done(), 1);
        let mut again = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(roundtrip(&mut again, b"next").await, b"next");
    }

    #[tokio::test]
    async fn cuts_a_reply_halfway() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        proxy.cut_next_reply_halfway();
        assert_eq!(roundtrip(&mut stream, b"abcdef").await, b"abc");
    }

    #[tokio::test]
    async fn resets_live_connections() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(roundtrip(&mut stream, b"one").await, b"one");
        proxy.reset_connections();
        let _ = stream.write_all(b"two").await;
        let mut buf = [0u8; 8];
        let n = stream.read(&mut buf).await.unwrap_or(0);
        assert_eq!(n, 0, "the connection should be closed");
    }

    #[tokio::test]
    async fn delays_replies() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        proxy.delay_replies(Duration::from_millis(30));
        let started = std::time::Instant::now();
        assert_eq!(roundtrip(&mut stream, b"slow").await, b"slow");
        assert!(started.elapsed() >= Duration::from_millis(30));
    }

    #[tokio::test]
    async fn delays_a_stream_of_replies_without_spacing_them_out() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        proxy.delay_replies(Duration::from_millis(100));
        let started = std::time::Instant::now();
        for word in [b"a", b"b", b"c"] {
            stream.write_all(word).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut buf = [0u8; 3];
        stream.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"abc");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(140), "{took:?}");
        assert!(took < Duration::from_millis(250), "{took:?}");
    }
}
