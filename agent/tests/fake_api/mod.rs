//! A local HTTPS listener standing in for kube-apiserver in tests: a
//! self-signed certificate for 127.0.0.1 and the ALPN protocols given.

use std::sync::Arc;

use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair};

/// The listener (a port from the kernel), its TLS acceptor and the
/// certificate (PEM) clients may trust.
pub async fn listener(
    alpn: &[&[u8]],
) -> (tokio::net::TcpListener, tokio_rustls::TlsAcceptor, Vec<u8>) {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("key");
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .expect("key");
    let now = 1_700_000_000;
    let der = agent::certificate::x509::self_signed(
        "fake-apiserver",
        &[],
        &["127.0.0.1".parse().expect("ip")],
        &key,
        now,
        now + 100 * 365 * 86_400,
    )
    .expect("cert");
    let cert = agent::certificate::x509::pem("CERTIFICATE", &der).into_bytes();
    let key_pem = agent::certificate::x509::pem("PRIVATE KEY", pkcs8.as_ref()).into_bytes();
    let current = agent::server::tls::current(&cert, &key_pem).expect("current");
    let mut tls = (*agent::server::tls::server_config(current, None, None).expect("tls")).clone();
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    (listener, acceptor, cert)
}
