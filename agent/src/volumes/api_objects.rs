//! [`crate::volumes::objects::ApiObjects`] on the API server: configMaps and
//! secrets as kubelet's `configMapAndSecretChangeDetectionStrategy` says
//! (what the Node authorizer allows: the objects of pods bound to this
//! node), service account tokens from TokenRequest bound to the pod, kept
//! until 80 % of their life or 24 h (kubelet's token manager).
//!
//! - `Watch` (kubelet's `watch_based_manager.go`): the first read of an
//!   object starts a reflector on it alone (`metadata.name` field
//!   selector) and waits for its LIST; later reads are local. An object
//!   marked `immutable` is not watched once read. A watch nobody read for
//!   five `syncFrequency` periods (the pod is gone) ends.
//! - `Cache`: read again when the last read is over a minute old.
//! - `Get`: read every time.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edge_config::config::ChangeDetection;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::watch as chan;
use tokio::time::Instant;

use crate::kube::client::{Client, Error};
use crate::kube::reflector::{self, Seen};
use crate::kube::watch::Query;
use crate::volumes::objects::{ApiObjects, BoxFut, Data, FetchError, TokenRequest};

/// A TokenRequest answered without a token.
#[derive(Debug, thiserror::Error)]
#[error("{0}: no token in the answer")]
struct NoToken(String);

/// How long `Cache` keeps an object (kubelet's default TTL).
const CACHE_TTL: Duration = Duration::from_secs(60);
/// The longest a token is used before it is renewed (kubelet's token
/// manager: the API server may extend a token's life to a year).
const TOKEN_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// The configMaps or secrets of a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    fn collection(self, ns: &str) -> String {
        match self {
            Kind::ConfigMap => format!("/api/v1/namespaces/{ns}/configmaps"),
            Kind::Secret => format!("/api/v1/namespaces/{ns}/secrets"),
        }
    }

    fn data(self, obj: &Value) -> BTreeMap<String, Vec<u8>> {
        match self {
            Kind::ConfigMap => config_map_data(obj),
            Kind::Secret => secret_data(obj),
        }
    }
}

type Key = (Kind, String, String);

/// A LIST or watch of an object failed before it was ever read.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct WatchFailed(Arc<Error>);

/// What a watched object's reflector has seen: None until its first LIST
/// answered; then the object (None: there is none), or why the LIST
/// failed while there was nothing better to say.
type State = Option<Result<Option<Arc<Value>>, Arc<Error>>>;

/// One object's reflector.
struct Watched {
    state: chan::Receiver<State>,
    /// When a pod last read it (the reflector ends once it is `idle`).
    used: Arc<Mutex<Instant>>,
    task: tokio::task::AbortHandle,
    /// Its object is immutable: the reflector ended, the state stays.
    frozen: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub struct Objects {
    client: Arc<Client>,
    strategy: ChangeDetection,
    /// `Watch`: a watch unread this long ends.
    idle: Duration,
    watched: Mutex<HashMap<Key, Watched>>,
    /// `Cache`: objects and when they were read.
    cached: Mutex<HashMap<Key, (Data, Instant)>>,
    /// (ns, service account, pod uid, audience, seconds) → token, when it
    /// is due for renewal.
    tokens: Mutex<HashMap<String, (String, Instant)>>,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects").finish_non_exhaustive()
    }
}

