//! Resolved CDI edits written into the OCI spec (as JSON, before it is
//! typed), as the CDI library's `ContainerEdits.Apply` does: env by name,
//! device nodes with an allow rule each, mounts replacing one at the same
//! path then ordered parents first, additional gids. Hooks and Intel RDT
//! never get here (the registry refuses them).

use serde_json::{Value, json};

use super::ContainerEdits;

/// Appends to `v[key]`, making it an array first.
fn array<'a>(v: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !v[key].is_array() {
        v[key] = json!([]);
    }
    match &mut v[key] {
        Value::Array(a) => a,
        _ => unreachable!("set to an array above"),
    }
}

/// Path components of a mount destination, as `filepath.Clean` counts them.
fn depth(dest: &str) -> usize {
    dest.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .count()
}

/// Applies `edits` to `spec`. Device nodes must already carry their type
/// and numbers (`runtime::host_inputs` fills them from the host).
pub fn apply(spec: &mut Value, edits: &ContainerEdits) {
    for kv in &edits.env {
        let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
        let env = array(&mut spec["process"], "env");
        let same = |e: &Value| {
            e.as_str()
                .and_then(|s| s.split_once('='))
                .is_some_and(|(k, _)| k == key)
        };
        match env.iter_mut().find(|e| same(e)) {
            Some(e) => *e = json!(kv),
            None => env.push(json!(kv)),
        }
    }

    // As the CDI library: a node without an owner belongs to the
    // process's user when that is not root.
    let owner = |id: &str| {
        spec["process"]["user"][id]
            .as_u64()
            .filter(|&n| n > 0)
            .and_then(|n| u32::try_from(n).ok())
    };
    let (uid, gid) = (owner("uid"), owner("gid"));
    for d in &edits.device_nodes {
        let mut dev = json!({"path": d.path, "type": d.kind, "major": d.major, "minor": d.minor});
        if let Some(m) = d.file_mode {
            dev["fileMode"] = json!(m);
        }
        if let Some(u) = d.uid.or(uid) {
            dev["uid"] = json!(u);
        }
        if let Some(g) = d.gid.or(gid) {
            dev["gid"] = json!(g);
        }
        let devices = array(&mut spec["linux"], "devices");
        devices.retain(|x| x["path"] != json!(d.path));
        devices.push(dev);
        if d.kind == "b" || d.kind == "c" {
            let access = if d.permissions.is_empty() {
                "rwm"
            } else {
                d.permissions.as_str()
            };
            array(&mut spec["linux"]["resources"], "devices").push(json!({
                "allow": true, "type": d.kind, "major": d.major, "minor": d.minor, "access": access,
            }));
        }
    }

    if !edits.mounts.is_empty() {
        let mounts = array(spec, "mounts");
        for m in &edits.mounts {
            mounts.retain(|x| x["destination"] != json!(m.container_path));
            let mut mount = json!({"destination": m.container_path, "source": m.host_path, "options": m.options});
            if !m.kind.is_empty() {
                mount["type"] = json!(m.kind);
            }
            mounts.push(mount);
        }
        // Parents before what is mounted inside them; stable otherwise.
        mounts.sort_by_key(|m| depth(m["destination"].as_str().unwrap_or("")));
    }

    for &g in &edits.additional_gids {
        let gids = array(&mut spec["process"]["user"], "additionalGids");
        if g != 0 && !gids.contains(&json!(g)) {
            gids.push(json!(g));
        }
    }
}
