//! The spec's syntax rules, as the CDI library checks them when it loads a
//! file, plus absolute container paths (the OCI spec needs them).

use std::collections::BTreeSet;
use std::path::Path;

use super::{CdiError, ContainerEdits, SUPPORTED_VERSIONS, Spec};

const HOOK_NAMES: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// A vendor, class or device name against the spec's syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("empty {0}")]
    Empty(&'static str),
    #[error("{what} {name:?} should start with {want}")]
    Start {
        what: &'static str,
        name: String,
        want: &'static str,
    },
    #[error("{what} {name:?} should end with a letter or digit")]
    End { what: &'static str, name: String },
    #[error("invalid character {c:?} in {what} {name:?}")]
    Character {
        what: &'static str,
        name: String,
        c: char,
    },
    #[error("{0:?} is not vendor/class")]
    NotKind(String),
    #[error("not vendor.com/class=name")]
    NotQualified,
}

/// Checks `name`: `first` (a test and what it wants) holds for its first
/// byte, an ASCII letter or digit ends it, letters, digits and `extra`
/// fill the middle.
fn syntax(
    what: &'static str,
    name: &str,
    first: (fn(&u8) -> bool, &'static str),
    extra: &[u8],
) -> Result<(), NameError> {
    let b = name.as_bytes();
    let (Some(f), Some(last)) = (b.first(), b.last()) else {
        return Err(NameError::Empty(what));
    };
    if let Some(c) = b
        .iter()
        .find(|c| !(c.is_ascii_alphanumeric() || extra.contains(c)))
    {
        return Err(NameError::Character {
            what,
            name: name.into(),
            c: char::from(*c),
        });
    }
    if !first.0(f) {
        return Err(NameError::Start {
            what,
            name: name.into(),
            want: first.1,
        });
    }
    if !last.is_ascii_alphanumeric() {
        return Err(NameError::End {
            what,
            name: name.into(),
        });
    }
    Ok(())
}

/// A vendor (`nvidia.com`) or class (`gpu`): a letter first, a letter or
/// digit last, letters, digits, `-`, `_`, `.` between.
fn vendor_or_class(what: &'static str, name: &str) -> Result<(), NameError> {
    syntax(what, name, (u8::is_ascii_alphabetic, "a letter"), b"-_.")
}

/// A device name: a letter or digit first and last, letters, digits, `-`,
/// `_`, `.`, `:` between.
fn device_name(name: &str) -> Result<(), NameError> {
    let first = (
        u8::is_ascii_alphanumeric as fn(&u8) -> bool,
        "a letter or digit",
    );
    syntax("device name", name, first, b"-_.:")
}

/// `vendor.com/class` → (vendor, class).
fn kind(kind: &str) -> Result<(&str, &str), NameError> {
    let (vendor, class) = kind
        .split_once('/')
        .ok_or_else(|| NameError::NotKind(kind.into()))?;
    vendor_or_class("vendor", vendor)?;
    vendor_or_class("class", class)?;
    Ok((vendor, class))
}

/// `vendor.com/class=name` → (`vendor.com/class`, name).
pub fn parse_qualified_name(qualified: &str) -> Result<(&str, &str), NameError> {
    let (k, name) = qualified.split_once('=').ok_or(NameError::NotQualified)?;
    kind(k)?;
    device_name(name)?;
    Ok((k, name))
}

/// Checks a parsed spec; the error names `file` and the field.
pub fn validate_spec(spec: &Spec, file: &Path) -> Result<(), CdiError> {
    let invalid = |field: &str, why: String| CdiError::Invalid {
        file: file.to_path_buf(),
        field: field.to_string(),
        why,
    };
    if !SUPPORTED_VERSIONS.contains(&spec.cdi_version.as_str()) {
        return Err(invalid(
            "cdiVersion",
            format!(
                "{:?} is not supported (want one of {})",
                spec.cdi_version,
                SUPPORTED_VERSIONS.join(", ")
            ),
        ));
    }
    kind(&spec.kind).map_err(|why| invalid("kind", why.to_string()))?;
    edits(&spec.container_edits, "containerEdits").map_err(|(f, why)| invalid(&f, why))?;
    if spec.devices.is_empty() {
        return Err(invalid("devices", "no devices".into()));
    }
    let mut seen = BTreeSet::new();
    for (i, d) in spec.devices.iter().enumerate() {
        let at = format!("devices[{i}]");
        device_name(&d.name).map_err(|why| invalid(&format!("{at}.name"), why.to_string()))?;
        if !seen.insert(d.name.as_str()) {
            return Err(invalid(
                &format!("{at}.name"),
                format!("{:?} named twice", d.name),
            ));
        }
        if d.container_edits.is_empty() {
            return Err(invalid(
                &format!("{at}.containerEdits"),
                "empty: a device must edit something".into(),
            ));
        }
        edits(&d.container_edits, &format!("{at}.containerEdits"))
            .map_err(|(f, why)| invalid(&f, why))?;
    }
    Ok(())
}

fn env(list: &[String], at: &str) -> Result<(), (String, String)> {
    for (i, kv) in list.iter().enumerate() {
        if kv.find('=').is_none_or(|p| p == 0) {
            return Err((format!("{at}[{i}]"), format!("{kv:?} is not KEY=value")));
        }
    }
    Ok(())
}

fn absolute(p: &str, field: String) -> Result<(), (String, String)> {
    if p.starts_with('/') {
        Ok(())
    } else {
        Err((field, format!("{p:?} is not an absolute path")))
    }
}

/// One edits block; the error is (field path, why).
fn edits(e: &ContainerEdits, at: &str) -> Result<(), (String, String)> {
    env(&e.env, &format!("{at}.env"))?;
    for (i, d) in e.device_nodes.iter().enumerate() {
        let f = |name: &str| format!("{at}.deviceNodes[{i}].{name}");
        absolute(&d.path, f("path"))?;
        if !d.host_path.is_empty() {
            absolute(&d.host_path, f("hostPath"))?;
        }
        if !matches!(d.kind.as_str(), "" | "b" | "c" | "u" | "p") {
            return Err((f("type"), format!("{:?} (want b, c, u or p)", d.kind)));
        }
        if d.major < 0 || d.minor < 0 {
            return Err((f("major"), format!("{}:{} is negative", d.major, d.minor)));
        }
        if !d.permissions.chars().all(|c| "rwm".contains(c)) {
            return Err((
                f("permissions"),
                format!("{:?} (want r, w, m)", d.permissions),
            ));
        }
    }
    for (i, h) in e.hooks.iter().enumerate() {
        let f = |name: &str| format!("{at}.hooks[{i}].{name}");
        if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
            return Err((
                f("hookName"),
                format!("{:?} (want one of {})", h.hook_name, HOOK_NAMES.join(", ")),
            ));
        }
        absolute(&h.path, f("path"))?;
        env(&h.env, &f("env"))?;
    }
    for (i, m) in e.mounts.iter().enumerate() {
        let f = |name: &str| format!("{at}.mounts[{i}].{name}");
        if m.host_path.is_empty() {
            return Err((f("hostPath"), "empty".into()));
        }
        absolute(&m.container_path, f("containerPath"))?;
        let bind = m.kind.is_empty() || m.kind == "bind";
        if bind {
            absolute(&m.host_path, f("hostPath"))?;
        }
    }
    Ok(())
}
