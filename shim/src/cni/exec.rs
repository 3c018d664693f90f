//! Runs one CNI plugin as the spec says: the binary named by `type` from
//! the first plugin folder that has it, `CNI_*` in the environment, the
//! network config on stdin, a result (or a spec error object) on stdout.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A plugin's stdout beyond this is an error (results are a few KiB).
const MAX_OUTPUT: u64 = 1 << 20;
/// What is kept of a plugin's stderr for the error message.
const MAX_STDERR: u64 = 4096;
/// A plugin that has not answered by then is killed (containerd bounds it
/// only by the CRI call's deadline; a hung plugin must not hang the pod's
/// sandbox forever).
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A plugin that failed, as containerd words it.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("plugin type={plugin:?} not found in {}", dirs_text(dirs))]
    NotFound { plugin: String, dirs: Vec<PathBuf> },
    #[error("plugin type={plugin:?} ({command}): cannot run {}: {source}", path.display())]
    Spawn {
        plugin: String,
        command: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin type={plugin:?} failed ({command}): {msg}")]
    Failed {
        plugin: String,
        command: &'static str,
        /// The spec's error code, 0 when the plugin printed no error object.
        code: u64,
        msg: String,
    },
    #[error("plugin type={plugin:?} ({command}) did not finish within {}s; killed", TIMEOUT.as_secs())]
    Timeout {
        plugin: String,
        command: &'static str,
    },
    #[error("plugin type={plugin:?} ({command}): bad output: {why}")]
    BadOutput {
        plugin: String,
        command: &'static str,
        why: String,
    },
}

fn dirs_text(dirs: &[PathBuf]) -> String {
    let v: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// The environment of one call, the same for every plugin of the list.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    /// `ADD` or `DEL`.
    pub command: &'static str,
    pub container_id: &'a str,
    pub netns: &'a Path,
    pub ifname: &'a str,
    /// `CNI_ARGS`: `K=V;K=V`.
    pub args: &'a str,
    pub bin_dirs: &'a [PathBuf],
}

/// Where a plugin runs.
enum Found {
    /// The first folder's executable named by the type.
    Exec(PathBuf),
    /// Type `picolet` that no folder has: picolet's own plugin, in this
    /// process (`builtin::call`); containerd runs it as `picolet cni`.
    Builtin,
}

fn find(plugin: &str, dirs: &[PathBuf]) -> Option<Found> {
    if let Some(p) = dirs.iter().map(|d| d.join(plugin)).find(|p| p.is_file()) {
        return Some(Found::Exec(p));
    }
    (plugin == super::builtin::TYPE).then_some(Found::Builtin)
}

/// [`run`] for the built-in plugin, on a blocking thread: the same config
/// on "stdin", the same variables, its result or error object.
async fn run_builtin(
    plugin: &str,
    call: &Call<'_>,
    stdin: &[u8],
) -> Result<Option<Value>, PluginError> {
    let command = call.command;
    let vars: Vec<(&'static str, String)> = vec![
        ("CNI_COMMAND", command.to_string()),
        ("CNI_CONTAINERID", call.container_id.to_string()),
        ("CNI_NETNS", call.netns.to_string_lossy().into_owned()),
        ("CNI_IFNAME", call.ifname.to_string()),
        ("CNI_ARGS", call.args.to_string()),
    ];
    let input = stdin.to_vec();
    let work = tokio::task::spawn_blocking(move || {
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        super::builtin::call(&input, &vars)
    });
    let out = tokio::time::timeout(TIMEOUT, work)
        .await
        .map_err(|_| PluginError::Timeout {
            plugin: plugin.into(),
            command,
        })?
        .map_err(|e| PluginError::BadOutput {
            plugin: plugin.into(),
            command,
            why: format!("the built-in plugin panicked: {e}"),
        })?;
    match out {
        Ok(v) if command == "ADD" => v.map(Some).ok_or_else(|| PluginError::BadOutput {
            plugin: plugin.into(),
            command,
            why: "no result".into(),
        }),
        Ok(_) => Ok(None),
        Err((code, msg)) => Err(PluginError::Failed {
            plugin: plugin.into(),
            command,
            code: code.into(),
            msg,
        }),
    }
}

