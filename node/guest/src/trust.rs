//! The sandbox's egress CA in its trust store: the CA alone in `CA_FILE`, and appended to
//! the system bundle (`CA_BUNDLE`) that OpenSSL, curl, git and Python read. Both files are
//! replaced whole (written beside, then renamed), so a reader never sees half of one.

use std::io::Write;
use warren_api::egress::{with_ca, CA_BUNDLE, CA_FILE};
use warren_api::ApiError;

fn write_atomically(path: &str, content: &str) -> std::io::Result<()> {
    let tmp = format!("{path}.warren-tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

pub fn install(ca_pem: &str) -> Result<(), ApiError> {
    if !ca_pem.starts_with("-----BEGIN CERTIFICATE-----") || ca_pem.len() > 16 * 1024 {
        return Err(ApiError::invalid(
            "egress_ca_pem is not one PEM certificate",
        ));
    }
    let fail =
        |what: &str, e: std::io::Error| ApiError::internal(format!("cannot write {what}: {e}"));
    if let Some(dir) = std::path::Path::new(CA_FILE).parent() {
        std::fs::create_dir_all(dir).map_err(|e| fail("/etc/ssl/certs", e))?;
    }
    write_atomically(CA_FILE, ca_pem).map_err(|e| fail(CA_FILE, e))?;
    let bundle = std::fs::read_to_string(CA_BUNDLE).unwrap_or_default();
    let updated = with_ca(&bundle, ca_pem);
    if updated != bundle {
        write_atomically(CA_BUNDLE, &updated).map_err(|e| fail(CA_BUNDLE, e))?;
    }
    Ok(())
}
