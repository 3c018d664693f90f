//! kubelet's TLS bootstrap (`--bootstrap-kubeconfig`): a node that has only
//! a bootstrap token makes its own key (ECDSA P-256; the key never leaves
//! the node), asks the API server for a client certificate with a CSR for
//! the `kubernetes.io/kube-apiserver-client-kubelet` signer (CN
//! `system:node:<name>`, O `system:nodes`), waits until the controller
//! manager approved and signed it, and writes the certificate with its key
//! and a kubeconfig that uses them (0600, atomically). The CSR's DER is
//! built here ([`csr`], pure): no X.509 library for one structure.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper::Method;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use super::client::Client;
use super::config::KubeConfig;

/// The signer of kubelet client certificates.
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// How long to wait for approval and signing (kubelet: 15 minutes, then
/// it exits and is restarted).
const WAIT: Duration = Duration::from_secs(15 * 60);

/// A DER TLV.
fn der(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    let n = body.len();
    if n < 0x80 {
        v.push(u8::try_from(n).unwrap_or(0));
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        v.push(0x80 | u8::try_from(bytes.len()).unwrap_or(0));
        v.extend(bytes);
    }
    v.extend_from_slice(body);
    v
}

fn seq(parts: &[&[u8]]) -> Vec<u8> {
    der(0x30, &parts.concat())
}

// DER contents of the object identifiers used.
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_PRIME256V1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// The CertificationRequestInfo of a node: subject O=system:nodes,
/// CN=system:node:<node>, the P-256 public key, no attributes.
pub fn request_info(node: &str, public_key: &[u8]) -> Vec<u8> {
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
    seq(&[&der(0x02, &[0]), &name, &spki, &[0xa0, 0x00]])
}

/// A PKCS#10 CSR for `node` signed with `key` (DER).
pub fn csr(node: &str, key: &EcdsaKeyPair) -> Result<Vec<u8>, String> {
    let info = request_info(node, key.public_key().as_ref());
    let sig = key
        .sign(&SystemRandom::new(), &info)
        .map_err(|_| "sign the CSR".to_string())?;
    let mut bits = vec![0u8];
    bits.extend_from_slice(sig.as_ref());
    Ok(seq(&[
        &info,
        &seq(&[&der(0x06, OID_ECDSA_SHA256)]),
        &der(0x03, &bits),
    ]))
}

/// Base64 (through k8s-openapi's ByteString, which the API types use).
fn base64(bytes: &[u8]) -> String {
    serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec()))
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// PEM of `der` with `label`, 64 characters a line.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The CertificateSigningRequest object.
pub fn csr_object(csr_pem: &str) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "node-csr-"},
        "spec": {
            "request": base64(csr_pem.as_bytes()),
            "signerName": SIGNER,
            "usages": ["digital signature", "client auth"],
        },
    })
}

/// What a CSR's status says: the certificate (PEM), still waiting, or
/// refused (why).
pub fn csr_outcome(csr: &Value) -> Result<Option<Vec<u8>>, String> {
    for c in csr["status"]["conditions"].as_array().into_iter().flatten() {
        if matches!(c["type"].as_str(), Some("Denied" | "Failed")) && c["status"] != "False" {
            return Err(format!(
                "the certificate signing request was {}: {}",
                c["type"].as_str().unwrap_or("").to_lowercase(),
                c["message"].as_str().unwrap_or("")
            ));
        }
    }
    match csr["status"]["certificate"].as_str() {
        Some(b64) if !b64.is_empty() => {
            serde_json::from_value::<k8s_openapi::ByteString>(json!(b64))
                .map(|b| Some(b.0))
                .map_err(|e| format!("the signed certificate: {e}"))
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
        Some(ca) => format!("certificate-authority-data: {}", base64(ca)),
        None => "insecure-skip-tls-verify: true".into(),
    };
    let file = pem_file.display();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n    server: https://{host}:{port}\n    {trust}\nusers:\n- name: default-auth\n  user:\n    client-certificate: {file}\n    client-key: {file}\ncontexts:\n- name: default-context\n  context: {{cluster: default-cluster, user: default-auth}}\ncurrent-context: default-context\n",
        port = cfg.port
    )
}

