//! The distribution auth flow: a 401 carries a `WWW-Authenticate` challenge;
//! `Basic` wants the credentials on every request, `Bearer` a token from the
//! challenge's realm for the challenge's service and scope (anonymous, with
//! basic credentials, or an OAuth2 refresh token), cached per realm, service
//! and scope until it expires. Parsing is pure; fetching is in `client`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A parsed `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// Parses `Bearer realm="https://auth/token",service="reg",scope="repository:x:pull"`
/// or `Basic realm="..."`; `None` for anything else.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let params = parse_params(rest)?;
    Some(Challenge::Bearer {
        realm: params.get("realm")?.clone(),
        service: params.get("service").cloned(),
        scope: params.get("scope").cloned(),
    })
}

/// `k="v", k2=v2` (quoted strings with `\` escapes); keys lowercased.
fn parse_params(s: &str) -> Option<HashMap<String, String>> {
    let mut out = HashMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() {
            return Some(out);
        }
        chars.next()?; // '='
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        out.insert(key.trim().to_ascii_lowercase(), value);
    }
}

/// Why a token endpoint's answer was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("token answer: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("token answer has no token")]
    NoToken,
}

/// A token endpoint's answer: `token` or `access_token`, lifetime in
/// seconds (60 when absent, as the spec says).
pub fn parse_token(body: &[u8]) -> Result<(String, Duration), TokenError> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(TokenError::NotJson)?;
    let token = v["token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .or_else(|| v["access_token"].as_str())
        .filter(|t| !t.is_empty())
        .ok_or(TokenError::NoToken)?;
    let secs = v["expires_in"].as_u64().unwrap_or(60).max(60);
    Ok((token.to_string(), Duration::from_secs(secs)))
}

/// Tokens by (realm, service, scope, who asked).
#[derive(Debug, Default)]
pub struct TokenCache {
    tokens: Mutex<HashMap<String, (String, Instant)>>,
}

/// Entries kept at most (a device pulls from a handful of registries).
const MAX_TOKENS: usize = 256;

impl TokenCache {
    pub fn get(&self, key: &str) -> Option<String> {
        let tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        tokens
            .get(key)
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(t, _)| t.clone())
    }

    /// Keeps `token` until 30 s before it expires.
    pub fn put(&self, key: String, token: String, life: Duration) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        tokens.retain(|_, (_, until)| now < *until);
        if tokens.len() >= MAX_TOKENS {
            tokens.clear();
        }
        let until = now + life.saturating_sub(Duration::from_secs(30));
        tokens.insert(key, (token, until));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_as_registries_send_them() {
        // docker.io's, verbatim.
        let hub = r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull""#;
        assert_eq!(
            parse_challenge(hub),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/busybox:pull".into()),
            })
        );
        // distribution with htpasswd.
        assert_eq!(
            parse_challenge(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        // Unquoted values, odd spacing, escapes, no scope.
        assert_eq!(
            parse_challenge(r#"bearer  realm=https://t/x , service="a\"b""#),
            Some(Challenge::Bearer {
                realm: "https://t/x".into(),
                service: Some("a\"b".into()),
                scope: None,
            })
        );
        assert_eq!(parse_challenge("Negotiate abc"), None);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None);
        assert_eq!(parse_challenge(r#"Bearer realm="unterminated"#), None);
    }

    #[test]
    fn token_answers() {
        assert_eq!(
            parse_token(br#"{"token":"abc","expires_in":300}"#).expect("token"),
            ("abc".into(), Duration::from_secs(300))
        );
        assert_eq!(
            parse_token(br#"{"access_token":"xyz"}"#).expect("access_token"),
            ("xyz".into(), Duration::from_secs(60))
        );
        assert!(matches!(
            parse_token(br#"{"token":""}"#),
            Err(TokenError::NoToken)
        ));
        let e = parse_token(b"<html>").expect_err("not JSON");
        assert!(matches!(e, TokenError::NotJson(_)), "{e}");
        assert!(e.to_string().starts_with("token answer: "), "{e}");
    }

    #[test]
    fn cached_tokens_expire_early() {
        let c = TokenCache::default();
        c.put("k".into(), "t".into(), Duration::from_secs(300));
        assert_eq!(c.get("k").as_deref(), Some("t"));
        // A 60 s token is kept 30 s; one shorter than 30 s not at all.
        c.put("short".into(), "t".into(), Duration::from_secs(20));
        assert_eq!(c.get("short"), None);
    }
}
