//! kubelet's TLS bootstrap (`--bootstrap-kubeconfig`): a node that has only
//! a bootstrap token makes its own key (ECDSA P-256; the key never leaves
//! the node), asks the API server for a client certificate with a CSR for
//! the `kubernetes.io/kube-apiserver-client-kubelet` signer (CN
//! `system:node:<name>`, O `system:nodes`), waits until the controller
//! manager approved and signed it, and writes the certificate with its key
//! and a kubeconfig that uses them (0600, atomically). The CSR's DER is
//! built here ([`csr`], pure): no X.509 library for one structure.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper::Method;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use crate::certificate::Error;
use crate::certificate::x509::{
    OID_COMMON_NAME, OID_EC_PUBLIC_KEY, OID_ECDSA_SHA256, OID_ORGANIZATION, OID_PRIME256V1, der,
    seq,
};
pub use crate::certificate::x509::{pem, validity};
use crate::kube::client::Client;
use crate::kube::config::KubeConfig;

/// The signer of kubelet client certificates.
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// How long to wait for approval and signing (kubelet: 15 minutes, then
/// it exits and is restarted).
const WAIT: Duration = Duration::from_secs(15 * 60);

/// The CertificationRequestInfo of a node: subject O=system:nodes,
/// CN=system:node:<node>, the P-256 public key, and `attributes` (DER;
/// empty for a client certificate, the subjectAltName request for a
/// serving one).
pub fn request_info(node: &str, public_key: &[u8], attributes: &[u8]) -> Vec<u8> {
    let rdn =
        |oid: &[u8], value: &str| der(0x31, &seq(&[&der(0x06, oid), &der(0x0c, value.as_bytes())]));
    let name = seq(&[
        &rdn(OID_ORGANIZATION, "system:nodes"),
        &rdn(OID_COMMON_NAME, &format!("system:node:{node}")),
    ]);
    let mut bits = vec![0u8];
    bits.extend_from_slice(public_key);
    let spki = seq(&[
        &seq(&[&der(0x06, OID_EC_PUBLIC_KEY), &der(0x06, OID_PRIME256V1)]),
        &der(0x03, &bits),
    ]);
    seq(&[&der(0x02, &[0]), &name, &spki, &der(0xa0, attributes)])
}

/// A PKCS#10 CSR for `node` signed with `key` (DER), with `attributes`.
pub fn csr(node: &str, key: &EcdsaKeyPair, attributes: &[u8]) -> Result<Vec<u8>, Error> {
    let info = request_info(node, key.public_key().as_ref(), attributes);
    let sig = key
        .sign(&SystemRandom::new(), &info)
        .map_err(|_| Error::Sign("certificate signing request"))?;
    let mut bits = vec![0u8];
    bits.extend_from_slice(sig.as_ref());
    Ok(seq(&[
        &info,
        &seq(&[&der(0x06, OID_ECDSA_SHA256)]),
        &der(0x03, &bits),
    ]))
}

/// The CertificateSigningRequest object for `signer` with `usages`.
pub fn csr_object(csr_pem: &str, signer: &str, usages: &[&str]) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "node-csr-"},
        "spec": {
            "request": STANDARD.encode(csr_pem.as_bytes()),
            "signerName": signer,
            "usages": usages,
        },
    })
}

/// What a CSR's status says: the certificate (PEM), still waiting, or
/// refused (why).
pub fn csr_outcome(csr: &Value) -> Result<Option<Vec<u8>>, Error> {
    for c in csr["status"]["conditions"].as_array().into_iter().flatten() {
        if matches!(c["type"].as_str(), Some("Denied" | "Failed")) && c["status"] != "False" {
            return Err(Error::Refused {
                verdict: c["type"].as_str().unwrap_or("").to_lowercase(),
                message: c["message"].as_str().unwrap_or("").to_string(),
            });
        }
    }
    match csr["status"]["certificate"].as_str() {
        Some(b64) if !b64.is_empty() => {
            serde_json::from_value::<k8s_openapi::ByteString>(json!(b64))
                .map(|b| Some(b.0))
                .map_err(Error::Signed)
        }
        _ => Ok(None),
    }
}

