//! A TLS server on 127.0.0.1 that answers nothing useful and records everything that reaches
//! it: each connection as it is accepted (before any handshake, so a client that only opens a
//! socket, or speaks plain HTTP to a proxy, is seen too), then the head of its request if it
//! completes a handshake. For a scenario that must prove a client never called an address
//! (a member's kubeconfig that baton refuses).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::webhook_support::TestTls;

/// What reached the server, in order: `connection from …`, then each request's head.
pub struct RecordingTlsServer {
    pub address: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    stopped: Arc<AtomicBool>,
}

impl RecordingTlsServer {
    /// Serves `tls`'s certificate (for 127.0.0.1) on a free port.
    pub fn start(tls: &TestTls) -> anyhow::Result<Self> {
        let certs = CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .context("the serving certificate")?;
        let key = PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes()).context("its key")?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(AtomicBool::new(false));
        let (record, stop) = (seen.clone(), stopped.clone());
        std::thread::Builder::new()
            .name("recording-tls".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let peer = stream
                        .peer_addr()
                        .map_or_else(|_| "?".to_owned(), |peer| peer.to_string());
                    note(&record, format!("connection from {peer}"));
                    let (config, record) = (config.clone(), record.clone());
                    std::thread::spawn(move || {
                        if let Some(head) = request_head(config, stream) {
                            note(&record, head);
                        }
                    });
                }
            })?;
        Ok(Self {
            address,
            seen,
            stopped,
        })
    }

    /// `https://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// Everything that reached it so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl Drop for RecordingTlsServer {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees it is stopped.
        let _ = TcpStream::connect_timeout(&self.address, Duration::from_secs(1));
    }
}

fn note(seen: &Mutex<Vec<String>>, what: String) {
    seen.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(what);
}

/// The request line and headers of the one request the client sends, after a handshake; then
/// answers 503 and closes.
fn request_head(config: Arc<rustls::ServerConfig>, stream: TcpStream) -> Option<String> {
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let connection = rustls::ServerConnection::new(config).ok()?;
    let mut tls = rustls::StreamOwned::new(connection, stream);
    let mut reader = BufReader::new(&mut tls);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 || line.trim().is_empty() {
            break;
        }
        head.push_str(&line);
    }
    let _ = tls.write_all(
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    );
    (!head.is_empty()).then_some(head)
}
