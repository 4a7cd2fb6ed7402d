//! The serving certificate, read from files and swapped without a restart when they change.
//!
//! kubelet updates a mounted Secret by swapping a symlink, which inotify on the file misses,
//! so the files are polled and compared byte for byte. A new pair that does not load (half
//! written, key not matching) keeps the last good certificate and logs an error.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

/// Why a certificate could not be loaded; names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("reading {path}: {error}")]
    Read {
        path: PathBuf,
        /// In the message already, so not also a `source` (chains would print it twice).
        error: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} is not a PEM certificate chain: {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("{path} is not a PEM private key: {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("{path} holds no CA certificate the client verifier can use: {reason}")]
    BadClientCa { path: PathBuf, reason: String },
    #[error("the private key {key} does not match the certificate {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

/// The certificate and key files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What was read from the files: their bytes (to notice changes) and, if they load, the key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileBytes {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl CertFiles {
    fn read(&self) -> Result<FileBytes, CertError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|error| CertError::Read {
                path: path.to_owned(),
                error,
            })
        };
        Ok(FileBytes {
            cert: read(&self.cert)?,
            key: read(&self.key)?,
        })
    }

    fn certified_key(
        &self,
        bytes: &FileBytes,
        provider: &CryptoProvider,
    ) -> Result<CertifiedKey, CertError> {
        let chain = CertificateDer::pem_slice_iter(&bytes.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| CertError::BadCertificate {
                path: self.cert.clone(),
                reason: error.to_string(),
            })?;
        if chain.is_empty() {
            return Err(CertError::NoCertificate {
                path: self.cert.clone(),
            });
        }
        let key = PrivateKeyDer::from_pem_slice(&bytes.key).map_err(|error| CertError::BadKey {
            path: self.key.clone(),
            reason: error.to_string(),
        })?;
        CertifiedKey::from_der(chain, key, provider).map_err(|error| CertError::Mismatch {
            cert: self.cert.clone(),
            key: self.key.clone(),
            reason: error.to_string(),
        })
    }
}

/// Serves whatever certificate is current; [`ReloadingCert::reload`] replaces it.
#[derive(Debug)]
pub struct ReloadingCert {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// Bytes last looked at (good or bad), so a bad file is reported once, not every poll.
    seen: RwLock<FileBytes>,
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    Replaced,
}

impl ReloadingCert {
    /// Loads the files; an error names the file at fault (startup must fail on it).
    pub fn load(files: CertFiles) -> Result<Self, CertError> {
        let provider = CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let bytes = files.read()?;
        let key = files.certified_key(&bytes, &provider)?;
        Ok(Self {
            files,
            provider,
            current: RwLock::new(Arc::new(key)),
            seen: RwLock::new(bytes),
        })
    }

    /// The certificate now served.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the files and swaps the certificate when they changed and load.
    pub fn reload(&self) -> Result<Reload, CertError> {
        let bytes = self.files.read()?;
        if *self.seen.read().unwrap_or_else(PoisonError::into_inner) == bytes {
            return Ok(Reload::Unchanged);
        }
        let loaded = self.files.certified_key(&bytes, &self.provider);
        *self.seen.write().unwrap_or_else(PoisonError::into_inner) = bytes;
        let key = loaded?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
        Ok(Reload::Replaced)
    }

    /// Polls the files every `interval` until `shutdown`.
    pub async fn watch(self: Arc<Self>, interval: Duration, shutdown: CancellationToken) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match self.reload() {
                Ok(Reload::Unchanged) => {}
                Ok(Reload::Replaced) => {
                    tracing::info!(cert = %self.files.cert.display(), "serving certificate reloaded")
                }
                Err(error) => {
                    tracing::error!(%error, "the certificate files changed but cannot be used; still serving the previous certificate")
                }
            }
        }
    }

    /// A TLS 1.2+ server configuration serving this certificate, to every client or (with
    /// `clients`) only to those presenting a certificate that verifier accepts.
    pub fn server_config(self: &Arc<Self>, clients: Option<ClientCa>) -> rustls::ServerConfig {
        let builder = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring supports TLS 1.2 and 1.3");
        match clients {
            Some(clients) => builder.with_client_cert_verifier(clients.0),
            None => builder.with_no_client_auth(),
        }
        .with_cert_resolver(self.clone())
    }
}

