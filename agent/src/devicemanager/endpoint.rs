//! One registered device plugin, kubelet's `endpoint.go`: the manager
//! dials the plugin's socket, follows its ListAndWatch stream (each answer
//! is the resource's whole device list), and when the stream ends marks
//! the devices unhealthy; a plugin that has not registered again within
//! [`STOP_GRACE`] loses its resource.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cri_proto::deviceplugin::device_plugin_client::DevicePluginClient;
use cri_proto::deviceplugin::{DevicePluginOptions, Empty};
use tokio_stream::StreamExt;

use super::{Manager, STOP_GRACE, pod_devices};
use crate::mutex::lock;

/// How long dialing a plugin that just registered may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Registrations so far: a newer one of a resource replaces an older.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The plugin serving a resource now.
#[derive(Debug, Clone)]
pub(super) struct Endpoint {
    pub(super) client: DevicePluginClient<cri_proto::Channel>,
    pub(super) options: DevicePluginOptions,
    generation: u64,
}

/// Serves one registration until the plugin's stream ends.
pub(super) async fn run(
    manager: Manager,
    resource: String,
    socket: PathBuf,
    options: DevicePluginOptions,
) {
    let dialed = tokio::time::timeout(DIAL_TIMEOUT, cri_proto::connect(&socket)).await;
    let channel = match dialed {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::warn!(%resource, error = %e, "device plugin");
            return;
        }
        Err(_) => {
            tracing::warn!(%resource, socket = %socket.display(), "device plugin: dial timed out");
            return;
        }
    };
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    let mut client = DevicePluginClient::new(channel);
    lock(&manager.0.endpoints).insert(
        resource.clone(),
        Endpoint {
            client: client.clone(),
            options,
            generation,
        },
    );
    tracing::info!(%resource, socket = %socket.display(), "device plugin registered");
    match client.list_and_watch(Empty {}).await {
        Ok(stream) => {
            let mut stream = stream.into_inner();
            while let Some(Ok(list)) = stream.next().await {
                if !is_current(&manager, &resource, generation) {
                    return;
                }
                let devices: BTreeMap<String, bool> = list
                    .devices
                    .into_iter()
                    .map(|d| (d.id, d.health == pod_devices::HEALTHY))
                    .collect();
                let ids_changed = {
                    let mut state = lock(&manager.0.state);
                    let before: Vec<String> = state
                        .devices
                        .get(&resource)
                        .map(|d| d.keys().cloned().collect())
                        .unwrap_or_default();
                    let changed = !devices.keys().eq(before.iter());
                    state.set_devices(&resource, devices);
                    changed
                };
                if ids_changed && let Err(e) = manager.save() {
                    tracing::warn!(error = %e, "device manager checkpoint");
                }
                manager.devices_changed();
            }
        }
        Err(e) => tracing::warn!(%resource, error = %e, "device plugin ListAndWatch"),
    }
    if !is_current(&manager, &resource, generation) {
        return;
    }
    tracing::warn!(%resource, "device plugin went away: its devices are unhealthy");
    lock(&manager.0.state).mark_unhealthy(&resource);
    manager.devices_changed();
    tokio::time::sleep(STOP_GRACE).await;
    let mut endpoints = lock(&manager.0.endpoints);
    if endpoints
        .get(&resource)
        .is_some_and(|e| e.generation == generation)
    {
        endpoints.remove(&resource);
        drop(endpoints);
        lock(&manager.0.state).forget_resource(&resource);
        if let Err(e) = manager.save() {
            tracing::warn!(error = %e, "device manager checkpoint");
        }
        manager.devices_changed();
    }
}

fn is_current(manager: &Manager, resource: &str, generation: u64) -> bool {
    lock(&manager.0.endpoints)
        .get(resource)
        .is_some_and(|e| e.generation == generation)
}
