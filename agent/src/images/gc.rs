//! Image garbage collection, as kubelet's image GC manager: every period
//! (kubelet: 5 min) the agent notes which images exist and which ones
//! containers (running or exited) use. When the filesystem holding the
//! runtime's images is `imageGCHighThresholdPercent` full or more, unused
//! images are removed through CRI RemoveImage — least recently used first,
//! none younger than `imageMinimumGCAge`, none pinned — until usage is down
//! to `imageGCLowThresholdPercent`. A runtime refuses to remove an image a
//! container still uses (ours does), so a race with a new container costs
//! one failed removal, not its rootfs.
//!
//! Images preloaded from the images folder come back at the next shim
//! start: the folder is the device's source of truth; GC frees the store.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::events::{EventType, Object, Recorder};
use crate::runtime::{Cri, Image};

/// The thresholds, as kubelet's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub high_percent: u8,
    pub low_percent: u8,
    pub min_age: Duration,
}

#[derive(Debug, Clone)]
struct Record {
    first_detected: Instant,
    last_used: Option<Instant>,
    size: u64,
    pinned: bool,
}

/// What the agent remembers between passes (lost on restart, as kubelet's:
/// then every image counts as first seen at the restart).
#[derive(Debug, Default)]
pub struct ImageGc {
    records: HashMap<String, Record>,
}

/// Bytes to free so that usage falls to the low threshold, when usage is
/// at the high one or above (kubelet's percentages, rounded as it does).
pub fn amount_to_free(capacity: u64, available: u64, policy: Policy) -> Option<u64> {
    if capacity == 0 {
        return None;
    }
    let available = available.min(capacity);
    let usage_percent = 100 - available.saturating_mul(100) / capacity;
    if usage_percent < u64::from(policy.high_percent) {
        return None;
    }
    let target_available = capacity.saturating_mul(100 - u64::from(policy.low_percent)) / 100;
    Some(target_available.saturating_sub(available))
}

impl ImageGc {
    /// Records the images that exist now and which of them `in_use` (the
    /// image references of every container) names.
    pub fn detect(&mut self, images: &[Image], in_use: &HashSet<String>, now: Instant) {
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| present.contains(id.as_str()));
        for image in images {
            let r = self.records.entry(image.id.clone()).or_insert(Record {
                first_detected: now,
                last_used: None,
                size: image.size,
                pinned: image.pinned,
            });
            r.size = image.size;
            r.pinned = image.pinned;
            if used(image, in_use) {
                r.last_used = Some(now);
            }
        }
    }

    /// Images to remove to free `amount` bytes at `now` (the last detection):
    /// not used then, detected at least `min_age` ago, not pinned; least
    /// recently used first (never used before used), then oldest detected.
    pub fn candidates(&self, amount: u64, now: Instant, min_age: Duration) -> (Vec<String>, u64) {
        let mut eligible: Vec<(&String, &Record)> = self
            .records
            .iter()
            .filter(|(_, r)| {
                !r.pinned
                    && r.last_used.is_none_or(|t| t < now)
                    && now.saturating_duration_since(r.first_detected) >= min_age
            })
            .collect();
        eligible.sort_by_key(|(id, r)| (r.last_used, r.first_detected, *id));
        let mut out = Vec::new();
        let mut freed = 0u64;
        for (id, r) in eligible {
            if freed >= amount {
                break;
            }
            out.push(id.clone());
            freed = freed.saturating_add(r.size);
        }
        (out, freed)
    }
}

/// Whether `in_use` names `image` by its ID or one of its names.
fn used(image: &Image, in_use: &HashSet<String>) -> bool {
    in_use.contains(&image.id) || image.names.iter().any(|n| in_use.contains(n))
}

/// The image references of every container, and the sandbox image.
async fn in_use(cri: &Cri) -> Result<HashSet<String>, GcError> {
    let mut in_use = cri.container_images().await?;
    in_use.extend(cri.sandbox_image().await);
    Ok(in_use)
}

/// Capacity and available bytes of the filesystem holding `path`.
fn fs_space(path: &Path) -> Option<(u64, u64)> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    let frag = s.fragment_size() as u64;
    Some((
        (s.blocks() as u64).saturating_mul(frag),
        (s.blocks_available() as u64).saturating_mul(frag),
    ))
}

/// Why a pass did not free what it had to.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error(transparent)]
    Cri(#[from] crate::runtime::CriError),
    #[error("statvfs {}", .0.display())]
    Statvfs(std::path::PathBuf),
    #[error(
        "Failed to garbage collect required amount of images. Attempted to free {amount} bytes, but only found {eligible} bytes eligible to free."
    )]
    NotEnough { amount: u64, eligible: u64 },
}

