//! The init's side of a create: it turns its new mount namespace into the
//! container's root, as runc's `prepareRootfs` does, with few syscalls.
//!
//! Every path inside the rootfs is resolved by the kernel with
//! `openat2(RESOLVE_IN_ROOT)` from one descriptor of the rootfs, so a
//! symlink in the image cannot point a mount or a device outside it
//! (runc's CVE-2021-30465 class). Mounts go onto `/proc/self/fd/<n>` of
//! the resolved descriptor, as runc's; a bind's flags are then set on the
//! new mount with `mount_setattr` (no remount that must repeat the locked
//! flags).
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::stat::{Mode, fstat, makedev, mkdirat};
use nix::unistd::symlinkat;

use super::plan::{Kind, MountPlan, RootPlan};
use crate::host::mountinfo::CgroupDir;
use crate::process::ChildError;

use crate::host::mount_api::{
    self, MOUNT_ATTR_ATIME, MOUNT_ATTR_NOATIME, MOUNT_ATTR_NODEV, MOUNT_ATTR_NODIRATIME,
    MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, MOUNT_ATTR_STRICTATIME, MountAttr,
    setattr,
};

pub(super) type Res<T> = Result<T, ChildError>;

/// `rel` as the container names it.
fn slash(rel: &Path) -> String {
    format!("/{}", rel.display())
}

pub(super) fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by the kernel to us and nothing else
    // owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

pub(super) fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// `rel` (no leading `/`) inside the root, as the kernel resolves it with
/// the rootfs as `/`.
pub(super) fn in_root(root: &OwnedFd, rel: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
    let rel: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(root.as_raw_fd(), rel, how).map(owned)
}

/// The directory `rel` inside the root, made (mode 0755) with its parents
/// when missing.
pub(super) fn mkdir_all(root: &OwnedFd, rel: &Path) -> Res<OwnedFd> {
    match in_root(root, rel, OFlag::O_PATH | OFlag::O_DIRECTORY) {
        Err(Errno::ENOENT) => {}
        r => return r.map_err(ChildError::errno_at("open", slash(rel))),
    }
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(ChildError::detail_at("open", slash(rel), "not found"));
    };
    let dir = mkdir_all(root, parent)?;
    match mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(ChildError::errno_at("mkdir", slash(rel))(e)),
    }
    in_root(root, rel, OFlag::O_PATH | OFlag::O_DIRECTORY)
        .map_err(ChildError::errno_at("open", slash(rel)))
}

/// A mount point for a file: `rel` made as an empty file when missing.
pub(super) fn touch(root: &OwnedFd, rel: &Path) -> Res<OwnedFd> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(ChildError::detail_at(
            "bind a file onto",
            slash(rel),
            "not a file path",
        ));
    };
    let dir = mkdir_all(root, parent)?;
    match openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_WRONLY,
        Mode::from_bits_truncate(0o644),
    ) {
        Ok(fd) => drop(owned(fd)),
        Err(Errno::EEXIST) => {}
        Err(e) => return Err(ChildError::errno_at("create", slash(rel))(e)),
    }
    in_root(root, rel, OFlag::O_PATH).map_err(ChildError::errno_at("open", slash(rel)))
}

