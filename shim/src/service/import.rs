//! picolet.v1.Images: archive import and registry pulls with progress, for
//! `picolet ctl import` and `picolet ctl pull`.
//! CRI has no import verb; the shim stays the only writer of its store.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use cri_proto::picolet::{
    ImportProgress, ImportRequest, ImportedImage, PullProgress, PullRequest, images_server::Images,
};
use images::ImageStore;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::error::Error;

#[derive(Debug, Clone)]
pub struct ImportSvc {
    store: Arc<ImageStore>,
    puller: Arc<registry::Puller>,
}

impl ImportSvc {
    pub fn new(store: Arc<ImageStore>, puller: Arc<registry::Puller>) -> Self {
        Self { store, puller }
    }
}

type ProgressStream = Pin<Box<dyn Stream<Item = Result<ImportProgress, Status>> + Send>>;
type PullStream = Pin<Box<dyn Stream<Item = Result<PullProgress, Status>> + Send>>;

/// How often a pull's progress is sent.
const PULL_TICK: std::time::Duration = std::time::Duration::from_millis(200);

fn pull_progress(p: &registry::Progress) -> PullProgress {
    use std::sync::atomic::Ordering::Relaxed;
    PullProgress {
        done_bytes: p.done.load(Relaxed),
        total_bytes: p.total.load(Relaxed),
        layers: u32::try_from(p.layers.load(Relaxed)).unwrap_or(u32::MAX),
        layers_done: u32::try_from(p.layers_done.load(Relaxed)).unwrap_or(u32::MAX),
        id: String::new(),
    }
}

#[tonic::async_trait]
impl Images for ImportSvc {
    type ImportStream = ProgressStream;
    type PullStream = PullStream;

    async fn pull(&self, req: Request<PullRequest>) -> Result<Response<PullStream>, Status> {
        let req = req.into_inner();
        if req.image.is_empty() {
            return Err(Error::InvalidArgument("image: must name an image".into()).into());
        }
        let cred = (!req.username.is_empty()).then(|| registry::Credential {
            username: req.username,
            password: req.password,
            ..Default::default()
        });
        let (tx, rx) = mpsc::channel(16);
        let (store, puller) = (self.store.clone(), self.puller.clone());
        // The pull stops when the client goes away (its partial downloads
        // are kept for the next try).
        tokio::spawn(async move {
            let progress = Arc::new(registry::Progress::default());
            let work =
                crate::service::image::pull(&store, &puller, &req.image, cred, progress.clone());
            tokio::pin!(work);
            let mut tick = tokio::time::interval(PULL_TICK);
            let last = loop {
                tokio::select! {
                    done = &mut work => break done,
                    _ = tick.tick() => {
                        if tx.send(Ok(pull_progress(&progress))).await.is_err() {
                            return;
                        }
                    }
                }
            };
            let last = last
                .map(|id| PullProgress {
                    id,
                    ..pull_progress(&progress)
                })
                .map_err(Status::from);
            let _ = tx.send(last).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn import(
        &self,
        req: Request<ImportRequest>,
    ) -> Result<Response<ProgressStream>, Status> {
        let path = PathBuf::from(req.into_inner().path);
        if !path.is_absolute() {
            return Err(Error::InvalidArgument(format!(
                "path: {} is not absolute",
                path.display()
            ))
            .into());
        }
        let (tx, rx) = mpsc::channel(16);
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let progress = |read_bytes, total_bytes| {
                // Progress is best effort: drop updates the client is slow to take.
                let _ = tx.try_send(Ok(ImportProgress {
                    read_bytes,
                    total_bytes,
                    images: vec![],
                }));
            };
            let last = match store.import(&path, &progress) {
                Ok(recs) => Ok(ImportProgress {
                    read_bytes: 0,
                    total_bytes: 0,
                    images: recs
                        .into_iter()
                        .map(|r| ImportedImage {
                            id: r.id.to_string(),
                            repo_tags: r.repo_tags,
                            repo_digests: r.repo_digests,
                        })
                        .collect(),
                }),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "import failed");
                    Err(Status::from(Error::from(e)))
                }
            };
            let _ = tx.blocking_send(last);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
