//! A small token server for the real registry's `auth: token` mode, as
//! Docker Hub's auth.docker.io works: `GET /token?service=..&scope=..`
//! with basic credentials, or an OAuth2 `POST /token` with a refresh token
//! (an identity token), answers a JWT (ES256, the signing certificate in
//! its `x5c` header, that certificate in the registry's `rootcertbundle`)
//! granting what the scopes ask. Anonymous requests get 401.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};

pub const ISSUER: &str = "picolet-test-issuer";
pub const SERVICE: &str = "picolet-test-registry";
pub const REFRESH_TOKEN: &str = "refresh-me";

pub struct TokenServer {
    pub realm: String,
    /// The certificate the registry trusts (`rootcertbundle`).
    pub cert: PathBuf,
    /// Tokens handed out so far.
    pub issued: Arc<AtomicUsize>,
}

impl TokenServer {
    /// Starts on 127.0.0.1 with a new key in `dir`; accepts `user:password`.
    pub fn start(dir: &Path, user: &str, password: &str) -> Self {
        let key = dir.join("token.key");
        let cert = dir.join("token.crt");
        super::peers::run(
            Command::new("openssl")
                .args([
                    "genpkey",
                    "-algorithm",
                    "EC",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-out",
                ])
                .arg(&key),
        );
        super::peers::run(
            Command::new("openssl")
                .args([
                    "req",
                    "-x509",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=picolet test token issuer",
                    "-key",
                ])
                .arg(&key)
                .arg("-out")
                .arg(&cert),
        );
        let pkcs8 = PrivatePkcs8KeyDer::from_pem_file(&key).expect("token key");
        let signer = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.secret_pkcs8_der(),
            &ring::rand::SystemRandom::new(),
        )
        .expect("ES256 key");
        let der = CertificateDer::from_pem_file(&cert).expect("token cert");
        let x5c = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let realm = format!("http://{}/token", listener.local_addr().expect("addr"));
        let issued = Arc::new(AtomicUsize::new(0));
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let state = Arc::new((signer, x5c, format!("Basic {basic}"), issued.clone()));
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let state = state.clone();
                std::thread::spawn(move || serve(conn, &state.0, &state.1, &state.2, &state.3));
            }
        });
        Self {
            realm,
            cert,
            issued,
        }
    }
}

fn serve(conn: TcpStream, signer: &EcdsaKeyPair, x5c: &str, basic: &str, issued: &AtomicUsize) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut authorization = String::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "authorization" => authorization = v.trim().to_string(),
                "content-length" => length = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    let mut body = vec![0u8; length.min(1 << 16)];
    let _ = reader.read_exact(&mut body);
    let query = match method {
        "POST" => String::from_utf8_lossy(&body).into_owned(),
        _ => target
            .split_once('?')
            .map(|(_, q)| q.to_string())
            .unwrap_or_default(),
    };
    let params: Vec<(String, String)> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect();
    let get = |k: &'static str| {
        params
            .iter()
            .filter(move |(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let allowed = match method {
        "GET" => authorization == basic,
        "POST" => {
            get("grant_type").any(|g| g == "refresh_token")
                && get("refresh_token").any(|t| t == REFRESH_TOKEN)
        }
        _ => false,
    };
    let mut out = conn;
    if !allowed {
        respond(
            &mut out,
            "401 Unauthorized",
            r#"{"details":"incorrect username or password"}"#,
        );
        return;
    }
    let access: Vec<serde_json::Value> = get("scope")
        .flat_map(|s| s.split(' '))
        .filter_map(|s| {
            let mut p = s.rsplitn(2, ':');
            let actions = p.next()?;
            let (kind, name) = p.next()?.split_once(':')?;
            Some(serde_json::json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let n = issued.fetch_add(1, Ordering::SeqCst);
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [x5c]});
    let claims = serde_json::json!({
        "iss": ISSUER, "sub": "edge", "aud": SERVICE,
        "exp": now + 300, "nbf": now - 10, "iat": now, "jti": format!("picolet-{n}"),
        "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = signer
        .sign(&ring::rand::SystemRandom::new(), signing_input.as_bytes())
        .expect("sign");
    let token = format!("{signing_input}.{}", b64(signature.as_ref()));
    let body = serde_json::json!({"token": token, "access_token": token, "expires_in": 300});
    respond(&mut out, "200 OK", &body.to_string());
}

fn respond(out: &mut TcpStream, status: &str, body: &str) {
    let _ = write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Percent-decoding of a query or form value (`+` is a space in forms).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
