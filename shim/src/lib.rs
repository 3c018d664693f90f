//! `picolet shim`: the CRI server.
//!
//! Serves, on one unix socket (mode 0600): CRI ImageService over the offline
//! [`images`] store, CRI RuntimeService over [`Runtime`] (sandboxes with
//! pinned namespaces, containers created by `picolet monitor` with its own
//! init, [`process::init`]), and picolet's own `picolet.v1.Images` import API. At start
//! it opens the store (cleaning what a crash left), recovers every sandbox and
//! container from its records, and starts the preload-folder watcher.

mod cni;
mod error;
pub mod host;
mod mutex;
pub mod process;
mod runtime;
pub mod seccomp;
mod service;
mod spec;
mod state;
mod streaming;

/// picolet's own CNI plugin (`picolet cni`), for devices without one.
pub use cni::builtin as cni_plugin;
/// The CDI spec parser and resolver (its fuzz target uses it).
pub use spec::cdi;

use std::future::Future;
use std::sync::Arc;

use cri_proto::picolet::images_server::ImagesServer;
use cri_proto::v1::image_service_server::ImageServiceServer;
use cri_proto::v1::runtime_service_server::RuntimeServiceServer;
use edge_config::ShimPaths;
use images::{ImageStore, Preloader};

pub use error::Error;
/// How images missing from the store are pulled (`serve`'s `pull`).
pub use registry::Options as PullOptions;
pub use runtime::Runtime;
pub use service::image::ImageSvc;
pub use service::runtime::{RUNTIME_API_VERSION, RUNTIME_NAME, RuntimeSvc};

/// Why the shim could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("cannot open the image store: {0}")]
    Store(#[from] images::Error),
    #[error(transparent)]
    Socket(#[from] cri_proto::SocketError),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("start-up task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("cannot recover runtime state: {0}")]
    Runtime(#[from] Error),
    #[error(transparent)]
    Owner(#[from] edge_config::owner::OwnerError),
    #[error("cannot listen for streaming on {addr}: {source}")]
    Streaming {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Runs the shim until `shutdown` resolves; `store` says how images are
/// stored (platform, unpack limits), `pull` how images missing from it are
/// pulled (registries.yaml, credentials); the streaming server (Exec,
/// PortForward) listens on `streaming` (port 0: any free port).
pub async fn serve(
    paths: ShimPaths,
    store: images::StoreOptions,
    pull: registry::Options,
    streaming: std::net::SocketAddr,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ShimError> {
    // Before anything under the root is touched: one shim per root.
    let lock = paths.root.join("shim.lock");
    let _owner = tokio::task::spawn_blocking(move || {
        edge_config::owner::claim(&lock, "shim", edge_config::owner::WAIT)
    })
    .await??;
    let store_dir = paths.image_store();
    let store =
        tokio::task::spawn_blocking(move || ImageStore::open_with(store_dir, store)).await??;
    let store = Arc::new(store);

    let preloader = Preloader::new(store.clone(), paths.images_dir.clone());
    std::thread::Builder::new()
        .name("preload".into())
        .spawn(move || {
            if let Err(e) = preloader.watch() {
                tracing::error!(error = %e, "preload folder watcher stopped");
            }
        })
        .map_err(|e| images::Error::Io {
            op: "spawn preload thread",
            path: paths.images_dir.clone(),
            source: e,
        })?;

    let runtime = Arc::new(Runtime::new(paths.clone(), store.clone())?);
    runtime.recover().await?;
    tokio::spawn(runtime.clone().watch_exits());
    let (streaming_server, listener) =
        streaming::Streaming::bind(streaming)
            .await
            .map_err(|source| ShimError::Streaming {
                addr: streaming,
                source,
            })?;
    tokio::spawn(streaming_server.clone().serve(listener, runtime.clone()));

    let puller = Arc::new(registry::Puller::new(store.clone(), pull));
    let incoming = cri_proto::listen(&paths.socket)?;
    tracing::info!(socket = %paths.socket.display(), "serving CRI");
    tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(RuntimeSvc::new(
            runtime.clone(),
            streaming_server,
        )))
        .add_service(ImageServiceServer::new(ImageSvc::new(
            store.clone(),
            puller.clone(),
        )))
        .add_service(ImagesServer::new(service::import::ImportSvc::new(
            store, puller,
        )))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    let _ = std::fs::remove_file(&paths.socket);
    runtime.retire_pin_space();
    Ok(())
}
