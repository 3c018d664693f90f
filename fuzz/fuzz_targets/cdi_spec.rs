//! A CDI spec file (/etc/cdi, /var/run/cdi): YAML and JSON decoding,
//! strict fields, name and edit validation. Each input is read both ways.
//! Checked: any error is typed, never a panic; every device of a spec that
//! loads has a valid qualified name, resolves (or is refused as
//! unsupported), and its edits apply to an OCI spec.
#![no_main]

use std::path::{Path, PathBuf};

use shim::cdi;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for file in ["/etc/cdi/f.yaml", "/var/run/cdi/f.json"] {
        let Ok(spec) = cdi::parse_spec(data, Path::new(file)) else {
            continue;
        };
        let names: Vec<String> = spec
            .devices
            .iter()
            .map(|d| format!("{}={}", spec.kind, d.name))
            .collect();
        for n in &names {
            assert!(cdi::parse_qualified_name(n).is_ok(), "{n}");
        }
        let (registry, conflicts) = cdi::Registry::new(vec![(PathBuf::from(file), 0, spec)]);
        assert!(conflicts.is_empty(), "one file cannot conflict with itself");
        match registry.resolve(&names) {
            Ok(edits) => {
                let mut oci = serde_json::json!({
                    "process": {"env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}},
                    "mounts": [{"destination": "/proc", "type": "proc"}],
                    "linux": {"resources": {"devices": []}},
                });
                cdi::apply(&mut oci, &edits);
            }
            Err(cdi::CdiError::Unsupported { .. }) => {}
            Err(e) => panic!("a loaded spec's own devices: {e}"),
        }
    }
});