/// The mount_setattr form of `flags`.
fn attr_of(flags: MsFlags) -> MountAttr {
    let mut a = MountAttr::default();
    for (ms, attr) in [
        (MsFlags::MS_RDONLY, MOUNT_ATTR_RDONLY),
        (MsFlags::MS_NOSUID, MOUNT_ATTR_NOSUID),
        (MsFlags::MS_NODEV, MOUNT_ATTR_NODEV),
        (MsFlags::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
        (MsFlags::MS_NODIRATIME, MOUNT_ATTR_NODIRATIME),
    ] {
        if flags.contains(ms) {
            a.attr_set |= attr;
        }
    }
    let atime = if flags.contains(MsFlags::MS_NOATIME) {
        Some(MOUNT_ATTR_NOATIME)
    } else if flags.contains(MsFlags::MS_STRICTATIME) {
        Some(MOUNT_ATTR_STRICTATIME)
    } else if flags.contains(MsFlags::MS_RELATIME) {
        Some(0)
    } else {
        None
    };
    if let Some(at) = atime {
        a.attr_clr |= MOUNT_ATTR_ATIME;
        a.attr_set |= at;
    }
    a
}

/// Binds the host's `source` onto `onto` with `flags` (on the top mount,
/// as runc), read-only all the way down with `recursive_readonly`, and
/// `propagation` (recursive for the `r` forms). A bind
/// made with mount(2) joins the source's peer group, as a shared volume
/// needs; a clone from open_tree(2) would be a slave of it.
pub(super) fn bind(
    source: &Path,
    onto: &OwnedFd,
    recursive: bool,
    recursive_readonly: bool,
    flags: MsFlags,
    propagation: Option<MsFlags>,
    again: &dyn Fn() -> nix::Result<OwnedFd>,
) -> nix::Result<()> {
    let rec = if recursive {
        MsFlags::MS_REC
    } else {
        MsFlags::empty()
    };
    mount(
        Some(source),
        fd_path(onto).as_str(),
        None::<&str>,
        MsFlags::MS_BIND | rec,
        None::<&str>,
    )?;
    let attr = attr_of(flags);
    if attr.attr_set == 0 && attr.attr_clr == 0 && propagation.is_none() && !recursive_readonly {
        return Ok(());
    }
    // The new mount, not the directory under it.
    let top = again()?;
    set_bind_flags(&top, flags, recursive_readonly, propagation)
}

/// A new bind's flags (on `top`, the mount itself), read-only all the way
/// down with `recursive_readonly`, then its propagation.
pub(super) fn set_bind_flags(
    top: &OwnedFd,
    flags: MsFlags,
    recursive_readonly: bool,
    propagation: Option<MsFlags>,
) -> nix::Result<()> {
    let attr = attr_of(flags);
    if attr.attr_set != 0 || attr.attr_clr != 0 {
        setattr(top, &attr, false)?;
    }
    if recursive_readonly {
        let ro = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            ..MountAttr::default()
        };
        setattr(top, &ro, true)?;
    }
    if let Some(p) = propagation {
        mount(
            None::<&str>,
            fd_path(top).as_str(),
            None::<&str>,
            p,
            None::<&str>,
        )?;
    }
    Ok(())
}

fn new_fs(
    fstype: &str,
    source: &str,
    onto: &OwnedFd,
    flags: MsFlags,
    data: &str,
) -> nix::Result<()> {
    let data = (!data.is_empty()).then_some(data);
    mount(
        Some(source),
        fd_path(onto).as_str(),
        Some(fstype),
        flags,
        data,
    )
}

