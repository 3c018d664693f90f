//! CDI, the Container Device Interface (tags.cncf.io/container-device-interface,
//! spec versions 0.3.0–0.8.0), as containerd's `enable_cdi` uses it: spec
//! files in a list of folders name devices `vendor.com/class=name`; a
//! container asks for them by CRI `CDI_devices` or `cdi.k8s.io/*`
//! annotations, and gets each device's container edits (device nodes with
//! their cgroup rules, env, mounts, additional gids) plus its spec's common
//! edits. Pure: parsing and validation here, which files win in
//! [`Registry`], the edits written into the OCI spec in [`apply`]; reading
//! the folders and stat-ing host devices is `runtime::host_inputs`' part.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

mod apply;
mod registry;
mod validate;

pub use apply::apply;
pub use registry::{Registry, requested};
pub use validate::{NameError, parse_qualified_name, validate_spec};

/// The spec versions understood (the CDI library's 0.3.0 to 0.8.0).
pub const SUPPORTED_VERSIONS: [&str; 6] = ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0"];
/// Most bytes a spec file may have: real ones (all GPUs of a machine,
/// their libraries as mounts) are tens of KiB.
pub const MAX_SPEC_BYTES: u64 = 1 << 20;
/// Annotation keys that request devices (`ParseAnnotations`).
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// CDI's errors: a spec file that does not load, a request that cannot be
/// served.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// A spec file that does not parse or validate: the file, the field
    /// path (`devices[2].name`) and why.
    #[error("{}: {field}: {why}", file.display())]
    Invalid {
        file: PathBuf,
        field: String,
        why: String,
    },
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: larger than {limit} bytes", file.display())]
    TooLarge { file: PathBuf, limit: u64 },
    /// A requested name that is not `vendor.com/class=name`.
    #[error("invalid CDI device name {name:?} in {origin}: {source}")]
    BadName {
        name: String,
        origin: String,
        source: NameError,
    },
    /// Requested devices no loaded spec has (containerd's wording).
    #[error("unresolvable CDI devices {}", names.join(", "))]
    Unresolvable { names: Vec<String> },
    /// A device whose edits need what picolet's runtime does not do.
    #[error("CDI device {device} ({}): {what} not supported by picolet's runtime", file.display())]
    Unsupported {
        device: String,
        file: PathBuf,
        what: &'static str,
    },
    /// The host side of a device node cannot be used.
    #[error("CDI device node {path}: host device {host_path}: {why}")]
    HostDevice {
        path: String,
        host_path: String,
        why: String,
    },
    #[error("CDI device node {path}: cannot stat host device {host_path}: {source}")]
    Stat {
        path: String,
        host_path: String,
        source: std::io::Error,
    },
}

/// As containerd fails such a create, with CRI's codes: a malformed name
/// is the request's fault, an unknown device not found, a device the
/// runtime cannot give or a host device that is not there the node's.
impl From<CdiError> for crate::error::Error {
    fn from(e: CdiError) -> Self {
        use crate::error::Error;
        match e {
            CdiError::BadName { .. } => Error::InvalidArgument(e.to_string()),
            CdiError::Unresolvable { .. } => Error::NotFound(e.to_string()),
            CdiError::Invalid { .. }
            | CdiError::Read { .. }
            | CdiError::TooLarge { .. }
            | CdiError::Unsupported { .. }
            | CdiError::HostDevice { .. }
            | CdiError::Stat { .. } => Error::FailedPrecondition(e.to_string()),
        }
    }
}

/// A CDI spec file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    pub cdi_version: String,
    /// `vendor.com/class`.
    pub kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub devices: Vec<Device>,
    /// Applied once when any device of this spec is injected.
    #[serde(default, deserialize_with = "nullable")]
    pub container_edits: ContainerEdits,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Device {
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: BTreeMap<String, String>,
    pub container_edits: ContainerEdits,
}

/// What a device (or its spec) changes in the container.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerEdits {
    /// `KEY=value`, overriding the container's own.
    #[serde(default, deserialize_with = "nullable")]
    pub env: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default, deserialize_with = "nullable")]
    pub hooks: Vec<Hook>,
    #[serde(default, deserialize_with = "nullable")]
    pub mounts: Vec<Mount>,
    /// Kept as written: picolet's runtime has no Intel RDT, a device that
    /// sets it is refused.
    #[serde(default)]
    pub intel_rdt: Option<serde_json::Value>,
    #[serde(default, rename = "additionalGids", deserialize_with = "nullable")]
    pub additional_gids: Vec<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceNode {
    /// In the container.
    pub path: String,
    /// On the host; empty: `path`.
    #[serde(default, deserialize_with = "nullable")]
    pub host_path: String,
    /// `c`, `b`, `u`, `p`; empty: the host device's.
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    pub kind: String,
    /// 0 with the minor: the host device's numbers.
    #[serde(default, deserialize_with = "nullable")]
    pub major: i64,
    #[serde(default, deserialize_with = "nullable")]
    pub minor: i64,
    #[serde(default)]
    pub file_mode: Option<u32>,
    /// cgroup access, of `rwm`; empty: `rwm`.
    #[serde(default, deserialize_with = "nullable")]
    pub permissions: String,
    #[serde(default)]
    pub uid: Option<u32>,
    #[serde(default)]
    pub gid: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    pub kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hook {
    /// prestart, createRuntime, createContainer, startContainer,
    /// poststart or poststop.
    pub hook_name: String,
    pub path: String,
    #[serde(default, deserialize_with = "nullable")]
    pub args: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub env: Vec<String>,
    #[serde(default)]
    pub timeout: Option<i64>,
}

impl ContainerEdits {
    /// Whether nothing is edited (valid for a spec, not for a device).
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.hooks.is_empty()
            && self.mounts.is_empty()
            && self.intel_rdt.is_none()
            && self.additional_gids.is_empty()
    }

    /// Appends `other` (later entries win where the OCI spec takes one).
    pub fn append(&mut self, other: &ContainerEdits) {
        self.env.extend(other.env.iter().cloned());
        self.device_nodes.extend(other.device_nodes.iter().cloned());
        self.hooks.extend(other.hooks.iter().cloned());
        self.mounts.extend(other.mounts.iter().cloned());
        if other.intel_rdt.is_some() {
            self.intel_rdt.clone_from(&other.intel_rdt);
        }
        self.additional_gids.extend(other.additional_gids.iter());
    }
}

/// `null` as the empty value, as Go's decoder reads it.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Parses and validates one spec file's bytes: JSON for `*.json`, YAML
/// otherwise (as the CDI library, which reads both with a YAML decoder).
/// Errors name `file` and the field.
pub fn parse_spec(data: &[u8], file: &Path) -> Result<Spec, CdiError> {
    let invalid = |field: String, why: String| CdiError::Invalid {
        file: file.to_path_buf(),
        field,
        why,
    };
    let field_of = |p: &serde_path_to_error::Path| {
        let s = p.to_string();
        if s == "." { "(document)".into() } else { s }
    };
    let spec: Spec = if file.extension().is_some_and(|e| e == "json") {
        let mut de = serde_json::Deserializer::from_slice(data);
        serde_path_to_error::deserialize(&mut de)
            .map_err(|e| invalid(field_of(e.path()), e.inner().to_string()))?
    } else {
        serde_path_to_error::deserialize(serde_yaml::Deserializer::from_slice(data))
            .map_err(|e| invalid(field_of(e.path()), e.inner().to_string()))?
    };
    validate_spec(&spec, file)?;
    Ok(spec)
}

#[cfg(test)]
mod tests;