/// One pass: detect, then free space if the image filesystem is too full.
pub async fn collect(m: &Manager, gc: &mut ImageGc) -> Result<(), GcError> {
    let (policy, shared) = (m.policy, m);
    let now = Instant::now();
    let images = shared.cri.list_images().await?;
    gc.detect(&images, &in_use(&shared.cri).await?, now);
    let mount = shared.cri.image_fs_mountpoint().await?;
    let Some((capacity, available)) = fs_space(&mount) else {
        return Err(GcError::Statvfs(mount));
    };
    let Some(amount) = amount_to_free(capacity, available, policy) else {
        return Ok(());
    };
    let (victims, eligible) = gc.candidates(amount, now, policy.min_age);
    let mut freed = 0u64;
    for id in victims {
        match shared.cri.remove_image(&id).await {
            Ok(()) => {
                let size = gc.records.remove(&id).map_or(0, |r| r.size);
                freed += size;
                tracing::info!(image = %id, bytes = size, "image garbage collected");
            }
            // In use by a container made since the detection, for one.
            Err(e) => tracing::warn!(image = %id, error = %e, "cannot remove image"),
        }
    }
    if freed < amount {
        let err = GcError::NotEnough { amount, eligible };
        let msg = err.to_string();
        let node = Object::node(&shared.node_name);
        let warning = EventType::Warning;
        shared.recorder.event(
            &node,
            warning,
            crate::events::reason::FREE_DISK_SPACE_FAILED,
            &msg,
        );
        return Err(err);
    }
    Ok(())
}

/// Removes every image no container uses, the runtime does not pin and
/// `keep` (IDs) does not name (kubelet's `DeleteUnusedImages`, the eviction
/// manager's reclaim under disk pressure); the bytes freed.
pub async fn remove_unused(cri: &Cri, keep: &HashSet<String>) -> Result<u64, GcError> {
    let images = cri.list_images().await?;
    let mut in_use = in_use(cri).await?;
    in_use.extend(keep.iter().cloned());
    let mut freed = 0u64;
    for i in images.iter().filter(|i| !i.pinned && !used(i, &in_use)) {
        match cri.remove_image(&i.id).await {
            Ok(()) => {
                freed = freed.saturating_add(i.size);
                tracing::info!(image = %i.id, bytes = i.size, "unused image removed under disk pressure");
            }
            Err(e) => tracing::warn!(image = %i.id, error = %e, "cannot remove image"),
        }
    }
    Ok(freed)
}

/// The image GC manager: what a pass needs.
#[derive(Debug)]
pub struct Manager {
    pub cri: Cri,
    pub recorder: Recorder,
    pub node_name: String,
    pub policy: Policy,
    /// `picolet.imageGCPeriod` (kubelet: 5 min).
    pub period: Duration,
}

/// Runs [`collect`] every period.
pub fn spawn(m: Manager) {
    let period = m.period;
    tokio::spawn(async move {
        let mut gc = ImageGc::default();
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = collect(&m, &mut gc).await {
                tracing::warn!("image garbage collection: {e}");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Policy = Policy {
        high_percent: 85,
        low_percent: 80,
        min_age: Duration::from_secs(120),
    };

    fn image(id: &str, size: u64) -> Image {
        Image {
            id: id.into(),
            names: vec![format!("{id}:latest")],
            size,
            pinned: false,
        }
    }

    #[test]
    fn frees_down_to_the_low_threshold_only_above_the_high_one() {
        // 1000 bytes, 160 free: 84 % used, under 85.
        assert_eq!(amount_to_free(1000, 160, POLICY), None);
        // 150 free: 85 % used → to 80 % (200 free): 50 bytes.
        assert_eq!(amount_to_free(1000, 150, POLICY), Some(50));
        assert_eq!(amount_to_free(1000, 0, POLICY), Some(200));
        assert_eq!(amount_to_free(0, 0, POLICY), None);
        // 100 % high: under 1 % free, kubelet's integer percentages.
        let full_only = Policy {
            high_percent: 100,
            ..POLICY
        };
        assert_eq!(amount_to_free(1000, 10, full_only), None);
        assert_eq!(amount_to_free(1000, 9, full_only), Some(191));
    }

    #[test]
    fn unused_old_images_go_least_recently_used_first() {
        let t0 = Instant::now();
        let mut gc = ImageGc::default();
        let all = [
            image("a", 10),
            image("b", 20),
            image("c", 30),
            image("d", 40),
        ];
        // t0: a and b in use (b by tag), c and d not.
        let used: HashSet<String> = ["a".into(), "b:latest".into()].into();
        gc.detect(&all, &used, t0);
        // t1: only a in use; b was last used at t0.
        let t1 = t0 + Duration::from_secs(300);
        gc.detect(&all, &["a".to_string()].into(), t1);
        // Never used (c, d: oldest detection, then id) before b; a is in use.
        assert_eq!(
            gc.candidates(u64::MAX, t1, POLICY.min_age),
            (vec!["c".into(), "d".into(), "b".into()], 90)
        );
        // Enough after c and d.
        assert_eq!(
            gc.candidates(60, t1, POLICY.min_age),
            (vec!["c".into(), "d".into()], 70)
        );
    }

    #[test]
    fn young_pinned_and_vanished_images_stay_out() {
        let t0 = Instant::now();
        let mut gc = ImageGc::default();
        let mut pinned = image("p", 5);
        pinned.pinned = true;
        gc.detect(&[image("old", 1), pinned.clone()], &HashSet::new(), t0);
        let t1 = t0 + Duration::from_secs(200);
        // "young" first seen now; "old" gone from the runtime.
        gc.detect(&[image("young", 2), pinned], &HashSet::new(), t1);
        assert_eq!(gc.candidates(u64::MAX, t1, POLICY.min_age), (vec![], 0));
        let t2 = t1 + POLICY.min_age;
        gc.detect(&[image("young", 2)], &HashSet::new(), t2);
        assert_eq!(
            gc.candidates(u64::MAX, t2, POLICY.min_age),
            (vec!["young".into()], 2)
        );
    }
}
