//! A pull: resolve the reference at the first endpoint that has it, pick
//! the host's platform, fetch config and layers into the blob store
//! (verified while streaming, resumed after a break), unpack each layer as
//! it arrives, commit the image.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http_body_util::BodyExt;
use hyper::StatusCode;
use images::{Digest, ImageRecord, ImageStore, Lease, Reference};
use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};

use crate::auth::TokenCache;
use crate::client::{Conn, IDLE_TIMEOUT, Remote, error_text, small_body};
use crate::config::{Attempt, Registries};
use crate::{Credential, Error, Kind, dockercfg};

mod fetch;

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Largest manifest or index accepted (distribution's own limit is 4 MiB).
const MAX_MANIFEST: usize = 4 << 20;
/// Tries of one blob download (each resumes where the last one broke).
const BLOB_TRIES: u32 = 4;

/// How the puller is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// k3s-style registries.yaml; missing: no mirrors, no per-host settings.
    pub registry_config: PathBuf,
    /// A docker config.json whose `auths` are used when a request brings no
    /// credentials; missing: none.
    pub auth_file: Option<PathBuf>,
    /// Layers downloaded at once per pull.
    pub parallel: usize,
}

/// A pull's progress, readable while it runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes of all layers and the config.
    pub total: AtomicU64,
    /// Of those, in the store now (fetched, resumed or there before).
    pub done: AtomicU64,
    /// Bytes that came over the network in this pull.
    pub fetched: AtomicU64,
    pub layers: AtomicU64,
    pub layers_done: AtomicU64,
}

/// What a tag or digest resolved to.
struct Resolved {
    /// The digest the reference points at (an index for multi-arch images).
    top: Digest,
    /// The platform's manifest.
    manifest: Digest,
}

/// (mtime, size) of the registries.yaml last read.
type Stamp = Option<(SystemTime, u64)>;

/// Pulls images into one store. Share it in an `Arc`.
pub struct Puller {
    store: Arc<ImageStore>,
    opts: Options,
    registries: Mutex<(Stamp, Arc<Registries>)>,
    tokens: Arc<TokenCache>,
    /// One download per digest at a time: a second pull of the same blob
    /// waits, then finds it in the store.
    downloads: Mutex<HashMap<Digest, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for Puller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Puller")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

fn store_err(e: images::Error) -> Error {
    Error::new(Kind::Other, e.to_string()).caused_by(e)
}

fn join_err(e: tokio::task::JoinError) -> Error {
    Error::new(Kind::Other, format!("pull task failed: {e}")).caused_by(e)
}

impl Puller {
    pub fn new(store: Arc<ImageStore>, opts: Options) -> Self {
        Self {
            store,
            opts,
            registries: Mutex::new((None, Arc::default())),
            tokens: Arc::default(),
            downloads: Mutex::default(),
        }
    }

