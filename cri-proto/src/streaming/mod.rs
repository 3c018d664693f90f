//! CRI streaming (Exec, Attach, PortForward) on the wire, for both ends:
//! the shim's streaming server and `picolet ctl`'s client.
//!
//! A CRI `Exec` answers with a URL; the client upgrades an HTTP/1.1 request
//! to that URL to SPDY/3.1 ([`spdy`], [`session`]) and opens one stream per
//! channel, naming it with the `streamType` header. Which streams and what
//! the error stream carries is the negotiated subprotocol:
//! `v4.channel.k8s.io` (exit codes as a `metav1.Status` JSON), down to
//! `channel.k8s.io`; port forwarding is `portforward.k8s.io`, a data and an
//! error stream per connection, paired by `requestID`. Exec and attach also
//! run over WebSocket ([`ws`], `v5.channel.k8s.io`). These are kubelet's
//! protocols (`k8s.io/apimachinery/pkg/util/remotecommand`,
//! `k8s.io/kubelet/pkg/cri/streaming`), as crictl, kubectl and the API
//! server speak them.

pub mod client;
pub mod session;
pub mod spdy;
pub mod ws;

/// Request/response header that carries the subprotocol.
pub const PROTOCOL_HEADER: &str = "X-Stream-Protocol-Version";
/// Stream header naming the channel.
pub const STREAM_TYPE: &str = "streamType";
/// Port-forward stream headers.
pub const PORT_HEADER: &str = "port";
pub const REQUEST_ID_HEADER: &str = "requestID";

pub const STREAM_ERROR: &str = "error";
pub const STREAM_STDIN: &str = "stdin";
pub const STREAM_STDOUT: &str = "stdout";
pub const STREAM_STDERR: &str = "stderr";
pub const STREAM_RESIZE: &str = "resize";
pub const STREAM_DATA: &str = "data";

/// remotecommand subprotocols, newest first (the server's preference list).
pub const REMOTECOMMAND_V4: &str = "v4.channel.k8s.io";
pub const REMOTECOMMAND_V3: &str = "v3.channel.k8s.io";
pub const REMOTECOMMAND_V2: &str = "v2.channel.k8s.io";
pub const REMOTECOMMAND_V1: &str = "channel.k8s.io";
pub const REMOTECOMMAND_PROTOCOLS: &[&str] = &[
    REMOTECOMMAND_V4,
    REMOTECOMMAND_V3,
    REMOTECOMMAND_V2,
    REMOTECOMMAND_V1,
];
pub const PORTFORWARD_V1: &str = "portforward.k8s.io";

/// The subprotocol both sides speak: the first of the client's (each
/// header value may list several, comma-separated) that the server has, as
/// apimachinery's `httpstream.Handshake`.
pub fn negotiate<'a>(client: &[&str], server: &[&'a str]) -> Option<&'a str> {
    client
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .find_map(|c| server.iter().find(|s| **s == c).copied())
}

/// v4 and v5 (WebSocket) report a `metav1.Status`; earlier ones text.
fn status_is_json(protocol: &str) -> bool {
    protocol == REMOTECOMMAND_V4 || protocol == ws::REMOTECOMMAND_V5
}

/// How a remote command ended, as the error stream reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exited with this code (0 is success).
    Exited(i32),
    /// Could not run, or the runtime failed: the message.
    Failed(String),
}

/// The error stream's final message for `outcome` under `protocol`:
/// `metav1.Status` JSON for v4, plain text before (nothing on success).
pub fn status_message(protocol: &str, outcome: &Outcome) -> Vec<u8> {
    if !status_is_json(protocol) {
        return match outcome {
            Outcome::Exited(0) => Vec::new(),
            Outcome::Exited(code) => {
                format!("command terminated with non-zero exit code: {code}").into_bytes()
            }
            Outcome::Failed(msg) => msg.clone().into_bytes(),
        };
    }
    let v = match outcome {
        Outcome::Exited(0) => serde_json::json!({"metadata": {}, "status": "Success"}),
        Outcome::Exited(code) => serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Outcome::Failed(msg) => serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": msg,
            "reason": "InternalError",
            "code": 500,
        }),
    };
    v.to_string().into_bytes()
}

