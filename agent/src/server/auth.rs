//! Who a request on the API port is, and whether they may (kubelet's
//! `server/auth.go` and the delegating authenticator and authorizer it is
//! built from). Authentication, in order: the TLS client certificate
//! (verified against `clientCAFile` in the handshake; CN is the user, O
//! the groups), a bearer token (a TokenReview on the API server, cached
//! for `cacheTTL`, failures for 10 s), else `system:anonymous` if
//! anonymous access is on, else 401. Authorization: `AlwaysAllow`, or a
//! SubjectAccessReview per request attributes ([`attributes`], kubelet's
//! mapping of path to `nodes/<subresource>`), cached for
//! `cacheAuthorizedTTL` / `cacheUnauthorizedTTL`. The review bodies are
//! built and read by pure functions, tested against the real API
//! server's answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::kube::client::Client;

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
    pub uid: String,
    pub extra: Vec<(String, Vec<String>)>,
}

impl Identity {
    pub fn anonymous() -> Self {
        Self {
            user: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            uid: String::new(),
            extra: Vec::new(),
        }
    }

    /// A client certificate's subject: CN, O; `system:authenticated` added
    /// as the API server adds it.
    pub fn from_certificate(cn: String, mut orgs: Vec<String>) -> Self {
        orgs.push("system:authenticated".into());
        Self {
            user: cn,
            groups: orgs,
            uid: String::new(),
            extra: Vec::new(),
        }
    }
}

/// What a request asks to do, as an API request on the node object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: &'static str,
    pub subresource: &'static str,
    pub node: String,
}

/// `path` is `base` or below it (kubelet's `isSubpath`).
fn is_subpath(path: &str, base: &str) -> bool {
    let base = base.trim_end_matches('/');
    path == base || path.strip_prefix(base).is_some_and(|r| r.starts_with('/'))
}

/// kubelet's `GetRequestAttributes`: the verb from the method, resource
/// `nodes`, name the node, subresource `stats`, `metrics`, `log` for
/// `/stats/*`, `/metrics/*`, `/logs/*`, else `proxy` (exec, attach,
/// port-forward, containerLogs, pods, ... all need `nodes/proxy`).
pub fn attributes(method: &Method, path: &str, node: &str) -> Attributes {
    let verb = match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let subresource = if is_subpath(path, "/stats/") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs/") {
        "log"
    } else {
        "proxy"
    };
    Attributes {
        verb,
        subresource,
        node: node.into(),
    }
}

/// The TokenReview that asks the API server who `token` is.
pub fn token_review(token: &str) -> Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    })
}

/// The API server said no (a TokenReview or SubjectAccessReview): its
/// reason, as it wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refused {
    pub reason: String,
}

/// The user of an answered TokenReview; Err with the server's reason when
/// the token was not accepted.
pub fn reviewed_identity(review: &Value) -> Result<Identity, Refused> {
    let status = &review["status"];
    if status["authenticated"] != true {
        let why = status["error"]
            .as_str()
            .unwrap_or("the token was not accepted");
        return Err(Refused {
            reason: why.to_string(),
        });
    }
    let u = &status["user"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    let mut extra: Vec<(String, Vec<String>)> = u["extra"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), strings(v)))
        .collect();
    extra.sort();
    Ok(Identity {
        user: u["username"].as_str().unwrap_or_default().to_string(),
        groups: strings(&u["groups"]),
        uid: u["uid"].as_str().unwrap_or_default().to_string(),
        extra,
    })
}

/// The SubjectAccessReview for `who` doing `what`.
pub fn access_review(who: &Identity, what: &Attributes) -> Value {
    let extra: serde_json::Map<String, Value> = who
        .extra
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": who.user,
            "groups": who.groups,
            "uid": who.uid,
            "extra": extra,
            "resourceAttributes": {
                "verb": what.verb,
                "version": "v1",
                "resource": "nodes",
                "subresource": what.subresource,
                "name": what.node,
            },
        },
    })
}

