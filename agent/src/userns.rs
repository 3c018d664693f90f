//! Pods with `hostUsers: false`: kubelet's user namespace manager. Each
//! such pod gets a range of 65536 host IDs of its own for its user
//! namespace, the same for users and groups, mapped from 0 inside: a free
//! one found from a random place on (kubelet's allocation bitmap: no pod
//! can tell which IDs the next one gets), from 65536 up to the last whole
//! range below 2^32 (kubelet's defaults without a `kubelet` user in
//! /etc/subuid). A pod keeps its range across restarts
//! of the agent: it is written to `<dir>/<pod uid>` (kubelet's JSON, as
//! in its pod dir's `userns` file) before any sandbox uses it, and given
//! back when the pod is gone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cri_proto::v1::{IdMapping, NamespaceMode, UserNamespace};
use serde::{Deserialize, Serialize};

use crate::mutex::lock;

/// IDs per pod: kubelet's `userNamespaces.idsPerPod` default, and the
/// unit the configured number is a multiple of.
pub const IDS_PER_POD: u32 = 65536;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("user namespaces: {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("user namespaces: no range of {0} IDs is free")]
    Exhausted(u32),
}

/// One range, as kubelet writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdRange {
    container_id: u32,
    host_id: u32,
    length: u32,
}

/// kubelet's `userns` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Mappings {
    uid_mappings: Vec<IdRange>,
    gid_mappings: Vec<IdRange>,
}

impl Mappings {
    /// The slot (host ID / `len`) of a file kubelet or we wrote: one
    /// range of `len`, the same for users and groups, from 0 inside.
    fn slot(&self, len: u32) -> Option<u32> {
        let ([u], [g]) = (self.uid_mappings.as_slice(), self.gid_mappings.as_slice()) else {
            return None;
        };
        (u == g && u.container_id == 0 && u.length == len && u.host_id.is_multiple_of(len))
            .then_some(u.host_id / len)
            .filter(|s| *s >= 1)
    }

    fn of_slot(slot: u32, len: u32) -> Self {
        let range = IdRange {
            container_id: 0,
            host_id: slot * len,
            length: len,
        };
        Self {
            uid_mappings: vec![range],
            gid_mappings: vec![range],
        }
    }
}

/// Which slots are whose. Pure.
#[derive(Debug, Default)]
struct Slots {
    by_slot: BTreeMap<u32, String>,
}

impl Slots {
    fn of(&self, uid: &str) -> Option<u32> {
        self.by_slot
            .iter()
            .find_map(|(s, u)| (u == uid).then_some(*s))
    }

    /// The first free slot of ranges of `len` at or after `start`,
    /// wrapping (slot 0 is the host's own IDs; the last whole range ends
    /// below ID 2^32 - 1).
    fn free_from(&self, start: u32, len: u32) -> Option<u32> {
        let slots = u32::MAX / len - 1;
        (0..slots)
            .map(|i| 1 + (start.wrapping_add(i) % slots))
            .find(|s| !self.by_slot.contains_key(s))
    }
}

fn random() -> u32 {
    let mut b = [0u8; 4];
    // A failed read leaves zeros: the lowest free range, still free.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    u32::from_ne_bytes(b)
}

/// The ranges of the node's `hostUsers: false` pods.
#[derive(Debug)]
pub struct Manager {
    dir: PathBuf,
    /// IDs per pod (`userNamespaces.idsPerPod`).
    len: u32,
    slots: Mutex<Slots>,
}