impl Objects {
    /// `sync_frequency`: how often pods read their objects again.
    pub fn new(client: Arc<Client>, strategy: ChangeDetection, sync_frequency: Duration) -> Self {
        Self {
            client,
            strategy,
            idle: sync_frequency * 5,
            watched: Mutex::new(HashMap::new()),
            cached: Mutex::new(HashMap::new()),
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

    /// The object as the strategy reads it.
    async fn object(&self, kind: Kind, ns: &str, name: &str) -> Result<Data, FetchError> {
        let key = (kind, ns.to_string(), name.to_string());
        match self.strategy {
            ChangeDetection::Get => Ok(self
                .get(format!("{}/{name}", kind.collection(ns)))
                .await?
                .map(|o| kind.data(&o))),
            ChangeDetection::Cache => {
                let now = Instant::now();
                if let Some((data, at)) = crate::mutex::lock(&self.cached).get(&key)
                    && now.duration_since(*at) < CACHE_TTL
                {
                    return Ok(data.clone());
                }
                let data = self
                    .get(format!("{}/{name}", kind.collection(ns)))
                    .await?
                    .map(|o| kind.data(&o));
                let mut cached = crate::mutex::lock(&self.cached);
                cached.retain(|_, (_, at)| now.duration_since(*at) < CACHE_TTL);
                cached.insert(key, (data.clone(), now));
                Ok(data)
            }
            ChangeDetection::Watch => self.watched(key).await,
        }
    }

    /// `Watch`: the object from its reflector, started if there is none,
    /// once its first LIST answered.
    async fn watched(&self, key: Key) -> Result<Data, FetchError> {
        let mut state = {
            let now = Instant::now();
            let mut all = crate::mutex::lock(&self.watched);
            all.retain(|_, w| now.duration_since(*crate::mutex::lock(&w.used)) < self.idle);
            let w = match all.get_mut(&key) {
                // A reflector that ended (its object is immutable) keeps
                // its last state.
                Some(w) if !w.task.is_finished() || w.frozen.load(Ordering::Relaxed) => w,
                _ => all
                    .entry(key.clone())
                    .insert_entry(self.reflect(&key))
                    .into_mut(),
            };
            *crate::mutex::lock(&w.used) = now;
            w.state.clone()
        };
        let synced = tokio::time::timeout(
            crate::kube::client::REQUEST_TIMEOUT,
            state.wait_for(Option::is_some),
        )
        .await;
        let (kind, ns, name) = &key;
        let state = synced.ok().and_then(Result::ok).and_then(|s| s.clone());
        match state {
            Some(Ok(obj)) => Ok(obj.map(|o| kind.data(&o))),
            Some(Err(e)) => Err(FetchError(Box::new(WatchFailed(e)))),
            // Not listed in time (or the reflector is gone).
            None => Err(FetchError(Box::new(NotSynced(format!(
                "{}/{name}",
                kind.collection(ns)
            ))))),
        }
    }

    /// Starts the reflector of one object.
    fn reflect(&self, key: &Key) -> Watched {
        let (kind, ns, name) = key;
        let (tx, rx) = chan::channel::<State>(None);
        let client = self.client.clone();
        let query = Query::named(kind.collection(ns), name);
        let what = format!("{}/{name}", kind.collection(ns));
        let used = Arc::new(Mutex::new(Instant::now()));
        let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (last_read, idle, freeze) = (used.clone(), self.idle, frozen.clone());
        let reflect = async move {
            reflector::run(&client, &query, &what, |seen| {
                match seen {
                    Seen::Listed(objs) | Seen::Changed(objs) => {
                        let obj = objs.values().next().cloned().map(Arc::new);
                        let immutable = obj
                            .as_ref()
                            .is_some_and(|o| o["immutable"].as_bool() == Some(true));
                        tx.send_replace(Some(Ok(obj)));
                        if immutable {
                            freeze.store(true, Ordering::Relaxed);
                            return ControlFlow::Break(());
                        }
                    }
                    Seen::Failed(e) => {
                        // A LIST failed: said only while nothing was read;
                        // what was read stays until the server answers.
                        tx.send_if_modified(|s| match s {
                            Some(Ok(_)) => false,
                            _ => {
                                *s = Some(Err(e));
                                true
                            }
                        });
                    }
                }
                ControlFlow::Continue(())
            })
            .await;
        };
        let task = tokio::spawn(async move {
            tokio::select! {
                () = reflect => {}
                () = until_idle(&last_read, idle) => {}
            }
        })
        .abort_handle();
        Watched {
            state: rx,
            used,
            task,
            frozen,
        }
    }
}

/// Returns once nobody has read the object for `idle` (its pods are gone;
/// kubelet ends such a watch when the last pod is unregistered).
async fn until_idle(used: &Mutex<Instant>, idle: Duration) {
    loop {
        let due = *crate::mutex::lock(used) + idle;
        if Instant::now() >= due {
            return;
        }
        tokio::time::sleep_until(due).await;
    }
}

/// An object's first LIST did not answer in time.
#[derive(Debug, thiserror::Error)]
#[error("{0}: not read from the API server yet")]
struct NotSynced(String);

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
        Box::pin(self.object(Kind::ConfigMap, ns, name))
    }

    fn secret<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFut<'a, Result<Data, FetchError>> {
        Box::pin(self.object(Kind::Secret, ns, name))
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
            let renew = (life * 4 / 5).min(TOKEN_MAX_AGE);
            crate::mutex::lock(&self.tokens).insert(key, (token.clone(), now + renew));
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
