//! Resolving `user[:group]` against an image's /etc/passwd and /etc/group, as
//! runc's user package does. Pure.

/// A resolved process identity.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
}

struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
}

fn passwd_entries(passwd: &str) -> impl Iterator<Item = PasswdEntry<'_>> {
    passwd.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        Some(PasswdEntry {
            name: f.first()?,
            uid: f.get(2)?.parse().ok()?,
            gid: f.get(3)?.parse().ok()?,
        })
    })
}

/// (name, gid, members) of each /etc/group line.
fn group_entries(group: &str) -> impl Iterator<Item = (&str, u32, Vec<&str>)> {
    group.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        let members = f
            .get(3)
            .map(|m| m.split(',').filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        Some((*f.first()?, f.get(2)?.parse().ok()?, members))
    })
}

/// A user or group name the image does not define.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("user {0:?} not found in the image's /etc/passwd")]
    User(String),
    #[error("group {0:?} not found in the image's /etc/group")]
    Group(String),
}

/// Resolves `spec` (`""`, `name`, `uid`, `uid:gid`, `name:group`, ...).
/// Empty means root. A numeric uid not in /etc/passwd is fine (gid 0); an
/// unknown name is an error.
pub fn lookup(spec: &str, passwd: &str, group: &str) -> Result<User, LookupError> {
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let mut user = User::default();
    let mut name = None;
    if !u.is_empty() {
        if let Ok(uid) = u.parse::<u32>() {
            user.uid = uid;
            if let Some(e) = passwd_entries(passwd).find(|e| e.uid == uid) {
                user.gid = e.gid;
                name = Some(e.name.to_string());
            }
        } else {
            let e = passwd_entries(passwd)
                .find(|e| e.name == u)
                .ok_or_else(|| LookupError::User(u.to_string()))?;
            user.uid = e.uid;
            user.gid = e.gid;
            name = Some(u.to_string());
        }
    }
    if let Some(g) = g.filter(|g| !g.is_empty()) {
        user.gid = match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => group_entries(group)
                .find(|(n, _, _)| *n == g)
                .map(|(_, gid, _)| gid)
                .ok_or_else(|| LookupError::Group(g.to_string()))?,
        };
    }
    if let Some(name) = name {
        user.additional_gids = group_entries(group)
            .filter(|(_, gid, members)| members.contains(&name.as_str()) && *gid != user.gid)
            .map(|(_, gid, _)| gid)
            .collect();
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home:/bin/sh\nweb:x:33:33::/:/bin/false\n";
    const GROUP: &str =
        "root:x:0:\nuser:x:1000:\nwww:x:33:\naudio:x:29:user,web\nvideo:x:44:user\n";

    #[test]
    fn resolves_like_runc() {
        let cases: [(&str, Result<User, ()>); 8] = [
            (
                "",
                Ok(User {
                    uid: 0,
                    gid: 0,
                    additional_gids: vec![],
                }),
            ),
            (
                "user",
                Ok(User {
                    uid: 1000,
                    gid: 1000,
                    additional_gids: vec![29, 44],
                }),
            ),
            (
                "1000",
                Ok(User {
                    uid: 1000,
                    gid: 1000,
                    additional_gids: vec![29, 44],
                }),
            ),
            (
                "web:www",
                Ok(User {
                    uid: 33,
                    gid: 33,
                    additional_gids: vec![29],
                }),
            ),
            (
                "4242",
                Ok(User {
                    uid: 4242,
                    gid: 0,
                    additional_gids: vec![],
                }),
            ),
            (
                "4242:77",
                Ok(User {
                    uid: 4242,
                    gid: 77,
                    additional_gids: vec![],
                }),
            ),
            ("nobody", Err(())),
            ("user:nogroup", Err(())),
        ];
        for (spec, want) in cases {
            assert_eq!(
                lookup(spec, PASSWD, GROUP).map_err(|_| ()),
                want,
                "{spec:?}"
            );
        }
    }
}
