//! A container's root file system: an overlay of the image's layers under
//! a new upper dir. In a pod with a user namespace of its own, the layers
//! are seen through that namespace (idmapped mounts: a file the image's
//! root owns belongs to the pod's root), and the upper dir belongs to the
//! pod's root, so nothing of the image is copied or chowned.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};

use crate::error::Error;
use crate::host::mount_api;
use crate::spec::userns::PodUserns;

/// Mounts the overlay of `layers` (top first) with `upper` and `work` at
/// `rootfs`; with `userns` (its pin and ranges), through idmapped copies
/// of the layers attached under `scratch` while the overlay is made.
pub(super) fn mount_rootfs(
    rootfs: &Path,
    layers: &[PathBuf],
    upper: &Path,
    work: &Path,
    userns: Option<&(PathBuf, PodUserns)>,
    scratch: &Path,
) -> Result<(), Error> {
    let Some((pin, maps)) = userns else {
        return overlay(rootfs, layers, upper, work);
    };
    let ns: OwnedFd = fs::File::open(pin).map_err(Error::io("open", pin))?.into();
    for d in [upper, work] {
        nix::unistd::chown(
            d,
            Some(nix::unistd::Uid::from_raw(maps.uids.host)),
            Some(nix::unistd::Gid::from_raw(maps.gids.host)),
        )
        .map_err(Error::sys("give the pod's root", d))?;
    }
    let mut seen = Attached(Vec::new());
    fs::create_dir_all(scratch).map_err(Error::io("create", scratch))?;
    for (i, layer) in layers.iter().enumerate() {
        let at = scratch.join(i.to_string());
        fs::create_dir(&at).map_err(Error::io("create", &at))?;
        let mnt =
            mount_api::clone_tree(layer, false).map_err(Error::sys("clone the layer", layer))?;
        mount_api::idmap(&mnt, &ns).map_err(Error::sys("idmap the layer", layer))?;
        mount_api::attach(&mnt, &at).map_err(Error::sys("attach the idmapped layer at", &at))?;
        seen.0.push(at);
    }
    let made = overlay(rootfs, &seen.0, upper, work);
    // The overlay holds its own copies of its layers: these go now.
    drop(seen);
    let _ = fs::remove_dir(scratch);
    made
}

/// An image volume (CRI `Mount.image`): the image's layers at `at`, read
/// only: the one layer bound, or an overlay of them with no upper dir.
pub(super) fn mount_image(layers: &[PathBuf], at: &Path) -> Result<(), Error> {
    let ro = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    match layers {
        [] => Err(Error::FailedPrecondition(format!(
            "image volume at {}: the image has no layers",
            at.display()
        ))),
        [one] => mount(Some(one), at, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .and_then(|()| {
                mount(
                    None::<&str>,
                    at,
                    None::<&str>,
                    MsFlags::MS_BIND | MsFlags::MS_REMOUNT | ro,
                    None::<&str>,
                )
            })
            .map_err(Error::sys("mount the image volume at", at)),
        _ => {
            let lower = layers
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(":");
            mount(
                Some("overlay"),
                at,
                Some("overlay"),
                ro,
                Some(format!("lowerdir={lower}").as_str()),
            )
            .map_err(Error::sys("mount the image volume at", at))
        }
    }
}

fn overlay(rootfs: &Path, lowers: &[PathBuf], upper: &Path, work: &Path) -> Result<(), Error> {
    let opts = images::overlay_options(lowers, upper, work);
    mount(
        Some("overlay"),
        rootfs,
        Some("overlay"),
        MsFlags::empty(),
        Some(opts.as_str()),
    )
    .map_err(Error::sys("mount rootfs at", rootfs))
}

/// Idmapped layers attached for the overlay's mount: detached and their
/// mount points removed when dropped, whether the overlay was made or not.
struct Attached(Vec<PathBuf>);

impl Drop for Attached {
    fn drop(&mut self) {
        for at in &self.0 {
            let _ = umount2(at, MntFlags::MNT_DETACH);
            let _ = fs::remove_dir(at);
        }
    }
}
