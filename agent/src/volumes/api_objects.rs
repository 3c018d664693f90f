//! [`crate::volumes::objects::ApiObjects`] on the API server: configMaps and
//! secrets read when a pod needs them (what the Node authorizer allows: the
//! objects of pods bound to this node), service account tokens from
//! TokenRequest bound to the pod, kept until 80 % of their life (kubelet's
//! token manager).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::kube::client::Client;
use crate::volumes::objects::{ApiObjects, BoxFut, Data, FetchError, TokenRequest};

/// A TokenRequest answered without a token.
#[derive(Debug, thiserror::Error)]
#[error("{0}: no token in the answer")]
struct NoToken(String);

pub struct Objects {
    client: Arc<Client>,
    /// (ns, service account, pod uid, audience, seconds) → token, when it
    /// is due for renewal.
    tokens: Mutex<HashMap<String, (String, tokio::time::Instant)>>,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects").finish_non_exhaustive()
    }
}

impl Objects {
    pub fn new(client: Arc<Client>) -> Self {
        Self {
            client,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    async fn get(&self, path: String) -> Result<Option<Value>, FetchError> {
        match self.client.get(&path).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.status() == Some(StatusCode::NOT_FOUND) => Ok(None),
            Err(e) => Err(FetchError(Box::new(e))),
        }
    }
}

/// A base64 string's bytes.
fn base64(v: &Value) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str()?)
        .ok()
}

/// A configMap's `data` (text) and `binaryData` (base64) as bytes.
pub fn config_map_data(cm: &Value) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for (k, v) in cm["data"].as_object().into_iter().flatten() {
        out.insert(k.clone(), v.as_str().unwrap_or("").as_bytes().to_vec());
    }
    for (k, v) in cm["binaryData"].as_object().into_iter().flatten() {
        if let Some(b) = base64(v) {
            out.insert(k.clone(), b);
        }
    }
    out
}

/// A secret's `data` (base64) as bytes.
pub fn secret_data(s: &Value) -> BTreeMap<String, Vec<u8>> {
    s["data"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), base64(v)?)))
        .collect()
}

/// The TokenRequest kubelet makes for a projected token.
pub fn token_request(r: &TokenRequest<'_>) -> Value {
    let mut spec = json!({
        "expirationSeconds": r.seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": r.pod_name, "uid": r.pod_uid},
    });
    // No audience: the API server's own (an empty list).
    spec["audiences"] = if r.audience.is_empty() {
        json!([])
    } else {
        json!([r.audience])
    };
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
}

impl ApiObjects for Objects {
    fn config_map<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<Data, FetchError>> {
        Box::pin(async move {
            let v = self
                .get(format!("/api/v1/namespaces/{ns}/configmaps/{name}"))
                .await?;
            Ok(v.as_ref().map(config_map_data))
        })
    }

    fn secret<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFut<'a, Result<Data, FetchError>> {
        Box::pin(async move {
            let v = self
                .get(format!("/api/v1/namespaces/{ns}/secrets/{name}"))
                .await?;
            Ok(v.as_ref().map(secret_data))
        })
    }

    fn token<'a>(&'a self, r: TokenRequest<'a>) -> BoxFut<'a, Result<String, FetchError>> {
        Box::pin(async move {
            let key = format!(
                "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
                r.namespace, r.service_account, r.pod_uid, r.audience, r.seconds
            );
            let now = tokio::time::Instant::now();
            {
                let mut cache = crate::mutex::lock(&self.tokens);
                cache.retain(|_, (_, renew)| *renew + Duration::from_secs(3600) > now);
                if let Some((t, renew)) = cache.get(&key)
                    && *renew > now
                {
                    return Ok(t.clone());
                }
            }
            let path = format!(
                "/api/v1/namespaces/{}/serviceaccounts/{}/token",
                r.namespace, r.service_account
            );
            let answer = self
                .client
                .json(Method::POST, &path, Some(&token_request(&r)), None)
                .await
                .map_err(|e| FetchError(Box::new(e)))?;
            let token = answer["status"]["token"]
                .as_str()
                .ok_or_else(|| FetchError(Box::new(NoToken(path))))?
                .to_string();
            let life = Duration::from_secs(u64::try_from(r.seconds).unwrap_or(3600));
            crate::mutex::lock(&self.tokens).insert(key, (token.clone(), now + life * 4 / 5));
            Ok(token)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_maps_and_secrets_become_bytes() {
        let cm = json!({"data": {"app.conf": "port=8080\n"}, "binaryData": {"logo": "AAEC"}});
        let d = config_map_data(&cm);
        assert_eq!(d["app.conf"], b"port=8080\n");
        assert_eq!(d["logo"], [0u8, 1, 2]);
        let s = json!({"data": {"pw": "czNjcjN0"}});
        assert_eq!(secret_data(&s)["pw"], b"s3cr3t");
        let r = TokenRequest {
            namespace: "default",
            service_account: "default",
            pod_name: "web",
            pod_uid: "u1",
            audience: "",
            seconds: 3607,
        };
        let t = token_request(&r);
        assert_eq!(t["spec"]["boundObjectRef"]["uid"], "u1");
        assert_eq!(t["spec"]["audiences"], json!([]));
    }
}
