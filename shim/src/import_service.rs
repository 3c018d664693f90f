//! picolet.v1.Images: archive import with progress, for `picolet ctl import`.
//! CRI has no import verb; the shim stays the only writer of its store.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use cri_proto::picolet::{ImportProgress, ImportRequest, ImportedImage, images_server::Images};
use images::ImageStore;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::error::Error;

#[derive(Debug, Clone)]
pub struct ImportSvc {
    store: Arc<ImageStore>,
}

impl ImportSvc {
    pub fn new(store: Arc<ImageStore>) -> Self {
        Self { store }
    }
}

type ProgressStream = Pin<Box<dyn Stream<Item = Result<ImportProgress, Status>> + Send>>;

#[tonic::async_trait]
impl Images for ImportSvc {
    type ImportStream = ProgressStream;

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