/// Mounts the spec's mounts, makes the devices and links of /dev, then
/// pivots into the root and masks and protects what the spec says.
/// `cgroups` are the init's own cgroup directories. With `outside` (a pod
/// with a user namespace of its own) the rootfs is the working directory
/// and the binds' sources are its copies.
pub(crate) fn prepare(
    plan: &RootPlan,
    cgroups: &[CgroupDir],
    outside: Option<&super::outside::Outside>,
) -> Res<()> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | plan.propagation,
        None::<&str>,
    )
    .map_err(ChildError::errno_at("set the propagation of", "/"))?;
    let rootfs = if outside.is_some() {
        Path::new(".")
    } else {
        plan.rootfs.as_path()
    };
    if plan.propagation.contains(MsFlags::MS_SHARED) {
        // pivot_root refuses a shared new root or parent.
        mount(
            None::<&str>,
            rootfs,
            None::<&str>,
            MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(ChildError::errno_at("make private", plan.rootfs.display()))?;
    }
    let root = if outside.is_some() {
        // A copy of the rootfs' tree attached onto it, and held: what the
        // bind below does, without the path.
        mount_api::clone_tree(rootfs, true)
            .and_then(|tree| {
                let here = nix::fcntl::open(
                    rootfs,
                    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map(owned)?;
                mount_api::attach_onto(&tree, &here)?;
                Ok(tree)
            })
            .map_err(ChildError::errno_at(
                "bind the rootfs",
                plan.rootfs.display(),
            ))?
    } else {
        mount(
            Some(rootfs),
            rootfs,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(ChildError::errno_at(
            "bind the rootfs",
            plan.rootfs.display(),
        ))?;
        nix::fcntl::open(
            rootfs,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map(owned)
        .map_err(ChildError::errno_at(
            "open the rootfs",
            plan.rootfs.display(),
        ))?
    };
    for (i, m) in plan.mounts.iter().enumerate() {
        let copy = outside.and_then(|o| o.bind(i));
        mount_one(&root, m, cgroups, copy)
            .map_err(|e| e.within(format_args!("mount {}", slash(&m.dest))))?;
    }
    let dev = mkdir_all(&root, Path::new("dev"))?;
    super::dev::links(&dev)?;
    for d in &plan.devices {
        let made = if plan.in_userns {
            super::dev::bind_device(&root, d)
        } else {
            super::dev::device(&root, d)
        };
        made.map_err(|e| e.within(format_args!("device {}", slash(&d.dest))))?;
    }
    match nix::unistd::unlinkat(
        Some(dev.as_raw_fd()),
        "ptmx",
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    ) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(ChildError::errno_at("remove", "/dev/ptmx")(e)),
    }
    symlinkat("pts/ptmx", Some(dev.as_raw_fd()), "ptmx")
        .map_err(ChildError::errno_at("link", "/dev/ptmx"))?;
    drop(dev);
    pivot(&root)?;
    drop(root);
    if let Some(p) = plan.after_pivot {
        mount(None::<&str>, "/", None::<&str>, p, None::<&str>)
            .map_err(ChildError::errno_at("set the propagation of", "/"))?;
    }
    // Nothing of the container is opened before /proc is known to be the
    // procfs mounted above (the mounts below go through /proc/self/fd) and
    // the masks and read-only paths are in place.
    check_proc()?;
    if plan.readonly {
        let slash =
            nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).map(owned);
        slash
            .and_then(|s| setattr(&s, &attr_of(MsFlags::MS_RDONLY), false))
            .map_err(ChildError::errno_at("make read-only", "/"))?;
    }
    let protect = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for p in &plan.readonly_paths {
        match open_path(p) {
            Err(Errno::ENOENT) => continue,
            r => r
                // Bound onto itself from the one descriptor: the path is
                // resolved once, without magic links.
                .and_then(|fd| {
                    let itself = fd_path(&fd);
                    bind(Path::new(&itself), &fd, true, false, protect, None, &|| {
                        open_path(p)
                    })
                })
                .map_err(ChildError::errno_at("make read-only", p.display()))?,
        }
    }
    let null = dev_null()?;
    for p in &plan.masked {
        mask(p, &null).map_err(ChildError::errno_at("mask", p.display()))?;
    }
    reopen_dev_null(&null)
}

/// `/proc` of the new root is a procfs, not the image's directory or a
/// link: the mounts after the pivot name their targets and sources as
/// `/proc/self/fd/<n>` (runc's CVE-2019-19921 and CVE-2025-52881 classes).
/// The plan refuses a spec mount inside /proc ([`super::plan`]).
fn check_proc() -> Res<()> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    let fd = openat2(libc::AT_FDCWD, "/proc", how)
        .map(owned)
        .map_err(ChildError::errno_at("open", "/proc"))?;
    let fs = nix::sys::statfs::fstatfs(&fd).map_err(ChildError::errno_at("statfs", "/proc"))?;
    if fs.filesystem_type() != nix::sys::statfs::PROC_SUPER_MAGIC {
        return Err(ChildError::detail_at(
            "check",
            "/proc",
            "not a procfs mount",
        ));
    }
    Ok(())
}

/// The container's `/dev/null`, checked to be the null device (1:3)
/// before anything is opened or mounted through it (runc's
/// CVE-2025-31133): an O_PATH descriptor, reached without a link.
fn dev_null() -> Res<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = openat2(libc::AT_FDCWD, "/dev/null", how)
        .map(owned)
        .map_err(ChildError::errno_at("open", "/dev/null"))?;
    let st = fstat(fd.as_raw_fd()).map_err(ChildError::errno_at("stat", "/dev/null"))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR || st.st_rdev != makedev(1, 3) {
        return Err(ChildError::detail_at(
            "check",
            "/dev/null",
            "not the null device (1:3)",
        ));
    }
    Ok(fd)
}

/// A mount the plan placed outside /proc must land outside it: a link in
/// a volume (another container of the pod may have left one) can turn
/// `/data/x` into `/proc/self/...`; the kernel follows it inside the root.
fn outside_proc(onto: &OwnedFd, m: &MountPlan) -> Res<()> {
    if m.dest.starts_with("proc") {
        return Ok(());
    }
    let fs =
        nix::sys::statfs::fstatfs(onto).map_err(ChildError::errno("statfs the mount point"))?;
    if fs.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC {
        return Err(ChildError::detail(
            "the mount point",
            "resolves into /proc (through a link)",
        ));
    }
    Ok(())
}

