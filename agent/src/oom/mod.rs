//! The OOM watcher: reads `/dev/kmsg` on a thread of its own, starting at
//! the end of the buffer (older kills were reported by whoever ran then),
//! and turns each kill into an `OOMKilling` event on the pod and container
//! it hit, or a node `SystemOOM` event when the victim was outside any pod
//! (kubelet's oom_watcher). Reads block in the kernel, so a kill that
//! happens while the agent runs is never missed; records overwritten before
//! they were read (EPIPE) are counted and logged.

pub mod kmsg;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::{Arc, Mutex};

use crate::cri_config::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE};
use crate::events::Object;
use crate::events::{EventType, Recorder};
use crate::mutex::lock;
use crate::oom::kmsg::{OomKill, OomParser, parse_record};
use crate::runtime::Cri;
use crate::status;

/// Where a memcg path points: (pod UID, container ID) for
/// `…/pod<uid>/<container id>`, (pod UID, "") for the pod cgroup itself.
pub fn pod_of(memcg: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = memcg.split('/').filter(|p| !p.is_empty()).collect();
    let i = parts.iter().rposition(|p| {
        p.strip_prefix("pod").is_some_and(|u| {
            u.len() >= 32
                && u.bytes()
                    .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_')
        })
    })?;
    // The cgroupfs layout kubelet and picolet use: `…/pod<uid>/<id>`.
    let uid = parts[i].trim_start_matches("pod").replace('_', "-");
    let container = parts.get(i + 1).map(|c| c.to_string()).unwrap_or_default();
    Some((uid, container))
}

/// OOM kills seen in /dev/kmsg by the victim's memcg
/// (`container_oom_events_total`).
#[derive(Debug, Clone, Default)]
pub struct Kills(Arc<Mutex<BTreeMap<String, u64>>>);

impl Kills {
    fn record(&self, kill: &OomKill) {
        *lock(&self.0).entry(kill.task_memcg.clone()).or_default() += 1;
    }

    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        lock(&self.0).clone()
    }
}

/// What the watcher needs.
#[derive(Debug, Clone)]
pub struct Watcher {
    pub cri: Cri,
    pub recorder: Recorder,
    pub statuses: status::Manager,
    pub node_name: String,
    pub kills: Kills,
}

/// Starts the watcher thread. Errors opening /dev/kmsg (not root, a
/// container without it) are logged once: the agent runs without it.
pub fn spawn(shared: Watcher) {
    let f = match File::open("/dev/kmsg") {
        Ok(mut f) => {
            // Start at the end: only kills from now on.
            if let Err(e) = f.seek(SeekFrom::End(0)) {
                tracing::warn!("OOM watcher: seek /dev/kmsg: {e}");
            }
            f
        }
        Err(e) => {
            tracing::warn!("OOM watcher disabled: /dev/kmsg: {e}");
            return;
        }
    };
    // The thread only reads and counts; naming the pod and container takes
    // CRI calls, made by a task.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<OomKill>();
    let reporter = shared.clone();
    tokio::spawn(async move {
        while let Some(kill) = rx.recv().await {
            report(&reporter, &kill).await;
        }
    });
    let r = std::thread::Builder::new()
        .name("oom-watcher".into())
        .spawn(move || watch(f, &shared, &tx));
    if let Err(e) = r {
        tracing::warn!("OOM watcher: thread: {e}");
    }
}

fn watch(mut f: File, shared: &Watcher, tx: &tokio::sync::mpsc::UnboundedSender<OomKill>) {
    let mut parser = OomParser::default();
    // One record per read; 8 KiB is the kernel's maximum record size.
    let mut buf = vec![0u8; 8192];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                if let Some(rec) = parse_record(&text)
                    && let Some(kill) = parser.feed(rec.usec, rec.message)
                {
                    shared.kills.record(&kill);
                    if tx.send(kill).is_err() {
                        return;
                    }
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                // The ring overwrote records we had not read yet; the next
                // read returns the oldest record still there.
                tracing::warn!(
                    "OOM watcher: kernel log records were overwritten before they were read"
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!("OOM watcher stopped: read /dev/kmsg: {e}");
                return;
            }
        }
    }
}

