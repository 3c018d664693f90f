//! CNI network configuration as libcni reads it: the first `*.conflist`,
//! `*.conf` or `*.json` of the config folder in lexical order (a single
//! plugin `.conf` becomes a one-plugin list), the stdin each plugin gets
//! (`name`, `cniVersion`, `prevResult` and the `runtimeConfig` of the
//! capabilities it declares injected), and the pod IPs of a result.
//! Pure: no I/O but reading the folder.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A config file larger than this is refused (libcni reads any size).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Why the config folder holds no usable network.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    Invalid { path: PathBuf, why: String },
}

/// One network: a list of plugins run in order for ADD, reversed for DEL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkList {
    pub name: String,
    pub cni_version: String,
    /// Each an object with at least `type`.
    pub plugins: Vec<Map<String, Value>>,
    /// The file it came from, for messages.
    pub source: PathBuf,
}

impl NetworkList {
    /// The stdin of plugin `i`: its object with the list's `name` and
    /// `cniVersion`, `prevResult` when given, and `runtimeConfig` holding
    /// the capability args the plugin declares (`"capabilities":
    /// {"portMappings": true}`) and the runtime has, as libcni's
    /// `buildOneConfig`.
    pub fn plugin_stdin(
        &self,
        i: usize,
        prev_result: Option<&Value>,
        capability_args: &Map<String, Value>,
    ) -> Vec<u8> {
        let mut conf = self.plugins[i].clone();
        conf.insert("name".into(), Value::String(self.name.clone()));
        conf.insert("cniVersion".into(), Value::String(self.cni_version.clone()));
        if let Some(prev) = prev_result {
            conf.insert("prevResult".into(), prev.clone());
        }
        let mut runtime_config = Map::new();
        if let Some(Value::Object(caps)) = self.plugins[i].get("capabilities") {
            for (cap, on) in caps {
                if on.as_bool() == Some(true)
                    && let Some(arg) = capability_args.get(cap)
                {
                    runtime_config.insert(cap.clone(), arg.clone());
                }
            }
        }
        if !runtime_config.is_empty() {
            conf.insert("runtimeConfig".into(), Value::Object(runtime_config));
        }
        serde_json::to_vec(&Value::Object(conf)).unwrap_or_default()
    }

