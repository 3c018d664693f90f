//! The few rtnetlink requests the built-in network needs, synchronous, on
//! one `NETLINK_ROUTE` socket: links (bridge, veth pair), addresses, the
//! default route. The socket works in the network namespace of the thread
//! that opened it, so a plugin configures the pod's side by opening a
//! second socket on a thread that joined the pod's namespace.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload,
};
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
}

impl Netlink {
    pub fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        Ok(Self { socket, seq: 0 })
    }

    /// Sends `msg` and reads the kernel's answer: the first message that is
    /// not an ACK (for GET), `None` for a plain ACK.
    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Option<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let mut req = NetlinkMessage::from(msg);
        req.header.flags = flags;
        req.header.sequence_number = self.seq;
        req.finalize();
        let mut buf = vec![0; req.header.length as usize];
        req.serialize(&mut buf);
        self.socket.send(&buf, 0)?;
        let mut answer = vec![0u8; 64 * 1024];
        loop {
            let n = self.socket.recv(&mut &mut answer[..], 0)?;
            let mut at = 0;
            while at < n {
                let got = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&answer[at..n])
                    .map_err(|e| io::Error::other(format!("netlink answer: {e}")))?;
                let len = got.header.length as usize;
                if got.header.sequence_number == self.seq {
                    match got.payload {
                        NetlinkPayload::Error(e) => {
                            return match e.code {
                                None => Ok(None),
                                Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                            };
                        }
                        NetlinkPayload::InnerMessage(inner) => {
                            // A GET answers with the object, then (with ACK) an ACK;
                            // the object is what the caller wants.
                            return Ok(Some(inner));
                        }
                        NetlinkPayload::Done(_) => return Ok(None),
                        _ => {}
                    }
                }
                if len == 0 {
                    break;
                }
                at += len;
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
            Ok(Some(RouteNetlinkMessage::NewLink(l))) => Ok(Some(l.header.index)),
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