/// An answered SubjectAccessReview: allowed, or why not.
pub fn reviewed_access(review: &Value) -> Result<(), Refused> {
    let status = &review["status"];
    if status["allowed"] == true && status["denied"] != true {
        return Ok(());
    }
    Err(Refused {
        reason: status["reason"]
            .as_str()
            .or(status["evaluationError"].as_str())
            .unwrap_or_default()
            .to_string(),
    })
}

/// kubelet's 403 text.
pub fn forbidden_message(who: &Identity, what: &Attributes) -> String {
    format!(
        "Forbidden (user={}, verb={}, resource=nodes, subresource={})",
        who.user, what.verb, what.subresource
    )
}

/// Answers kept for a while, bounded (oldest entries go first when full).
#[derive(Debug)]
struct Cache<K, V> {
    entries: HashMap<K, (Instant, V)>,
}

/// Most answers kept per cache (kubelet's webhook caches: 1024 / 10000).
const CACHE_MAX: usize = 1024;
/// How long a refused token is remembered (the API server's webhook
/// authenticator: 10 s).
const FAILED_TOKEN_TTL: Duration = Duration::from_secs(10);

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Cache<K, V> {
    fn new() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }

    fn get(&mut self, k: &K, now: Instant) -> Option<V> {
        match self.entries.get(k) {
            Some((until, v)) if *until > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(k);
                None
            }
            None => None,
        }
    }

    fn put(&mut self, k: K, v: V, ttl: Duration, now: Instant) {
        if self.entries.len() >= CACHE_MAX {
            self.entries.retain(|_, (until, _)| *until > now);
            if self.entries.len() >= CACHE_MAX
                && let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (until, _))| *until)
                    .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(k, (now + ttl, v));
    }
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no credentials that authenticate.
    Unauthorized,
    /// 403, with kubelet's message.
    Forbidden(String),
    /// 500: the API server could not be asked.
    Error(String),
}

/// The authenticator and authorizer of the API port.
#[derive(Debug)]
pub struct Auth {
    pub node: String,
    pub anonymous: bool,
    /// TokenReviews and SubjectAccessReviews go here; None: no tokens, and
    /// authorization is AlwaysAllow.
    pub client: Option<Arc<Client>>,
    pub tokens: bool,
    pub token_ttl: Duration,
    pub webhook_authz: bool,
    pub allowed_ttl: Duration,
    pub denied_ttl: Duration,
    /// The local CA's public key ([`super::local`]): its certificates
    /// are authorized on the node itself.
    pub local_ca: Option<Vec<u8>>,
    token_cache: std::sync::Mutex<Cache<[u8; 32], Option<Identity>>>,
    access_cache: std::sync::Mutex<Cache<(Identity, Attributes), Result<(), Refused>>>,
}

impl Auth {
    pub fn new(
        node: String,
        config: &edge_config::config::Config,
        client: Option<Arc<Client>>,
    ) -> Self {
        let a = &config.authentication;
        let z = &config.authorization;
        Self {
            node,
            anonymous: a.anonymous,
            tokens: a.webhook && client.is_some(),
            token_ttl: a.webhook_cache_ttl,
            webhook_authz: config.authorization_mode()
                == edge_config::config::AuthorizationMode::Webhook,
            allowed_ttl: z.cache_authorized_ttl,
            denied_ttl: z.cache_unauthorized_ttl,
            client,
            local_ca: None,
            token_cache: std::sync::Mutex::new(Cache::new()),
            access_cache: std::sync::Mutex::new(Cache::new()),
        }
    }

    /// Trusts the local CA whose public key is `public_key`.
    #[must_use]
    pub fn with_local_ca(mut self, public_key: Vec<u8>) -> Self {
        self.local_ca = Some(public_key);
        self
    }