async fn report(shared: &Watcher, kill: &OomKill) {
    let victim = format!("victim process: {}, pid: {}", kill.process, kill.pid);
    let Some((uid, container_id)) = pod_of(&kill.task_memcg) else {
        tracing::warn!(memcg = %kill.task_memcg, "system OOM: {victim}");
        let node = Object::node(&shared.node_name);
        shared.recorder.event(
            &node,
            EventType::Warning,
            "SystemOOM",
            &format!("System OOM encountered, {victim}"),
        );
        return;
    };
    let Some(obj) = object_of(shared, &uid, &container_id).await else {
        tracing::warn!(memcg = %kill.task_memcg, "OOM kill in a pod this agent does not know: {victim}");
        return;
    };
    tracing::info!(pod = %obj.name, field = %obj.field_path, "OOM kill: {victim}");
    shared.recorder.event(
        &obj,
        EventType::Warning,
        crate::events::reason::SYSTEM_OOM,
        &format!(
            "Memory cgroup out of memory: Killed process {} ({})",
            kill.pid, kill.process
        ),
    );
}

/// The pod (and container) a kill hit. The runtime's labels name them even
/// when the kill came before the pod's status listed the container (a hog
/// killed within milliseconds of its start); the pod's status tells init
/// containers from app containers.
async fn object_of(shared: &Watcher, uid: &str, container_id: &str) -> Option<Object> {
    let labels = if container_id.is_empty() {
        None
    } else {
        shared
            .cri
            .container_labels(container_id)
            .await
            .ok()
            .flatten()
    };
    let status = shared.statuses.get(uid);
    let label = |k: &str| labels.as_ref().and_then(|l| l.get(k).cloned());
    let (namespace, name) = match (&status, label(LABEL_POD_NAME)) {
        (Some(p), _) => (
            p.metadata.namespace.clone().unwrap_or_default(),
            p.metadata.name.clone().unwrap_or_default(),
        ),
        (None, Some(name)) => (label(LABEL_POD_NAMESPACE).unwrap_or_default(), name),
        (None, None) => return None,
    };
    let container = label(LABEL_CONTAINER_NAME).or_else(|| {
        let st = status.as_ref()?.status.as_ref()?;
        st.container_statuses
            .iter()
            .chain(st.init_container_statuses.iter())
            .flatten()
            .find(|c| {
                c.container_id
                    .as_deref()
                    .is_some_and(|id| !container_id.is_empty() && id.ends_with(container_id))
            })
            .map(|c| c.name.clone())
    });
    let is_init = |n: &str| {
        status
            .as_ref()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|ics| ics.iter().any(|c| c.name == n))
    };
    let field_path = container.map_or_else(String::new, |n| {
        let list = if is_init(&n) {
            "initContainers"
        } else {
            "containers"
        };
        format!("spec.{list}{{{n}}}")
    });
    Some(Object {
        kind: "Pod",
        namespace,
        name,
        uid: uid.to_string(),
        field_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcg_paths_map_to_pods() {
        let uid = "0a1b2c3d4e5f60718293a4b5c6d7e8f9";
        assert_eq!(
            pod_of(&format!("/picolet/kubepods/besteffort/pod{uid}/c0ffee")),
            Some((uid.into(), "c0ffee".into()))
        );
        assert_eq!(
            pod_of(&format!("/kubepods/pod{uid}")),
            Some((uid.into(), String::new()))
        );
        let dashed = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
        assert_eq!(
            pod_of(&format!("/kubepods/burstable/pod{dashed}/abc")),
            Some((dashed.into(), "abc".into()))
        );
        assert_eq!(pod_of("/system.slice/stress.service"), None);
        assert_eq!(pod_of("/"), None);
        assert_eq!(pod_of("/podcast/x"), None);
    }
}
