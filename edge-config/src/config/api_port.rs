//! The API port's `authentication` and `authorization` blocks of the
//! KubeletConfiguration, with kubelet's defaults.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{Config, FieldError};

/// Parses a duration field (name, value, default).
pub(crate) type DurationField<'a> =
    &'a dyn Fn(&str, &Option<String>, &str) -> Result<Duration, FieldError>;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawAuthentication {
    x509: Option<RawX509>,
    webhook: Option<RawWebhookAuthn>,
    anonymous: Option<RawEnabled>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawX509 {
    #[serde(rename = "clientCAFile")]
    client_ca_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawWebhookAuthn {
    enabled: Option<bool>,
    #[serde(rename = "cacheTTL")]
    cache_ttl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnabled {
    enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawAuthorization {
    mode: Option<String>,
    webhook: Option<RawWebhookAuthz>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawWebhookAuthz {
    #[serde(rename = "cacheAuthorizedTTL")]
    cache_authorized_ttl: Option<String>,
    #[serde(rename = "cacheUnauthorizedTTL")]
    cache_unauthorized_ttl: Option<String>,
}

/// kubelet's `authentication` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authentication {
    /// `x509.clientCAFile`: client certificates signed by a CA in this
    /// bundle authenticate as their CN (user) and O (groups).
    pub client_ca_file: Option<PathBuf>,
    /// `webhook.enabled` (default true): bearer tokens are checked with a
    /// TokenReview on the API server (cluster mode only).
    pub webhook: bool,
    /// `webhook.cacheTTL` (default 2m): how long a review's answer is kept.
    pub webhook_cache_ttl: Duration,
    /// `anonymous.enabled` (default false): a request without credentials
    /// is `system:anonymous`; otherwise it gets 401.
    pub anonymous: bool,
}

/// kubelet's `authorization.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    /// A SubjectAccessReview on the API server per (cached) request.
    Webhook,
}

/// kubelet's `authorization` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// None: `Webhook` in cluster mode, `AlwaysAllow` otherwise (with no
    /// API server there is nobody to ask; who may connect at all is then
    /// decided by authentication).
    pub mode: Option<AuthorizationMode>,
    /// `webhook.cacheAuthorizedTTL` (default 5m).
    pub cache_authorized_ttl: Duration,
    /// `webhook.cacheUnauthorizedTTL` (default 30s).
    pub cache_unauthorized_ttl: Duration,
}

impl Config {
    /// Whether the agent joins a cluster (a kubeconfig or a bootstrap
    /// kubeconfig is set).
    pub fn cluster_mode(&self) -> bool {
        self.kubeconfig.is_some() || self.bootstrap_kubeconfig.is_some()
    }

    /// Where the API port binds: `address`, else 0.0.0.0 in cluster mode
    /// and 127.0.0.1 otherwise.
    pub fn api_address(&self) -> IpAddr {
        self.address.unwrap_or(if self.cluster_mode() {
            IpAddr::from([0, 0, 0, 0])
        } else {
            IpAddr::from([127, 0, 0, 1])
        })
    }

    /// The authorization mode in force (`authorization.mode`, else by mode).
    pub fn authorization_mode(&self) -> AuthorizationMode {
        self.authorization.mode.unwrap_or(if self.cluster_mode() {
            AuthorizationMode::Webhook
        } else {
            AuthorizationMode::AlwaysAllow
        })
    }
}

/// Reads both blocks; `dur` parses a duration field, `err` makes an error.
pub(crate) fn parse(
    authentication: Option<RawAuthentication>,
    authorization: Option<RawAuthorization>,
    dur: DurationField<'_>,
    err: &dyn Fn(&str, String) -> FieldError,
) -> Result<(Authentication, Authorization), FieldError> {
    let authn = authentication.unwrap_or_default();
    let webhook = authn.webhook.unwrap_or_default();
    let authentication = Authentication {
        client_ca_file: authn.x509.and_then(|x| x.client_ca_file).map(PathBuf::from),
        webhook: webhook.enabled.unwrap_or(true),
        webhook_cache_ttl: dur("authentication.webhook.cacheTTL", &webhook.cache_ttl, "2m")?,
        anonymous: authn.anonymous.and_then(|a| a.enabled).unwrap_or(false),
    };
    let authz = authorization.unwrap_or_default();
    let authz_webhook = authz.webhook.unwrap_or_default();
    let authorization = Authorization {
        mode: match authz.mode.as_deref() {
            None => None,
            Some("AlwaysAllow") => Some(AuthorizationMode::AlwaysAllow),
            Some("Webhook") => Some(AuthorizationMode::Webhook),
            Some(m) => {
                return Err(err(
                    "authorization.mode",
                    format!("{m:?} (want \"AlwaysAllow\" or \"Webhook\")"),
                ));
            }
        },
        cache_authorized_ttl: dur(
            "authorization.webhook.cacheAuthorizedTTL",
            &authz_webhook.cache_authorized_ttl,
            "5m",
        )?,
        cache_unauthorized_ttl: dur(
            "authorization.webhook.cacheUnauthorizedTTL",
            &authz_webhook.cache_unauthorized_ttl,
            "30s",
        )?,
    };
    Ok((authentication, authorization))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{AuthorizationMode, Config, FieldError};

    fn parse(text: &str) -> Result<Config, FieldError> {
        Config::parse(text, Path::new("c.yaml"))
    }

    #[test]
    fn kubelets_defaults_and_the_mode_by_cluster_mode() {
        let c = parse("").expect("defaults");
        let a = &c.authentication;
        assert_eq!(
            (a.client_ca_file.as_deref(), a.webhook, a.anonymous),
            (None, true, false)
        );
        assert_eq!(a.webhook_cache_ttl.as_secs(), 120);
        assert_eq!(c.authorization.cache_authorized_ttl.as_secs(), 300);
        assert_eq!(c.authorization.cache_unauthorized_ttl.as_secs(), 30);
        assert_eq!(c.authorization_mode(), AuthorizationMode::AlwaysAllow);
        assert_eq!(c.api_address().to_string(), "127.0.0.1");
        assert_eq!((c.read_only_port, c.tls.is_none()), (0, true));
        let c = parse("picolet: {kubeconfig: /k}").expect("cluster");
        assert_eq!(c.authorization_mode(), AuthorizationMode::Webhook);
        assert_eq!(c.api_address().to_string(), "0.0.0.0");
        let c = parse("address: 127.0.0.1\npicolet: {kubeconfig: /k}").expect("cluster");
        assert_eq!(c.api_address().to_string(), "127.0.0.1");
    }

    #[test]
    fn the_blocks_as_kubelet_spells_them() {
        let c = parse(
            "authentication:\n  x509: {clientCAFile: /ca.crt}\n  webhook: {enabled: false, cacheTTL: 10s}\n  anonymous: {enabled: true}\n\
             authorization:\n  mode: Webhook\n  webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 5s}\n\
             tlsCertFile: /s.crt\ntlsPrivateKeyFile: /s.key\nreadOnlyPort: 10255\n",
        )
        .expect("parses");
        let a = &c.authentication;
        assert_eq!(a.client_ca_file.as_deref(), Some(Path::new("/ca.crt")));
        assert!(!a.webhook && a.anonymous);
        assert_eq!(a.webhook_cache_ttl.as_secs(), 10);
        assert_eq!(c.authorization.mode, Some(AuthorizationMode::Webhook));
        assert_eq!(c.authorization.cache_unauthorized_ttl.as_secs(), 5);
        assert_eq!(c.read_only_port, 10255);
        assert!(c.tls.is_some());
    }

    #[test]
    fn mistakes_name_their_field() {
        for (text, field) in [
            ("authorization: {mode: RBAC}", "authorization.mode"),
            (
                "authentication: {webhook: {cacheTTL: soon}}",
                "authentication.webhook.cacheTTL",
            ),
            (
                "authentication: {x509: {clientCaFile: /x}}",
                "authentication.x509",
            ),
            ("tlsCertFile: /s.crt", "tlsPrivateKeyFile"),
            ("tlsPrivateKeyFile: /s.key", "tlsCertFile"),
        ] {
            let e = parse(text).expect_err(text).to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
    }
}