/// What a client makes of the error stream (v4 JSON, or v1–v3 text).
pub fn parse_status(protocol: &str, message: &[u8]) -> Outcome {
    if !status_is_json(protocol) {
        return if message.is_empty() {
            Outcome::Exited(0)
        } else {
            Outcome::Failed(String::from_utf8_lossy(message).into_owned())
        };
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(message) else {
        return Outcome::Failed(format!(
            "error stream: not a status: {}",
            String::from_utf8_lossy(message)
        ));
    };
    if v["status"] == "Success" {
        return Outcome::Exited(0);
    }
    if v["reason"] == "NonZeroExitCode" {
        let code = v["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["reason"] == "ExitCode")
            .and_then(|c| c["message"].as_str())
            .and_then(|m| m.parse().ok());
        if let Some(code) = code {
            return Outcome::Exited(code);
        }
    }
    Outcome::Failed(v["message"].as_str().unwrap_or("unknown error").to_string())
}

/// A terminal size from the resize stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermSize {
    pub width: u16,
    pub height: u16,
}

impl TermSize {
    /// The resize stream's JSON (`{"Width":80,"Height":24}`).
    pub fn to_json(self) -> Vec<u8> {
        format!("{{\"Width\":{},\"Height\":{}}}\n", self.width, self.height).into_bytes()
    }
}

/// Reads the resize stream: JSON objects one after another, as Go's
/// json.Encoder writes them; a cut object waits for the rest, and at most
/// 4 KiB waits (what is not sizes is dropped rather than kept).
#[derive(Debug, Default)]
pub struct Resizes {
    buf: Vec<u8>,
}

impl Resizes {
    /// The sizes completed by `chunk`.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<TermSize> {
        self.buf.extend_from_slice(chunk);
        let mut sizes = Vec::new();
        let mut it =
            serde_json::Deserializer::from_slice(&self.buf).into_iter::<serde_json::Value>();
        let mut used = 0;
        while let Some(Ok(v)) = it.next() {
            used = it.byte_offset();
            let dim = |k: &str| v[k].as_u64().and_then(|n| u16::try_from(n).ok());
            if let (Some(width), Some(height)) = (dim("Width"), dim("Height")) {
                sizes.push(TermSize { width, height });
            }
        }
        self.buf.drain(..used);
        if self.buf.len() > 4096 {
            self.buf.clear();
        }
        sizes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_takes_the_clients_first_known_protocol() {
        assert_eq!(
            negotiate(
                &["v4.channel.k8s.io", "v3.channel.k8s.io"],
                REMOTECOMMAND_PROTOCOLS
            ),
            Some(REMOTECOMMAND_V4)
        );
        assert_eq!(
            negotiate(
                &["v5.channel.k8s.io, v2.channel.k8s.io"],
                REMOTECOMMAND_PROTOCOLS
            ),
            Some(REMOTECOMMAND_V2)
        );
        assert_eq!(negotiate(&["v9"], REMOTECOMMAND_PROTOCOLS), None);
    }

    #[test]
    fn v4_status_round_trips_and_is_what_client_go_decodes() {
        for o in [
            Outcome::Exited(0),
            Outcome::Exited(3),
            Outcome::Failed("no such container".into()),
        ] {
            let m = status_message(REMOTECOMMAND_V4, &o);
            assert_eq!(parse_status(REMOTECOMMAND_V4, &m), o);
        }
        let m =
            String::from_utf8(status_message(REMOTECOMMAND_V4, &Outcome::Exited(7))).expect("utf8");
        // client-go's errorDecoderV4 reads causes[].reason == "ExitCode".
        assert!(
            m.contains(r#""causes":[{"message":"7","reason":"ExitCode"}]"#),
            "{m}"
        );
        assert!(m.contains(r#""reason":"NonZeroExitCode""#), "{m}");
        assert!(status_message(REMOTECOMMAND_V2, &Outcome::Exited(0)).is_empty());
    }

    #[test]
    fn resizes_are_split_and_a_cut_object_waits() {
        let mut r = Resizes::default();
        let s = r.push(b"{\"Width\":80,\"Height\":24}\n{\"Width\":100,\"Height\":40}\n{\"Wid");
        assert_eq!(
            s,
            vec![
                TermSize {
                    width: 80,
                    height: 24
                },
                TermSize {
                    width: 100,
                    height: 40
                }
            ]
        );
        // The cut object completes with the next chunk.
        assert_eq!(
            r.push(b"th\":1,\"Height\":2}"),
            vec![TermSize {
                width: 1,
                height: 2
            }]
        );
        // Garbage is dropped past 4 KiB, not kept.
        assert!(r.push(&[b'{'; 5000]).is_empty());
        assert!(r.buf.is_empty());
    }
}
