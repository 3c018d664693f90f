//! `picolet.devices`: the built-in generic device plugin's device groups,
//! in squat/generic-device-plugin's shape. Each entry is one extended
//! resource, `devices.picolet.io/<name>`; its groups say which host files
//! make one device (paths by glob, USB devices by vendor and product) and
//! how many pods may hold each at once (`count`, for shareable devices
//! like /dev/fuse).
//!
//! ```yaml
//! picolet:
//!   devices:
//!   - name: serial
//!     groups:
//!     - paths: [{path: /dev/ttyUSB*}]
//!     - paths: [{path: /dev/ttyACM*}]
//!   - name: fuse
//!     groups:
//!     - paths: [{path: /dev/fuse}]
//!       count: 10
//!   - name: ftdi
//!     groups:
//!     - usb: [{vendor: "0403", product: "6001"}]
//! ```

use serde::Deserialize;

/// The resource domain of the built-in plugin's devices.
pub const DOMAIN: &str = "devices.picolet.io";

/// One resource of the built-in plugin.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceSpec {
    /// A DNS label: the resource is `devices.picolet.io/<name>`.
    pub name: String,
    pub groups: Vec<Group>,
}

/// Which host files make one device of the resource.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Group {
    /// Each path a glob; one device is one match of each (the n-th of
    /// each pattern, in name order).
    #[serde(default)]
    pub paths: Vec<PathSpec>,
    /// USB devices by vendor and product ID (hex), each one device.
    #[serde(default)]
    pub usb: Vec<UsbSpec>,
    /// How many containers may hold each device at once (default 1).
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PathSpec {
    /// A glob (`*`, `?` in any component) of host files.
    pub path: String,
    /// Where it appears in the container: the host path by default; a
    /// path ending in `/` gets the file's name appended.
    #[serde(default)]
    pub mount_path: Option<String>,
    /// Device access, any of `r`, `w`, `m` (default `rw`).
    #[serde(default)]
    pub permissions: Option<String>,
    /// `Device` (a device node, the default) or `Mount` (a bind mount).
    #[serde(default, rename = "type")]
    pub kind: PathKind,
    /// A `Mount` is read-only in the container.
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum PathKind {
    #[default]
    Device,
    Mount,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsbSpec {
    /// Hex, as `lsusb` shows it (`0403`).
    pub vendor: String,
    pub product: String,
    /// Only the device with this serial number.
    #[serde(default)]
    pub serial: Option<String>,
}

impl DeviceSpec {
    /// `devices.picolet.io/<name>`.
    pub fn resource(&self) -> String {
        format!("{DOMAIN}/{}", self.name)
    }

    /// The first thing wrong, as (field below this entry, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        let n = &self.name;
        let label = !n.is_empty()
            && n.len() <= 63
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !n.starts_with('-')
            && !n.ends_with('-');
        if !label {
            return Err((
                "name".into(),
                format!("{n:?} is not a DNS label (lowercase letters, digits, '-')"),
            ));
        }
        if self.groups.is_empty() {
            return Err(("groups".into(), "at least one group is needed".into()));
        }
        for (i, g) in self.groups.iter().enumerate() {
            let at = |f: &str| format!("groups[{i}].{f}");
            match (g.paths.is_empty(), g.usb.is_empty()) {
                (true, true) => return Err((at("paths"), "paths or usb is needed".into())),
                (false, false) => {
                    return Err((at("usb"), "a group has paths or usb, not both".into()));
                }
                _ => {}
            }
            if g.count == 0 {
                return Err((at("count"), "must be at least 1".into()));
            }
            for (j, p) in g.paths.iter().enumerate() {
                if !p.path.starts_with('/') {
                    return Err((at(&format!("paths[{j}].path")), "must be absolute".into()));
                }
                if let Some(m) = &p.mount_path
                    && !m.starts_with('/')
                {
                    return Err((
                        at(&format!("paths[{j}].mountPath")),
                        "must be absolute".into(),
                    ));
                }
                if let Some(perm) = &p.permissions
                    && (perm.is_empty() || !perm.chars().all(|c| matches!(c, 'r' | 'w' | 'm')))
                {
                    return Err((
                        at(&format!("paths[{j}].permissions")),
                        format!("{perm:?}: any of r, w, m"),
                    ));
                }
            }
            for (j, u) in g.usb.iter().enumerate() {
                for (f, v) in [("vendor", &u.vendor), ("product", &u.product)] {
                    if u16::from_str_radix(v, 16).is_err() {
                        return Err((
                            at(&format!("usb[{j}].{f}")),
                            format!("{v:?} is not a 16-bit hex ID"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> DeviceSpec {
        serde_yaml::from_str(yaml).expect("parses")
    }

    #[test]
    fn groups_take_squats_shape_with_defaults() {
        let d = parse(
            "name: serial\ngroups:\n- paths: [{path: /dev/ttyUSB*, mountPath: /dev/}]\n- usb: [{vendor: \"0403\", product: \"6001\"}]\n  count: 2\n",
        );
        assert_eq!(d.resource(), "devices.picolet.io/serial");
        assert_eq!(d.groups[0].count, 1);
        assert_eq!(d.groups[0].paths[0].kind, PathKind::Device);
        assert_eq!(d.groups[1].count, 2);
        assert_eq!(d.check(), Ok(()));
    }

    #[test]
    fn each_mistake_names_its_field() {
        let bad = |yaml: &str| parse(yaml).check().expect_err(yaml).0;
        assert_eq!(
            bad("name: Serial\ngroups: [{paths: [{path: /dev/x}]}]"),
            "name"
        );
        assert_eq!(bad("name: s\ngroups: []"), "groups");
        assert_eq!(bad("name: s\ngroups: [{count: 1}]"), "groups[0].paths");
        assert_eq!(
            bad("name: s\ngroups: [{paths: [{path: dev/x}]}]"),
            "groups[0].paths[0].path"
        );
        assert_eq!(
            bad("name: s\ngroups: [{paths: [{path: /dev/x, permissions: rx}]}]"),
            "groups[0].paths[0].permissions"
        );
        assert_eq!(
            bad("name: s\ngroups: [{usb: [{vendor: zz, product: \"1\"}]}]"),
            "groups[0].usb[0].vendor"
        );
        assert_eq!(
            bad("name: s\ngroups: [{paths: [{path: /dev/x}], count: 0}]"),
            "groups[0].count"
        );
        assert!(serde_yaml::from_str::<DeviceSpec>("name: s\ngroups: []\nextra: 1").is_err());
    }
}
