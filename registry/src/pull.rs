//! A pull: resolve the reference at the first endpoint that has it, pick
//! the host's platform, fetch config and layers into the blob store
//! (verified while streaming, resumed after a break), unpack each layer as
//! it arrives, commit the image.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::BodyExt;
use hyper::StatusCode;
use images::{Digest, ImageRecord, ImageStore, Lease, Reference};
use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;

use crate::auth::TokenCache;
use crate::client::{Conn, IDLE_TIMEOUT, Remote, error_text, small_body};
use crate::config::{Attempt, Registries};
use crate::{Credential, Error, Kind, dockercfg};

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
    Error {
        kind: Kind::Other,
        message: e.to_string(),
    }
}

fn join_err(e: tokio::task::JoinError) -> Error {
    Error {
        kind: Kind::Other,
        message: format!("pull task failed: {e}"),
    }
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
            let parsed = Registries::load(path).map_err(|e| Error {
                kind: Kind::Other,
                message: e.to_string(),
            })?;
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
        let bad = |message: &dyn std::fmt::Display| Error {
            kind: Kind::Other,
            message: format!("{name} ({}): {message}", attempt.endpoint.authority),
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

    async fn fetch(
        self: &Arc<Self>,
        remote: Arc<Remote>,
        reference: &Reference,
        resolved: Resolved,
        mut lease: Lease,
        progress: Arc<Progress>,
        grant: Option<String>,
    ) -> Result<ImageRecord, Error> {
        let blobs = self.store.blobs();
        let raw = blobs.read(&resolved.manifest).map_err(store_err)?;
        let manifest: ImageManifest = serde_json::from_slice(&raw)
            .map_err(|e| remote.err(Kind::Other, format!("manifest {}: {e}", resolved.manifest)))?;
        let config = Digest::parse(manifest.config().digest().as_ref()).map_err(store_err)?;
        let config_size = manifest.config().size();
        let layer_bytes: u64 = manifest.layers().iter().map(|l| l.size()).sum();
        progress
            .total
            .store(config_size + layer_bytes, Ordering::Relaxed);
        progress
            .layers
            .store(manifest.layers().len() as u64, Ordering::Relaxed);
        lease.add(&config);
        self.download(&remote, &config, config_size, &progress)
            .await?;
        let image: ImageConfiguration =
            serde_json::from_slice(&blobs.read(&config).map_err(store_err)?)
                .map_err(|e| remote.err(Kind::Other, format!("config {config}: {e}")))?;
        let diff_ids = image.rootfs().diff_ids();
        if diff_ids.len() != manifest.layers().len() {
            return Err(remote.err(
                Kind::Other,
                format!(
                    "manifest {} has {} layers but its config lists {} diff ids",
                    resolved.manifest,
                    manifest.layers().len(),
                    diff_ids.len()
                ),
            ));
        }
        let gate = Arc::new(tokio::sync::Semaphore::new(self.opts.parallel.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        for (desc, diff_id) in manifest.layers().iter().zip(diff_ids) {
            let digest = Digest::parse(desc.digest().as_ref()).map_err(store_err)?;
            let diff_id = Digest::parse(diff_id).map_err(store_err)?;
            lease.add(&digest);
            lease.add(&diff_id);
            let (this, remote, gate, progress) =
                (self.clone(), remote.clone(), gate.clone(), progress.clone());
            let size = desc.size();
            tasks.spawn(async move {
                let _turn = gate.acquire_owned().await;
                this.download(&remote, &digest, size, &progress).await?;
                let store = this.store.clone();
                tokio::task::spawn_blocking(move || store.unpack_layer(&digest, &diff_id))
                    .await
                    .map_err(join_err)?
                    .map_err(|e| remote.err(Kind::Other, e))?;
                progress.layers_done.fetch_add(1, Ordering::Relaxed);
                Ok::<(), Error>(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            // The first failure ends the pull; the others' downloads stop
            // with the JoinSet, their partial files kept for a retry.
            done.map_err(join_err)??;
        }
        let store = self.store.clone();
        let (name, reference, manifest, top) = (
            format!("{} ({})", reference, remote.conn.endpoint().authority),
            reference.clone(),
            resolved.manifest,
            resolved.top,
        );
        let grant = grant.filter(|_| remote.presented_credentials());
        let rec = tokio::task::spawn_blocking(move || {
            store.commit_pulled(name, &manifest, &reference, &top, grant)
        })
        .await
        .map_err(join_err)?
        .map_err(|e| remote.err(Kind::Other, e))?;
        drop(lease);
        Ok(rec)
    }

    /// Downloads blob `digest` into the store unless it is there; one
    /// download per digest at a time.
    async fn download(
        &self,
        remote: &Remote,
        digest: &Digest,
        size: u64,
        progress: &Progress,
    ) -> Result<(), Error> {
        let lock = self
            .downloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(digest.clone())
            .or_default()
            .clone();
        let result = {
            let _only_one = lock.lock().await;
            self.download_locked(remote, digest, size, progress).await
        };
        let mut downloads = self.downloads.lock().unwrap_or_else(|p| p.into_inner());
        // Ours and the map's: nobody else waits for this digest.
        if Arc::strong_count(&lock) <= 2 {
            downloads.remove(digest);
        }
        result
    }

    async fn download_locked(
        &self,
        remote: &Remote,
        digest: &Digest,
        size: u64,
        progress: &Progress,
    ) -> Result<(), Error> {
        let blobs = self.store.blobs();
        if blobs.contains(digest) {
            progress.done.fetch_add(size, Ordering::Relaxed);
            return Ok(());
        }
        let path = blobs.partial_path(digest);
        // A blob that cannot fit fails before it fills the device's disk.
        let have = tokio::fs::metadata(&path).await.map_or(0, |m| m.len());
        if let Some((free, reserve)) = path.parent().and_then(images::unpack::free_above_reserve)
            && size.saturating_sub(have) > free
        {
            return Err(remote.err(
                Kind::Other,
                format!(
                    "blob {digest} is {} MiB: {} MiB are free on the store's filesystem above the {} MiB kept free",
                    size >> 20,
                    free >> 20,
                    reserve >> 20
                ),
            ));
        }
        let mut hashed: Option<(Sha256, u64)> = None;
        let mut reported = 0u64;
        let mut last = None;
        for attempt in 0..BLOB_TRIES {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
            }
            let mut have = tokio::fs::metadata(&path).await.map_or(0, |m| m.len());
            if have > size {
                let _ = tokio::fs::remove_file(&path).await;
                have = 0;
            }
            // The hash of what is on disk: kept across tries of this pull,
            // recomputed for a file an earlier pull left.
            let (mut hasher, _) = match hashed.take() {
                Some((h, n)) if n == have => (h, n),
                _ => hash_prefix(path.clone(), have)
                    .await
                    .map_err(|e| remote.err(Kind::Other, format!("{}: {e}", path.display())))?,
            };
            if have > reported {
                progress.done.fetch_add(have - reported, Ordering::Relaxed);
                reported = have;
            }
            // A file with every byte (a kill between the last write and the
            // rename) is checked as it is: asking for `bytes=<size>-` would be
            // a 416 and throw it away.
            if have < size {
                let resp = match remote
                    .get(&format!("blobs/{digest}"), "*/*", Some(have))
                    .await
                {
                    Ok(r) => r,
                    Err(e) if e.kind == Kind::Unreachable => {
                        last = Some(e);
                        hashed = Some((hasher, have));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let status = resp.status();
                let append = match status {
                    StatusCode::PARTIAL_CONTENT if have > 0 => true,
                    StatusCode::OK => {
                        if have > 0 {
                            hasher = Sha256::new();
                            progress.done.fetch_sub(have, Ordering::Relaxed);
                            reported = 0;
                            have = 0;
                        }
                        false
                    }
                    StatusCode::RANGE_NOT_SATISFIABLE => {
                        let _ = tokio::fs::remove_file(&path).await;
                        progress.done.fetch_sub(reported, Ordering::Relaxed);
                        reported = 0;
                        last =
                            Some(remote.err(Kind::Other, format!("blob {digest}: range refused")));
                        continue;
                    }
                    s => {
                        let kind = match s {
                            StatusCode::NOT_FOUND => Kind::NotFound,
                            StatusCode::FORBIDDEN => Kind::Unauthorized,
                            _ => Kind::Other,
                        };
                        let body = small_body(resp).await;
                        let e =
                            remote.err(kind, format!("blob {digest}: {}", error_text(s, &body)));
                        if s.is_server_error() {
                            last = Some(e);
                            hashed = Some((hasher, have));
                            continue;
                        }
                        return Err(e);
                    }
                };
                let mut file = tokio::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .append(append)
                    .truncate(!append)
                    .open(&path)
                    .await
                    .map_err(|e| remote.err(Kind::Other, format!("{}: {e}", path.display())))?;
                let mut body = resp.into_body();
                let broke = loop {
                    let frame = match tokio::time::timeout(IDLE_TIMEOUT, body.frame()).await {
                        Err(_) => break Some("timed out".to_string()),
                        Ok(None) => break None,
                        Ok(Some(Err(e))) => break Some(e.to_string()),
                        Ok(Some(Ok(f))) => f,
                    };
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if have + data.len() as u64 > size {
                        drop(file);
                        let _ = tokio::fs::remove_file(&path).await;
                        return Err(remote.err(
                            Kind::Other,
                            format!("blob {digest}: the registry sent more than the {size} bytes its manifest says"),
                        ));
                    }
                    hasher.update(&data);
                    file.write_all(&data)
                        .await
                        .map_err(|e| remote.err(Kind::Other, format!("{}: {e}", path.display())))?;
                    have += data.len() as u64;
                    progress
                        .done
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    progress
                        .fetched
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    reported = have;
                };
                file.flush()
                    .await
                    .map_err(|e| remote.err(Kind::Other, format!("{}: {e}", path.display())))?;
                drop(file);
                // With every byte here, however the stream ended, check them.
                if have < size {
                    let why = broke.unwrap_or_else(|| "the body ended early".to_string());
                    tracing::info!(blob = %digest, bytes = have, of = size, reason = %why, "download broke; resuming");
                    last = Some(remote.err(
                        Kind::Unreachable,
                        format!(
                            "blob {digest}: download broke after {have} of {size} bytes: {why}"
                        ),
                    ));
                    hashed = Some((hasher, have));
                    continue;
                }
            }
            let actual = format!("sha256:{:x}", hasher.finalize());
            if actual != digest.as_str() {
                let _ = tokio::fs::remove_file(&path).await;
                progress.done.fetch_sub(reported, Ordering::Relaxed);
                return Err(remote.err(
                    Kind::Other,
                    format!("blob {digest}: content hashes to {actual}: corrupted, not stored"),
                ));
            }
            let store = self.store.clone();
            let d = digest.clone();
            tokio::task::spawn_blocking(move || store.blobs().commit_partial(&d))
                .await
                .map_err(join_err)?
                .map_err(store_err)?;
            return Ok(());
        }
        Err(last.unwrap_or_else(|| remote.err(Kind::Other, format!("blob {digest}: not fetched"))))
    }
}

/// Hashes the first `len` bytes of `path` (a download to resume).
async fn hash_prefix(path: PathBuf, len: u64) -> std::io::Result<(Sha256, u64)> {
    if len == 0 {
        return Ok((Sha256::new(), 0));
    }
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut h = Sha256::new();
        let mut f = std::fs::File::open(&path)?.take(len);
        let mut buf = vec![0u8; 64 << 10];
        let mut n = 0u64;
        loop {
            let r = f.read(&mut buf)?;
            if r == 0 {
                break;
            }
            h.update(&buf[..r]);
            n += r as u64;
        }
        Ok((h, n))
    })
    .await
    .map_err(std::io::Error::other)?
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
    let kind = failures
        .iter()
        .map(|e| e.kind)
        .min_by_key(|k| rank(*k))
        .unwrap_or(Kind::NotFound);
    let message = failures
        .iter()
        .map(|e| e.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Error { kind, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_telling_failure_names_the_kind() {
        let e = |kind, m: &str| Error {
            kind,
            message: m.into(),
        };
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
}
