//! A bound actix server that serves until a shutdown token is cancelled: the ops server and
//! the webhook server differ only in how they are built.
//!
//! A server behind a load balancer (a Service's endpoints, or a proxy health-checking `/ready`)
//! leaves in an order that fails no request ([`leave`]): it first reports not ready and keeps
//! serving while the load balancer takes it out, every answer asking its client to close the
//! connection ([`Draining`]), because established keep-alive connections would otherwise keep
//! bringing requests here; only then does it stop accepting, close idle connections and let
//! in-flight requests finish. Stopping at once instead fails the requests that still arrive on
//! connections the client believes open (the API server reports "failed calling webhook … EOF").

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::ConnectionType;
use actix_web::middleware::Next;
use tokio_util::sync::CancellationToken;

use crate::ops_server::Readiness;

/// A bound, not yet running, HTTP server.
pub struct BoundServer {
    server: actix_web::dev::Server,
    local_addr: SocketAddr,
}

impl std::fmt::Debug for BoundServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundServer")
            .field("local_addr", &self.local_addr)
            .finish()
    }
}

impl BoundServer {
    /// `local_addr` is where `server` listens: the real port when it was bound to port 0.
    pub fn new(server: actix_web::dev::Server, local_addr: SocketAddr) -> Self {
        Self { server, local_addr }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` is cancelled, then stops gracefully: the listener closes, idle
    /// HTTP/1.1 keep-alive connections are closed, and in-flight requests finish (their
    /// answers closing the connection) within the server's shutdown timeout.
    pub async fn run(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let handle = self.server.handle();
        let stopper = tokio::spawn(async move {
            shutdown.cancelled().await;
            handle.stop(true).await;
        });
        let result = self.server.await;
        stopper.abort();
        result
    }
}

/// Whether the server is leaving. Shared between [`leave`] and
/// [`close_connections_when_draining`], which finds it in the app data.
#[derive(Debug, Clone, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    pub fn start(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_draining(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Middleware (`App::new().app_data(draining).wrap(from_fn(close_connections_when_draining))`):
/// once draining, every answer carries `Connection: close`, so the client opens its next
/// connection through the load balancer, which no longer picks this server. Closing after an
/// answer races with nothing: an HTTP/1.1 client sends no further request on a connection whose
/// answer said close (closing an idle connection can race with a request being sent on it).
pub async fn close_connections_when_draining(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let draining = request.app_data::<Draining>().cloned();
    let mut response = next.call(request).await?;
    // Judged after the handler: a request that began before draining may end during it.
    if draining.is_some_and(|draining| draining.is_draining()) {
        response
            .response_mut()
            .head_mut()
            .set_connection_type(ConnectionType::Close);
    }
    Ok(response)
}

/// The shutdown order of a server behind a load balancer: not ready and draining at once, then
/// serving on until `endpoints_dropped` resolves (the configured delay: long enough for the
/// load balancer's health check or the Service's endpoints to drop this replica), then `stop`
/// is cancelled, which ends [`BoundServer::run`] gracefully.
pub async fn leave(
    readiness: &Readiness,
    draining: &Draining,
    endpoints_dropped: impl Future<Output = ()>,
    stop: &CancellationToken,
) {
    // Draining first: whoever sets readiness concurrently can check it afterwards.
    draining.start();
    readiness.set(false);
    endpoints_dropped.await;
    stop.cancel();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use actix_web::middleware::from_fn;
    use actix_web::{App, HttpResponse, HttpServer, web};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::{Notify, oneshot};

    use super::*;

    /// Where `/slow` tells it has begun and waits to be let go.
    #[derive(Default)]
    struct Gate {
        entered: Notify,
        release: Notify,
    }

    /// A plain-HTTP server as the webhook builds its own: `/` answers at once, `/slow` when
    /// the gate is released.
    fn serve(draining: Draining, gate: Arc<Gate>) -> BoundServer {
        let server = HttpServer::new(move || {
            let gate = gate.clone();
            App::new()
                .app_data(draining.clone())
                .wrap(from_fn(close_connections_when_draining))
                .route(
                    "/",
                    web::get().to(|| async { HttpResponse::Ok().body("ok") }),
                )
                .route(
                    "/slow",
                    web::get().to(move || {
                        let gate = gate.clone();
                        async move {
                            gate.entered.notify_one();
                            gate.release.notified().await;
                            HttpResponse::Ok().body("slow")
                        }
                    }),
                )
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(30)
        .bind("127.0.0.1:0")
        .unwrap();
        let local_addr = server.addrs()[0];
        BoundServer::new(server.run(), local_addr)
    }

    /// One HTTP/1.1 request on `stream`, kept alive unless the server says otherwise; returns
    /// the head of the answer.
    async fn get(stream: &mut TcpStream, path: &str) -> String {
        let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let mut buffer = [0; 1024];
        while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
            let read = stream.read(&mut buffer).await.unwrap();
            assert_ne!(read, 0, "connection closed before an answer");
            answer.extend_from_slice(&buffer[..read]);
        }
        String::from_utf8_lossy(&answer).to_lowercase()
    }

    /// Whether the server closed `stream` (reads until end of stream, within a deadline).
    async fn closed_by_server(stream: &mut TcpStream) -> bool {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest))
            .await
            .is_ok_and(|read| read.is_ok())
    }

    #[tokio::test]
    async fn leaving_turns_unready_serves_on_closing_each_connection_then_stops_and_drains() {
        // Given a ready server, a connection left idle after one keep-alive answer and a
        // request in flight
        let (readiness, draining, gate) = (
            Readiness::default(),
            Draining::default(),
            Arc::new(Gate::default()),
        );
        readiness.set(true);
        let server = serve(draining.clone(), gate.clone());
        let address = server.local_addr();
        let stop = CancellationToken::new();
        let running = tokio::spawn(server.run(stop.clone()));
        let mut idle = TcpStream::connect(address).await.unwrap();
        let answer = get(&mut idle, "/").await;
        assert!(!answer.contains("connection: close"), "{answer}");
        let mut in_flight = TcpStream::connect(address).await.unwrap();
        in_flight
            .write_all(b"GET /slow HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        gate.entered.notified().await;

        // When it leaves, with the load balancer's delay under the test's control
        let (endpoints_dropped, delay_over) = oneshot::channel::<()>();
        let delay = async {
            let _ = delay_over.await;
        };
        let observe = async {
            // Then it is not ready at once
            assert!(!readiness.is_ready());
            // And during the delay new connections are still answered, each told to close
            let mut during = TcpStream::connect(address).await.unwrap();
            let answer = get(&mut during, "/").await;
            assert!(answer.starts_with("http/1.1 200"), "{answer}");
            assert!(answer.contains("connection: close"), "{answer}");
            assert!(closed_by_server(&mut during).await);
            assert!(!running.is_finished(), "still serving during the delay");

            // When the delay is over
            endpoints_dropped.send(()).unwrap();
            // Then the idle keep-alive connection is closed
            assert!(closed_by_server(&mut idle).await, "idle connection closed");
            // And the listener is closed while the request in flight is still served
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while TcpStream::connect(address).await.is_ok() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the listener stays open"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(!running.is_finished(), "waits for the request in flight");
            gate.release.notify_one();
            let mut answer = String::new();
            in_flight.read_to_string(&mut answer).await.unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(
                answer.to_lowercase().contains("connection: close"),
                "{answer}"
            );
            assert!(answer.ends_with("slow"), "{answer}");
        };
        // (`leave` is polled first: it turns unready before its first await.)
        tokio::join!(leave(&readiness, &draining, delay, &stop), observe);

        // And the server ends
        tokio::time::timeout(Duration::from_secs(30), running)
            .await
            .expect("the server ends once the request in flight is answered")
            .unwrap()
            .unwrap();
    }
}
