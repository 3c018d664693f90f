//! The node's certificates, kubelet's `pkg/kubelet/certificate`: the
//! client certificate from TLS bootstrap ([`bootstrap`]), the API port's
//! serving certificate ([`serving`]) and the DER both are built from
//! ([`x509`]).

pub mod bootstrap;
pub mod serving;
pub mod x509;

use std::path::PathBuf;

use crate::kube::cert::KeyError;
use crate::kube::client;

/// Why a certificate could not be made, asked for or put in use.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The system's random source failed (ring says no more).
    #[error("generate {0}: no randomness")]
    Random(&'static str),
    #[error("the key in {}: {rejected}", path.display())]
    BadKey {
        path: PathBuf,
        rejected: ring::error::KeyRejected,
    },
    #[error("sign the {0}")]
    Sign(&'static str),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("the bootstrap kubeconfig: {0}")]
    Kubeconfig(#[from] edge_config::FieldError),
    #[error("{}: {source}", path.display())]
    Client {
        path: PathBuf,
        source: client::Error,
    },
    #[error("{what}: {source}")]
    Api {
        what: &'static str,
        source: client::Error,
    },
    /// The API server refused the request (`Denied` or `Failed`).
    #[error("the certificate signing request was {verdict}: {message}")]
    Refused { verdict: String, message: String },
    #[error("the signed certificate: {0}")]
    Signed(serde_json::Error),
    #[error("{name} was not signed within {waited:?}")]
    NotSigned {
        name: String,
        waited: std::time::Duration,
    },
}

impl Error {
    /// `.map_err(Error::io("write", &path))`.
    pub fn io(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_path_buf();
        move |source| Error::Io { op, path, source }
    }
}
