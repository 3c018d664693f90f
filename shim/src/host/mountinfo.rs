//! `/proc/<pid>/mountinfo` (proc(5)), parsed: one place for the mount table
//! the exec path (cgroup hierarchies) and container creation (mount
//! propagation) read, and where a process's cgroups are mounted. Pure:
//! callers read the files.

use std::path::{Path, PathBuf};

/// One line: `id parent major:minor root mount_point options [tags...] -
/// fs_type source super_options`.
#[derive(Debug, PartialEq, Eq)]
pub struct Mount<'a> {
    /// The root of the mount within its filesystem (as written, escaped).
    pub root: &'a str,
    /// Where it is mounted, with the kernel's octal escapes undone.
    pub mount_point: String,
    /// Optional fields: `shared:N`, `master:N`, `propagate_from:N`, `unbindable`.
    pub tags: Vec<&'a str>,
    pub fs_type: &'a str,
    pub super_options: &'a str,
}

/// The mounts of a mountinfo text; malformed lines are skipped.
pub fn parse(text: &str) -> impl Iterator<Item = Mount<'_>> {
    text.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut f = left.split(' ');
        let root = f.nth(3)?;
        let mount_point = unescape(f.next()?);
        let tags = f.skip(1).collect(); // past the mount options
        let mut r = right.split(' ');
        let fs_type = r.next()?;
        let super_options = r.nth(1)?;
        Some(Mount {
            root,
            mount_point,
            tags,
            fs_type,
            super_options,
        })
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| {
                let v = d.iter().fold(0u16, |v, c| v * 8 + u16::from(c - b'0'));
                u8::try_from(v).ok()
            });
        match octal {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A cgroup a process is in, where the host has it mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupDir {
    /// The hierarchy's mount point (`/sys/fs/cgroup/cpu,cpuacct`).
    pub mount_point: PathBuf,
    /// The process's cgroup directory in it.
    pub dir: PathBuf,
    /// A cgroup v2 (unified) hierarchy.
    pub v2: bool,
}

/// Where the cgroups of a process (its `/proc/<pid>/cgroup`) are, from a
/// mount table: one directory per hierarchy that is mounted with its root
/// containing the path (a bind mount of a sub-tree may not).
pub(crate) fn cgroup_dirs(
    cgroup: &str,
    mountinfo: &str,
) -> Result<Vec<CgroupDir>, super::ChildError> {
    let mounts: Vec<(&str, String, Vec<&str>, bool)> = parse(mountinfo)
        .filter_map(|m| match m.fs_type {
            "cgroup2" => Some((m.root, m.mount_point, Vec::new(), true)),
            "cgroup" => Some((
                m.root,
                m.mount_point,
                m.super_options.split(',').collect(),
                false,
            )),
            _ => None,
        })
        .collect();
    let mut out: Vec<CgroupDir> = Vec::new();
    for line in cgroup.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(super::ChildError::detail_at(
                "read",
                "/proc/<pid>/cgroup",
                format!("unexpected line {line:?}"),
            ));
        };
        let wanted: Vec<&str> = controllers.split(',').filter(|c| !c.is_empty()).collect();
        let found = mounts.iter().find_map(|(root, point, opts, v2)| {
            let same = if wanted.is_empty() {
                *v2
            } else {
                !*v2 && wanted.iter().all(|w| opts.contains(w))
            };
            let rel = path.strip_prefix(root.trim_end_matches('/'))?;
            (same && (rel.is_empty() || rel.starts_with('/'))).then(|| CgroupDir {
                mount_point: PathBuf::from(point),
                dir: Path::new(point).join(rel.trim_start_matches('/')),
                v2: *v2,
            })
        });
        if let Some(d) = found
            && !out.contains(&d)
        {
            out.push(d);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_and_without_tags() {
        let text = "\
22 1 252:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,errors=remount-ro
29 23 0:26 /k /sys/fs/cgroup-k rw - cgroup2 cgroup2 rw
91 30 252:0 /tmp/a\\040b /tmp/a\\040b rw shared:90 master:2 - ext4 /dev/vda rw
garbage
";
        let got: Vec<Mount<'_>> = parse(text).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0],
            Mount {
                root: "/",
                mount_point: "/".into(),
                tags: vec!["shared:1"],
                fs_type: "ext4",
                super_options: "rw,errors=remount-ro",
            }
        );
        assert_eq!((got[1].root, got[1].tags.len()), ("/k", 0));
        assert_eq!(got[1].fs_type, "cgroup2");
        assert_eq!(got[2].mount_point, "/tmp/a b");
        assert_eq!(got[2].tags, ["shared:90", "master:2"]);
    }

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape("/a\\040b\\011c\\134"), "/a b\tc\\");
        assert_eq!(unescape("/a\\999\\777"), "/a\\999\\777");
    }

    #[test]
    fn cgroup_dirs_follow_the_mount_table() {
        let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
31 25 0:27 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
33 25 0:29 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd
";
        let cgroup = "\
4:cpu,cpuacct:/picolet/p/c
3:memory:/picolet/p/c
1:name=systemd:/system.slice/x.service
0::/picolet/p/c
";
        let d = cgroup_dirs(cgroup, mountinfo).expect("dirs");
        assert_eq!(d.len(), 4);
        assert_eq!(
            d[0].dir,
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/picolet/p/c")
        );
        assert_eq!(
            d[2].dir,
            PathBuf::from("/sys/fs/cgroup/systemd/system.slice/x.service")
        );
        assert!(d[3].v2 && !d[0].v2);
        assert!(cgroup_dirs("garbage", mountinfo).is_err());
    }
}
