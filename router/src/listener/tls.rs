//! TLS of the public listener: a certificate and key from PEM files, read again whenever
//! either file changes, so that a renewed certificate is served without a restart. A file
//! that cannot be read or does not match its key leaves the last good pair in service.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// Where the listener's certificate chain and private key are.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// How often the files are looked at for a change.
    pub check_every: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {why}")]
    Read { path: PathBuf, why: String },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("the key in {key} is not the key of the certificate in {cert}: {why}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        why: String,
    },
}

/// The pair in service, swapped when the files change.
#[derive(Debug)]
pub struct ReloadingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("cert lock").clone())
    }
}

fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// Reads and checks the pair.
pub fn load(files: &TlsFiles) -> Result<CertifiedKey, TlsError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|e| TlsError::Read {
            path: p.to_path_buf(),
            why: e.to_string(),
        })
    };
    let cert_pem = read(&files.cert)?;
    let key_pem = read(&files.key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Read {
            path: files.cert.clone(),
            why: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: files.cert.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Read {
        path: files.key.clone(),
        why: e.to_string(),
    })?;
    let certified =
        CertifiedKey::from_der(chain, key, &provider()).map_err(|e| TlsError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
            why: e.to_string(),
        })?;
    Ok(certified)
}

/// What identifies a version of the files (a rewrite or a rename over them changes it).
fn stamp(files: &TlsFiles) -> Option<[(SystemTime, u64); 2]> {
    let one = |p: &Path| {
        let m = std::fs::metadata(p).ok()?;
        Some((m.modified().ok()?, m.len()))
    };
    Some([one(&files.cert)?, one(&files.key)?])
}

impl ReloadingCert {
    /// Loads the pair (an error here stops the node from starting) and keeps it current
    /// until `stop`.
    pub fn start(files: TlsFiles, stop: CancellationToken) -> Result<Arc<Self>, TlsError> {
        let first = load(&files)?;
        let this = Arc::new(ReloadingCert {
            current: RwLock::new(Arc::new(first)),
        });
        let watched = this.clone();
        tokio::spawn(async move {
            let mut seen = stamp(&files);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(files.check_every) => {}
                }
                let now = stamp(&files);
                if now == seen {
                    continue;
                }
                match load(&files) {
                    Ok(pair) => {
                        *watched.current.write().expect("cert lock") = Arc::new(pair);
                        seen = now;
                        tracing::info!(cert = %files.cert.display(), "serving the changed TLS certificate");
                    }
                    // Half-written files look like this too: tried again at the next check.
                    Err(e) => {
                        tracing::warn!(error = %e, "the changed TLS files cannot be used; the previous certificate stays in service")
                    }
                }
            }
        });
        Ok(this)
    }

    /// A TLS server configuration that serves the current pair (HTTP/1.1 by ALPN).
    pub fn server_config(self: &Arc<Self>) -> rustls::ServerConfig {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            check_every: Duration::from_millis(20),
        }
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let (cert, _) = pair("a.example");
        let (_, other_key) = pair("b.example");
        std::fs::write(&f.cert, cert).unwrap();
        std::fs::write(&f.key, other_key).unwrap();
        assert!(
            matches!(load(&f), Err(TlsError::Mismatch { .. })),
            "{:?}",
            load(&f)
        );
        std::fs::write(&f.cert, "").unwrap();
        assert!(matches!(load(&f), Err(TlsError::NoCertificate { .. })));
    }

    #[tokio::test]
    async fn a_changed_pair_is_served_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let (cert, key) = pair("a.example");
        std::fs::write(&f.cert, &cert).unwrap();
        std::fs::write(&f.key, &key).unwrap();
        let stop = CancellationToken::new();
        let r = ReloadingCert::start(f.clone(), stop.clone()).unwrap();
        let served = |r: &ReloadingCert| r.current.read().unwrap().cert[0].clone();
        let first = served(&r);
        // A certificate without its key (a half-done renewal) changes nothing.
        let (cert2, key2) = pair("a.example");
        std::fs::write(&f.cert, &cert2).unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(served(&r), first);
        std::fs::write(&f.key, &key2).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while served(&r) == first {
            assert!(std::time::Instant::now() < deadline, "never reloaded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.cancel();
    }
}
