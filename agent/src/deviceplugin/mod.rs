//! The built-in generic device plugin: each `picolet.devices` entry is a
//! device plugin of its own, served on `picolet-<name>.sock` in the first
//! device-plugins directory and registered on its `kubelet.sock` through
//! the device plugin API, as any plugin is — so a static pod asks for
//! `devices.picolet.io/serial: 1` and gets a serial port without a
//! DaemonSet or `privileged`. The host is scanned every
//! [`RESCAN`]: a device that appears or goes is reported within seconds.

pub mod discover;

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cri_proto::deviceplugin::device_plugin_server::{DevicePlugin, DevicePluginServer};
use cri_proto::deviceplugin::registration_client::RegistrationClient;
use cri_proto::deviceplugin::*;
use edge_config::devices::DeviceSpec as Resource;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::mutex::lock;

/// How often the host is looked at for devices that came or went.
pub const RESCAN: Duration = Duration::from_secs(2);
/// How long to wait between tries to register.
const RETRY: Duration = Duration::from_secs(2);

/// What went wrong starting a plugin.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Socket(#[from] cri_proto::SocketError),
    /// The device manager refused the registration.
    #[error("register: {0}")]
    Register(tonic::Status),
}

/// Starts a plugin for each resource in `dir` (where `kubelet.sock` is).
pub fn start(resources: &[Resource], dir: &Path) -> Result<(), Error> {
    for r in resources {
        let plugin = Plugin::new(r.clone());
        let socket = dir.join(format!("picolet-{}.sock", r.name));
        let incoming = cri_proto::listen(socket.clone())?;
        let scanning = plugin.clone();
        tokio::spawn(async move { scanning.rescan_forever().await });
        let serving = plugin.clone();
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(serving))
                .serve_with_incoming(incoming)
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "built-in device plugin");
            }
        });
        tokio::spawn(register(
            dir.join(crate::devicemanager::KUBELET_SOCKET),
            socket,
            r.resource(),
        ));
    }
    Ok(())
}

/// Registers until the device manager takes it.
async fn register(kubelet: PathBuf, socket: PathBuf, resource: String) {
    let endpoint = socket
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    loop {
        let done = match cri_proto::connect(&kubelet).await {
            Ok(ch) => RegistrationClient::new(ch)
                .register(RegisterRequest {
                    version: crate::devicemanager::registration::VERSION.into(),
                    endpoint: endpoint.clone(),
                    resource_name: resource.clone(),
                    options: Some(DevicePluginOptions::default()),
                })
                .await
                .map_err(Error::Register),
            Err(e) => Err(Error::Socket(e)),
        };
        match done {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(%resource, error = %e, "built-in device plugin: register; retrying");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

#[derive(Clone)]
struct Plugin {
    resource: Arc<Resource>,
    devices: Arc<Mutex<discover::Devices>>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Plugin {
    fn new(resource: Resource) -> Self {
        let devices = discover::devices(&resource);
        Self {
            resource: Arc::new(resource),
            devices: Arc::new(Mutex::new(devices)),
            changed: tokio::sync::watch::channel(0).0,
        }
    }

    async fn rescan_forever(self) {
        loop {
            tokio::time::sleep(RESCAN).await;
            let r = self.resource.clone();
            let Ok(now) = tokio::task::spawn_blocking(move || discover::devices(&r)).await else {
                continue;
            };
            let mut held = lock(&self.devices);
            if *held != now {
                tracing::info!(
                    resource = %self.resource.resource(),
                    devices = now.len(),
                    "devices changed"
                );
                *held = now;
                drop(held);
                self.changed.send_modify(|n| *n += 1);
            }
        }
    }

    fn list(&self) -> ListAndWatchResponse {
        ListAndWatchResponse {
            devices: lock(&self.devices)
                .keys()
                .map(|id| Device {
                    id: id.clone(),
                    health: crate::devicemanager::pod_devices::HEALTHY.into(),
                    topology: None,
                })
                .collect(),
        }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    async fn get_device_plugin_options(&self, _: Request<Empty>) -> Reply<DevicePluginOptions> {
        Ok(Response::new(DevicePluginOptions::default()))
    }

    type ListAndWatchStream =
        Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send + 'static>>;

    async fn list_and_watch(&self, _: Request<Empty>) -> Reply<Self::ListAndWatchStream> {
        let me = self.clone();
        let mut changed = self.changed.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                if tx.send(Ok(me.list())).await.is_err() || changed.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn get_preferred_allocation(
        &self,
        _: Request<PreferredAllocationRequest>,
    ) -> Reply<PreferredAllocationResponse> {
        Err(Status::unimplemented(
            "the built-in plugin has no preference",
        ))
    }

    async fn allocate(&self, req: Request<AllocateRequest>) -> Reply<AllocateResponse> {
        let devices = lock(&self.devices).clone();
        let container_responses = req
            .into_inner()
            .container_requests
            .iter()
            .map(|c| discover::allocate(&devices, &c.devices_ids))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Status::not_found(e.to_string()))?;
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Reply<PreStartContainerResponse> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