impl Manager {
    /// Loads the ranges of `len` IDs pods hold from `dir`; a file that is
    /// not one we wrote (or of another length) is set aside (`.bad`) and
    /// its pod gets a new range.
    pub fn open(dir: &Path, len: u32) -> Result<Self, Error> {
        let len = len.max(IDS_PER_POD);
        let io = |op, path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { op, path, source }
        };
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        let mut slots = Slots::default();
        for entry in std::fs::read_dir(dir).map_err(io("read", dir))?.flatten() {
            let path = entry.path();
            let Some(uid) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if uid.ends_with(".bad") || uid.starts_with('.') {
                continue;
            }
            let slot = std::fs::read(&path)
                .ok()
                .and_then(|raw| serde_json::from_slice::<Mappings>(&raw).ok())
                .and_then(|m| m.slot(len))
                .filter(|s| !slots.by_slot.contains_key(s));
            match slot {
                Some(s) => {
                    slots.by_slot.insert(s, uid.to_string());
                }
                None => {
                    tracing::warn!(file = %path.display(), "user namespace mappings set aside");
                    let mut bad = path.clone().into_os_string();
                    bad.push(".bad");
                    std::fs::rename(&path, &bad).map_err(io("set aside", &path))?;
                }
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            len,
            slots: Mutex::new(slots),
        })
    }

    /// The pod's user namespace: its range, or a new one, written down
    /// before it is returned.
    pub fn get_or_create(&self, uid: &str) -> Result<UserNamespace, Error> {
        let mut slots = lock(&self.slots);
        let slot = match slots.of(uid) {
            Some(s) => s,
            None => {
                let s = slots
                    .free_from(random(), self.len)
                    .ok_or(Error::Exhausted(self.len))?;
                let path = self.dir.join(uid);
                let raw = serde_json::to_vec(&Mappings::of_slot(s, self.len)).unwrap_or_default();
                edge_config::write_atomic(&path, &raw).map_err(|source| Error::Io {
                    op: "write",
                    path,
                    source,
                })?;
                slots.by_slot.insert(s, uid.to_string());
                s
            }
        };
        let range = IdMapping {
            host_id: slot * self.len,
            container_id: 0,
            length: self.len,
        };
        Ok(UserNamespace {
            mode: NamespaceMode::Pod as i32,
            uids: vec![range],
            gids: vec![range],
        })
    }

    /// Gives the pod's range back (its file goes); nothing if it has none.
    pub fn release(&self, uid: &str) {
        let mut slots = lock(&self.slots);
        if let Some(s) = slots.of(uid) {
            let _ = std::fs::remove_file(self.dir.join(uid));
            slots.by_slot.remove(&s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_slot_from_where_the_scan_starts_wrapping() {
        let mut slots = Slots::default();
        assert_eq!(slots.free_from(0, IDS_PER_POD), Some(1));
        slots.by_slot.insert(1, "a".into());
        slots.by_slot.insert(65534, "b".into());
        assert_eq!(slots.free_from(0, IDS_PER_POD), Some(2));
        // From the last slot on: taken, so round to the first free.
        assert_eq!(slots.free_from(65533, IDS_PER_POD), Some(2));
        assert_eq!(
            slots.free_from(u32::MAX, IDS_PER_POD),
            slots.free_from(u32::MAX % 65534, IDS_PER_POD)
        );
        // Ranges of 2^31: one slot only, taken.
        assert_eq!(slots.free_from(0, 1 << 31), None);
    }

    #[test]
    fn a_range_is_kept_across_a_restart_and_given_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = Manager::open(dir.path(), IDS_PER_POD).expect("open");
        let a = m.get_or_create("a").expect("a");
        let b = m.get_or_create("b").expect("b");
        let first = |u: &UserNamespace| u.uids[0].host_id;
        assert_ne!(first(&a), first(&b));
        for u in [&a, &b] {
            assert_eq!(
                (u.mode, u.uids[0].length),
                (NamespaceMode::Pod as i32, 65536)
            );
            assert_eq!(first(u) % 65536, 0);
            assert_eq!(u.uids, u.gids);
            assert!(first(u) >= 65536);
        }
        assert_eq!(m.get_or_create("a").expect("again"), a);
        // kubelet's file.
        let raw = std::fs::read_to_string(dir.path().join("a")).expect("file");
        let h = first(&a);
        assert_eq!(
            raw,
            format!(
                r#"{{"uidMappings":[{{"containerId":0,"hostId":{h},"length":65536}}],"gidMappings":[{{"containerId":0,"hostId":{h},"length":65536}}]}}"#
            )
        );
        m.release("a");
        assert!(!dir.path().join("a").exists());
        drop(m);
        std::fs::write(dir.path().join("junk"), "{").expect("junk");
        let m = Manager::open(dir.path(), IDS_PER_POD).expect("reopen");
        assert!(dir.path().join("junk.bad").exists());
        assert_eq!(m.get_or_create("b").expect("b"), b);
        assert_eq!(lock(&m.slots).by_slot.len(), 1);
    }
}