/// A kubeconfig for the API server of `cfg` with the client certificate
/// and key in `pem_file`.
pub fn kubeconfig(cfg: &KubeConfig, pem_file: &Path) -> String {
    let host = if cfg.host.contains(':') {
        format!("[{}]", cfg.host)
    } else {
        cfg.host.clone()
    };
    let trust = match &cfg.ca {
        Some(ca) => format!("certificate-authority-data: {}", STANDARD.encode(ca)),
        None => "insecure-skip-tls-verify: true".into(),
    };
    let file = pem_file.display();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n    server: https://{host}:{port}\n    {trust}\nusers:\n- name: default-auth\n  user:\n    client-certificate: {file}\n    client-key: {file}\ncontexts:\n- name: default-context\n  context: {{cluster: default-cluster, user: default-auth}}\ncurrent-context: default-context\n",
        port = cfg.port
    )
}

/// With `kubeconfig` missing, or its bootstrapped certificate expired (a
/// device that was offline past its certificate's life, kubelet's
/// `isClientConfigStillValid`): bootstraps it with the token of
/// `bootstrap`; the certificate and key go to `<cert_dir>/picolet-client-
/// current.pem`. A key made before (a restart while waiting) is used again,
/// as kubelet does, so no CSR is orphaned. A kubeconfig that is not
/// bootstrap's is the admin's, used as it is.
pub async fn ensure(
    kubeconfig_path: &Path,
    bootstrap: &Path,
    cert_dir: &Path,
    node: &str,
) -> Result<(), Error> {
    if let Ok(current) = std::fs::read_to_string(kubeconfig_path) {
        let pem_file = pem_path(cert_dir);
        let ours = current.contains(&pem_file.display().to_string());
        if !ours || std::fs::read(&pem_file).is_ok_and(|p| still_valid(&p, unix_now())) {
            return Ok(());
        }
        tracing::warn!(file = %pem_file.display(), "the client certificate has expired or cannot be read: TLS bootstrap again");
    }
    let cfg = crate::kube::config::load(bootstrap)?;
    let client =
        Client::new(&cfg, &format!("picolet/{}", env!("CARGO_PKG_VERSION"))).map_err(|source| {
            Error::Client {
                path: bootstrap.to_path_buf(),
                source,
            }
        })?;
    edge_config::private_dir(cert_dir).map_err(Error::io("make private", cert_dir))?;
    let key_path = cert_dir.join("picolet-client.key.tmp");
    let rng = SystemRandom::new();
    let pkcs8 = match std::fs::read(&key_path) {
        Ok(k) => k,
        Err(_) => {
            let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
                .map_err(|_| Error::Random("the node's key"))?;
            edge_config::write_atomic(&key_path, doc.as_ref())
                .map_err(Error::io("write", &key_path))?;
            doc.as_ref().to_vec()
        }
    };
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, &rng).map_err(
        |rejected| Error::BadKey {
            path: key_path.clone(),
            rejected,
        },
    )?;
    let request = pem("CERTIFICATE REQUEST", &csr(node, &key, &[])?);
    let cert = request_certificate(&client, &csr_object(&request, SIGNER, CLIENT_USAGES)).await?;
    let pem_path = pem_path(cert_dir);
    let mut both = cert;
    both.extend(pem("PRIVATE KEY", &pkcs8).into_bytes());
    edge_config::write_atomic(&pem_path, &both).map_err(Error::io("write", &pem_path))?;
    edge_config::write_atomic(kubeconfig_path, kubeconfig(&cfg, &pem_path).as_bytes())
        .map_err(Error::io("write", kubeconfig_path))?;
    let _ = std::fs::remove_file(&key_path);
    tracing::info!(kubeconfig = %kubeconfig_path.display(), "TLS bootstrap: client certificate received");
    Ok(())
}

/// The bootstrapped certificate file, `<cert_dir>/picolet-client-current.pem`.
pub fn pem_path(cert_dir: &Path) -> PathBuf {
    cert_dir.join("picolet-client-current.pem")
}

