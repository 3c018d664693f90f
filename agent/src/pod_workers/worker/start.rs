//! Starting one container as kubelet's `startContainer` does: the image
//! (pull policy, back-off, ErrImagePull / ImagePullBackOff), volumes, the
//! container config, create, start, and the postStart hook.

use super::{MIN_GRACE, Worker};
use crate::clock::now;
use crate::credentialprovider::{Cred, Keyring};
use crate::cri_config::{self, ContainerEnv};
use crate::events::EventType;
use crate::events::reason as event;
use crate::lifecycle::handlers;
use crate::mutex::lock;
use crate::plan::{Observed, State};
use crate::pod_workers::SyncError;
use crate::qos;
use crate::reason;
use crate::status::Waiting;
use crate::volumes::{self, projection};
use k8s_openapi::api::core::v1::{Container, Pod};
use std::path::PathBuf;

/// Why a pod's configMap, secret, downwardAPI or projected volumes could
/// not be set up (a FailedMount).
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("configMaps, secrets and service account tokens need an API server (cluster mode)")]
    NoApiServer,
    #[error(transparent)]
    Fetch(#[from] crate::volumes::objects::FetchError),
    #[error("volume {volume:?}: {source}")]
    Project {
        volume: String,
        source: projection::ProjectionError,
    },
    #[error(transparent)]
    Write(#[from] volumes::Error),
}

impl Worker {
    pub(super) fn prepare_pod_cgroup(&mut self, pod: &Pod) -> Result<(), SyncError> {
        let spec = pod.spec.clone().unwrap_or_default();
        let r = qos::pod_resources(&spec);
        self.ensure_pod_cgroup(r)
            .map_err(|(path, source)| SyncError::PodCgroup { path, source })?;
        self.pod_cgroup_made(r);
        Ok(())
    }

    /// Makes the pod's cgroup, or sets its values (kubelet's pod container
    /// manager), where the agent keeps pod cgroups.
    pub(super) fn ensure_pod_cgroup(
        &self,
        r: qos::PodResources,
    ) -> Result<(), (String, std::io::Error)> {
        let cfg = &self.shared.config;
        let Some(h) = self.shared.cgroups.as_ref() else {
            return Ok(());
        };
        if !cfg.cgroups_per_qos {
            return Ok(());
        }
        let limits = cgroup::Limits {
            cpu_shares: r.cpu_shares,
            cpu_quota: r.cpu_quota,
            cpu_period: qos::CPU_PERIOD_US as u64,
            memory: r.memory_limit,
            pids: cfg.pod_pids_limit,
        };
        let path = qos::pod_cgroup_parent(&cfg.cgroup_root, self.qos, &self.uid);
        h.ensure_pod(&path, &limits).map_err(|e| (path, e))
    }

    /// The credentials the pod's `imagePullSecrets` hold for `image`
    /// (cluster mode); a secret that cannot be read is a Warning event, as
    /// kubelet's `FailedToRetrieveImagePullSecret`, and the pull goes on.
    async fn pull_credentials(&self, pod: &Pod, container: &str, image: &str) -> Vec<Cred> {
        let (Some(objects), Some(spec)) = (self.shared.objects.as_ref(), pod.spec.as_ref()) else {
            return Vec::new();
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut ring = Keyring::default();
        let mut missing = Vec::new();
        for name in spec
            .image_pull_secrets
            .iter()
            .flatten()
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty())
        {
            match objects.secret(ns, name).await {
                Ok(Some(data)) => {
                    if let Err(e) = ring.add_secret(&data) {
                        tracing::warn!(pod = %self.obj.name, secret = name, "pull secret: {e}");
                        missing.push(name.to_string());
                    }
                }
                Ok(None) | Err(_) => missing.push(name.to_string()),
            }
        }
        if !missing.is_empty() {
            self.event(
                Some(container),
                EventType::Warning,
                "FailedToRetrieveImagePullSecret",
                &format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    missing.join(", ")
                ),
            );
        }
        ring.lookup(image)
    }

    /// Pulls (per imagePullPolicy) and returns the image ref, or the
    /// waiting reason.
    pub(super) async fn ensure_image(&self, pod: &Pod, c: &Container) -> Result<String, Waiting> {
        let image = c.image.clone().unwrap_or_default();
        let policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
        self.ensure_image_ref(pod, &c.name, &image, policy).await
    }

    /// [`Self::ensure_image`] for any image of the pod (a container's, an
    /// image volume's), its events on `container`.
    pub(super) async fn ensure_image_ref(
        &self,
        pod: &Pod,
        container: &str,
        image: &str,
        policy: &str,
    ) -> Result<String, Waiting> {
        let image = image.to_string();
        let cri = &self.shared.cri;
        let present = cri.image_id(&image).await.ok().flatten();
        match (policy, present) {
            ("Never", Some(id)) | ("IfNotPresent", Some(id)) => {
                // kubelet's image manager says so at every container start.
                self.event(
                    Some(container),
                    EventType::Normal,
                    event::PULLED_IMAGE,
                    &format!("Container image {image:?} already present on machine"),
                );
                return Ok(id);
            }
            ("Never", None) => {
                let msg =
                    format!("Container image {image:?} is not present with pull policy of Never");
                self.event(
                    Some(container),
                    EventType::Warning,
                    event::ERR_IMAGE_NEVER_PULL,
                    &msg,
                );
                return Err(Waiting {
                    reason: reason::ERR_IMAGE_NEVER_PULL.into(),
                    message: msg,
                });
            }
            _ => {}
        }
        let key = format!("{}/pull/{image}", self.uid);
        let t = now();
        {
            let b = lock(&self.shared.image_backoff);
            if b.remaining_since_update(&key, t).is_some() {
                let msg = format!("Back-off pulling image {image:?}");
                self.event(Some(container), EventType::Normal, event::BACK_OFF, &msg);
                return Err(Waiting {
                    reason: reason::IMAGE_PULL_BACK_OFF.into(),
                    message: msg,
                });
            }
        }
        self.event(
            Some(container),
            EventType::Normal,
            event::PULLING_IMAGE,
            &format!("Pulling image {image:?}"),
        );
        let started = tokio::time::Instant::now();
        let sandbox = cri_config::sandbox_config(pod, 0, &self.sandbox_env());
        // kubelet's puller: each credential the pull secrets have for this
        // image in turn, the last error if none works; anonymous without.
        let creds = self.pull_credentials(pod, container, &image).await;
        let turn = self.shared.pull_gate.acquire().await;
        let pulling = tokio::time::Instant::now();
        let mut pulled = cri.pull_image(&image, creds.first(), sandbox.clone()).await;
        for cred in creds.iter().skip(1) {
            if pulled.is_ok() {
                break;
            }
            pulled = cri.pull_image(&image, Some(cred), sandbox.clone()).await;
        }
        let pulled_in = pulling.elapsed();
        drop(turn);
        match pulled {
            Ok(r) => {
                self.event(
                    Some(container),
                    EventType::Normal,
                    event::PULLED_IMAGE,
                    &format!(
                        "Successfully pulled image {image:?} in {pulled_in:?} ({:?} including waiting)",
                        started.elapsed()
                    ),
                );
                Ok(r)
            }
            Err(e) => {
                lock(&self.shared.image_backoff).next(&key, now());
                let msg = format!("Failed to pull image {image:?}: {}", e.status.message());
                self.event(
                    Some(container),
                    EventType::Warning,
                    event::FAILED_TO_PULL_IMAGE,
                    &msg,
                );
                Err(Waiting {
                    reason: reason::ERR_IMAGE_PULL.into(),
                    message: msg,
                })
            }
        }
    }

    /// The pod's managed /etc/hosts, made before each container start (the
    /// pod IP changes with a new sandbox); `None` when the pod has no IP.
    fn etc_hosts(
        &self,
        pod: &Pod,
        host_network: bool,
        ip: &str,
    ) -> Result<Option<PathBuf>, volumes::Error> {
        if ip.is_empty() {
            return Ok(None);
        }
        // Only a host-network pod's file is made from the node's.
        let node_hosts = if host_network {
            std::fs::read_to_string("/etc/hosts").unwrap_or_default()
        } else {
            String::new()
        };
        let text =
            cri_config::hosts::content(pod, &[ip], &self.shared.config.cluster_domain, &node_hosts);
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        volumes::write_etc_hosts(&self.shared.config.data_dir, uid, &text).map(Some)
    }

    /// The container's config could not be made: kubelet's
    /// CreateContainerConfigError.
    fn config_failed(&mut self, c: &Container, e: String) {
        let msg = format!("Error: {e}");
        self.event(
            Some(&c.name),
            EventType::Warning,
            event::FAILED_TO_CREATE_CONTAINER,
            &msg,
        );
        self.waiting.insert(
            c.name.clone(),
            Waiting {
                reason: reason::CREATE_CONTAINER_CONFIG_ERROR.into(),
                message: e,
            },
        );
    }

    /// A volume could not be made: kubelet's FailedMount, the container
    /// waits in ContainerCreating.
    fn mount_failed(&mut self, c: &Container, e: &str) {
        let msg = format!("MountVolume.SetUp failed: {e}");
        self.event(
            Some(&c.name),
            EventType::Warning,
            event::FAILED_MOUNT_VOLUME,
            &msg,
        );
        self.waiting.insert(
            c.name.clone(),
            Waiting {
                reason: reason::CONTAINER_CREATING.into(),
                message: msg,
            },
        );
    }

    /// The configMaps, secrets and tokens the pod refers to.
    pub(super) async fn fetch_objects(&self, pod: &Pod) -> Result<projection::Objects, MountError> {
        let needs = projection::needs(pod);
        let mut out = projection::Objects::default();
        if needs.is_empty() {
            return Ok(out);
        }
        let Some(api) = self.shared.objects.as_ref() else {
            return Err(MountError::NoApiServer);
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        for name in &needs.config_maps {
            out.config_maps
                .insert(name.clone(), api.config_map(ns, name).await?);
        }
        for name in &needs.secrets {
            out.secrets
                .insert(name.clone(), api.secret(ns, name).await?);
        }
        let spec = pod.spec.as_ref();
        let sa = spec
            .and_then(|s| s.service_account_name.as_deref())
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        for key in &needs.tokens {
            let token = api
                .token(crate::volumes::objects::TokenRequest {
                    namespace: ns,
                    service_account: sa,
                    pod_name: pod.metadata.name.as_deref().unwrap_or(""),
                    pod_uid: pod.metadata.uid.as_deref().unwrap_or(""),
                    audience: &key.0,
                    seconds: key.1,
                })
                .await?;
            out.tokens.insert(key.clone(), token);
        }
        Ok(out)
    }

    /// The files of the pod's configMap, secret, downwardAPI and projected
    /// volumes, by volume name.
    pub(super) fn project(
        &self,
        pod: &Pod,
        objects: &projection::Objects,
    ) -> Result<std::collections::BTreeMap<String, projection::Files>, MountError> {
        let node = &self.shared.node;
        let resource = |container: &str, res: &str, divisor: Option<&str>| {
            cri_config::container_resource(pod, container, res, divisor, node)
                .map_err(|e| projection::ResourceError(Box::new(e)))
        };
        let mut out = std::collections::BTreeMap::new();
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        for v in volumes.into_iter().flatten() {
            if projection::is_projected(v) {
                let files =
                    projection::volume_files(pod, v, objects, &resource).map_err(|source| {
                        MountError::Project {
                            volume: v.name.clone(),
                            source,
                        }
                    })?;
                out.insert(v.name.clone(), files);
            }
        }
        Ok(out)
    }

    /// While the pod runs, its configMap/secret/projected volumes follow
    /// their objects (and tokens are renewed): written again every
    /// syncFrequency when something changed (kubelet's periodic remount;
    /// never for subPath mounts, which are bind mounts of the old files).
    pub(super) async fn refresh_volumes(&mut self, pod: &Pod, observed: &Observed) {
        // Never written by this worker (the agent restarted while the pod
        // ran): due at once, so objects and tokens keep following.
        let due = self
            .volumes_written
            .is_none_or(|t| t.elapsed() >= self.shared.config.sync_frequency);
        let projected = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|v| v.iter().any(projection::is_projected));
        if !due || !projected || observed.sandboxes.is_empty() {
            return;
        }
        self.volumes_written = Some(tokio::time::Instant::now());
        let written = match self.fetch_objects(pod).await {
            Ok(objects) => self.project(pod, &objects).and_then(|files| {
                Ok(volumes::write_projected(
                    pod,
                    &self.shared.config.data_dir,
                    &files,
                )?)
            }),
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            // The old files stay; tried again at the next period.
            self.event(
                None,
                EventType::Warning,
                event::FAILED_MOUNT_VOLUME,
                &format!("MountVolume.SetUp failed (refresh): {e}"),
            );
        }
    }

    pub(super) async fn start_container(
        &mut self,
        pod: &Pod,
        c: &Container,
        observed: &Observed,
        sandbox_id: &str,
        pod_ip: &str,
    ) {
        let last = observed.latest(&c.name);
        let restart_count = last.map(|l| l.restart_count + 1).unwrap_or(0);
        if last.is_some_and(|l| l.state == State::Exited) {
            lock(&self.shared.backoff).next(&self.backoff_key(c), now());
        }
        let image_ref = match self.ensure_image(pod, c).await {
            Ok(r) => r,
            Err(w) => {
                self.waiting.insert(c.name.clone(), w);
                return;
            }
        };
        let image_volumes = match self.image_volumes(pod, c).await {
            Ok(v) => v,
            Err(w) => {
                self.waiting.insert(c.name.clone(), w);
                return;
            }
        };
        // A restarted agent learns the pod's range again here.
        if let Err(e) = self.pod_userns(pod).await {
            self.config_failed(c, e.to_string());
            return;
        }
        // kubelet's etc-hosts is made with the volumes (a host-network
        // pod's IP is the node's; no IP, a pod network without CNI: the
        // runtime's file stays).
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let hosts_ip = if host_network {
            self.shared.node.host_ip.as_str()
        } else {
            pod_ip
        };
        let objects = match self.fetch_objects(pod).await {
            Ok(o) => o,
            Err(e) => {
                self.mount_failed(c, &e.to_string());
                return;
            }
        };
        let projected = match self.project(pod, &objects) {
            Ok(f) => f,
            Err(e) => {
                self.mount_failed(c, &e.to_string());
                return;
            }
        };
        let data_dir = &self.shared.config.data_dir;
        let prepared = volumes::prepare(pod, data_dir)
            .and_then(|mut v| {
                v.extend(volumes::write_projected(pod, data_dir, &projected)?);
                Ok(v)
            })
            .and_then(|v| Ok((v, self.etc_hosts(pod, host_network, hosts_ip)?)));
        if !projected.is_empty() {
            self.volumes_written = Some(tokio::time::Instant::now());
        }
        let (vols, etc_hosts) = match prepared {
            Ok(v) => v,
            Err(e) => {
                self.event(
                    Some(&c.name),
                    EventType::Warning,
                    event::FAILED_MOUNT_VOLUME,
                    &e.to_string(),
                );
                self.waiting.insert(
                    c.name.clone(),
                    Waiting {
                        reason: reason::CONTAINER_CREATING.into(),
                        message: e.to_string(),
                    },
                );
                return;
            }
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let object_env = projection::env_from_objects(c, &objects, ns);
        let object_env = match object_env {
            Ok(e) => e,
            Err(e) => {
                self.config_failed(c, e.to_string());
                return;
            }
        };
        let devices = self.container_devices(&c.name);
        let env = ContainerEnv {
            devices: &devices,
            node: &self.shared.node,
            pod_ip: hosts_ip,
            etc_hosts: etc_hosts.as_deref(),
            volumes: &vols,
            qos: self.qos,
            objects: &object_env,
            seccomp_default: self.shared.config.seccomp_default,
            userns: self.userns.as_ref(),
            image_volumes: &image_volumes,
        };
        let cfg = match cri_config::container_config(pod, c, restart_count, &image_ref, &env) {
            Ok(cfg) => cfg,
            Err(e) => {
                self.config_failed(c, e.to_string());
                return;
            }
        };
        let attempt = cri_config::sandbox_config(
            pod,
            observed.sandboxes.first().map(|s| s.attempt).unwrap_or(0),
            &self.sandbox_env(),
        );
        let cri = self.shared.cri.clone();
        let id = match cri.create_container(sandbox_id, cfg, attempt).await {
            Ok(id) => id,
            Err(e) => {
                let msg = format!("Error: {}", e.status.message());
                self.event(
                    Some(&c.name),
                    EventType::Warning,
                    event::FAILED_TO_CREATE_CONTAINER,
                    &msg,
                );
                self.waiting.insert(
                    c.name.clone(),
                    Waiting {
                        reason: reason::CREATE_CONTAINER_ERROR.into(),
                        message: e.status.message().into(),
                    },
                );
                return;
            }
        };
        self.created(c, &id);
        self.event(
            Some(&c.name),
            EventType::Normal,
            event::CREATED_CONTAINER,
            &format!("Created container {}", c.name),
        );
        let pre_started = match &self.shared.devices {
            Some(m) => m.pre_start(&self.uid, &c.name).await,
            None => Ok(()),
        };
        let started = match pre_started {
            Ok(()) => cri
                .start_container(&id)
                .await
                .map_err(|e| e.status.message().to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = started {
            let msg = format!("Error: {e}");
            self.event(
                Some(&c.name),
                EventType::Warning,
                event::FAILED_TO_START_CONTAINER,
                &msg,
            );
            self.waiting.insert(
                c.name.clone(),
                Waiting {
                    reason: reason::RUN_CONTAINER_ERROR.into(),
                    message: e,
                },
            );
            return;
        }
        self.waiting.remove(&c.name);
        self.started_any = true;
        self.event(
            Some(&c.name),
            EventType::Normal,
            event::STARTED_CONTAINER,
            &format!("Started container {}", c.name),
        );
        if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let timeout = self.grace().max(MIN_GRACE);
            if let Err(e) = handlers::run(&cri, h, c, &id, pod_ip, timeout).await {
                self.event(
                    Some(&c.name),
                    EventType::Warning,
                    event::FAILED_POST_START_HOOK,
                    &e.to_string(),
                );
                self.event(
                    Some(&c.name),
                    EventType::Normal,
                    event::KILLING_CONTAINER,
                    &format!("FailedPostStartHook: stopping container {}", c.name),
                );
                if let Err(e) = cri.stop_container(&id, self.grace()).await {
                    tracing::warn!("stopping {id} after a failed postStart hook: {e}");
                }
            }
        }
    }
}