/// Mounts `m`; a bind from `copy` (its source, taken from outside a user
/// namespace) when there is one.
fn mount_one(
    root: &OwnedFd,
    m: &MountPlan,
    cgroups: &[CgroupDir],
    copy: Option<&OwnedFd>,
) -> Res<()> {
    match &m.kind {
        Kind::Bind {
            source,
            recursive,
            recursive_readonly,
        } => {
            let is_dir = match copy {
                Some(tree) => {
                    fstat(tree.as_raw_fd())
                        .map_err(ChildError::errno_at("stat", source.display()))?
                        .st_mode
                        & libc::S_IFMT
                        == libc::S_IFDIR
                }
                None => std::fs::metadata(source)
                    .map_err(ChildError::io("source", source))?
                    .is_dir(),
            };
            let onto = if is_dir {
                mkdir_all(root, &m.dest)?
            } else {
                touch(root, &m.dest)?
            };
            outside_proc(&onto, m)?;
            if let Some(tree) = copy {
                return super::outside::attach_bind(tree, &onto, *recursive_readonly, m)
                    .map_err(ChildError::errno_at("bind", source.display()));
            }
            let again = || in_root(root, &m.dest, OFlag::O_PATH);
            bind(
                source,
                &onto,
                *recursive,
                *recursive_readonly,
                m.flags,
                m.propagation,
                &again,
            )
            .map_err(ChildError::errno_at("bind", source.display()))
        }
        Kind::Fs { fstype, source } => {
            let onto = mkdir_all(root, &m.dest)?;
            outside_proc(&onto, m)?;
            if matches!(fstype.as_str(), "proc" | "sysfs") {
                // Never onto a link (runc's GHSA-fh74-hm69-rqjw): the
                // resolved directory must be the very path.
                let here = in_root(
                    root,
                    &m.dest,
                    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
                )
                .map_err(|e| {
                    ChildError::new(format!("{fstype} must be mounted on a plain directory"))
                        .with_errno(e as i32)
                })?;
                return new_fs(fstype, source, &here, m.flags, &m.data)
                    .map_err(ChildError::errno_at("mount", fstype));
            }
            new_fs(fstype, source, &onto, m.flags, &m.data)
                .map_err(ChildError::errno_at("mount", fstype))
        }
        Kind::Cgroup => cgroup(root, m, cgroups),
    }
}

/// `/sys/fs/cgroup` as runc makes it without a cgroup namespace: on cgroup
/// v2 a new cgroup2 mount; on v1 a tmpfs with the init's own cgroup of
/// each hierarchy bound in (and links for co-mounted controllers such as
/// `cpu` → `cpu,cpuacct`), read-only when the mount is.
fn cgroup(root: &OwnedFd, m: &MountPlan, cgroups: &[CgroupDir]) -> Res<()> {
    let onto = mkdir_all(root, &m.dest)?;
    outside_proc(&onto, m)?;
    let fixed = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV;
    if let Some(v2) = cgroups
        .iter()
        .find(|c| c.v2 && c.mount_point == Path::new("/sys/fs/cgroup"))
    {
        return match new_fs("cgroup2", "cgroup", &onto, m.flags | fixed, "") {
            Err(Errno::EPERM | Errno::EBUSY) => {
                let again = || in_root(root, &m.dest, OFlag::O_PATH);
                bind(&v2.dir, &onto, true, false, m.flags | fixed, None, &again)
                    .map_err(ChildError::errno_at("bind", v2.dir.display()))
            }
            r => r.map_err(ChildError::errno_at("mount", "cgroup2")),
        };
    }
    new_fs("tmpfs", "tmpfs", &onto, fixed, "mode=755")
        .map_err(ChildError::errno_at("mount", "tmpfs"))?;
    // The tmpfs just mounted, not the directory under it.
    let tmpfs = in_root(root, &m.dest, OFlag::O_PATH | OFlag::O_DIRECTORY)
        .map_err(ChildError::errno("open the new tmpfs"))?;
    for c in cgroups.iter().filter(|c| !c.v2) {
        let Some(name) = c
            .mount_point
            .strip_prefix("/sys/fs/cgroup")
            .ok()
            .and_then(|n| n.to_str())
        else {
            continue;
        };
        if name.is_empty() || name.contains('/') {
            continue;
        }
        match mkdirat(
            Some(tmpfs.as_raw_fd()),
            name,
            Mode::from_bits_truncate(0o755),
        ) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(ChildError::errno_at("mkdir", name)(e)),
        }
        let sub = || {
            openat(
                Some(tmpfs.as_raw_fd()),
                name,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map(owned)
        };
        let onto = sub().map_err(ChildError::errno_at("open", name))?;
        bind(&c.dir, &onto, true, false, m.flags | fixed, None, &sub)
            .map_err(ChildError::errno_at("bind", c.dir.display()))?;
        if name.contains(',') {
            for part in name.split(',') {
                match symlinkat(name, Some(tmpfs.as_raw_fd()), part) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(ChildError::errno_at("link", part)(e)),
                }
            }
        }
    }
    if m.flags.contains(MsFlags::MS_RDONLY) {
        setattr(&tmpfs, &attr_of(MsFlags::MS_RDONLY), false)
            .map_err(ChildError::errno("make read-only"))?;
    }
    Ok(())
}