    /// Who a request is and whether they may: the client certificate the
    /// handshake verified (`cert`, DER), else `bearer`, else anonymous;
    /// then authorization of `method` on `path`, except for the local
    /// CA's certificates: root on the device, who made them, may do
    /// anything on it, also offline and unknown to any API server.
    pub async fn admit(
        &self,
        cert: Option<&[u8]>,
        bearer: Option<&str>,
        method: &Method,
        path: &str,
    ) -> Result<Identity, Refusal> {
        let from_cert = cert.and_then(|der| {
            let (cn, orgs) = crate::certificate::x509::subject(der)?;
            let local = self
                .local_ca
                .as_deref()
                .is_some_and(|key| crate::certificate::x509::signed_by(der, key));
            Some((Identity::from_certificate(cn, orgs), local))
        });
        let who = match from_cert {
            Some((who, true)) => return Ok(who),
            Some((who, false)) => who,
            None => self.authenticate(bearer).await?,
        };
        self.authorize(&who, &attributes(method, path, &self.node))
            .await?;
        Ok(who)
    }

    /// Who presents `bearer` (or nobody): certificate identities are
    /// resolved by the caller first.
    pub async fn authenticate(&self, bearer: Option<&str>) -> Result<Identity, Refusal> {
        if let Some(token) = bearer
            && self.tokens
            && let Some(client) = &self.client
        {
            let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            let cached = crate::mutex::lock(&self.token_cache).get(&key, Instant::now());
            let known = match cached {
                Some(known) => known,
                None => {
                    let answer = client
                        .json(
                            Method::POST,
                            "/apis/authentication.k8s.io/v1/tokenreviews",
                            Some(&token_review(token)),
                            None,
                        )
                        .await
                        .map_err(|e| Refusal::Error(format!("token review: {e}")))?;
                    let known = reviewed_identity(&answer)
                        .inspect_err(|why| tracing::debug!("token refused: {why}"))
                        .ok();
                    let ttl = if known.is_some() {
                        self.token_ttl
                    } else {
                        FAILED_TOKEN_TTL
                    };
                    crate::mutex::lock(&self.token_cache).put(
                        key,
                        known.clone(),
                        ttl,
                        Instant::now(),
                    );
                    known
                }
            };
            if let Some(id) = known {
                return Ok(id);
            }
            return Err(Refusal::Unauthorized);
        }
        if self.anonymous {
            return Ok(Identity::anonymous());
        }
        Err(Refusal::Unauthorized)
    }

