//! The devices of a container's /dev: runc's links, and each device node
//! of the spec, made with mknod, or in a pod's user namespace (where mknod
//! is not allowed) bound from the host's after a check that it is that
//! device.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sys::stat::{Mode, SFlag, fstat, makedev, mknodat};
use nix::unistd::{Gid, Uid, fchownat, symlinkat};

use super::plan::DevicePlan;
use super::rootfs::{Res, bind, fd_path, in_root, mkdir_all, owned, touch};
use crate::process::ChildError;

/// runc's links in /dev (and `core` where the host has /proc/kcore).
pub(super) fn links(dev: &OwnedFd) -> Res<()> {
    let mut links = vec![
        ("/proc/self/fd", "fd"),
        ("/proc/self/fd/0", "stdin"),
        ("/proc/self/fd/1", "stdout"),
        ("/proc/self/fd/2", "stderr"),
    ];
    if Path::new("/proc/kcore").exists() {
        links.push(("/proc/kcore", "core"));
    }
    for (to, name) in links {
        match symlinkat(to, Some(dev.as_raw_fd()), name) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(ChildError::errno_at("link", format_args!("/dev/{name}"))(e)),
        }
    }
    Ok(())
}

pub(super) fn device(root: &OwnedFd, d: &DevicePlan) -> Res<()> {
    let (Some(parent), Some(name)) = (d.dest.parent(), d.dest.file_name()) else {
        return Err(ChildError::detail("check the path", "not a file path"));
    };
    let dir = mkdir_all(root, parent)?;
    let kind = if d.block {
        SFlag::S_IFBLK
    } else {
        SFlag::S_IFCHR
    };
    let make = || {
        mknodat(
            Some(dir.as_raw_fd()),
            name,
            kind,
            Mode::from_bits_truncate(d.mode),
            makedev(d.major, d.minor),
        )
    };
    match make() {
        Ok(()) => {}
        // Already there: kept only when it is the very device (a bind of
        // the host's, say). A /dev that is a volume can hold anything a
        // container of the pod left there, a link to /proc/sys/... as
        // `null` among them (runc's CVE-2025-31133): replaced.
        Err(Errno::EEXIST) => {
            let st = nix::sys::stat::fstatat(
                Some(dir.as_raw_fd()),
                name,
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(ChildError::errno("stat"))?;
            if st.st_mode & libc::S_IFMT == kind.bits() && st.st_rdev == makedev(d.major, d.minor) {
                return Ok(());
            }
            nix::unistd::unlinkat(
                Some(dir.as_raw_fd()),
                name,
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            )
            .map_err(ChildError::errno("remove what is there instead"))?;
            make().map_err(ChildError::errno("mknod"))?;
        }
        Err(e) => return Err(ChildError::errno("mknod")(e)),
    }
    // mknod's mode went through the umask; the spec's is exact.
    nix::sys::stat::fchmodat(
        Some(dir.as_raw_fd()),
        name,
        Mode::from_bits_truncate(d.mode),
        nix::sys::stat::FchmodatFlags::NoFollowSymlink,
    )
    .map_err(ChildError::errno("chmod"))?;
    fchownat(
        Some(dir.as_raw_fd()),
        name,
        Some(Uid::from_raw(d.uid)),
        Some(Gid::from_raw(d.gid)),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(ChildError::errno("chown"))
}

/// The host's node at the same path bound onto the device's place, as
/// runc does where mknod is not allowed (in a user namespace): checked to
/// be the very device the spec names, not a link or another node put
/// there on the host.
pub(super) fn bind_device(root: &OwnedFd, d: &DevicePlan) -> Res<()> {
    let host = Path::new("/").join(&d.dest);
    let node = nix::fcntl::open(
        &host,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(owned)
    .map_err(ChildError::errno_at("open the host's", host.display()))?;
    let st = fstat(node.as_raw_fd()).map_err(ChildError::errno("stat"))?;
    let kind = if d.block {
        libc::S_IFBLK
    } else {
        libc::S_IFCHR
    };
    if st.st_mode & libc::S_IFMT != kind || st.st_rdev != makedev(d.major, d.minor) {
        return Err(ChildError::detail_at(
            "bind",
            host.display(),
            "not the device the spec names",
        ));
    }
    let onto = touch(root, &d.dest)?;
    let again = || in_root(root, &d.dest, OFlag::O_PATH | OFlag::O_NOFOLLOW);
    bind(
        Path::new(&fd_path(&node)),
        &onto,
        false,
        false,
        MsFlags::empty(),
        None,
        &again,
    )
    .map_err(ChildError::errno_at("bind", host.display()))
}