/// Runs `plugin` with `stdin`; its result for ADD, `None` for DEL.
pub async fn run(
    plugin: &str,
    call: &Call<'_>,
    stdin: &[u8],
) -> Result<Option<Value>, PluginError> {
    let command = call.command;
    let started = std::time::Instant::now();
    let found = find(plugin, call.bin_dirs).ok_or_else(|| PluginError::NotFound {
        plugin: plugin.into(),
        dirs: call.bin_dirs.to_vec(),
    })?;
    let path = match found {
        Found::Exec(path) => path,
        Found::Builtin => {
            let out = run_builtin(plugin, call, stdin).await;
            tracing::debug!(plugin, command, container = call.container_id, elapsed = ?started.elapsed(), ok = out.is_ok(), "built-in CNI plugin ran");
            return out;
        }
    };
    let cni_path = std::env::join_paths(call.bin_dirs).unwrap_or_default();
    let mut child = tokio::process::Command::new(&path)
        .env_clear()
        // Plugins run iptables, ip and friends from PATH.
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into()),
        )
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", call.container_id)
        .env("CNI_NETNS", call.netns)
        .env("CNI_IFNAME", call.ifname)
        .env("CNI_ARGS", call.args)
        .env("CNI_PATH", cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| PluginError::Spawn {
            plugin: plugin.into(),
            command,
            path: path.clone(),
            source,
        })?;
    let (Some(mut input), Some(out), Some(err)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(PluginError::BadOutput {
            plugin: plugin.into(),
            command,
            why: "no pipes".into(),
        });
    };
    let work = async {
        // A plugin may exit before reading all of stdin: its answer counts.
        let write = async {
            let _ = input.write_all(stdin).await;
            drop(input);
        };
        let (_, (stdout, r1), (stderr, r2)) = tokio::join!(
            write,
            read_bounded(out, MAX_OUTPUT + 1),
            read_bounded(err, MAX_STDERR)
        );
        let status = child.wait().await;
        (stdout, stderr, r1.and(r2).and(status))
    };
    let (stdout, stderr, status) =
        tokio::time::timeout(TIMEOUT, work)
            .await
            .map_err(|_| PluginError::Timeout {
                plugin: plugin.into(),
                command,
            })?;
    let bad = |why: String| PluginError::BadOutput {
        plugin: plugin.into(),
        command,
        why,
    };
    let status = status.map_err(|e| bad(format!("reading it: {e}")))?;
    tracing::debug!(plugin, command, container = call.container_id, elapsed = ?started.elapsed(), %status, "CNI plugin ran");
    if stdout.len() as u64 > MAX_OUTPUT {
        return Err(bad(format!("more than {MAX_OUTPUT} bytes on stdout")));
    }
    if !status.success() {
        let (code, msg) = error_of(&stdout, &stderr, status);
        return Err(PluginError::Failed {
            plugin: plugin.into(),
            command,
            code,
            msg,
        });
    }
    if command != "ADD" {
        return Ok(None);
    }
    let v: Value =
        serde_json::from_slice(&stdout).map_err(|e| bad(format!("result is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(bad("result is not a JSON object".into()));
    }
    Ok(Some(v))
}

/// Reads `r` to its end, keeping the first `limit` bytes: a chatty plugin
/// is never left blocked on a full pipe.
async fn read_bounded(
    mut r: impl tokio::io::AsyncRead + Unpin,
    limit: u64,
) -> (Vec<u8>, std::io::Result<()>) {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) => return (kept, Ok(())),
            Ok(n) => {
                let room = limit.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
            }
            Err(e) => return (kept, Err(e)),
        }
    }
}

/// The spec's error object (`code`, `msg`, `details`), else stderr.
fn error_of(stdout: &[u8], stderr: &[u8], status: std::process::ExitStatus) -> (u64, String) {
    if let Ok(v) = serde_json::from_slice::<Value>(stdout)
        && let Some(msg) = v.get("msg").and_then(Value::as_str)
    {
        let code = v.get("code").and_then(Value::as_u64).unwrap_or(0);
        let mut text = msg.to_string();
        if let Some(d) = v.get("details").and_then(Value::as_str)
            && !d.is_empty()
        {
            text.push_str(": ");
            text.push_str(d);
        }
        return (code, text);
    }
    let err = String::from_utf8_lossy(stderr);
    let err = err.trim();
    if err.is_empty() {
        (0, format!("{status}, no error message"))
    } else {
        (0, format!("{status}: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn plugin(dir: &Path, name: &str, script: &str) {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    async fn call(
        dir: &Path,
        name: &str,
        command: &'static str,
    ) -> Result<Option<Value>, PluginError> {
        let dirs = vec![dir.join("none"), dir.to_path_buf()];
        let c = Call {
            command,
            container_id: "abc",
            netns: Path::new("/run/netns/x"),
            ifname: "eth0",
            args: "IgnoreUnknown=1;K8S_POD_NAME=p",
            bin_dirs: &dirs,
        };
        run(name, &c, br#"{"cniVersion":"1.0.0"}"#).await
    }

    #[tokio::test]
    async fn environment_stdin_and_result() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Echoes what it was given as a result.
        plugin(
            dir.path(),
            "echo",
            r#"in=$(cat); printf '{"cmd":"%s","id":"%s","ns":"%s","if":"%s","args":"%s","in":%s}' "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_NETNS" "$CNI_IFNAME" "$CNI_ARGS" "$in""#,
        );
        let v = call(dir.path(), "echo", "ADD")
            .await
            .expect("ok")
            .expect("result");
        assert_eq!(v["cmd"], "ADD");
        assert_eq!(v["id"], "abc");
        assert_eq!(v["ns"], "/run/netns/x");
        assert_eq!(v["if"], "eth0");
        assert_eq!(v["args"], "IgnoreUnknown=1;K8S_POD_NAME=p");
        assert_eq!(v["in"]["cniVersion"], "1.0.0");
        assert!(call(dir.path(), "echo", "DEL").await.expect("ok").is_none());
    }

    #[tokio::test]
    async fn errors_say_which_plugin_and_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        plugin(
            dir.path(),
            "spec-error",
            r#"echo '{"cniVersion":"1.0.0","code":11,"msg":"no IPs left","details":"range 10.0.0.0/30"}'; exit 1"#,
        );
        plugin(dir.path(), "stderr", "echo boom >&2; exit 3");
        plugin(dir.path(), "garbage", "echo not-json");
        match call(dir.path(), "spec-error", "ADD").await {
            Err(PluginError::Failed { code: 11, msg, .. }) => {
                assert_eq!(msg, "no IPs left: range 10.0.0.0/30");
            }
            other => panic!("{other:?}"),
        }
        let e = call(dir.path(), "stderr", "DEL").await.expect_err("fails");
        assert!(
            e.to_string()
                .contains("plugin type=\"stderr\" failed (DEL)"),
            "{e}"
        );
        assert!(e.to_string().contains("boom"), "{e}");
        let e = call(dir.path(), "garbage", "ADD").await.expect_err("fails");
        assert!(e.to_string().contains("result is not JSON"), "{e}");
        let e = call(dir.path(), "missing", "ADD").await.expect_err("fails");
        assert!(
            e.to_string()
                .contains("plugin type=\"missing\" not found in ["),
            "{e}"
        );
    }
}
