//! Pulls images from OCI distribution (v2) registries into picolet's
//! [`images`] store.
//!
//! - [`config`]: k3s's `registries.yaml` (mirrors, rewrites, per-host auth
//!   and TLS), reloaded when it changes.
//! - [`auth`]: the `WWW-Authenticate` challenge flow (basic, bearer tokens
//!   cached per scope).
//! - `client`: HTTP(S) over hyper + rustls (already in the binary), a
//!   connection per request, redirects, bounded waits.
//! - `pull`: resolves a reference (mirrors in order, then the registry),
//!   picks the host's platform from an index, downloads config and layers
//!   (in parallel, each digest once however many pulls want it, resumed
//!   with HTTP Range after a break, verified while streaming, visible only
//!   when complete), unpacks each layer as it arrives, then commits the
//!   image in one atomic write.

pub mod auth;
mod client;
pub mod config;
mod dockercfg;
mod pull;

use base64::Engine as _;

pub use config::Registries;
pub use pull::{Options, Progress, Puller};

/// Registry credentials, as CRI's `AuthConfig` carries them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
    /// An OAuth2 refresh token for the registry's token server.
    pub identity_token: String,
    /// A bearer token sent to the registry as it is.
    pub registry_token: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print secrets.
        f.debug_struct("Credential")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// Whether it says anything at all.
    pub fn is_empty(&self) -> bool {
        self.username.is_empty()
            && self.password.is_empty()
            && self.identity_token.is_empty()
            && self.registry_token.is_empty()
    }

    /// Every part, secret or not, in a fixed order.
    fn parts(&self) -> [&str; 4] {
        [
            &self.username,
            &self.password,
            &self.identity_token,
            &self.registry_token,
        ]
    }

    /// A digest of every secret in it: tells credentials apart without
    /// keeping them in another form.
    fn fingerprint(&self) -> String {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        for part in self.parts() {
            h.update(part.len().to_le_bytes());
            h.update(part.as_bytes());
        }
        format!("{:x}", h.finalize())
    }

    /// `base64(username:password)` for a `Basic` header.
    fn basic(&self) -> String {
        base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", self.username, self.password))
    }
}

/// Why a docker `auth` field (`base64(username:password)`) was refused.
/// Each message starts with the field's name, so a caller prefixes only
/// where the field sits (`auths."host".auth: not base64`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFieldError {
    #[error("auth: not base64")]
    NotBase64(#[source] base64::DecodeError),
    #[error("auth: not text")]
    NotText(#[source] std::string::FromUtf8Error),
    #[error("auth: not username:password")]
    NoColon,
}

/// Decodes a docker `auth` field: `base64(username:password)`.
pub fn decode_auth(auth: &str) -> Result<(String, String), AuthFieldError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(AuthFieldError::NotBase64)?;
    let text = String::from_utf8(bytes).map_err(AuthFieldError::NotText)?;
    let (u, p) = text.split_once(':').ok_or(AuthFieldError::NoColon)?;
    Ok((u.to_string(), p.to_string()))
}

/// What kind of failure, for the CRI status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No endpoint has the manifest (or a blob).
    NotFound,
    /// Credentials missing or refused.
    Unauthorized,
    /// No connection, TLS failure, timeout.
    Unreachable,
    /// Bad content, store errors, anything else.
    Other,
}

/// A pull error: its message names the reference, the registry (endpoint)
/// and the HTTP status or reason; an I/O or store error underneath stays
/// its source (its `io::ErrorKind` kept).
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
    pub source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    /// The error itself (an `io::Error` downcasts), not its `Arc`.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The same error, caused by `source`.
    #[must_use]
    pub fn caused_by(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_print_their_secrets() {
        let c = Credential {
            username: "edge".into(),
            password: "pull-me".into(),
            identity_token: "tok".into(),
            registry_token: "rt".into(),
        };
        let shown = format!("{c:?}");
        assert!(shown.contains("edge") && !shown.contains("pull-me") && !shown.contains("tok"));
        assert_eq!(c.basic(), "ZWRnZTpwdWxsLW1l");
        assert_eq!(
            decode_auth("ZWRnZTpwdWxsLW1l"),
            Ok(("edge".into(), "pull-me".into()))
        );
        assert_eq!(decode_auth("ZWRnZQ=="), Err(AuthFieldError::NoColon));
        assert_eq!(
            decode_auth("!!").map_err(|e| e.to_string()),
            Err("auth: not base64".to_string())
        );
    }
}
