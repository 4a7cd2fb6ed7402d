//! The files TLS is served with, read at start and swapped without a restart when they change:
//! the serving certificate ([`ReloadingCert`]) and the CA of the API server's client
//! certificate ([`ReloadingClientCa`]), both by one mechanism ([`Reloading`]).
//!
//! kubelet updates a mounted Secret or ConfigMap by swapping a symlink, which inotify on the
//! file misses, so the files are polled and compared byte for byte. New files that do not load
//! (half written, key not matching, no CA) keep the last good ones and log an error.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Failures};

/// Files that load into what TLS is served with.
pub trait Files: Send + Sync + 'static {
    /// What the files load into.
    type Loaded: Send + Sync + 'static;
    /// What they are, for the logs.
    const WHAT: &'static str;
    /// The files, read in this order.
    fn paths(&self) -> Vec<&Path>;
    /// Loads the files' bytes (as [`Files::paths`] orders them); an error names the file.
    fn load(
        &self,
        bytes: &[Vec<u8>],
        provider: &Arc<CryptoProvider>,
    ) -> Result<Self::Loaded, Error>;
}

/// The serving certificate's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Files for CertFiles {
    type Loaded = CertifiedKey;
    const WHAT: &'static str = "serving certificate";

    fn paths(&self) -> Vec<&Path> {
        vec![&self.cert, &self.key]
    }

    fn load(
        &self,
        bytes: &[Vec<u8>],
        provider: &Arc<CryptoProvider>,
    ) -> Result<CertifiedKey, Error> {
        let [cert, key] = bytes else {
            unreachable!("paths() names two files")
        };
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| Error::BadCertificate {
                path: self.cert.clone(),
                reason: error.to_string(),
            })?;
        if chain.is_empty() {
            return Err(Error::NoCertificate {
                path: self.cert.clone(),
            });
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|error| Error::BadKey {
            path: self.key.clone(),
            reason: error.to_string(),
        })?;
        CertifiedKey::from_der(chain, key, provider).map_err(|error| Error::KeyMismatch {
            cert: self.cert.clone(),
            key: self.key.clone(),
            reason: error.to_string(),
        })
    }
}

/// The file of PEM CA certificates that sign the API server's client certificate
/// (`webhook.client_ca_file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCaFile(pub PathBuf);

impl Files for ClientCaFile {
    type Loaded = Arc<dyn ClientCertVerifier>;
    const WHAT: &'static str = "client CA";

    fn paths(&self) -> Vec<&Path> {
        vec![&self.0]
    }

    fn load(
        &self,
        bytes: &[Vec<u8>],
        provider: &Arc<CryptoProvider>,
    ) -> Result<Arc<dyn ClientCertVerifier>, Error> {
        let [bytes] = bytes else {
            unreachable!("paths() names one file")
        };
        let bad = |reason: String| Error::BadClientCa {
            path: self.0.clone(),
            reason,
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(bytes) {
            let cert = cert.map_err(|error| bad(error.to_string()))?;
            roots.add(cert).map_err(|error| bad(error.to_string()))?;
        }
        if roots.is_empty() {
            return Err(Error::NoCertificate {
                path: self.0.clone(),
            });
        }
        rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|error| bad(error.to_string()))
    }
}

/// What was last loaded from `files`, swapped by [`Reloading::reload`].
pub struct Reloading<F: Files> {
    files: F,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<F::Loaded>>,
    /// Bytes last looked at (good or bad), so a bad file is reported once, not every poll.
    seen: RwLock<Vec<Vec<u8>>>,
}

/// Serves whatever certificate is current.
pub type ReloadingCert = Reloading<CertFiles>;

/// Admits the clients whose certificate a current CA signed: the API server authenticating
/// itself to the webhook, so that a review reaching a handler came from it (a forged one from
/// anywhere else on the network fails the handshake, before any side effect can be asked
/// for). A new CA (the API server's client certificate reissued by another) is picked up as
/// the serving certificate is; connections open keep the CA they were admitted with.
pub type ReloadingClientCa = Reloading<ClientCaFile>;

impl<F: Files + std::fmt::Debug> std::fmt::Debug for Reloading<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    Replaced,
}

impl<F: Files> Reloading<F> {
    /// Loads the files; an error names the file at fault (startup must fail on it).
    pub fn load(files: F) -> Result<Self, Error> {
        let provider = CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let bytes = read(&files)?;
        let loaded = files.load(&bytes, &provider)?;
        Ok(Self {
            files,
            provider,
            current: RwLock::new(Arc::new(loaded)),
            seen: RwLock::new(bytes),
        })
    }

    /// What is served now.
    pub fn current(&self) -> Arc<F::Loaded> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the files and swaps what is served when they changed and load.
    pub fn reload(&self) -> Result<Reload, Error> {
        let bytes = read(&self.files)?;
        if *self.seen.read().unwrap_or_else(PoisonError::into_inner) == bytes {
            return Ok(Reload::Unchanged);
        }
        let loaded = self.files.load(&bytes, &self.provider);
        *self.seen.write().unwrap_or_else(PoisonError::into_inner) = bytes;
        let loaded = loaded?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(loaded);
        Ok(Reload::Replaced)
    }

    /// Polls the files every `interval` until `shutdown`; each reload that fails is counted in
    /// `failures` (this loop's one place).
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        failures: Option<Failures>,
        shutdown: CancellationToken,
    ) {
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
                    let file = self.files.paths()[0].display().to_string();
                    tracing::info!(%file, what = F::WHAT, "reloaded")
                }
                Err(error) => {
                    if let Some(failures) = &failures {
                        failures.count(&error);
                    }
                    tracing::error!(%error, what = F::WHAT, "the files changed but cannot be used; still serving the previous ones")
                }
            }
        }
    }
}

fn read<F: Files>(files: &F) -> Result<Vec<Vec<u8>>, Error> {
    files
        .paths()
        .into_iter()
        .map(|path| {
            std::fs::read(path).map_err(|error| Error::ReadTlsFile {
                path: path.to_owned(),
                error,
            })
        })
        .collect()
}

impl ReloadingCert {
    /// A TLS 1.2+ server configuration serving this certificate, to every client or (with
    /// `clients`) only to those presenting a certificate that CA signed.
    pub fn server_config(
        self: &Arc<Self>,
        clients: Option<Arc<ReloadingClientCa>>,
    ) -> rustls::ServerConfig {
        let builder = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring supports TLS 1.2 and 1.3");
        match clients {
            Some(clients) => builder.with_client_cert_verifier(clients),
            None => builder.with_no_client_auth(),
        }
        .with_cert_resolver(self.clone())
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Each handshake asks the CA current when it begins.
impl ClientCertVerifier for ReloadingClientCa {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    /// None: the hints would have to outlive a reload. Clients then send the certificate they
    /// have (the API server has one per webhook), which is checked all the same.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        (**self.current()).verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        (**self.current()).verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        (**self.current()).verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        (**self.current()).supported_verify_schemes()
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
        let error = ReloadingClientCa::load(ClientCaFile(missing))
            .unwrap_err()
            .to_string();
        assert!(error.contains("missing.crt"), "{error}");
        let not_pem = dir.path().join("not-pem.crt");
        std::fs::write(&not_pem, "not a certificate").unwrap();
        let error = ReloadingClientCa::load(ClientCaFile(not_pem))
            .unwrap_err()
            .to_string();
        assert!(error.contains("not-pem.crt"), "{error}");
    }
}
