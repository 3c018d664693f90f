//! A container in a pod's user namespace: what its init takes from the
//! host before it joins the namespace (the state and data dirs are out
//! of reach there), and how a bind is made from it.

use std::os::fd::OwnedFd;

use nix::errno::Errno;

use super::plan::{Kind, MountPlan, RootPlan};
use super::rootfs::{Res, set_bind_flags};
use crate::host::mount_api;
use crate::process::ChildError;

/// What the init takes from the host before it joins a pod's user
/// namespace, where the host's paths are out of its reach (the state and
/// data dirs are root's alone): the source of each bind of the spec
/// (by its index in `RootPlan::mounts`), a detached copy seen through the
/// pod's user namespace where its file system can be idmapped. The init's
/// working directory is then the rootfs ([`take_outside`]).
pub(crate) struct Outside {
    binds: Vec<Option<OwnedFd>>,
}

impl Outside {
    /// The copy of the source of the `i`th mount, if it is a bind.
    pub(super) fn bind(&self, i: usize) -> Option<&OwnedFd> {
        self.binds.get(i).and_then(Option::as_ref)
    }
}

/// Takes what [`Outside`] holds, and moves into the rootfs: it stays the
/// working directory through the user and mount namespaces joined next.
pub(crate) fn take_outside(plan: &RootPlan, userns: &OwnedFd) -> Res<Outside> {
    nix::unistd::chdir(&plan.rootfs).map_err(ChildError::errno_at(
        "chdir into the rootfs",
        plan.rootfs.display(),
    ))?;
    let mut binds = Vec::with_capacity(plan.mounts.len());
    for m in &plan.mounts {
        let Kind::Bind {
            source, recursive, ..
        } = &m.kind
        else {
            binds.push(None);
            continue;
        };
        let tree = mount_api::clone_tree(source, *recursive)
            .map_err(ChildError::errno_at("clone", source.display()))?;
        match mount_api::idmap(&tree, userns) {
            // A file system that cannot be idmapped (proc, sysfs, …):
            // its files keep the host's owners, who are nobody inside.
            Ok(()) | Err(Errno::EINVAL | Errno::EPERM | Errno::EOPNOTSUPP) => {}
            Err(e) => return Err(ChildError::errno_at("idmap", source.display())(e)),
        }
        binds.push(Some(tree));
    }
    Ok(Outside { binds })
}

/// [`super::rootfs::bind`] for a source copied from outside: `tree`
/// attached onto `onto`, then the same flags and propagation.
pub(super) fn attach_bind(
    tree: &OwnedFd,
    onto: &OwnedFd,
    recursive_readonly: bool,
    m: &MountPlan,
) -> nix::Result<()> {
    mount_api::attach_onto(tree, onto)?;
    set_bind_flags(tree, m.flags, recursive_readonly, m.propagation)
}
