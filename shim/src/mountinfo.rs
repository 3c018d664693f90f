//! `/proc/<pid>/mountinfo` (proc(5)), parsed: one place for the mount table
//! the exec path (cgroup hierarchies) and container creation (mount
//! propagation) read. Pure: callers read the file.

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
}
