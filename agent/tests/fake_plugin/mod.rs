//! A device plugin for tests, speaking kubelet's device plugin API
//! (v1beta1) as real plugins do: it serves DevicePlugin on its own socket
//! in a device-plugins directory and registers on that directory's
//! `kubelet.sock`. Its devices and their health are set by the test;
//! Allocate answers each device ID with a device node (`/dev/fake-<id>`
//! from `host_path`), an env var and an annotation, and remembers every
//! call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use cri_proto::deviceplugin::device_plugin_server::{DevicePlugin, DevicePluginServer};
use cri_proto::deviceplugin::registration_client::RegistrationClient;
use cri_proto::deviceplugin::*;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

#[derive(Debug, Default)]
pub struct PluginState {
    /// ID → healthy.
    pub devices: BTreeMap<String, bool>,
    /// Every Allocate: the IDs asked for.
    pub allocations: Vec<Vec<String>>,
    pub pre_starts: Vec<Vec<String>>,
    /// Allocate never answers (a hung plugin).
    pub hang_allocate: bool,
}

#[derive(Clone)]
pub struct FakePlugin {
    pub resource: String,
    pub socket: PathBuf,
    /// What each container gets as its device node's host path.
    pub host_path: String,
    pub state: Arc<Mutex<PluginState>>,
    changed: tokio::sync::watch::Sender<u64>,
    pre_start_required: bool,
    /// GetPreferredAllocation answers the last IDs of those available.
    pub prefers_last: bool,
    /// True: its ListAndWatch streams end, as when a plugin exits.
    gone: tokio::sync::watch::Sender<bool>,
}

impl FakePlugin {
    /// Serves on `<dir>/<name>.sock` with `devices` healthy.
    pub fn start(dir: &Path, name: &str, resource: &str, devices: &[&str]) -> Self {
        Self::start_with(dir, name, resource, devices, false)
    }

    /// As [`FakePlugin::start`]; `prefers_last`: it has a preference.
    pub fn start_with(
        dir: &Path,
        name: &str,
        resource: &str,
        devices: &[&str],
        prefers_last: bool,
    ) -> Self {
        let socket = dir.join(format!("{name}.sock"));
        let plugin = FakePlugin {
            resource: resource.into(),
            socket: socket.clone(),
            host_path: "/dev/null".into(),
            state: Arc::new(Mutex::new(PluginState {
                devices: devices.iter().map(|d| (d.to_string(), true)).collect(),
                ..Default::default()
            })),
            changed: tokio::sync::watch::channel(0).0,
            pre_start_required: true,
            prefers_last,
            gone: tokio::sync::watch::channel(false).0,
        };
        let incoming = cri_proto::listen(socket.clone()).expect("plugin socket");
        let server = DevicePluginServer::new(plugin.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(server)
                .serve_with_incoming(incoming),
        );
        plugin
    }

    /// Registers on `<dir>/kubelet.sock`.
    pub async fn register(&self) -> Result<(), Status> {
        let dir = self.socket.parent().expect("dir");
        let channel = cri_proto::connect(dir.join("kubelet.sock"))
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        RegistrationClient::new(channel)
            .register(RegisterRequest {
                version: "v1beta1".into(),
                endpoint: self
                    .socket
                    .file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into(),
                resource_name: self.resource.clone(),
                options: Some(DevicePluginOptions {
                    pre_start_required: self.pre_start_required,
                    get_preferred_allocation_available: self.prefers_last,
                }),
            })
            .await
            .map(|_| ())
    }

    /// Sets a device's health (a new device when unknown); ListAndWatch
    /// sends the new list.
    pub fn set(&self, id: &str, healthy: bool) {
        self.state
            .lock()
            .expect("state")
            .devices
            .insert(id.into(), healthy);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Ends its ListAndWatch streams, as a plugin that exits.
    pub fn go_away(&self) {
        self.gone.send_replace(true);
    }

    /// Serves streams again (then [`FakePlugin::register`] again).
    pub fn come_back(&self) {
        self.gone.send_replace(false);
    }

    fn list(&self) -> ListAndWatchResponse {
        let st = self.state.lock().expect("state");
        ListAndWatchResponse {
            devices: st
                .devices
                .iter()
                .map(|(id, healthy)| Device {
                    id: id.clone(),
                    health: if *healthy { "Healthy" } else { "Unhealthy" }.into(),
                    topology: None,
                })
                .collect(),
        }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl DevicePlugin for FakePlugin {
    async fn get_device_plugin_options(&self, _: Request<Empty>) -> Reply<DevicePluginOptions> {
        Ok(Response::new(DevicePluginOptions {
            pre_start_required: self.pre_start_required,
            get_preferred_allocation_available: self.prefers_last,
        }))
    }

    type ListAndWatchStream =
        Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send + 'static>>;

    async fn list_and_watch(&self, _: Request<Empty>) -> Reply<Self::ListAndWatchStream> {
        let me = self.clone();
        let mut changed = self.changed.subscribe();
        let mut gone = self.gone.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tokio::spawn(async move {
            loop {
                if *gone.borrow_and_update() || tx.send(Ok(me.list())).await.is_err() {
                    return;
                }
                tokio::select! {
                    c = changed.changed() => if c.is_err() { return },
                    _ = gone.changed() => {}
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<PreferredAllocationRequest>,
    ) -> Reply<PreferredAllocationResponse> {
        if !self.prefers_last {
            return Err(Status::unimplemented("no preference"));
        }
        let container_responses = req
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| {
                let n = usize::try_from(c.allocation_size).unwrap_or(0);
                let ids = &c.available_device_i_ds;
                ContainerPreferredAllocationResponse {
                    device_i_ds: ids[ids.len().saturating_sub(n)..].to_vec(),
                }
            })
            .collect();
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(&self, req: Request<AllocateRequest>) -> Reply<AllocateResponse> {
        if self.state.lock().expect("state").hang_allocate {
            std::future::pending::<()>().await;
        }
        let mut responses = Vec::new();
        for c in req.into_inner().container_requests {
            self.state
                .lock()
                .expect("state")
                .allocations
                .push(c.devices_ids.clone());
            responses.push(ContainerAllocateResponse {
                envs: [("FAKE_DEVICES".to_string(), c.devices_ids.join(","))].into(),
                mounts: Vec::new(),
                devices: c
                    .devices_ids
                    .iter()
                    .map(|id| DeviceSpec {
                        container_path: format!("/dev/fake-{id}"),
                        host_path: self.host_path.clone(),
                        permissions: "rw".into(),
                    })
                    .collect(),
                annotations: [("fake.example/devices".to_string(), c.devices_ids.join(","))].into(),
                cdi_devices: Vec::new(),
            });
        }
        Ok(Response::new(AllocateResponse {
            container_responses: responses,
        }))
    }

    async fn pre_start_container(
        &self,
        req: Request<PreStartContainerRequest>,
    ) -> Reply<PreStartContainerResponse> {
        self.state
            .lock()
            .expect("state")
            .pre_starts
            .push(req.into_inner().devices_ids);
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