    /// The registries.yaml in force: read again when its mtime or size
    /// changed. A broken file fails pulls with an error naming it.
    pub fn registries(&self) -> Result<Arc<Registries>, Error> {
        let path = &self.opts.registry_config;
        let stamp = std::fs::metadata(path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        let mut cur = self.registries.lock().unwrap_or_else(|p| p.into_inner());
        if cur.0 != stamp {
            let parsed = Registries::load(path)
                .map_err(|e| Error::new(Kind::Other, e.to_string()).caused_by(e))?;
            tracing::info!(path = %path.display(), "registry configuration loaded");
            *cur = (stamp, Arc::new(parsed));
        }
        Ok(cur.1.clone())
    }

    /// Pulls `reference` (with `cred` for its registry, if given) and
    /// returns the stored image.
    pub async fn pull(
        self: &Arc<Self>,
        reference: &Reference,
        cred: Option<Credential>,
        progress: Arc<Progress>,
    ) -> Result<ImageRecord, Error> {
        let registries = self.registries()?;
        let cred = cred.filter(|c| !c.is_empty());
        let mut failures: Vec<Error> = Vec::new();
        for attempt in registries.plan(&reference.domain, &reference.path) {
            let (remote, uses_request) =
                match self.remote(&attempt, reference, cred.as_ref(), &registries) {
                    Ok(r) => r,
                    Err(e) => {
                        failures.push(e);
                        continue;
                    }
                };
            let remote = Arc::new(remote);
            let mut lease = self.store.lease();
            match self.resolve(&remote, reference, &mut lease).await {
                Ok(resolved) => {
                    // Pulled with the request's credentials, which the
                    // registry asked for: only they (or others it accepts
                    // later) may use the image without asking it again.
                    let grant = match &cred {
                        Some(c) if uses_request => Some(self.grant(c)?),
                        _ => None,
                    };
                    return self
                        .fetch(remote, reference, resolved, lease, progress, grant)
                        .await;
                }
                Err(e) => {
                    tracing::debug!(endpoint = %attempt.endpoint.authority, error = %e, "pull: trying the next endpoint");
                    failures.push(e);
                }
            }
        }
        Err(combine(failures))
    }

    /// Whether an image in the store may be given to a request with `cred`
    /// without asking its registry: it was imported or pulled without
    /// credentials, or pulled with these.
    pub fn may_use(&self, rec: &ImageRecord, cred: Option<&Credential>) -> Result<bool, Error> {
        if rec.pulled_with.is_empty() {
            return Ok(true);
        }
        match cred.filter(|c| !c.is_empty()) {
            Some(c) => Ok(rec.pulled_with.contains(&self.grant(c)?)),
            None => Ok(false),
        }
    }

    fn grant(&self, cred: &Credential) -> Result<String, Error> {
        self.store.grant(&cred.parts()).map_err(store_err)
    }

    /// The remote for one attempt, and whether it uses the request's
    /// credentials.
    fn remote(
        &self,
        attempt: &Attempt,
        reference: &Reference,
        cred: Option<&Credential>,
        registries: &Arc<Registries>,
    ) -> Result<(Remote, bool), Error> {
        let host = registries.host(&attempt.endpoint.authority);
        let name = reference.to_string();
        let bad = |message: &dyn std::fmt::Display| {
            Error::new(
                Kind::Other,
                format!("{name} ({}): {message}", attempt.endpoint.authority),
            )
        };
        // CRI's credentials (else the docker config's) are for the image's
        // registry, also when a mirror entry serves its own address; other
        // mirrors use their own from registries.yaml.
        let own = !attempt.mirror || attempt.endpoint.authority == reference.domain;
        let uses_request = own && cred.is_some();
        let cred = match (own, cred) {
            (true, Some(c)) => Some(c.clone()),
            _ => match host.and_then(|h| h.auth.clone()) {
                Some(c) => Some(c),
                None if own => match &self.opts.auth_file {
                    Some(f) => dockercfg::lookup(f, &reference.domain).map_err(|e| bad(&e))?,
                    None => None,
                },
                None => None,
            },
        };
        let conn = Conn::new(&attempt.endpoint, host).map_err(|e| bad(&e))?;
        Ok((
            Remote::new(
                conn,
                attempt.repository.clone(),
                name,
                cred,
                self.tokens.clone(),
                registries.clone(),
            ),
            uses_request,
        ))
    }

    async fn resolve(
        &self,
        remote: &Remote,
        reference: &Reference,
        lease: &mut Lease,
    ) -> Result<Resolved, Error> {
        let wanted = match (&reference.digest, &reference.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_string(),
        };
        let (bytes, media_type) = self.manifest(remote, &wanted).await?;
        let top = Digest::of(&bytes);
        if let Some(d) = &reference.digest
            && d != &top
        {
            return Err(remote.err(
                Kind::Other,
                format!("manifest content hashes to {top}, not the digest asked for"),
            ));
        }
        lease.add(&top);
        self.keep(&bytes, &top).await?;
        if media_type != OCI_INDEX && media_type != DOCKER_LIST {
            return Ok(Resolved {
                manifest: top.clone(),
                top,
            });
        }
        let index: ImageIndex = serde_json::from_slice(&bytes)
            .map_err(|e| remote.err(Kind::Other, format!("index {top}: {e}")))?;
        let platform = self.store.platform();
        let chosen = index
            .manifests()
            .iter()
            .filter_map(|m| {
                m.platform()
                    .as_ref()
                    .and_then(|p| platform.score(p))
                    .map(|s| (s, m))
            })
            .max_by_key(|(s, _)| *s)
            .map(|(_, m)| m)
            .ok_or_else(|| {
                remote.err(
                    Kind::NotFound,
                    format!("index {top} has no image for platform {platform}"),
                )
            })?;
        let digest = Digest::parse(chosen.digest().as_ref()).map_err(store_err)?;
        let (bytes, media_type) = self.manifest(remote, digest.as_str()).await?;
        if Digest::of(&bytes) != digest {
            return Err(remote.err(
                Kind::Other,
                format!(
                    "manifest {digest}: content hashes to {}",
                    Digest::of(&bytes)
                ),
            ));
        }
        if media_type != OCI_MANIFEST && media_type != DOCKER_MANIFEST {
            return Err(remote.err(
                Kind::Other,
                format!("manifest {digest}: unsupported media type {media_type:?}"),
            ));
        }
        lease.add(&digest);
        self.keep(&bytes, &digest).await?;
        Ok(Resolved {
            top,
            manifest: digest,
        })
    }

    /// Stores a small verified blob (a manifest or index).
    async fn keep(&self, bytes: &[u8], digest: &Digest) -> Result<(), Error> {
        let store = self.store.clone();
        let (bytes, digest) = (bytes.to_vec(), digest.clone());
        tokio::task::spawn_blocking(move || {
            if !store.blobs().contains(&digest) {
                store.blobs().ingest(&bytes[..], Some(&digest), None)?;
            }
            Ok(())
        })
        .await
        .map_err(join_err)?
        .map_err(store_err)
    }

    /// GETs a manifest (by tag or digest): its bytes and media type.
    async fn manifest(&self, remote: &Remote, wanted: &str) -> Result<(Vec<u8>, String), Error> {
        let accept = [OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST].join(", ");
        let resp = remote
            .get(&format!("manifests/{wanted}"), &accept, None)
            .await?;
        let status = resp.status();
        if status != StatusCode::OK {
            let kind = if status == StatusCode::NOT_FOUND {
                Kind::NotFound
            } else if status == StatusCode::FORBIDDEN {
                Kind::Unauthorized
            } else {
                Kind::Other
            };
            let body = small_body(resp).await;
            return Err(remote.err(
                kind,
                format!("manifest {wanted}: {}", error_text(status, &body)),
            ));
        }
        let content_type = resp
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_string())
            .unwrap_or_default();
        let mut body = resp.into_body();
        let mut bytes = Vec::new();
        loop {
            let frame = tokio::time::timeout(IDLE_TIMEOUT, body.frame())
                .await
                .map_err(|_| {
                    remote.err(Kind::Unreachable, format!("manifest {wanted}: timed out"))
                })?;
            match frame {
                None => break,
                Some(Err(e)) => {
                    return Err(remote.err(Kind::Unreachable, format!("manifest {wanted}: {e}")));
                }
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        if bytes.len() + d.len() > MAX_MANIFEST {
                            return Err(remote.err(
                                Kind::Other,
                                format!("manifest {wanted}: larger than {MAX_MANIFEST} bytes"),
                            ));
                        }
                        bytes.extend_from_slice(&d);
                    }
                }
            }
        }
        let media_type = match content_type.as_str() {
            OCI_INDEX | DOCKER_LIST | OCI_MANIFEST | DOCKER_MANIFEST => content_type,
            _ => serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["mediaType"].as_str().map(str::to_string))
                .unwrap_or(content_type),
        };
        if media_type.starts_with("application/vnd.docker.distribution.manifest.v1") {
            return Err(remote.err(
                Kind::Other,
                format!("manifest {wanted}: Docker schema 1 manifests are not supported"),
            ));
        }
        Ok((bytes, media_type))
    }
}

