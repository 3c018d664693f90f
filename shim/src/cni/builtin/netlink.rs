//! The few rtnetlink requests the built-in network needs, synchronous, on
//! one `NETLINK_ROUTE` socket: links (bridge, veth pair), addresses, the
//! default route. The socket works in the network namespace of the thread
//! that opened it, so a plugin configures the pod's side by opening a
//! second socket on a thread that joined the pod's namespace.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NetlinkMessage};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_sys::Socket;
use netlink_sys::protocols::NETLINK_ROUTE;

/// One rtnetlink socket of the calling thread's network namespace.
pub struct Netlink {
    socket: Socket,
    seq: u32,
    /// The kernel's answers land here (one allocation per socket).
    answer: Vec<u8>,
}

/// What the kernel answered a request with.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// An ACK (or the end of a dump).
    Ack,
    /// A link (`RTM_NEWLINK`): its index.
    Link(u32),
    /// Another object.
    Other,
}

const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWLINK: u16 = 16;

/// The messages of one `recv` in order: (type, sequence number, answer
/// or error). Only the fixed headers are read: a link's attributes (its
/// statistics and all) are never decoded, which netlink-packet-route did
/// for every answer, formatting a context string for each attribute: the
/// largest user-space cost of a pod's network at a cold start.
fn answers(buf: &[u8]) -> io::Result<Vec<(u32, io::Result<Answer>)>> {
    let u16_at = |b: &[u8], at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let msg = &buf[at..];
        let len = u32_at(msg, 0) as usize;
        if len < NLMSG_HDRLEN || len > msg.len() {
            return Err(io::Error::other(format!(
                "netlink answer: message of {len} bytes in {} left",
                msg.len()
            )));
        }
        let (kind, seq) = (u16_at(msg, 4), u32_at(msg, 8));
        let body = &msg[NLMSG_HDRLEN..len];
        let answer = match kind {
            NLMSG_ERROR if body.len() >= 4 => {
                match i32::from_ne_bytes([body[0], body[1], body[2], body[3]]) {
                    0 => Ok(Answer::Ack),
                    code => Err(io::Error::from_raw_os_error(code.saturating_neg())),
                }
            }
            NLMSG_DONE => Ok(Answer::Ack),
            // struct ifinfomsg: family, pad, type (u16), index (i32), ...
            RTM_NEWLINK if body.len() >= 8 => Ok(Answer::Link(u32_at(body, 4))),
            NLMSG_ERROR | RTM_NEWLINK => {
                return Err(io::Error::other("netlink answer: message too short"));
            }
            _ => Ok(Answer::Other),
        };
        out.push((seq, answer));
        // Messages are 4-byte aligned.
        at += len.next_multiple_of(4);
    }
    Ok(out)
}

