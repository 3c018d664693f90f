//! CRI ImageService over the offline image store.

use std::collections::HashMap;
use std::sync::Arc;

use cri_proto::v1::{
    FilesystemIdentifier, FilesystemUsage, Image, ImageFsInfoRequest, ImageFsInfoResponse,
    ImageSpec, ImageStatusRequest, ImageStatusResponse, Int64Value, ListImagesRequest,
    ListImagesResponse, PullImageRequest, PullImageResponse, RemoveImageRequest,
    RemoveImageResponse, UInt64Value, image_service_server::ImageService,
};
use images::{ImageRecord, ImageStore};
use tonic::{Request, Response, Status};

use crate::error::Error;

/// Serves CRI ImageService from an [`ImageStore`], pulling what it lacks.
#[derive(Debug, Clone)]
pub struct ImageSvc {
    store: Arc<ImageStore>,
    puller: Arc<registry::Puller>,
}

impl ImageSvc {
    pub fn new(store: Arc<ImageStore>, puller: Arc<registry::Puller>) -> Self {
        Self { store, puller }
    }

    fn to_cri(&self, rec: &ImageRecord) -> Image {
        let user = self
            .store
            .config(rec)
            .ok()
            .and_then(|c| c.config().as_ref().and_then(|c| c.user().clone()))
            .unwrap_or_default();
        let (uid, username) = split_user(&user);
        Image {
            id: rec.id.to_string(),
            repo_tags: rec.repo_tags.clone(),
            repo_digests: rec.repo_digests.clone(),
            size: rec.size(),
            uid: uid.map(|value| Int64Value { value }),
            username,
            spec: Some(ImageSpec {
                image: rec.id.to_string(),
                ..Default::default()
            }),
            pinned: false,
        }
    }