/// pivot_root into the root and drop the old one, as runc: the old root
/// is made a slave first so its unmount cannot reach the host.
fn pivot(root: &OwnedFd) -> Res<()> {
    let old = open_path(Path::new("/")).map_err(ChildError::errno_at("open", "/"))?;
    nix::unistd::fchdir(root.as_raw_fd()).map_err(ChildError::errno("chdir into the rootfs"))?;
    nix::unistd::pivot_root(".", ".").map_err(ChildError::errno("pivot_root"))?;
    // "." is the old root only from inside it: from the new root's
    // directory the rslave below would reach the container's own mounts.
    nix::unistd::fchdir(old.as_raw_fd()).map_err(ChildError::errno("chdir into the old root"))?;
    drop(old);
    mount(
        None::<&str>,
        ".",
        None::<&str>,
        MsFlags::MS_SLAVE | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(ChildError::errno("make the old root a slave"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(ChildError::errno("unmount the old root"))?;
    nix::unistd::chdir("/").map_err(ChildError::errno_at("chdir", "/"))
}

/// `p` (after the pivot: inside the container) as an O_PATH descriptor,
/// not following a final link, nor any `/proc/<pid>/root`-like link out
/// of the root on the way.
fn open_path(p: &Path) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(libc::AT_FDCWD, p, how).map(owned)
}

/// Standard streams that are the host's /dev/null become the container's,
/// reopened from the checked descriptor `null`, never by name.
fn reopen_dev_null(null: &OwnedFd) -> Res<()> {
    let mut opened: Option<OwnedFd> = None;
    for n in 0..3 {
        let Ok(st) = fstat(n) else { continue };
        if st.st_mode & libc::S_IFMT != libc::S_IFCHR || st.st_rdev != makedev(1, 3) {
            continue;
        }
        if opened.is_none() {
            opened = Some(
                nix::fcntl::open(
                    fd_path(null).as_str(),
                    OFlag::O_RDWR | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map(owned)
                .map_err(ChildError::errno_at("open", "/dev/null"))?,
            );
        }
        if let Some(fd) = &opened {
            nix::unistd::dup2(fd.as_raw_fd(), n)
                .map_err(ChildError::errno_at("reopen", "/dev/null"))?;
        }
    }
    Ok(())
}

/// runc's masking: a read-only empty tmpfs over a directory, the checked
/// `null` over anything else; a path the container lacks is left alone.
fn mask(p: &Path, null: &OwnedFd) -> nix::Result<()> {
    let fd = match open_path(p) {
        Err(Errno::ENOENT) => return Ok(()),
        r => r?,
    };
    if fstat(fd.as_raw_fd())?.st_mode & libc::S_IFMT == libc::S_IFDIR {
        new_fs("tmpfs", "tmpfs", &fd, MsFlags::MS_RDONLY, "")
    } else {
        bind(
            Path::new(&fd_path(null)),
            &fd,
            false,
            false,
            MsFlags::empty(),
            None,
            &|| open_path(p),
        )
    }
}