    /// The `type` of plugin `i` (checked at parse).
    pub fn plugin_type(&self, i: usize) -> &str {
        self.plugins[i]
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// Whether DEL gets the ADD result as `prevResult` (spec ≥ 0.4.0).
    pub fn del_gets_prev_result(&self) -> bool {
        !matches!(
            self.cni_version.as_str(),
            "" | "0.1.0" | "0.2.0" | "0.3.0" | "0.3.1"
        )
    }
}

/// The network of `dir`: its first config file in lexical order, as
/// containerd (go-cni) picks it; `Ok(None)` when there is none.
pub fn load_dir(dir: &Path) -> Result<Option<NetworkList>, ConfigError> {
    let files = config_files(dir).map_err(|source| ConfigError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let Some(path) = files.into_iter().next() else {
        return Ok(None);
    };
    let read = |source| ConfigError::Read {
        path: path.clone(),
        source,
    };
    let len = std::fs::metadata(&path).map_err(read)?.len();
    if len > MAX_CONFIG_BYTES {
        return Err(ConfigError::Invalid {
            path,
            why: format!("{len} bytes, more than the {MAX_CONFIG_BYTES} allowed"),
        });
    }
    let bytes = std::fs::read(&path).map_err(read)?;
    parse(&path, &bytes).map(Some)
}

/// The config files of `dir` in lexical order (none when it is missing).
pub fn config_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("conf" | "conflist" | "json")
            ) && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Parses a config file: a list (`.conflist`) or a single plugin.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<NetworkList, ConfigError> {
    let bad = |why: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        why,
    };
    let v: Value = serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let Value::Object(obj) = v else {
        return Err(bad("not a JSON object".into()));
    };
    let string = |key: &str| -> Result<String, ConfigError> {
        match obj.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::String(_)) | None => Err(bad(format!("{key}: required"))),
            Some(_) => Err(bad(format!("{key}: not a string"))),
        }
    };
    let name = string("name")?;
    let cni_version = string("cniVersion")?;
    let is_list = path.extension().and_then(|e| e.to_str()) == Some("conflist");
    let plugins = if is_list {
        let Some(Value::Array(list)) = obj.get("plugins") else {
            return Err(bad("plugins: required, a list".into()));
        };
        if list.is_empty() {
            return Err(bad("plugins: empty".into()));
        }
        list.iter()
            .enumerate()
            .map(|(i, p)| match p {
                Value::Object(o) => Ok(o.clone()),
                _ => Err(bad(format!("plugins[{i}]: not an object"))),
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        vec![obj.clone()]
    };
    for (i, p) in plugins.iter().enumerate() {
        let field = if is_list {
            format!("plugins[{i}].type")
        } else {
            "type".into()
        };
        match p.get("type") {
            Some(Value::String(t)) if valid_plugin_name(t) => {}
            Some(Value::String(t)) => {
                return Err(bad(format!("{field}: {t:?} is not a plugin file name")));
            }
            _ => return Err(bad(format!("{field}: required"))),
        }
    }
    Ok(NetworkList {
        name,
        cni_version,
        plugins,
        source: path.to_path_buf(),
    })
}

/// A plugin type names a file in a plugin folder: no path separators.
fn valid_plugin_name(t: &str) -> bool {
    !t.is_empty() && t != "." && t != ".." && !t.contains('/') && !t.contains('\0')
}

/// The pod's IPs in a plugin result, IPv4 first (the pod IP), as
/// containerd picks them: the addresses of the interface `ifname` inside
/// the sandbox, or every address when the result names no interfaces.
/// Reads spec 0.3.0 to 1.x results (`ips`) and 0.1/0.2 ones (`ip4`/`ip6`).
pub fn pod_ips(result: &Value, ifname: &str) -> Vec<IpAddr> {
    let addr = |s: &str| -> Option<IpAddr> { s.split('/').next()?.parse().ok() };
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Some(Value::Array(list)) = result.get("ips") {
        let interfaces = result.get("interfaces").and_then(Value::as_array);
        for ip in list {
            let ours = match (ip.get("interface").and_then(Value::as_u64), interfaces) {
                (Some(idx), Some(ifs)) => usize::try_from(idx)
                    .ok()
                    .and_then(|i| ifs.get(i))
                    .is_some_and(|i| {
                        i.get("name").and_then(Value::as_str) == Some(ifname)
                            && i.get("sandbox")
                                .and_then(Value::as_str)
                                .is_some_and(|s| !s.is_empty())
                    }),
                _ => true,
            };
            if ours && let Some(a) = ip.get("address").and_then(Value::as_str).and_then(addr) {
                ips.push(a);
            }
        }
    } else {
        for key in ["ip4", "ip6"] {
            if let Some(a) = result
                .get(key)
                .and_then(|v| v.get("ip"))
                .and_then(Value::as_str)
                .and_then(addr)
            {
                ips.push(a);
            }
        }
    }
    ips.sort_by_key(|ip| !ip.is_ipv4());
    ips
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conflist(text: &str) -> Result<NetworkList, ConfigError> {
        parse(Path::new("/etc/cni/net.d/10-x.conflist"), text.as_bytes())
    }

    const BRIDGE: &str = r#"{"cniVersion":"1.0.0","name":"pods","plugins":[
        {"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","subnet":"10.99.0.0/24"}},
        {"type":"portmap","capabilities":{"portMappings":true}}]}"#;

    #[test]
    fn parses_a_list() {
        let n = conflist(BRIDGE).expect("valid");
        assert_eq!(n.name, "pods");
        assert_eq!(n.plugins.len(), 2);
        assert_eq!(n.plugin_type(1), "portmap");
        assert!(n.del_gets_prev_result());
    }

    #[test]
    fn a_single_plugin_conf_is_a_list_of_one() {
        let n = parse(
            Path::new("/x/10-bridge.conf"),
            br#"{"cniVersion":"0.3.1","name":"n","type":"bridge"}"#,
        )
        .expect("valid");
        assert_eq!(n.plugins.len(), 1);
        assert_eq!(n.plugin_type(0), "bridge");
        assert!(!n.del_gets_prev_result());
    }

    #[test]
    fn bad_configs_name_file_and_field() {
        for (text, want) in [
            ("[]", "10-x.conflist: not a JSON object"),
            ("{", "10-x.conflist: not JSON"),
            (r#"{"cniVersion":"1.0.0","plugins":[]}"#, "name: required"),
            (r#"{"name":"n","plugins":[]}"#, "cniVersion: required"),
            (r#"{"name":"n","cniVersion":"1.0.0"}"#, "plugins: required"),
            (
                r#"{"name":"n","cniVersion":"1.0.0","plugins":[]}"#,
                "plugins: empty",
            ),
            (
                r#"{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"bridge"},{}]}"#,
                "plugins[1].type: required",
            ),
            (
                r#"{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"../../bin/sh"}]}"#,
                "plugins[0].type: \"../../bin/sh\" is not a plugin file name",
            ),
        ] {
            let e = conflist(text).expect_err(text).to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(e.starts_with("/etc/cni/net.d/10-x.conflist: "), "{e}");
        }
    }

    #[test]
    fn stdin_injects_name_version_prev_result_and_declared_capabilities() {
        let n = conflist(BRIDGE).expect("valid");
        let mut caps = Map::new();
        caps.insert(
            "portMappings".into(),
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        );
        caps.insert("dns".into(), json!({"servers": ["10.0.0.10"]}));
        let first: Value = serde_json::from_slice(&n.plugin_stdin(0, None, &caps)).expect("json");
        assert_eq!(first["name"], "pods");
        assert_eq!(first["cniVersion"], "1.0.0");
        assert!(first.get("prevResult").is_none());
        // bridge declares no capabilities: no runtimeConfig.
        assert!(first.get("runtimeConfig").is_none(), "{first}");
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        let second: Value =
            serde_json::from_slice(&n.plugin_stdin(1, Some(&prev), &caps)).expect("json");
        assert_eq!(second["prevResult"], prev);
        assert_eq!(
            second["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
        );
    }

    #[test]
    fn pod_ips_of_the_sandbox_interface_ipv4_first() {
        let r = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "cni0", "mac": "aa"},
                {"name": "veth1", "mac": "bb"},
                {"name": "eth0", "mac": "cc", "sandbox": "/run/netns/x"}
            ],
            "ips": [
                {"address": "fd00::5/64", "interface": 2},
                {"address": "10.99.0.5/24", "gateway": "10.99.0.1", "interface": 2},
                {"address": "10.99.0.1/24", "interface": 0}
            ]
        });
        assert_eq!(
            pod_ips(&r, "eth0"),
            vec![
                "10.99.0.5".parse::<IpAddr>().expect("ip"),
                "fd00::5".parse().expect("ip")
            ]
        );
        let old = json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.1.2.3/16"}});
        assert_eq!(
            pod_ips(&old, "eth0"),
            vec!["10.1.2.3".parse::<IpAddr>().expect("ip")]
        );
        let bare = json!({"ips": [{"address": "10.1.2.4/16"}]});
        assert_eq!(
            pod_ips(&bare, "eth0"),
            vec!["10.1.2.4".parse::<IpAddr>().expect("ip")]
        );
    }

    #[test]
    fn first_file_in_lexical_order_wins() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(load_dir(&dir.path().join("missing")).expect("ok").is_none());
        assert!(load_dir(dir.path()).expect("ok").is_none());
        std::fs::write(dir.path().join("README"), "not a config").expect("write");
        assert!(load_dir(dir.path()).expect("ok").is_none());
        std::fs::write(
            dir.path().join("20-b.conf"),
            r#"{"cniVersion":"1.0.0","name":"b","type":"bridge"}"#,
        )
        .expect("write");
        std::fs::write(dir.path().join("10-a.conflist"), BRIDGE).expect("write");
        assert_eq!(
            load_dir(dir.path()).expect("ok").expect("some").name,
            "pods"
        );
        std::fs::write(dir.path().join("05-bad.json"), "{").expect("write");
        let e = load_dir(dir.path()).expect_err("bad first file");
        assert!(e.to_string().contains("05-bad.json: not JSON"), "{e}");
    }
}