/// When to rotate a certificate valid from `not_before` to `not_after`:
/// at `fraction` (kubelet picks 70–90 % at random) of its life.
pub fn rotation_at(not_before: i64, not_after: i64, fraction: f64) -> i64 {
    let life = (not_after - not_before).max(0);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_precision_loss,
        reason = "a lifetime in seconds is far below 2^52, and the fraction is clamped to 0..=1"
    )]
    let offset = (life as f64 * fraction.clamp(0.0, 1.0)) as i64;
    not_before + offset
}

/// Whether the certificate in `pem_text` has not expired at `now` (only
/// expiry counts, as kubelet's: a device without a real-time clock that
/// boots in 1970 must not throw its certificate away).
pub fn still_valid(pem_text: &[u8], now: i64) -> bool {
    validity(pem_text).is_some_and(|(_, to)| now < to)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Rotates the bootstrapped client certificate in `pem_path` (kubelet's
/// `rotateCertificates`): at 70–90 % of its life a new key and CSR,
/// sent as the node itself (auto-approved by the controller manager's
/// `selfnodeclient` rule), then the new certificate and key replace the old
/// ones on disk (atomically) and in `client`. Runs until the process ends.
pub fn spawn_rotation(client: std::sync::Arc<Client>, pem_path: PathBuf, node: String) {
    tokio::spawn(async move {
        rotate_forever(&pem_path, "client", || renew(&client, &pem_path, &node)).await;
    });
}

/// Waits until 70–90 % (at random) of the life of the certificate in
/// `pem_path`, then `renew`s it; again and again, a failed renewal every
/// minute. Ends when the file has no certificate whose validity it can
/// read.
pub async fn rotate_forever<F, Fut>(pem_path: &Path, what: &str, mut renew: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    loop {
        let Some((from, to)) = std::fs::read(pem_path).ok().and_then(|p| validity(&p)) else {
            tracing::warn!(file = %pem_path.display(), "{what} certificate rotation: cannot read the certificate's validity; not rotating");
            return;
        };
        let mut byte = [0u8; 1];
        let _ = ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut byte);
        let at = rotation_at(from, to, 0.7 + 0.2 * f64::from(byte[0]) / 255.0);
        // Sleep in steps of at most an hour: the wall clock may jump.
        while unix_now() < at {
            let left = u64::try_from(at - unix_now()).unwrap_or(0);
            tokio::time::sleep(Duration::from_secs(left.clamp(1, 3600))).await;
        }
        tracing::info!(not_after = to, "rotating the {what} certificate");
        match renew().await {
            Ok(()) => tracing::info!(file = %pem_path.display(), "{what} certificate rotated"),
            Err(e) => {
                tracing::warn!("{what} certificate rotation: {e}; trying again in 1 minute");
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        }
    }
}

/// A new key and certificate through `client`, written and put in use.
async fn renew(client: &Client, pem_path: &Path, node: &str) -> Result<(), Error> {
    let (doc, key) = new_key()?;
    let request = pem("CERTIFICATE REQUEST", &csr(node, &key, &[])?);
    let cert = request_certificate(client, &csr_object(&request, SIGNER, CLIENT_USAGES)).await?;
    let key_pem = pem("PRIVATE KEY", doc.as_ref());
    let mut both = cert.clone();
    both.extend(key_pem.as_bytes());
    edge_config::write_atomic(pem_path, &both).map_err(Error::io("write", pem_path))?;
    client
        .set_client_cert(&cert, key_pem.as_bytes())
        .await
        .map_err(|source| Error::Api {
            what: "use the new client certificate",
            source,
        })
}

/// A new ECDSA P-256 key: its PKCS#8 document and the key.
pub fn new_key() -> Result<(ring::pkcs8::Document, EcdsaKeyPair), Error> {
    let rng = SystemRandom::new();
    let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| Error::Random("a key"))?;
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, doc.as_ref(), &rng)
        .map_err(|_| Error::Random("a key"))?;
    Ok((doc, key))
}

/// Client certificate usages (kubelet's).
const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];