/// The CA whose certificates alone may connect: the API server authenticating itself to the
/// webhook, so that a review reaching a handler came from it (a forged one from anywhere else
/// on the network fails the handshake, before any side effect can be asked for).
#[derive(Clone)]
pub struct ClientCa(Arc<dyn rustls::server::danger::ClientCertVerifier>);

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientCa")
    }
}

impl ClientCa {
    /// Reads the PEM CA certificates of `path`; an error names the file. Read once: a new CA
    /// takes a restart (it changes with the API server's configuration, which restarts too).
    pub fn load(path: &Path) -> Result<Self, CertError> {
        let bytes = std::fs::read(path).map_err(|error| CertError::Read {
            path: path.to_owned(),
            error,
        })?;
        let bad = |reason: String| CertError::BadClientCa {
            path: path.to_owned(),
            reason,
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&bytes) {
            let cert = cert.map_err(|error| bad(error.to_string()))?;
            roots.add(cert).map_err(|error| bad(error.to_string()))?;
        }
        if roots.is_empty() {
            return Err(CertError::NoCertificate {
                path: path.to_owned(),
            });
        }
        let provider = CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| bad(error.to_string()))?;
        Ok(Self(verifier))
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(name: &str) -> (String, String) {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        (cert.pem(), signing_key.serialize_pem())
    }

    fn files(dir: &Path) -> CertFiles {
        CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }

    fn write(dir: &Path, cert: &str, key: &str) {
        std::fs::write(dir.join("tls.crt"), cert).unwrap();
        std::fs::write(dir.join("tls.key"), key).unwrap();
    }

    #[test]
    fn startup_errors_name_the_file() {
        baton_shared::crypto::install_default_provider();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = issue("a");
        let (_, other_key) = issue("b");
        let cases: Vec<(Option<(&str, &str)>, &str)> = vec![
            (None, "tls.crt"),
            (
                Some(("garbage", key.as_str())),
                "tls.crt holds no PEM certificate",
            ),
            (
                Some((cert.as_str(), "garbage")),
                "tls.key is not a PEM private key",
            ),
            (
                Some((key.as_str(), key.as_str())),
                "tls.crt holds no PEM certificate",
            ),
            (
                Some((cert.as_str(), other_key.as_str())),
                "does not match the certificate",
            ),
        ];
        for (contents, expected) in cases {
            let _ = std::fs::remove_file(dir.path().join("tls.crt"));
            if let Some((cert, key)) = contents {
                write(dir.path(), cert, key);
            }
            let error = ReloadingCert::load(files(dir.path()))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(expected),
                "{error:?} should contain {expected:?}"
            );
        }
    }

    #[test]
    fn reload_swaps_good_files_and_keeps_the_last_good_one() {
        baton_shared::crypto::install_default_provider();
        let dir = tempfile::tempdir().unwrap();
        let (cert_a, key_a) = issue("a");
        write(dir.path(), &cert_a, &key_a);
        let reloading = ReloadingCert::load(files(dir.path())).unwrap();
        let first = reloading.current();
        assert_eq!(reloading.reload().unwrap(), Reload::Unchanged);

        let (cert_b, key_b) = issue("b");
        write(dir.path(), &cert_b, &key_b);
        assert_eq!(reloading.reload().unwrap(), Reload::Replaced);
        let second = reloading.current();
        assert_ne!(first.cert, second.cert);

        // Half-written: new certificate, old key.
        let (cert_c, _) = issue("c");
        write(dir.path(), &cert_c, &key_b);
        assert!(
            reloading
                .reload()
                .unwrap_err()
                .to_string()
                .contains("does not match")
        );
        assert_eq!(
            reloading.current().cert,
            second.cert,
            "the last good certificate stays"
        );
        assert_eq!(
            reloading.reload().unwrap(),
            Reload::Unchanged,
            "a bad file is reported once"
        );

        // Files gone: an error, still serving.
        std::fs::remove_file(dir.path().join("tls.key")).unwrap();
        assert!(
            reloading
                .reload()
                .unwrap_err()
                .to_string()
                .contains("tls.key")
        );
        assert_eq!(reloading.current().cert, second.cert);
    }

    #[test]
    fn a_client_ca_file_that_cannot_be_used_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.crt");
        let error = ClientCa::load(&missing).unwrap_err().to_string();
        assert!(error.contains("missing.crt"), "{error}");
        let not_pem = dir.path().join("not-pem.crt");
        std::fs::write(&not_pem, "not a certificate").unwrap();
        let error = ClientCa::load(&not_pem).unwrap_err().to_string();
        assert!(error.contains("not-pem.crt"), "{error}");
    }
}
