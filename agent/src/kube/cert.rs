//! A certificate and key as rustls signs with them, replaceable while in
//! use (rotation): the API client's client certificate and the API port's
//! serving certificate.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate and key (PEM) rustls cannot sign with; `what` is
/// "client" or "serving".
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the {what} certificate: {source}")]
    CertPem {
        what: &'static str,
        source: rustls::pki_types::pem::Error,
    },
    #[error("the {what} certificate file holds no certificate")]
    NoCert { what: &'static str },
    #[error("the {what} key: {source}")]
    KeyPem {
        what: &'static str,
        source: rustls::pki_types::pem::Error,
    },
    #[error("the {what} key: {source}")]
    Key {
        what: &'static str,
        source: rustls::Error,
    },
}

/// A certificate and key replaceable while in use (rotation): new
/// connections present the current one. The API client's client
/// certificate, and the API port's serving certificate.
#[derive(Debug)]
pub struct CurrentCert(std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>);

impl CurrentCert {
    pub fn new(key: rustls::sign::CertifiedKey) -> Self {
        Self(std::sync::RwLock::new(Arc::new(key)))
    }

    pub fn set(&self, key: rustls::sign::CertifiedKey) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(key);
    }

    fn get(&self) -> Arc<rustls::sign::CertifiedKey> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl rustls::server::ResolvesServerCert for CurrentCert {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.get())
    }
}

impl rustls::client::ResolvesClientCert for CurrentCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.get())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A certificate chain and key (PEM) as rustls signs with them; `what`
/// ("client", "serving") names them in errors.
pub fn certified_key(
    provider: &rustls::crypto::CryptoProvider,
    cert: &[u8],
    key: &[u8],
    what: &'static str,
) -> Result<rustls::sign::CertifiedKey, KeyError> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| KeyError::CertPem { what, source })?;
    if chain.is_empty() {
        return Err(KeyError::NoCert { what });
    }
    let key =
        PrivateKeyDer::from_pem_slice(key).map_err(|source| KeyError::KeyPem { what, source })?;
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|source| KeyError::Key { what, source })?;
    Ok(rustls::sign::CertifiedKey::new(chain, signer))
}
