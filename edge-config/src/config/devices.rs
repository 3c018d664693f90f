//! The `picolet:` fields about devices: the built-in device plugin's
//! resources (`devices`) and where CDI specs are read (`cdiSpecDirs`).

use super::FieldError;
use crate::devices::DeviceSpec;

/// Makes a field's error (field path, message).
type Err<'a> = &'a dyn Fn(&str, String) -> FieldError;

/// `picolet.devices`: each entry valid, no name twice.
pub(super) fn check(devices: Vec<DeviceSpec>, err: Err<'_>) -> Result<Vec<DeviceSpec>, FieldError> {
    let mut names = std::collections::BTreeSet::new();
    for (i, d) in devices.iter().enumerate() {
        d.check()
            .map_err(|(field, message)| err(&format!("picolet.devices[{i}].{field}"), message))?;
        if !names.insert(d.name.as_str()) {
            return Err(err(
                &format!("picolet.devices[{i}].name"),
                format!("{:?} is named twice", d.name),
            ));
        }
    }
    Ok(devices)
}

/// `picolet.cdiSpecDirs`: absolute paths, at least one (default
/// `/etc/cdi`, `/var/run/cdi`).
pub(super) fn cdi_spec_dirs(
    dirs: Option<Vec<String>>,
    err: Err<'_>,
) -> Result<Vec<String>, FieldError> {
    let dirs = dirs.unwrap_or_else(|| crate::DEFAULT_CDI_SPEC_DIRS.map(String::from).to_vec());
    if dirs.is_empty() {
        let why = "empty (enableCDI: false turns CDI off)";
        return Err(err("picolet.cdiSpecDirs", why.into()));
    }
    if let Some((i, d)) = dirs.iter().enumerate().find(|(_, d)| !d.starts_with('/')) {
        let why = format!("{d:?} is not an absolute path");
        return Err(err(&format!("picolet.cdiSpecDirs[{i}]"), why));
    }
    Ok(dirs)
}
