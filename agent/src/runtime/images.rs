//! ImageService calls: listing, pulls, removal and the image filesystem
//! (image GC and the pod workers).

use cri_proto::v1::{
    ImageFsInfoRequest, ImageSpec, ImageStatusRequest, ListContainersRequest, ListImagesRequest,
    PodSandboxConfig, PullImageRequest, RemoveImageRequest,
};
use std::path::PathBuf;
use tonic::Status;

use super::{Cri, CriError, Image, Result, e};

impl Cri {
    /// Every image the runtime has (image GC).
    pub async fn list_images(&self) -> Result<Vec<Image>> {
        let images = self
            .img
            .clone()
            .list_images(self.req(ListImagesRequest::default()))
            .await
            .map_err(e("ListImages"))?
            .into_inner()
            .images;
        Ok(images
            .into_iter()
            .map(|i| Image {
                names: i.repo_tags.into_iter().chain(i.repo_digests).collect(),
                id: i.id,
                size: i.size,
                pinned: i.pinned,
            })
            .collect())
    }

    /// The images of every container, running or not, as the runtime
    /// names them (image ID, and the image as asked for).
    pub async fn container_images(&self) -> Result<std::collections::HashSet<String>> {
        let items = self
            .rt
            .clone()
            .list_containers(self.req(ListContainersRequest::default()))
            .await
            .map_err(e("ListContainers"))?
            .into_inner()
            .containers;
        Ok(items
            .into_iter()
            .flat_map(|c| [Some(c.image_ref), c.image.map(|i| i.image)])
            .flatten()
            .filter(|s| !s.is_empty())
            .collect())
    }

    /// containerd's sandbox ("pause") image, from its verbose Status: image
    /// GC must keep it though no container names it (kubelet keeps its
    /// `--pod-infra-container-image` for the same reason; containerd 1.7+
    /// also marks it pinned). None for runtimes without one, like ours.
    pub async fn sandbox_image(&self) -> Option<String> {
        let info = self
            .rt
            .clone()
            .status(self.req(cri_proto::v1::StatusRequest { verbose: true }))
            .await
            .ok()?
            .into_inner()
            .info;
        let config: serde_json::Value = serde_json::from_str(info.get("config")?).ok()?;
        config["sandboxImage"].as_str().map(str::to_string)
    }

    /// Where the runtime keeps its images (ImageFsInfo's mountpoint).
    pub async fn image_fs_mountpoint(&self) -> Result<PathBuf> {
        let info = self
            .img
            .clone()
            .image_fs_info(self.req(ImageFsInfoRequest::default()))
            .await
            .map_err(e("ImageFsInfo"))?
            .into_inner();
        info.image_filesystems
            .into_iter()
            .find_map(|f| f.fs_id.map(|id| PathBuf::from(id.mountpoint)))
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or_else(|| CriError {
                call: "ImageFsInfo",
                status: Status::internal("no image filesystem"),
            })
    }

    pub async fn remove_image(&self, id: &str) -> Result<()> {
        self.img
            .clone()
            .remove_image(self.req(RemoveImageRequest {
                image: Some(ImageSpec {
                    image: id.into(),
                    ..Default::default()
                }),
            }))
            .await
            .map_err(e("RemoveImage"))?;
        Ok(())
    }

    /// The image's ID if the runtime has it.
    pub async fn image_id(&self, image: &str) -> Result<Option<String>> {
        let r = self
            .img
            .clone()
            .image_status(self.req(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                verbose: false,
            }))
            .await
            .map_err(e("ImageStatus"))?
            .into_inner();
        Ok(r.image.map(|i| i.id))
    }

    /// PullImage, with a registry credential (from the pod's pull secrets).
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<&crate::credentialprovider::Cred>,
        sandbox: PodSandboxConfig,
    ) -> Result<String> {
        let auth = auth.map(|c| cri_proto::v1::AuthConfig {
            username: c.username.clone(),
            password: c.password.clone(),
            identity_token: c.identity_token.clone(),
            ..Default::default()
        });
        Ok(self
            .img
            .clone()
            // No deadline, as kubelet's: a large image on a slow link takes
            // what it takes (the runtime bounds each stalled read).
            .pull_image(tonic::Request::new(PullImageRequest {
                image: Some(ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: Some(sandbox),
            }))
            .await
            .map_err(e("PullImage"))?
            .into_inner()
            .image_ref)
    }
}
