//! The cluster's certificate authority, node certificates, and rustls configurations.

use crate::TransportError;
use hmac::{Hmac, Mac};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::sync::Arc;

/// ALPN of the peer protocol; both ends must offer it.
pub const ALPN: &[u8] = b"warren-peer/1";

fn tls_err(e: impl std::fmt::Display) -> TransportError {
    TransportError::Tls(e.to_string())
}

/// The cluster CA: its certificate and signing key (PEM). In the replicated state the key
/// is empty (clusters bootstrapped before keys were kept out of it hold it there): only
/// signing nodes hold it, in their CA file (`file_pem`, `parse_file`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaMaterial {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for CaMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaMaterial")
            .field("cert_pem", &self.cert_pem)
            .field("has_key", &!self.key_pem.is_empty())
            .finish()
    }
}

impl CaMaterial {
    /// The certificate alone, as the replicated state holds it.
    pub fn public(&self) -> CaMaterial {
        CaMaterial {
            cert_pem: self.cert_pem.clone(),
            key_pem: String::new(),
        }
    }

    /// The CA file's content: the certificate, then the key.
    pub fn file_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }

    /// Reads a CA file (a certificate and a private key, PEM, in any order).
    pub fn parse_file(pem: &str) -> Result<CaMaterial, TransportError> {
        let block = |label: &str| -> Option<String> {
            let begin = format!("-----BEGIN {label}-----");
            let end = format!("-----END {label}-----");
            let start = pem.find(&begin)?;
            let stop = pem[start..].find(&end)? + start + end.len();
            Some(format!("{}\n", &pem[start..stop]))
        };
        let cert_pem = block("CERTIFICATE").ok_or_else(|| tls_err("no CERTIFICATE block"))?;
        let key_pem = block("PRIVATE KEY").ok_or_else(|| tls_err("no PRIVATE KEY block"))?;
        // The key must be the certificate's.
        use rcgen::PublicKeyData;
        let key = KeyPair::from_pem(&key_pem).map_err(tls_err)?;
        if key_id_of(key.der_bytes()) != key_id_of_cert(&cert_pem)? {
            return Err(tls_err("the private key is not the certificate's"));
        }
        Ok(CaMaterial { cert_pem, key_pem })
    }
}

/// A node's certificate and key, and the CA it trusts (PEM).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    pub name: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

/// How far back a certificate's validity starts: clocks of different machines differ.
pub const BACKDATE: std::time::Duration = std::time::Duration::from_secs(60);

fn validity(params: &mut CertificateParams, lifetime: std::time::Duration) {
    let now = time_now();
    params.not_before = now - BACKDATE;
    params.not_after = now + lifetime;
}