    fn do_status(&self, req: ImageStatusRequest) -> Result<ImageStatusResponse, Error> {
        let reference = image_ref(req.image.as_ref())?;
        let Some(rec) = self.store.get(reference) else {
            // CRI: an absent image is a nil image, not an error.
            return Ok(ImageStatusResponse::default());
        };
        let mut info = HashMap::new();
        if req.verbose {
            let config: serde_json::Value =
                serde_json::from_slice(&self.store.config_json(&rec)?).unwrap_or_default();
            let verbose = serde_json::json!({
                "id": rec.id.as_str(),
                "manifest": rec.manifest.as_str(),
                "layers": rec.layers,
                "imageSpec": config,
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        Ok(ImageStatusResponse {
            image: Some(self.to_cri(&rec)),
            info,
        })
    }

    async fn do_pull(&self, req: PullImageRequest) -> Result<PullImageResponse, Error> {
        let reference = image_ref(req.image.as_ref())?;
        let cred = req.auth.map(credential).transpose()?;
        let id = pull(
            &self.store,
            &self.puller,
            reference,
            cred,
            Arc::new(registry::Progress::default()),
        )
        .await?;
        Ok(PullImageResponse { image_ref: id })
    }
}

/// The image ID of `reference`: an image already in the store is answered
/// from it without asking a registry (an edge device works offline, and a
/// tag is not re-resolved: pull by digest, or remove the image first, to
/// move it) — unless it was pulled with other credentials than the
/// request's, as kubelet's `KubeletEnsureSecretPulledImages` does: then the
/// registry must accept these. Anything else is pulled, its size and time
/// logged.
pub(crate) async fn pull(
    store: &ImageStore,
    puller: &Arc<registry::Puller>,
    reference: &str,
    cred: Option<registry::Credential>,
    progress: Arc<registry::Progress>,
) -> Result<String, Error> {
    let present = store.get(reference);
    if let Some(rec) = &present
        && puller.may_use(rec, cred.as_ref())?
    {
        return Ok(rec.id.to_string());
    }
    let parsed = images::Reference::parse(reference).ok();
    let Some(parsed) = parsed.filter(|_| !is_image_id(reference)) else {
        return Err(match present {
            Some(_) => Error::Pull(registry::Error::new(
                registry::Kind::Unauthorized,
                format!(
                    "image {reference} was pulled with other credentials: pull it by name with credentials its registry accepts"
                ),
            )),
            None => Error::NotFound(format!(
                "image {reference:?} is not in the store, and an image ID cannot be pulled"
            )),
        });
    };
    let started = std::time::Instant::now();
    let rec = puller
        .pull(&parsed, cred, progress.clone())
        .await
        .map_err(|mut e| {
            if present.is_some() {
                let why = if e.kind == registry::Kind::Unreachable {
                    "the registry, which must accept these first, cannot be reached"
                } else {
                    "the registry did not accept these"
                };
                e.message = format!(
                    "the image in the store was pulled with other credentials, and {why}: {}",
                    e.message
                );
            }
            e
        })
        .inspect_err(|e| tracing::warn!(image = %parsed, error = %e, "pull failed"))?;
    tracing::info!(
        image = %parsed,
        id = %rec.id,
        size = rec.size(),
        fetched = progress.fetched.load(std::sync::atomic::Ordering::Relaxed),
        ms = started.elapsed().as_millis(),
        "pulled"
    );
    Ok(rec.id.to_string())
}

/// CRI's `AuthConfig` as registry credentials (`auth` is base64 of
/// `username:password`, as in a docker config).
pub(crate) fn credential(a: cri_proto::v1::AuthConfig) -> Result<registry::Credential, Error> {
    let mut c = registry::Credential {
        username: a.username,
        password: a.password,
        identity_token: a.identity_token,
        registry_token: a.registry_token,
    };
    if !a.auth.is_empty() {
        let (u, p) = registry::decode_auth(&a.auth)
            .map_err(|e| Error::InvalidArgument(format!("auth.{e}")))?;
        c.username = u;
        c.password = p;
    }
    Ok(c)
}

/// `"1000:1000"` → uid 1000; `"nobody"` → username.
fn split_user(user: &str) -> (Option<i64>, String) {
    let name = user.split(':').next().unwrap_or("");
    match name.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, name.to_string()),
    }
}

/// The image named by a request: an ID (`sha256:<hex>` or `<hex>`) or a
/// valid reference, else InvalidArgument naming the field.
fn image_ref(spec: Option<&ImageSpec>) -> Result<&str, Error> {
    let image = match spec {
        Some(s) if !s.image.is_empty() => s.image.as_str(),
        _ => {
            return Err(Error::InvalidArgument(
                "image.image: must name an image".into(),
            ));
        }
    };
    if !is_image_id(image) {
        images::Reference::parse(image)
            .map_err(|e| Error::InvalidArgument(format!("image.image: {e}")))?;
    }
    Ok(image)
}

/// `sha256:<hex>` or `<hex>`: an image ID, never pulled (as a reference
/// it would name `docker.io/library/sha256`).
fn is_image_id(image: &str) -> bool {
    let hex = image.strip_prefix("sha256:").unwrap_or(image);
    hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[tonic::async_trait]
impl ImageService for ImageSvc {
    async fn list_images(
        &self,
        req: Request<ListImagesRequest>,
    ) -> Result<Response<ListImagesResponse>, Status> {
        let wanted = req
            .into_inner()
            .filter
            .and_then(|f| f.image)
            .map(|s| s.image)
            .filter(|s| !s.is_empty());
        let images = match wanted {
            Some(r) => self
                .store
                .get(&r)
                .iter()
                .map(|rec| self.to_cri(rec))
                .collect(),
            None => self
                .store
                .list()
                .iter()
                .map(|rec| self.to_cri(rec))
                .collect(),
        };
        Ok(Response::new(ListImagesResponse { images }))
    }

    async fn image_status(
        &self,
        req: Request<ImageStatusRequest>,
    ) -> Result<Response<ImageStatusResponse>, Status> {
        Ok(Response::new(self.do_status(req.into_inner())?))
    }

    async fn pull_image(
        &self,
        req: Request<PullImageRequest>,
    ) -> Result<Response<PullImageResponse>, Status> {
        Ok(Response::new(self.do_pull(req.into_inner()).await?))
    }

    async fn remove_image(
        &self,
        req: Request<RemoveImageRequest>,
    ) -> Result<Response<RemoveImageResponse>, Status> {
        let req = req.into_inner();
        let reference = image_ref(req.image.as_ref())?.to_string();
        let store = self.store.clone();
        // Idempotent: removing an absent image succeeds.
        tokio::task::spawn_blocking(move || store.remove(&reference))
            .await
            .map_err(Error::from)?
            .map_err(Error::from)?;
        Ok(Response::new(RemoveImageResponse {}))
    }

    async fn image_fs_info(
        &self,
        _req: Request<ImageFsInfoRequest>,
    ) -> Result<Response<ImageFsInfoResponse>, Status> {
        let store = self.store.clone();
        let usage = tokio::task::spawn_blocking(move || store.usage())
            .await
            .map_err(Error::from)?
            .map_err(Error::from)?;
        let fs = FilesystemUsage {
            timestamp: now_nanos(),
            fs_id: Some(FilesystemIdentifier {
                mountpoint: self.store.root().display().to_string(),
            }),
            used_bytes: Some(UInt64Value { value: usage.bytes }),
            inodes_used: Some(UInt64Value {
                value: usage.inodes,
            }),
        };
        Ok(Response::new(ImageFsInfoResponse {
            image_filesystems: vec![fs],
            container_filesystems: vec![],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users() {
        assert_eq!(split_user("1000:1000"), (Some(1000), String::new()));
        assert_eq!(split_user("nobody"), (None, "nobody".to_string()));
        assert_eq!(split_user(""), (None, String::new()));
    }
}