/// With `kubeconfig` missing: bootstraps it with the token of
/// `bootstrap`; the certificate and key go to `<cert_dir>/picolet-client-
/// current.pem`. A key made before (a restart while waiting) is used again,
/// as kubelet does, so no CSR is orphaned.
pub async fn ensure(
    kubeconfig_path: &Path,
    bootstrap: &Path,
    cert_dir: &Path,
    node: &str,
) -> Result<(), String> {
    if kubeconfig_path.exists() {
        return Ok(());
    }
    let cfg = super::config::load(bootstrap).map_err(|e| e.to_string())?;
    let client = Client::new(&cfg, &format!("picolet/{}", env!("CARGO_PKG_VERSION")))
        .map_err(|e| format!("{}: {e}", bootstrap.display()))?;
    edge_config::private_dir(cert_dir).map_err(|e| format!("{}: {e}", cert_dir.display()))?;
    let key_path = cert_dir.join("picolet-client.key.tmp");
    let rng = SystemRandom::new();
    let pkcs8 = match std::fs::read(&key_path) {
        Ok(k) => k,
        Err(_) => {
            let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
                .map_err(|_| "generate the node's key".to_string())?;
            edge_config::write_atomic(&key_path, doc.as_ref())
                .map_err(|e| format!("{}: {e}", key_path.display()))?;
            doc.as_ref().to_vec()
        }
    };
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, &rng)
        .map_err(|e| format!("{}: {e}", key_path.display()))?;
    let request = pem("CERTIFICATE REQUEST", &csr(node, &key)?);
    let created = client
        .json(
            Method::POST,
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            Some(&csr_object(&request)),
            None,
        )
        .await
        .map_err(|e| format!("create the certificate signing request: {e}"))?;
    let name = created["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    tracing::info!(csr = %name, "TLS bootstrap: waiting for the certificate signing request to be approved and signed");
    let path = format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}");
    let deadline = tokio::time::Instant::now() + WAIT;
    let cert = loop {
        match client.get(&path).await {
            Ok(csr) => {
                if let Some(cert) = csr_outcome(&csr)? {
                    break cert;
                }
            }
            Err(e) => tracing::debug!("read {name}: {e}"),
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{name} was not signed within {WAIT:?}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let pem_path = cert_dir.join("picolet-client-current.pem");
    let mut both = cert;
    both.extend(pem("PRIVATE KEY", &pkcs8).into_bytes());
    edge_config::write_atomic(&pem_path, &both)
        .map_err(|e| format!("{}: {e}", pem_path.display()))?;
    edge_config::write_atomic(kubeconfig_path, kubeconfig(&cfg, &pem_path).as_bytes())
        .map_err(|e| format!("{}: {e}", kubeconfig_path.display()))?;
    let _ = std::fs::remove_file(&key_path);
    tracing::info!(kubeconfig = %kubeconfig_path.display(), "TLS bootstrap: client certificate received");
    Ok(())
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
        let request = csr("pk-edge", &key).expect("csr");
        let info = request_info("pk-edge", key.public_key().as_ref());
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

    #[test]
    fn long_lengths_are_encoded_in_long_form() {
        assert_eq!(der(0x04, &[0; 3])[..2], [0x04, 3]);
        assert_eq!(der(0x04, &[0; 200])[..3], [0x04, 0x81, 200]);
        assert_eq!(der(0x04, &[0; 300])[..4], [0x04, 0x82, 0x01, 0x2c]);
    }

    #[test]
    fn csr_outcomes() {
        assert_eq!(csr_outcome(&json!({"status": {}})), Ok(None));
        assert_eq!(
            csr_outcome(
                &json!({"status": {"conditions": [{"type": "Approved", "status": "True"}]}})
            ),
            Ok(None)
        );
        assert_eq!(
            csr_outcome(&json!({"status": {"certificate": "UEVN"}})),
            Ok(Some(b"PEM".to_vec()))
        );
        assert!(
            csr_outcome(&json!({"status": {"conditions": [{"type": "Denied", "status": "True", "message": "no"}]}}))
                .is_err_and(|e| e.contains("denied: no"))
        );
        let obj = csr_object("PEM");
        assert_eq!(obj["spec"]["signerName"], SIGNER);
        assert_eq!(obj["spec"]["request"], "UEVN");
    }
}
