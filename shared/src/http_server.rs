//! A bound actix server that serves until a shutdown token is cancelled: the ops server and
//! the webhook server differ only in how they are built.

use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;

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

    /// Serves until `shutdown` is cancelled, then stops accepting and lets in-flight requests
    /// finish within the server's shutdown timeout.
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
