//! Per-sandbox certificate authorities for the HTTPS the proxy intercepts (hosts with a
//! rule). A sandbox's CA is derived from a cluster-wide seed and the sandbox's id (HKDF,
//! an Ed25519 key, a fixed validity): every node derives the same CA for the same sandbox,
//! so it survives moves without being stored anywhere, and one sandbox's trust anchor is
//! worth nothing against another's traffic. The CA's key never leaves the node; the
//! sandbox only ever receives its certificate.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Leaf certificates live this long (they are made again on demand).
const LEAF_DAYS: i64 = 7;
/// Most leaf configurations kept (per sandbox and host).
const LEAF_CACHE: usize = 4096;

/// The CA of one sandbox.
pub struct SandboxCa {
    pub cert_pem: String,
    key_pkcs8: Vec<u8>,
}

fn hkdf32(seed: &[u8; 32], info: &[u8]) -> [u8; 32] {
    struct Len32;
    impl ring::hkdf::KeyType for Len32 {
        fn len(&self) -> usize {
            32
        }
    }
    let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"warren egress ca").extract(seed);
    let mut out = [0u8; 32];
    prk.expand(&[info], Len32)
        .expect("32 bytes are in range")
        .fill(&mut out)
        .expect("32 bytes");
    out
}

/// The PKCS#8 (v1) encoding of an Ed25519 private key from its 32-byte seed.
fn ed25519_pkcs8(seed: &[u8; 32]) -> Vec<u8> {
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    der.extend_from_slice(seed);
    der
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl SandboxCa {
    /// The CA of `sandbox` under the cluster's `seed`.
    pub fn derive(seed: &[u8; 32], sandbox: &str) -> Result<SandboxCa, String> {
        let key_pkcs8 = ed25519_pkcs8(&hkdf32(seed, sandbox.as_bytes()));
        let key = KeyPair::try_from(key_pkcs8.as_slice()).map_err(err)?;
        let params = Self::params(sandbox)?;
        let cert = params.self_signed(&key).map_err(err)?;
        Ok(SandboxCa {
            cert_pem: cert.pem(),
            key_pkcs8,
        })
    }

    fn params(sandbox: &str) -> Result<CertificateParams, String> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            DnType::CommonName,
            format!("warren egress CA of sandbox {sandbox}"),
        );
        params
            .distinguished_name
            .push(DnType::OrganizationName, "warren");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        // Fixed, so that every node makes the same certificate.
        params.not_before =
            time::OffsetDateTime::from_unix_timestamp(1_704_067_200).map_err(err)?;
        params.not_after = time::OffsetDateTime::from_unix_timestamp(4_102_444_800).map_err(err)?;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(
            &hkdf32(&[0u8; 32], sandbox.as_bytes())[..16],
        ));
        Ok(params)
    }

    /// A certificate for `host` (a name or an address), signed by this CA, and its key.
    pub fn leaf(
        &self,
        host: &str,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
        let ca_key = KeyPair::try_from(self.key_pkcs8.as_slice()).map_err(err)?;
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, ca_key).map_err(err)?;
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(vec![host.to_string()]).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, host);
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(LEAF_DAYS);
        let cert = params.signed_by(&key, &issuer).map_err(err)?;
        Ok((
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        ))
    }
}

/// TLS server configurations the proxy answers intercepted connections with, by sandbox
/// and host.
#[derive(Default)]
pub struct LeafCache {
    by_key: Mutex<HashMap<(String, String), Arc<rustls::ServerConfig>>>,
}

impl LeafCache {
    pub fn server_config(
        &self,
        seed: &[u8; 32],
        sandbox: &str,
        host: &str,
    ) -> Result<Arc<rustls::ServerConfig>, String> {
        let k = (sandbox.to_string(), host.to_string());
        if let Some(c) = self.by_key.lock().expect("leaf cache").get(&k) {
            return Ok(c.clone());
        }
        let ca = SandboxCa::derive(seed, sandbox)?;
        let (chain, key) = ca.leaf(host)?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(err)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(err)?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cfg = Arc::new(cfg);
        let mut m = self.by_key.lock().expect("leaf cache");
        if m.len() >= LEAF_CACHE {
            m.clear();
        }
        m.insert(k, cfg.clone());
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_derives_the_same_ca_for_a_sandbox_and_another_for_another() {
        let seed = [7u8; 32];
        let a1 = SandboxCa::derive(&seed, "a").unwrap();
        let a2 = SandboxCa::derive(&seed, "a").unwrap();
        let b = SandboxCa::derive(&seed, "b").unwrap();
        assert_eq!(a1.cert_pem, a2.cert_pem);
        assert_ne!(a1.cert_pem, b.cert_pem);
        assert_ne!(
            a1.cert_pem,
            SandboxCa::derive(&[8u8; 32], "a").unwrap().cert_pem
        );
        assert!(a1.leaf("git.internal").is_ok());
        assert!(a1.leaf("127.0.0.9").is_ok());
    }
}
