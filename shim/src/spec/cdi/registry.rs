//! Which loaded spec serves each device name, and a container's request
//! resolved to one set of edits (the CDI library's cache and
//! `InjectDevices`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cri_proto::v1::ContainerConfig;

use super::{ANNOTATION_PREFIX, CdiError, ContainerEdits, Spec, parse_qualified_name};

/// One spec file that loaded.
#[derive(Debug, Clone)]
struct Loaded {
    file: PathBuf,
    priority: usize,
    spec: Spec,
}

/// The devices of the loaded specs, by qualified name.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    specs: Vec<Loaded>,
    /// Qualified name → (index in `specs`, index in its devices).
    devices: BTreeMap<String, (usize, usize)>,
}

impl Registry {
    /// The registry of `specs`, each with its file and its folder's
    /// priority (its index in the folder list). A device in a folder of
    /// higher priority replaces the one of a lower; two files of one folder
    /// that both name a device lose it, each named in a warning (returned:
    /// the caller logs them).
    pub fn new(specs: Vec<(PathBuf, usize, Spec)>) -> (Registry, Vec<String>) {
        let mut reg = Registry::default();
        let mut warnings = Vec::new();
        let mut conflicts = BTreeSet::new();
        for (file, priority, spec) in specs {
            let si = reg.specs.len();
            for (di, d) in spec.devices.iter().enumerate() {
                let name = format!("{}={}", spec.kind, d.name);
                if let Some(&(oi, _)) = reg.devices.get(&name) {
                    let old = &reg.specs[oi];
                    if old.priority > priority {
                        continue;
                    }
                    if old.priority == priority {
                        warnings.push(format!(
                            "CDI device {name} is in both {} and {}: neither is used",
                            old.file.display(),
                            file.display()
                        ));
                        conflicts.insert(name);
                        continue;
                    }
                }
                reg.devices.insert(name, (si, di));
            }
            reg.specs.push(Loaded {
                file,
                priority,
                spec,
            });
        }
        for c in conflicts {
            reg.devices.remove(&c);
        }
        (reg, warnings)
    }

    /// The qualified names of every device, sorted.
    pub fn device_names(&self) -> impl Iterator<Item = &str> {
        self.devices.keys().map(String::as_str)
    }

    /// The file a device comes from.
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        self.devices
            .get(name)
            .map(|&(si, _)| self.specs[si].file.as_path())
    }

    /// The edits for `names` (qualified, without duplicates): each spec's
    /// common edits once, where its first device comes, then each device's.
    /// Unknown names fail together; a device whose edits need hooks, Intel
    /// RDT or a fifo node fails as unsupported.
    pub fn resolve(&self, names: &[String]) -> Result<ContainerEdits, CdiError> {
        let unknown: Vec<String> = names
            .iter()
            .filter(|n| !self.devices.contains_key(n.as_str()))
            .cloned()
            .collect();
        if !unknown.is_empty() {
            return Err(CdiError::Unresolvable { names: unknown });
        }
        let mut out = ContainerEdits::default();
        let mut specs_done = BTreeSet::new();
        for name in names {
            let Some(&(si, di)) = self.devices.get(name.as_str()) else {
                continue;
            };
            let loaded = &self.specs[si];
            let device = &loaded.spec.devices[di].container_edits;
            for e in [&loaded.spec.container_edits, device] {
                let unsupported = |what| CdiError::Unsupported {
                    device: name.clone(),
                    file: loaded.file.clone(),
                    what,
                };
                if !e.hooks.is_empty() {
                    return Err(unsupported("OCI hooks (containerEdits.hooks) are"));
                }
                if e.intel_rdt.is_some() {
                    return Err(unsupported("Intel RDT (containerEdits.intelRdt) is"));
                }
                if e.device_nodes.iter().any(|d| d.kind == "p") {
                    return Err(unsupported("a fifo device node (type p) is"));
                }
            }
            if specs_done.insert(si) {
                out.append(&loaded.spec.container_edits);
            }
            out.append(device);
        }
        Ok(out)
    }
}

/// The devices a container asks for, as containerd's `WithCDI`: CRI
/// `CDI_devices` in order, then the comma-separated values of its
/// `cdi.k8s.io/*` annotations (by key, for a stable order); each name once.
pub fn requested(config: &ContainerConfig) -> Result<Vec<String>, CdiError> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |name: &str, origin: &dyn Fn() -> String| {
        parse_qualified_name(name).map_err(|source| CdiError::BadName {
            name: name.to_string(),
            origin: origin(),
            source,
        })?;
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
        Ok::<_, CdiError>(())
    };
    for (i, d) in config.cdi_devices.iter().enumerate() {
        add(&d.name, &|| format!("CDI_devices[{i}]"))?;
    }
    let annotations: BTreeMap<&String, &String> = config
        .annotations
        .iter()
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .collect();
    for (key, value) in annotations {
        for name in value.split(',') {
            add(name, &|| format!("annotation {key}"))?;
        }
    }
    Ok(out)
}
