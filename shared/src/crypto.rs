//! The one rustls crypto provider of the workspace.

/// Installs ring as the process-wide rustls provider. Call it first thing in `main`: with no
/// provider installed, the first TLS connection panics.
pub fn install_default_provider() {
    // A second call (tests calling it from several places) finds it installed: that is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    #[test]
    fn installing_twice_keeps_ring() {
        super::install_default_provider();
        super::install_default_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