/// One error for every endpoint tried: the kind of the most telling failure
/// (credentials, then connection trouble, then anything but "not found"),
/// the message of each.
fn combine(failures: Vec<Error>) -> Error {
    let rank = |k: Kind| match k {
        Kind::Unauthorized => 0,
        Kind::Other => 1,
        Kind::Unreachable => 2,
        Kind::NotFound => 3,
    };
    let telling = failures.iter().min_by_key(|e| rank(e.kind));
    let message = failures
        .iter()
        .map(|e| e.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Error {
        kind: telling.map_or(Kind::NotFound, |e| e.kind),
        message,
        // The cause of the failure that names the kind.
        source: telling.and_then(|e| e.source.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_telling_failure_names_the_kind() {
        let e = |kind, m: &str| Error::new(kind, m);
        let all = combine(vec![
            e(Kind::NotFound, "mirror: 404"),
            e(Kind::Unreachable, "upstream: dial"),
        ]);
        assert_eq!(all.kind, Kind::Unreachable);
        assert_eq!(all.message, "mirror: 404; upstream: dial");
        let auth = combine(vec![e(Kind::Unreachable, "a"), e(Kind::Unauthorized, "b")]);
        assert_eq!(auth.kind, Kind::Unauthorized);
        assert_eq!(combine(vec![e(Kind::NotFound, "x")]).kind, Kind::NotFound);
    }

    #[test]
    fn the_cause_of_the_telling_failure_stays_its_source() {
        let disk = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let all = combine(vec![
            Error::new(Kind::NotFound, "mirror: 404"),
            Error::new(Kind::Other, "upstream: blob: no space").caused_by(disk),
        ]);
        assert_eq!(all.kind, Kind::Other);
        let io = std::error::Error::source(&all)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("the io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
    }
}
