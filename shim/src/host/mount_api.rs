//! The new mount API calls nix does not wrap: `mount_setattr(2)` (flags
//! of one mount or a tree, and idmapping), `open_tree(2)` clones and
//! `move_mount(2)`. Used by the container's init (its mounts) and by the
//! shim (a rootfs whose layers are seen through a pod's user namespace).
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;

const AT_EMPTY_PATH: libc::c_uint = 0x1000;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const MOUNT_ATTR_ATIME: u64 = 0x70;
pub const MOUNT_ATTR_NOATIME: u64 = 0x10;
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
#[derive(Debug, Default)]
pub struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

/// Sets `attr` on the mount `mnt` is (an `O_PATH` descriptor of its root
/// or an `open_tree` clone), with `recursive` on every mount under it too.
pub fn setattr(mnt: &OwnedFd, attr: &MountAttr, recursive: bool) -> nix::Result<()> {
    let mut flags = AT_EMPTY_PATH;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: mount_setattr reads `size_of::<MountAttr>()` bytes of `attr`,
    // which lives through the call; the path is the empty C string.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            mnt.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// A detached copy of the mount at `path`, with every mount under it when
/// `recursive` (as `rbind`).
pub fn clone_tree(path: &Path, recursive: bool) -> nix::Result<OwnedFd> {
    let path =
        std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: open_tree reads the NUL-terminated path; the result is a
    // new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE
                | libc::O_CLOEXEC as libc::c_uint
                | if recursive { AT_RECURSIVE } else { 0 },
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    let fd = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just returned this descriptor to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The detached mount `mnt` seen through the user namespace `userns`:
/// a file its namespace's root owns is owned by the host's ID that root
/// maps to, and so on down the range.
pub fn idmap(mnt: &OwnedFd, userns: &OwnedFd) -> nix::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        userns_fd: u64::try_from(userns.as_raw_fd()).map_err(|_| Errno::EBADF)?,
        ..MountAttr::default()
    };
    setattr(mnt, &attr, false)
}

/// Attaches the detached mount `mnt` at `target`.
pub fn attach(mnt: &OwnedFd, target: &Path) -> nix::Result<()> {
    let target =
        std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: move_mount reads the two NUL-terminated paths, which live
    // through the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mnt.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// Attaches the detached mount `mnt` onto the directory or file `onto`
/// is (an `O_PATH` descriptor): no path is resolved again.
pub fn attach_onto(mnt: &OwnedFd, onto: &OwnedFd) -> nix::Result<()> {
    // SAFETY: move_mount reads the two empty C strings; both descriptors
    // are ours and open through the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mnt.as_raw_fd(),
            c"".as_ptr(),
            onto.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if r < 0 { Err(Errno::last()) } else { Ok(()) }
}
