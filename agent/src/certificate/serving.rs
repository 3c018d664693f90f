//! kubelet's `serverTLSBootstrap`: the API port's serving certificate
//! from the cluster. A CSR for the `kubernetes.io/kubelet-serving` signer
//! (CN `system:node:<name>`, O `system:nodes`, the node's name and
//! addresses as subjectAltNames; the key is made here and never leaves the
//! node), signed once an admin (or an approver the cluster runs) approved
//! it; the controller manager does not approve these by itself, so until
//! then the port serves its self-signed certificate. The certificate and
//! key are kept in `<dataDir>/agent/pki/picolet-serving-current.pem` and
//! renewed at 70–90 % of their life.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ring::signature::EcdsaKeyPair;

use crate::certificate::Error;
use crate::certificate::bootstrap::{
    csr, csr_object, pem, request_certificate, rotate_forever, still_valid,
};
use crate::certificate::x509;
use crate::kube::client::Client;

/// The signer of kubelet serving certificates.
pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
/// Serving certificate usages for an ECDSA key (kubelet's).
const USAGES: &[&str] = &["digital signature", "server auth"];

/// Puts a new certificate and key (PEM) in use.
pub type Install = Arc<dyn Fn(&[u8], &[u8]) -> Result<(), Error> + Send + Sync>;

/// The file of the current certificate and key.
pub fn pem_path(pki_dir: &Path) -> PathBuf {
    pki_dir.join("picolet-serving-current.pem")
}

/// The current certificate and key, if the file holds one that has not
/// expired.
pub fn current(pki_dir: &Path) -> Option<Vec<u8>> {
    let text = std::fs::read(pem_path(pki_dir)).ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    still_valid(&text, now).then_some(text)
}

/// What the node asks for: its name and addresses.
#[derive(Debug, Clone)]
pub struct Request {
    pub node: String,
    pub ips: Vec<IpAddr>,
}

/// The CSR object for `key`.
pub fn csr_for(req: &Request, key: &EcdsaKeyPair) -> Result<serde_json::Value, Error> {
    let alt = x509::subject_alt_names(std::slice::from_ref(&req.node), &req.ips);
    let der = csr(&req.node, key, &x509::san_request_attribute(&alt))?;
    Ok(csr_object(
        &pem("CERTIFICATE REQUEST", &der),
        SIGNER,
        USAGES,
    ))
}

/// A new key, its CSR, the signed certificate: written, then installed.
async fn renew(
    client: &Client,
    pki_dir: &Path,
    req: &Request,
    install: &Install,
) -> Result<(), Error> {
    let (doc, key) = crate::certificate::bootstrap::new_key()?;
    let cert = request_certificate(client, &csr_for(req, &key)?).await?;
    let key_pem = pem("PRIVATE KEY", doc.as_ref());
    install(&cert, key_pem.as_bytes())?;
    let mut both = cert;
    both.extend(key_pem.as_bytes());
    let path = pem_path(pki_dir);
    edge_config::write_atomic(&path, &both).map_err(Error::io("write", &path))
}

/// Gets a serving certificate when there is none yet (retrying every
/// minute after a refusal or a CSR nobody approved in 15 minutes), then
/// keeps it renewed. Runs until the process ends.
pub fn spawn(client: Arc<Client>, pki_dir: PathBuf, req: Request, install: Install) {
    tokio::spawn(async move {
        let path = pem_path(&pki_dir);
        while current(&pki_dir).is_none() {
            tracing::info!(node = %req.node, "serverTLSBootstrap: asking the API server for a serving certificate (kubernetes.io/kubelet-serving; an admin approves it)");
            match renew(&client, &pki_dir, &req, &install).await {
                Ok(()) => {
                    tracing::info!(file = %path.display(), "serverTLSBootstrap: serving with the cluster's certificate")
                }
                Err(e) => {
                    tracing::warn!("serverTLSBootstrap: {e}; asking again in 1 minute");
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
            }
        }
        rotate_forever(&path, "serving", || {
            renew(&client, &pki_dir, &req, &install)
        })
        .await;
    });
}

#[cfg(test)]
mod tests {
    use ring::rand::SystemRandom;
    use ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING;

    use super::*;

    #[test]
    fn the_csr_asks_for_the_nodes_names_from_the_serving_signer() {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, doc.as_ref(), &rng)
            .expect("key");
        let req = Request {
            node: "pk-edge".into(),
            ips: vec!["192.0.2.10".parse().expect("ip")],
        };
        let obj = csr_for(&req, &key).expect("csr");
        assert_eq!(obj["spec"]["signerName"], SIGNER);
        assert_eq!(obj["spec"]["usages"][1], "server auth");
        // What openssl reads in it is checked in the e2e by the real
        // controller manager signing it; here, the SAN bytes are inside.
        let text = obj["spec"]["request"].as_str().expect("request");
        let pem_text: k8s_openapi::ByteString =
            serde_json::from_value(serde_json::json!(text)).expect("base64");
        let der = rustls::pki_types::pem::PemObject::from_pem_slice(&pem_text.0)
            .map(|d: rustls::pki_types::CertificateSigningRequestDer<'_>| d.as_ref().to_vec())
            .expect("pem");
        let alt = x509::subject_alt_names(&["pk-edge".into()], &req.ips);
        assert!(der.windows(alt.len()).any(|w| w == alt.as_slice()));
    }
}