/// Sends a CSR object and waits for its certificate (PEM).
pub async fn request_certificate(client: &Client, object: &Value) -> Result<Vec<u8>, Error> {
    let created = client
        .json(
            Method::POST,
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            Some(object),
            None,
        )
        .await
        .map_err(|source| Error::Api {
            what: "create the certificate signing request",
            source,
        })?;
    let name = created["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    tracing::info!(csr = %name, "waiting for the certificate signing request to be approved and signed");
    let path = format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match client.get(&path).await {
            Ok(csr) => {
                if let Some(cert) = csr_outcome(&csr)? {
                    return Ok(cert);
                }
            }
            Err(e) => tracing::debug!("read {name}: {e}"),
        }
        if tokio::time::Instant::now() > deadline {
            return Err(Error::NotSigned { name, waited: WAIT });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Where the bootstrapped certificate lives: `<dataDir>/agent/pki`.
pub fn cert_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("agent").join("pki")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csr_is_a_signed_pkcs10_request_for_the_node() {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, doc.as_ref(), &rng)
            .expect("key");
        let request = csr("pk-edge", &key, &[]).expect("csr");
        let info = request_info("pk-edge", key.public_key().as_ref(), &[]);
        // SEQUENCE { info, algorithm, BIT STRING signature }.
        assert_eq!(request[0], 0x30);
        let at = request
            .windows(info.len())
            .position(|w| w == info.as_slice())
            .expect("the info is inside");
        let after = &request[at + info.len()..];
        let alg = seq(&[&der(0x06, OID_ECDSA_SHA256)]);
        assert!(after.starts_with(&alg));
        let sig = &after[alg.len()..];
        assert_eq!(sig[0], 0x03);
        let sig = &sig[3..]; // tag, length, no unused bits
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_ASN1,
            key.public_key().as_ref(),
        )
        .verify(&info, sig)
        .expect("the signature verifies over the request info");
        let text = String::from_utf8_lossy(&info);
        assert!(text.contains("system:nodes") && text.contains("system:node:pk-edge"));
        let p = pem("CERTIFICATE REQUEST", &request);
        assert!(p.starts_with("-----BEGIN CERTIFICATE REQUEST-----\n"));
        assert!(p.lines().all(|l| l.len() <= 64));
    }

    /// A certificate the real controller manager signed for a bootstrapped
    /// node (kube-controller-manager v1.26.5, recorded by hand; public).
    const SIGNED: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/bootstrapped-client.pem"
    ));

    #[test]
    fn a_certificates_validity_and_when_it_is_rotated() {
        let (from, to) = validity(SIGNED).expect("validity");
        // openssl x509 -dates: notBefore=Nov 26 00:25:35 2026 GMT,
        // notAfter=Dec 25 20:31:19 2026 GMT.
        assert_eq!(from, 1_795_652_735);
        assert_eq!(to, 1_798_230_679);
        assert_eq!(rotation_at(1000, 2000, 0.7), 1700);
        assert_eq!(rotation_at(1000, 2000, 0.9), 1900);
        assert_eq!(validity(b"not pem"), None);
        // Expired (or garbage): bootstrap again; a clock in 1970 is not expiry.
        assert!(still_valid(SIGNED, from + 1));
        assert!(!still_valid(SIGNED, to));
        assert!(still_valid(SIGNED, 0));
        assert!(!still_valid(b"garbage", from + 1));
    }

    #[test]
    fn csr_outcomes() {
        assert_eq!(csr_outcome(&json!({"status": {}})).expect("waiting"), None);
        assert_eq!(
            csr_outcome(
                &json!({"status": {"conditions": [{"type": "Approved", "status": "True"}]}})
            )
            .expect("approved"),
            None
        );
        assert_eq!(
            csr_outcome(&json!({"status": {"certificate": "UEVN"}})).expect("signed"),
            Some(b"PEM".to_vec())
        );
        assert!(
            csr_outcome(&json!({"status": {"conditions": [{"type": "Denied", "status": "True", "message": "no"}]}}))
                .is_err_and(|e| e.to_string().contains("denied: no"))
        );
        let obj = csr_object("PEM", SIGNER, CLIENT_USAGES);
        assert_eq!(obj["spec"]["signerName"], SIGNER);
        assert_eq!(obj["spec"]["request"], "UEVN");
    }
}
