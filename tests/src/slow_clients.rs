//! Clients that reach a webhook replica's port and send slowly, as any pod of the cluster
//! could: each connection completes its TLS handshake, sends the head of a review announcing a
//! large body, and then nothing. A connection the server answers or closes is opened again at
//! once, so that as many stall at any time as were asked for, until the clients are dropped.
//!
//! They connect from a loopback address of their own (`from`), so that the webhook tells them
//! apart from the API server, which calls it from 127.0.0.1, as it would tell a pod's address
//! from the API server's.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::{self, RootCertStore};
use tokio_util::sync::CancellationToken;

/// The running clients; they stop when dropped.
pub struct SlowClients {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    /// Request heads sent.
    sent: AtomicUsize,
    /// Requests answered or connections closed by the server.
    cut_off: AtomicUsize,
}

impl SlowClients {
    /// `count` connections from `from` to the replica at `to` (serving a certificate of
    /// `ca_pem` for 127.0.0.1), each POSTing to `path` a head that announces `announced`
    /// bytes of JSON.
    pub fn start(
        ca_pem: &str,
        from: IpAddr,
        to: SocketAddr,
        path: &str,
        announced: usize,
        count: usize,
    ) -> anyhow::Result<Self> {
        baton_shared::crypto::install_default_provider();
        let mut roots = RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
        let connector = TlsConnector::from(Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        ));
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {to}\r\ncontent-type: application/json\r\ncontent-length: {announced}\r\n\r\n"
        );
        let (stop, counts) = (CancellationToken::new(), Arc::new(Counts::default()));
        let tasks = (0..count)
            .map(|_| {
                let (connector, head) = (connector.clone(), head.clone());
                let (stop, counts) = (stop.clone(), counts.clone());
                tokio::spawn(async move {
                    while !stop.is_cancelled() {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            stalled = stall(&connector, from, to, &head, &counts) => {
                                if stalled.is_err() {
                                    // Refused or reset: try again, without spinning.
                                    tokio::time::sleep(Duration::from_millis(50)).await;
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        Ok(Self {
            stop,
            tasks,
            counts,
        })
    }

    /// Request heads sent so far.
    pub fn sent(&self) -> usize {
        self.counts.sent.load(Ordering::SeqCst)
    }

    /// Requests the server answered, or whose connection it closed, so far.
    pub fn cut_off(&self) -> usize {
        self.counts.cut_off.load(Ordering::SeqCst)
    }
}

impl Drop for SlowClients {
    fn drop(&mut self) {
        self.stop.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One connection: handshake, head, then nothing until the server answers or closes it.
async fn stall(
    connector: &TlsConnector,
    from: IpAddr,
    to: SocketAddr,
    head: &str,
    counts: &Counts,
) -> std::io::Result<()> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let tcp = socket.connect(to).await?;
    let name = ServerName::IpAddress(to.ip().into());
    let mut tls = connector.connect(name, tcp).await?;
    tls.write_all(head.as_bytes()).await?;
    tls.flush().await?;
    counts.sent.fetch_add(1, Ordering::SeqCst);
    let mut answer = [0_u8; 512];
    let read = tls.read(&mut answer).await;
    counts.cut_off.fetch_add(1, Ordering::SeqCst);
    read.map(|_| ())
}