/// The lifetime of the cluster CA's own certificate.
const CA_LIFETIME: std::time::Duration = std::time::Duration::from_secs(20 * 365 * 24 * 3600);

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// Creates a new cluster CA (at bootstrap).
pub fn new_ca(cluster: &str) -> Result<CaMaterial, TransportError> {
    let key = KeyPair::generate().map_err(tls_err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("warren cluster CA {cluster}"));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, CA_LIFETIME);
    let cert = params.self_signed(&key).map_err(tls_err)?;
    Ok(CaMaterial {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A new key pair and a certificate signing request for node `name` (the key stays local).
pub fn new_key_and_csr(name: &str) -> Result<(String, String), TransportError> {
    let key_pem = KeyPair::generate().map_err(tls_err)?.serialize_pem();
    let csr = csr_for_key(name, &key_pem)?;
    Ok((key_pem, csr))
}

/// The URI subject alternative name that carries a node's id in its certificate.
const NODE_ID_URI: &str = "warren-node:";

/// Who is at the other end of a peer connection, read from its verified certificate: the
/// node name, the node id the cluster assigned when it signed the certificate (absent in
/// certificates issued before ids were bound), the id of its public key, and when the
/// certificate expires (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerId {
    pub name: String,
    pub node: Option<u64>,
    pub key_id: String,
    pub expires_at: i64,
}

impl PeerId {
    /// Whether its certificate has expired at `now` (Unix seconds).
    pub fn expired(&self, now: i64) -> bool {
        now >= self.expires_at
    }
}

/// A certificate's validity, in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// The validity of the first certificate in `cert_pem`.
pub fn validity_of(cert_pem: &str) -> Result<Validity, TransportError> {
    with_first_cert(cert_pem, |c| Validity {
        not_before: c.validity().not_before.timestamp(),
        not_after: c.validity().not_after.timestamp(),
    })
}

/// The current time in Unix seconds.
pub fn unix_now() -> i64 {
    time_now().unix_timestamp()
}

/// Short id of a public key: hex SHA-256 of its subject-public-key bits (first 16 bytes).
fn key_id_of(raw_key: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(&Sha256::digest(raw_key)[..16])
}

/// The key id of a CSR's public key, once its signature is checked (the requester holds the
/// private key).
pub fn key_id_of_csr(csr_pem: &str) -> Result<String, TransportError> {
    use rcgen::PublicKeyData;
    let csr = CertificateSigningRequestParams::from_pem(csr_pem).map_err(tls_err)?;
    Ok(key_id_of(csr.public_key.der_bytes()))
}

/// The key id of the first certificate in `cert_pem`.
pub fn key_id_of_cert(cert_pem: &str) -> Result<String, TransportError> {
    with_first_cert(cert_pem, |c| {
        key_id_of(&c.public_key().subject_public_key.data)
    })
}

/// `f` of the first certificate in `cert_pem`.
fn with_first_cert<R>(
    cert_pem: &str,
    f: impl FnOnce(&x509_parser::certificate::X509Certificate) -> R,
) -> Result<R, TransportError> {
    let der = certs(cert_pem)?
        .into_iter()
        .next()
        .ok_or_else(|| tls_err("no certificate"))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(tls_err)?;
    Ok(f(&cert))
}

/// Signs a CSR for node `name` with id `node`, valid for `lifetime`. Whatever names the CSR
/// asks for, the certificate carries exactly `name` and `node`: a joiner cannot obtain
/// another node's identity, nor speak as another node id.
pub fn sign_csr(
    ca: &CaMaterial,
    csr_pem: &str,
    name: &str,
    node: u64,
    lifetime: std::time::Duration,
) -> Result<String, TransportError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(tls_err)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).map_err(tls_err)?;
    let mut csr = CertificateSigningRequestParams::from_pem(csr_pem).map_err(tls_err)?;
    csr.params.subject_alt_names = vec![
        SanType::DnsName(name.try_into().map_err(tls_err)?),
        SanType::URI(format!("{NODE_ID_URI}{node}").try_into().map_err(tls_err)?),
    ];
    csr.params.distinguished_name = rcgen::DistinguishedName::new();
    csr.params.distinguished_name.push(DnType::CommonName, name);
    csr.params.is_ca = IsCa::NoCa;
    csr.params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    csr.params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    validity(&mut csr.params, lifetime);
    Ok(csr.signed_by(&issuer).map_err(tls_err)?.pem())
}

/// A CSR for node `name` from the key it already has (a renewal keeps the key the cluster
/// registered).
pub fn csr_for_key(name: &str, key_pem: &str) -> Result<String, TransportError> {
    let key = KeyPair::from_pem(key_pem).map_err(tls_err)?;
    let mut params = CertificateParams::new(vec![name.to_string()]).map_err(tls_err)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params
        .serialize_request(&key)
        .map_err(tls_err)?
        .pem()
        .map_err(tls_err)
}

/// Issues an identity directly (the bootstrap node, for itself), valid for `lifetime`.
pub fn issue(
    ca: &CaMaterial,
    name: &str,
    node: u64,
    lifetime: std::time::Duration,
) -> Result<NodeIdentity, TransportError> {
    let (key_pem, csr) = new_key_and_csr(name)?;
    let cert_pem = sign_csr(ca, &csr, name, node, lifetime)?;
    Ok(NodeIdentity {
        name: name.to_string(),
        cert_pem,
        key_pem,
        ca_pem: ca.cert_pem.clone(),
    })
}

fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(tls_err)
}

fn key(pem: &str) -> Result<PrivateKeyDer<'static>, TransportError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(tls_err)
}

fn roots(ca_pem: &str) -> Result<Arc<rustls::RootCertStore>, TransportError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca_pem)? {
        roots.add(c).map_err(tls_err)?;
    }
    Ok(Arc::new(roots))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Server side: only clients with a certificate from the cluster CA get in.
pub fn server_config(id: &NodeIdentity) -> Result<rustls::ServerConfig, TransportError> {
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots(&id.ca_pem)?, provider())
            .build()
            .map_err(tls_err)?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_err)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(&id.cert_pem)?, key(&id.key_pem)?)
        .map_err(tls_err)?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    Ok(cfg)
}

/// Client side: trusts only the cluster CA and presents this node's certificate.
pub fn client_config(id: &NodeIdentity) -> Result<rustls::ClientConfig, TransportError> {
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_err)?
        .with_root_certificates(roots(&id.ca_pem)?)
        .with_client_auth_cert(certs(&id.cert_pem)?, key(&id.key_pem)?)
        .map_err(tls_err)?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    Ok(cfg)
}

