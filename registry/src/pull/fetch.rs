//! A pull's content: the config and layers fetched into the blob store
//! under the pull's lease, verified while streaming, resumed after a break
//! (up to [`BLOB_TRIES`] tries), each layer unpacked as it completes.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::StatusCode;
use images::{Digest, ImageRecord, Lease, Reference};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;

use super::*;

impl Puller {
    pub(super) async fn fetch(
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
                    .map_err(|e| remote.err(Kind::Other, &e).caused_by(e))?;
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
        .map_err(|e| remote.err(Kind::Other, &e).caused_by(e))?;
        drop(lease);
        Ok(rec)
    }

    /// Downloads blob `digest` into the store unless it is there; one
    /// download per digest at a time.
    pub(super) async fn download(
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

    pub(super) async fn download_locked(
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
                    .map_err(|e| remote.file_err(&path, e))?,
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
                    .map_err(|e| remote.file_err(&path, e))?;
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
                        .map_err(|e| remote.file_err(&path, e))?;
                    have += data.len() as u64;
                    progress
                        .done
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    progress
                        .fetched
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    reported = have;
                };
                file.flush().await.map_err(|e| remote.file_err(&path, e))?;
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