    /// Whether `who` may do `what`.
    pub async fn authorize(&self, who: &Identity, what: &Attributes) -> Result<(), Refusal> {
        let Some(client) = self.client.as_ref().filter(|_| self.webhook_authz) else {
            return Ok(());
        };
        let key = (who.clone(), what.clone());
        let cached = crate::mutex::lock(&self.access_cache).get(&key, Instant::now());
        let answer = match cached {
            Some(a) => a,
            None => {
                let review = client
                    .json(
                        Method::POST,
                        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                        Some(&access_review(who, what)),
                        None,
                    )
                    .await
                    .map_err(|e| Refusal::Error(format!("subject access review: {e}")))?;
                let answer = reviewed_access(&review);
                let ttl = if answer.is_ok() {
                    self.allowed_ttl
                } else {
                    self.denied_ttl
                };
                crate::mutex::lock(&self.access_cache).put(
                    key,
                    answer.clone(),
                    ttl,
                    Instant::now(),
                );
                answer
            }
        };
        answer.map_err(|why| {
            tracing::debug!(user = %who.user, verb = what.verb, subresource = what.subresource, "forbidden: {why}");
            Refusal::Forbidden(forbidden_message(who, what))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every endpoint's attributes (kubelet 1.26 `GetRequestAttributes`).
    #[test]
    fn every_endpoint_maps_to_its_node_subresource() {
        let table: &[(Method, &str, &str, &str)] = &[
            (Method::GET, "/pods", "get", "proxy"),
            (Method::GET, "/pods/", "get", "proxy"),
            (Method::GET, "/runningpods/", "get", "proxy"),
            (Method::GET, "/healthz", "get", "proxy"),
            (Method::GET, "/configz", "get", "proxy"),
            (Method::GET, "/spec/", "get", "proxy"),
            (Method::GET, "/stats/summary", "get", "stats"),
            (Method::GET, "/stats/", "get", "stats"),
            (Method::GET, "/stats", "get", "stats"),
            (Method::GET, "/statsfoo", "get", "proxy"),
            (Method::GET, "/metrics", "get", "metrics"),
            (Method::GET, "/metrics/cadvisor", "get", "metrics"),
            (Method::GET, "/metrics/resource", "get", "metrics"),
            (Method::GET, "/metrics/probes", "get", "metrics"),
            (Method::GET, "/metricsx", "get", "proxy"),
            (Method::GET, "/logs/", "get", "log"),
            (Method::GET, "/logs/syslog", "get", "log"),
            (Method::GET, "/containerLogs/ns/pod/c", "get", "proxy"),
            (Method::POST, "/exec/ns/pod/c", "create", "proxy"),
            (Method::GET, "/exec/ns/pod/c", "get", "proxy"),
            (Method::POST, "/attach/ns/pod/c", "create", "proxy"),
            (Method::POST, "/portForward/ns/pod", "create", "proxy"),
            (Method::POST, "/run/ns/pod/c", "create", "proxy"),
            (Method::PUT, "/pods", "update", "proxy"),
            (Method::PATCH, "/pods", "patch", "proxy"),
            (Method::DELETE, "/pods", "delete", "proxy"),
            (Method::HEAD, "/metrics", "get", "metrics"),
        ];
        for (method, path, verb, sub) in table {
            let a = attributes(method, path, "pk-node");
            assert_eq!(
                (a.verb, a.subresource, a.node.as_str()),
                (*verb, *sub, "pk-node"),
                "{method} {path}"
            );
        }
    }

    /// What the real kube-apiserver (v1.26, by hand) answered to
    /// [`token_review`] for a service account token, and for a garbage one.
    #[test]
    fn token_reviews_read_as_the_api_server_answers_them() {
        let ok: Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/tokenreview-ok.json"
        )))
        .expect("json");
        let id = reviewed_identity(&ok).expect("authenticated");
        assert_eq!(id.user, "system:serviceaccount:default:reader");
        assert!(id.groups.contains(&"system:serviceaccounts".to_string()));
        assert!(!id.uid.is_empty());
        let bad: Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/tokenreview-bad.json"
        )))
        .expect("json");
        assert!(reviewed_identity(&bad).is_err());
        assert_eq!(
            token_review("t")["spec"]["token"],
            "t",
            "the token is sent as the spec"
        );
    }

    #[test]
    fn access_reviews_read_as_the_api_server_answers_them() {
        let who = Identity::from_certificate("admin".into(), vec!["system:masters".into()]);
        let what = attributes(&Method::GET, "/stats/summary", "pk-node");
        let body = access_review(&who, &what);
        assert_eq!(body["spec"]["resourceAttributes"]["subresource"], "stats");
        assert_eq!(body["spec"]["groups"][1], "system:authenticated");
        let allowed: Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/sar-allowed.json"
        )))
        .expect("json");
        assert_eq!(reviewed_access(&allowed), Ok(()));
        let denied: Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/sar-denied.json"
        )))
        .expect("json");
        assert!(reviewed_access(&denied).is_err());
        assert_eq!(
            forbidden_message(&who, &what),
            "Forbidden (user=admin, verb=get, resource=nodes, subresource=stats)"
        );
    }

    #[test]
    fn caches_expire_and_stay_bounded() {
        let mut c: Cache<u32, u32> = Cache::new();
        let t0 = Instant::now();
        c.put(1, 10, Duration::from_secs(5), t0);
        assert_eq!(c.get(&1, t0 + Duration::from_secs(4)), Some(10));
        assert_eq!(c.get(&1, t0 + Duration::from_secs(5)), None);
        let max = u32::try_from(CACHE_MAX).expect("small");
        for i in 0..max + 10 {
            c.put(i, i, Duration::from_secs(60 + u64::from(i)), t0);
        }
        assert!(c.entries.len() <= CACHE_MAX);
        assert_eq!(c.get(&0, t0), None, "the oldest went first");
    }
}