impl Netlink {
    pub fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        Ok(Self {
            socket,
            seq: 0,
            answer: vec![0; 64 * 1024],
        })
    }

    /// Sends `msg` and reads the kernel's answer to it: for a GET the
    /// object (before any ACK), else the ACK or the error.
    fn request(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<Answer> {
        self.seq = self.seq.wrapping_add(1);
        let mut req = NetlinkMessage::from(msg);
        req.header.flags = flags;
        req.header.sequence_number = self.seq;
        req.finalize();
        let mut buf = vec![0; req.header.length as usize];
        req.serialize(&mut buf);
        self.socket.send(&buf, 0)?;
        loop {
            let n = self.socket.recv(&mut &mut self.answer[..], 0)?;
            for (seq, answer) in answers(&self.answer[..n])? {
                if seq == self.seq {
                    return answer;
                }
            }
        }
    }

    fn ack(&mut self, msg: RouteNetlinkMessage, create: bool) -> io::Result<()> {
        let mut flags = NLM_F_REQUEST | NLM_F_ACK;
        if create {
            flags |= NLM_F_CREATE | NLM_F_EXCL;
        }
        self.request(msg, flags).map(|_| ())
    }

    /// The index of link `name`, `None` when there is none.
    pub fn link_index(&mut self, name: &str) -> io::Result<Option<u32>> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.into()));
        // No ACK flag: the answer is the link or an error, nothing after it
        // that a later request could mistake for its own.
        match self.request(RouteNetlinkMessage::GetLink(m), NLM_F_REQUEST) {
            Ok(Answer::Link(index)) => Ok(Some(index)),
            Ok(_) => Err(io::Error::other(format!("link {name}: unexpected answer"))),
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates bridge `name` (EEXIST is the caller's to handle).
    pub fn add_bridge(&mut self, name: &str) -> io::Result<()> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.into()));
        m.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        self.ack(RouteNetlinkMessage::NewLink(m), true)
    }

    /// Creates a veth pair: `host` here, `peer` made directly inside the
    /// network namespace `peer_netns` under its final name.
    pub fn add_veth(&mut self, host: &str, peer: &str, peer_netns: BorrowedFd) -> io::Result<()> {
        let mut p = LinkMessage::default();
        p.attributes.push(LinkAttribute::IfName(peer.into()));
        p.attributes
            .push(LinkAttribute::NetNsFd(peer_netns.as_raw_fd()));
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(host.into()));
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(p))),
        ]));
        self.ack(RouteNetlinkMessage::NewLink(m), true)
    }

    pub fn set_up(&mut self, index: u32) -> io::Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.flags |= LinkFlags::Up;
        m.header.change_mask |= LinkFlags::Up;
        self.ack(RouteNetlinkMessage::SetLink(m), false)
    }

    /// Makes link `index` a port of bridge `master`.
    pub fn set_master(&mut self, index: u32, master: u32) -> io::Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes.push(LinkAttribute::Controller(master));
        self.ack(RouteNetlinkMessage::SetLink(m), false)
    }

    /// Deletes link `index` (for a veth, both ends).
    pub fn delete_link(&mut self, index: u32) -> io::Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        self.ack(RouteNetlinkMessage::DelLink(m), false)
    }

    /// Adds `ip/prefix` to link `index`; one it already has is fine.
    pub fn add_address(&mut self, index: u32, ip: Ipv4Addr, prefix: u8) -> io::Result<()> {
        let mut m = AddressMessage::default();
        m.header.family = AddressFamily::Inet;
        m.header.prefix_len = prefix;
        m.header.index = index;
        m.attributes.push(AddressAttribute::Local(IpAddr::V4(ip)));
        m.attributes.push(AddressAttribute::Address(IpAddr::V4(ip)));
        let host_bits = 32 - u32::from(prefix);
        let mask = if host_bits >= 32 {
            u32::MAX
        } else {
            (1u32 << host_bits) - 1
        };
        m.attributes
            .push(AddressAttribute::Broadcast(Ipv4Addr::from(
                u32::from(ip) | mask,
            )));
        match self.ack(RouteNetlinkMessage::NewAddress(m), true) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            r => r,
        }
    }

    /// Adds the IPv4 default route through `gateway`.
    pub fn add_default_route(&mut self, gateway: Ipv4Addr) -> io::Result<()> {
        let mut m = RouteMessage::default();
        m.header.address_family = AddressFamily::Inet;
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.header.protocol = RouteProtocol::Boot;
        m.header.scope = RouteScope::Universe;
        m.header.kind = RouteType::Unicast;
        m.attributes
            .push(RouteAttribute::Gateway(RouteAddress::Inet(gateway)));
        self.ack(RouteNetlinkMessage::NewRoute(m), true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let len = u32::try_from(NLMSG_HDRLEN + body.len()).expect("small");
        let mut m = Vec::new();
        m.extend(len.to_ne_bytes());
        m.extend(kind.to_ne_bytes());
        m.extend(0u16.to_ne_bytes());
        m.extend(seq.to_ne_bytes());
        m.extend(0u32.to_ne_bytes());
        m.extend(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    #[test]
    fn acks_errors_and_links_are_read_from_the_headers() {
        let mut buf = msg(NLMSG_ERROR, 1, &0i32.to_ne_bytes());
        buf.extend(msg(NLMSG_ERROR, 2, &(-libc::EEXIST).to_ne_bytes()));
        // ifinfomsg: family, pad, type, index 7, flags, change; then an
        // attribute of 5 bytes (padded to 8 in the buffer).
        let mut link = vec![0u8, 0, 1, 0];
        link.extend(7u32.to_ne_bytes());
        link.extend([0u8; 8]);
        link.extend([5u8, 0, 3, 0, b'x']);
        buf.extend(msg(RTM_NEWLINK, 3, &link));
        buf.extend(msg(NLMSG_DONE, 4, &[]));
        buf.extend(msg(20, 5, &[0; 12]));
        let got = answers(&buf).expect("parse");
        assert_eq!(got.len(), 5);
        assert!(matches!(got[0], (1, Ok(Answer::Ack))));
        assert_eq!(
            got[1].1.as_ref().map_err(io::Error::raw_os_error).err(),
            Some(Some(libc::EEXIST))
        );
        assert!(matches!(got[2], (3, Ok(Answer::Link(7)))));
        assert!(matches!(got[3], (4, Ok(Answer::Ack))));
        assert!(matches!(got[4], (5, Ok(Answer::Other))));
    }

    #[test]
    fn a_length_past_the_buffer_or_a_short_link_is_an_error() {
        let mut buf = msg(NLMSG_ERROR, 1, &0i32.to_ne_bytes());
        buf[0] = 200;
        assert!(answers(&buf).is_err());
        assert!(answers(&msg(RTM_NEWLINK, 1, &[0; 4])).is_err());
        assert!(answers(&[1, 2, 3]).expect("nothing whole").is_empty());
    }
}