/// Who a (verified) peer certificate names: its first DNS subject alternative name, the
/// node id in its `warren-node:` URI name, and its key.
pub fn peer_id(der: &[u8]) -> Option<PeerId> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    let names = &san.value.general_names;
    let name = names.iter().find_map(|g| match g {
        GeneralName::DNSName(n) => Some(n.to_string()),
        _ => None,
    })?;
    let node = names.iter().find_map(|g| match g {
        GeneralName::URI(u) => u.strip_prefix(NODE_ID_URI)?.parse().ok(),
        _ => None,
    });
    let key_id = key_id_of(&cert.public_key().subject_public_key.data);
    Some(PeerId {
        name,
        node,
        key_id,
        expires_at: cert.validity().not_after.timestamp(),
    })
}

/// HMAC-SHA256 of `parts` under the join token, hex: proves knowledge of the token without
/// sending it, and binds the proof to the exact bytes exchanged (CSR, certificates).
pub fn proof(token: &str, parts: &[&[u8]]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes any key length");
    for p in parts {
        mac.update(&(p.len() as u64).to_be_bytes());
        mac.update(p);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// Checks a proof in constant time.
pub fn verify_proof(token: &str, parts: &[&[u8]], given: &str) -> bool {
    let Ok(given) = hex::decode(given) else {
        return false;
    };
    let mut mac =
        Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes any key length");
    for p in parts {
        mac.update(&(p.len() as u64).to_be_bytes());
        mac.update(p);
    }
    mac.verify_slice(&given).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_carry_only_the_assigned_name_id_and_the_csr_key() {
        let ca = new_ca("test").unwrap();
        let (_key, csr) = new_key_and_csr("n2").unwrap();
        let cert = sign_csr(&ca, &csr, "n2", 2, DAY).unwrap();
        let der = certs(&cert).unwrap().remove(0);
        let peer = peer_id(&der).unwrap();
        assert_eq!((peer.name.as_str(), peer.node), ("n2", Some(2)));
        assert_eq!(peer.key_id, key_id_of_csr(&csr).unwrap());
        assert_eq!(peer.key_id, key_id_of_cert(&cert).unwrap());
        // A CSR asking for another name still gets the assigned one.
        let (_key, other) = new_key_and_csr("leader").unwrap();
        let cert = sign_csr(&ca, &other, "n3", 3, DAY).unwrap();
        let peer = peer_id(&certs(&cert).unwrap()[0]).unwrap();
        assert_eq!((peer.name.as_str(), peer.node), ("n3", Some(3)));
        assert_ne!(peer.key_id, key_id_of_csr(&csr).unwrap());
        let id = issue(&ca, "n1", 1, DAY).unwrap();
        assert!(server_config(&id).is_ok());
        assert!(client_config(&id).is_ok());
    }

    const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

    #[test]
    fn certificates_live_as_long_as_asked_and_a_renewal_keeps_the_key() {
        let ca = new_ca("test").unwrap();
        let id = issue(&ca, "n1", 1, std::time::Duration::from_secs(30)).unwrap();
        let v = validity_of(&id.cert_pem).unwrap();
        let now = unix_now();
        assert!((v.not_after - now - 30).abs() <= 2, "{v:?} at {now}");
        assert_eq!(v.not_before, v.not_after - 30 - BACKDATE.as_secs() as i64);
        let peer = peer_id(&certs(&id.cert_pem).unwrap()[0]).unwrap();
        assert_eq!(peer.expires_at, v.not_after);
        assert!(!peer.expired(now) && peer.expired(v.not_after));
        let csr = csr_for_key("n1", &id.key_pem).unwrap();
        assert_eq!(
            key_id_of_csr(&csr).unwrap(),
            key_id_of_cert(&id.cert_pem).unwrap()
        );
    }

    #[test]
    fn a_ca_file_holds_a_certificate_and_its_own_key() {
        let ca = new_ca("test").unwrap();
        assert_eq!(CaMaterial::parse_file(&ca.file_pem()).unwrap(), ca);
        let other = new_ca("other").unwrap();
        let mixed = format!("{}{}", ca.cert_pem, other.key_pem);
        assert!(CaMaterial::parse_file(&mixed).is_err());
        assert!(CaMaterial::parse_file(&ca.cert_pem).is_err());
        assert!(
            !format!("{:?}", ca).contains("PRIVATE"),
            "Debug hides the key"
        );
        assert!(ca.public().key_pem.is_empty());
    }

    #[test]
    fn proofs_bind_token_and_content() {
        let p = proof("secret", &[b"csr", b"n2"]);
        assert!(verify_proof("secret", &[b"csr", b"n2"], &p));
        assert!(!verify_proof("other", &[b"csr", b"n2"], &p));
        assert!(!verify_proof("secret", &[b"csr2", b"n2"], &p));
        assert!(
            !verify_proof("secret", &[b"cs", b"rn2"], &p),
            "length-prefixed parts cannot be re-split"
        );
    }
}
