//! A pod's user namespace (CRI `userns_options`, kubelet's `hostUsers:
//! false`): which IDs it maps, checked as containerd checks them. Pure.
//!
//! Mode POD: one namespace for the whole pod, with exactly one range of
//! user IDs and one of group IDs, each starting at 0 inside. NODE: the
//! host's, with no ranges. CONTAINER and TARGET are not modes a user
//! namespace has (CRI says so).

use cri_proto::v1::{IdMapping, NamespaceMode, NamespaceOption};

use crate::error::Error;

const FIELD: &str = "linux.security_context.namespace_options.userns_options";

/// One range of IDs: `container..container+len` inside is
/// `host..host+len` outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMap {
    pub container: u32,
    pub host: u32,
    pub len: u32,
}

impl IdMap {
    /// The line `/proc/<pid>/uid_map` and `gid_map` take.
    pub fn line(&self) -> String {
        format!("{} {} {}\n", self.container, self.host, self.len)
    }
}

/// The ranges of a pod's own user namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodUserns {
    pub uids: IdMap,
    pub gids: IdMap,
}

fn invalid(field: &str, what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{FIELD}.{field}: {what}"))
}

fn one_range(field: &str, maps: &[IdMapping]) -> Result<IdMap, Error> {
    let [m] = maps else {
        return Err(invalid(
            field,
            format!("{} ranges; a pod's user namespace takes one", maps.len()),
        ));
    };
    if m.container_id != 0 {
        return Err(invalid(
            field,
            format!(
                "the range starts at {} inside; it must start at 0",
                m.container_id
            ),
        ));
    }
    if m.length == 0 {
        return Err(invalid(field, "an empty range"));
    }
    if m.host_id.checked_add(m.length - 1).is_none() {
        return Err(invalid(
            field,
            format!("{}+{} is past the last ID", m.host_id, m.length),
        ));
    }
    // Host root inside a pod would be no boundary at all.
    if m.host_id == 0 {
        return Err(invalid(field, "the range maps the host's ID 0"));
    }
    Ok(IdMap {
        container: m.container_id,
        host: m.host_id,
        len: m.length,
    })
}

/// The pod's user namespace, if it asks for one of its own; an error
/// naming the field for what no runtime can make.
pub fn of_pod(ns: &NamespaceOption) -> Result<Option<PodUserns>, Error> {
    let Some(u) = &ns.userns_options else {
        return Ok(None);
    };
    match NamespaceMode::try_from(u.mode) {
        Ok(NamespaceMode::Node) => {
            if !u.uids.is_empty() || !u.gids.is_empty() {
                return Err(invalid("uids", "mode NODE takes no ranges"));
            }
            Ok(None)
        }
        Ok(NamespaceMode::Pod) => {
            let userns = PodUserns {
                uids: one_range("uids", &u.uids)?,
                gids: one_range("gids", &u.gids)?,
            };
            // kubelet refuses these with hostUsers: false; the host's
            // network, PID or IPC namespace belongs to the host's user
            // namespace, where the pod's root has no say.
            for (name, mode) in [("network", ns.network), ("pid", ns.pid), ("ipc", ns.ipc)] {
                if mode == NamespaceMode::Node as i32 {
                    return Err(Error::InvalidArgument(format!(
                        "linux.security_context.namespace_options.{name}: NODE \
                         with a user namespace of the pod's own"
                    )));
                }
            }
            Ok(Some(userns))
        }
        _ => Err(invalid("mode", format!("{} is not POD or NODE", u.mode))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_proto::v1::UserNamespace;

    fn range(container_id: u32, host_id: u32, length: u32) -> IdMapping {
        IdMapping {
            container_id,
            host_id,
            length,
        }
    }

    fn pod(mode: NamespaceMode, uids: Vec<IdMapping>, gids: Vec<IdMapping>) -> NamespaceOption {
        NamespaceOption {
            userns_options: Some(UserNamespace {
                mode: mode as i32,
                uids,
                gids,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_mode_takes_one_range_from_zero_each() {
        let one = || vec![range(0, 1000, 100_000)];
        let got = of_pod(&pod(NamespaceMode::Pod, one(), one()))
            .expect("valid")
            .expect("a namespace");
        assert_eq!(got.uids.line(), "0 1000 100000\n");
        assert_eq!(got.gids.host, 1000);
        assert_eq!(of_pod(&NamespaceOption::default()).expect("none"), None);
        assert_eq!(
            of_pod(&pod(NamespaceMode::Node, vec![], vec![])).expect("host"),
            None
        );
    }

    /// critest 1.36's "should fail" specs, and what kubelet never sends.
    #[test]
    fn what_no_pod_namespace_can_be_is_refused_by_field() {
        let one = || vec![range(0, 1000, 65536)];
        let cases = [
            (
                pod(
                    NamespaceMode::Pod,
                    vec![range(0, 1000, 10), range(10, 2000, 10)],
                    one(),
                ),
                "userns_options.uids: 2 ranges",
            ),
            (
                pod(NamespaceMode::Pod, vec![range(1, 1000, 10)], one()),
                "userns_options.uids: the range starts at 1",
            ),
            (
                pod(NamespaceMode::Pod, one(), vec![range(0, 0, 65536)]),
                "userns_options.gids: the range maps the host's ID 0",
            ),
            (
                pod(NamespaceMode::Pod, one(), vec![range(0, u32::MAX, 2)]),
                "userns_options.gids: 4294967295+2",
            ),
            (
                pod(NamespaceMode::Container, one(), one()),
                "userns_options.mode: 1 is not POD or NODE",
            ),
            (
                pod(NamespaceMode::Target, one(), one()),
                "userns_options.mode: 3",
            ),
            (
                pod(NamespaceMode::Node, one(), one()),
                "mode NODE takes no ranges",
            ),
            (
                NamespaceOption {
                    network: NamespaceMode::Node as i32,
                    ..pod(NamespaceMode::Pod, one(), one())
                },
                "namespace_options.network: NODE",
            ),
        ];
        for (ns, want) in cases {
            let e = of_pod(&ns).expect_err(want).to_string();
            assert!(e.contains(want), "{e}\nwant: {want}");
        }
    }
}
