//! DHCPv4 messages (RFC 2131, options RFC 2132): what the client sends, and a parser for
//! what comes back that takes any bytes without panicking (a reply is whatever the wire
//! carried). Hand-written: the Rust DHCP crates need std, and /init has none.
//!
//! The client runs over a packet socket ([`crate::net`]), so it also builds and checks the
//! IPv4 and UDP headers around the messages.

use alloc::string::String;
use alloc::vec::Vec;

use crate::netconf::Ipv4;

/// The UDP port DHCP servers listen on.
pub const SERVER_PORT: u16 = 67;
/// The UDP port DHCP clients listen on (replies are sent to it).
pub const CLIENT_PORT: u16 = 68;
const MAGIC: [u8; 4] = [99, 130, 83, 99];

/// Message type (option 53) DHCPDISCOVER: a client looking for servers.
pub const DISCOVER: u8 = 1;
/// Message type DHCPOFFER: a server offering an address.
pub const OFFER: u8 = 2;
/// Message type DHCPREQUEST: a client asking for the address offered.
pub const REQUEST: u8 = 3;
/// Message type DHCPACK: the server granting the lease.
pub const ACK: u8 = 5;
/// Message type DHCPNAK: the server refusing the request.
pub const NAK: u8 = 6;

/// The options asked for: subnet mask, router, DNS, host name, domain, root path, MTU,
/// broadcast address, lease time, server identifier.
const PARAMS: [u8; 10] = [1, 3, 6, 12, 15, 17, 26, 28, 51, 54];

/// What a client sends: DISCOVER, or REQUEST for an offered address.
pub struct Query<'a> {
    /// The message type (option 53): [`DISCOVER`] or [`REQUEST`].
    pub kind: u8,
    /// The transaction ID, chosen by the client; replies carry it back.
    pub xid: u32,
    /// The client's Ethernet address: chaddr, and the client identifier (option 61).
    pub mac: [u8; 6],
    /// Seconds since the client began the exchange.
    pub secs: u16,
    /// REQUEST: the offered address and the server that offered it.
    pub requested: Option<(Ipv4, Ipv4)>,
    /// Option 12: the client's host name (`ip=`'s); None, empty or over 255 bytes: not sent.
    pub hostname: Option<&'a str>,
}

impl Query<'_> {
    /// The message, without IP/UDP headers. It asks for broadcast replies, so the reply
    /// reaches an interface that has no address yet.
    pub fn encode(&self) -> Vec<u8> {
        let mut m = alloc::vec![0u8; 236];
        m[0] = 1; // BOOTREQUEST
        m[1] = 1; // Ethernet
        m[2] = 6;
        m[4..8].copy_from_slice(&self.xid.to_be_bytes());
        m[8..10].copy_from_slice(&self.secs.to_be_bytes());
        m[10] = 0x80; // the broadcast flag
        m[28..34].copy_from_slice(&self.mac);
        m.extend_from_slice(&MAGIC);
        m.extend_from_slice(&[53, 1, self.kind]);
        // Client identifier: the hardware type and address, as other clients send it.
        m.extend_from_slice(&[61, 7, 1]);
        m.extend_from_slice(&self.mac);
        if let Some((ip, server)) = self.requested {
            m.extend_from_slice(&[50, 4]);
            m.extend_from_slice(&ip);
            m.extend_from_slice(&[54, 4]);
            m.extend_from_slice(&server);
        }
        if let Some(h) = self.hostname.filter(|h| !h.is_empty() && h.len() < 256) {
            m.extend_from_slice(&[12, h.len() as u8]);
            m.extend_from_slice(h.as_bytes());
        }
        m.extend_from_slice(&[57, 2, 0x05, 0xdc]); // the largest message we take: 1500
        m.extend_from_slice(&[55, PARAMS.len() as u8]);
        m.extend_from_slice(&PARAMS);
        m.push(255);
        // Some servers drop messages shorter than a BOOTP message (300 bytes).
        if m.len() < 300 {
            m.resize(300, 0);
        }
        m
    }
}

/// A server's reply, as far as the boot uses it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// The message type (option 53): [`OFFER`], [`ACK`], [`NAK`], ...
    pub kind: u8,
    /// The transaction ID of the query answered.
    pub xid: u32,
    /// The client Ethernet address the reply is for.
    pub chaddr: [u8; 6],
    /// yiaddr: the address offered.
    pub address: Ipv4,
    /// siaddr: the next server (the kernel's default NFS server).
    pub next_server: Ipv4,
    /// Option 1: the subnet mask; None: not given (the client takes the address class's).
    pub mask: Option<Ipv4>,
    /// Option 3: the routers, in order of preference (the first is the default gateway); empty:
    /// none given.
    pub routers: Vec<Ipv4>,
    /// Option 6: the DNS servers, in order of preference; empty: none given.
    pub dns: Vec<Ipv4>,
    /// Option 12: the client's host name, as the server gives it.
    pub hostname: Option<String>,
    /// Option 15: the DNS domain name.
    pub domain: Option<String>,
    /// Option 17: the root path (`[SERVER:]PATH[,OPTIONS]`).
    pub root_path: Option<String>,
    /// Option 26: the interface MTU, in bytes (read, not applied).
    pub mtu: Option<u16>,
    /// Option 28: the broadcast address (read, not used: it is derived from the mask).
    pub broadcast: Option<Ipv4>,
    /// Option 51: the lease time, in seconds (for the step log).
    pub lease_secs: Option<u32>,
    /// Option 54: the server identifier (its address), sent back in the REQUEST.
    pub server_id: Option<Ipv4>,
}

/// Why a packet is not a reply to us: for the step log, never fatal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// Shorter than the fixed header and the magic cookie (240 bytes).
    Short,
    /// Not a BOOTREPLY for Ethernet (op 2, htype 1, hlen 6).
    NotReply,
    /// No DHCP magic cookie after the fixed header (a plain BOOTP message).
    NoMagic,
    /// An option's length runs past the end of its area.
    Truncated,
    /// No message type (option 53).
    NoType,
}

fn addrs(v: &[u8]) -> Vec<Ipv4> {
    v.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect()
}

fn addr(v: &[u8]) -> Option<Ipv4> {
    (v.len() == 4).then(|| [v[0], v[1], v[2], v[3]])
}

fn text(v: &[u8]) -> Option<String> {
    let v = v.split(|&b| b == 0).next().unwrap_or(&[]);
    (!v.is_empty()).then(|| String::from_utf8_lossy(v).into_owned())
}

/// Walk an options area: (code, value) pairs; pad (0) skipped, end (255) stops. A length
/// running past the area is an error, not a short read.
fn options(mut b: &[u8], out: &mut Vec<(u8, Vec<u8>)>) -> Result<(), Bad> {
    while let Some((&code, rest)) = b.split_first() {
        match code {
            0 => b = rest,
            255 => return Ok(()),
            _ => {
                let (&len, rest) = rest.split_first().ok_or(Bad::Truncated)?;
                let v = rest.get(..len as usize).ok_or(Bad::Truncated)?;
                // RFC 3396: an option given more than once is one value, concatenated.
                match out.iter_mut().find(|(c, _)| *c == code) {
                    Some((_, old)) => old.extend_from_slice(v),
                    None => out.push((code, v.to_vec())),
                }
                b = &rest[len as usize..];
            }
        }
    }
    Ok(())
}

impl Reply {
    /// Parse a DHCP message (the UDP payload).
    pub fn parse(m: &[u8]) -> Result<Reply, Bad> {
        if m.len() < 240 {
            return Err(Bad::Short);
        }
        if m[0] != 2 || m[1] != 1 || m[2] != 6 {
            return Err(Bad::NotReply);
        }
        if m[236..240] != MAGIC {
            return Err(Bad::NoMagic);
        }
        let mut opts = Vec::new();
        options(&m[240..], &mut opts)?;
        // Option 52: the file (1) and server name (2) fields carry more options.
        let overload = opts.iter().find(|(c, _)| *c == 52).and_then(|(_, v)| v.first().copied()).unwrap_or(0);
        if overload & 1 != 0 {
            options(&m[108..236], &mut opts)?;
        }
        if overload & 2 != 0 {
            options(&m[44..108], &mut opts)?;
        }
        let get = |code: u8| opts.iter().find(|(c, _)| *c == code).map(|(_, v)| v.as_slice());
        let kind = get(53).and_then(|v| v.first().copied()).ok_or(Bad::NoType)?;
        let mut chaddr = [0u8; 6];
        chaddr.copy_from_slice(&m[28..34]);
        Ok(Reply {
            kind,
            xid: u32::from_be_bytes([m[4], m[5], m[6], m[7]]),
            chaddr,
            address: [m[16], m[17], m[18], m[19]],
            next_server: [m[20], m[21], m[22], m[23]],
            mask: get(1).and_then(addr),
            routers: get(3).map(addrs).unwrap_or_default(),
            dns: get(6).map(addrs).unwrap_or_default(),
            hostname: get(12).and_then(text),
            domain: get(15).and_then(text),
            root_path: get(17).and_then(text),
            mtu: get(26).filter(|v| v.len() == 2).map(|v| u16::from_be_bytes([v[0], v[1]])),
            broadcast: get(28).and_then(addr),
            lease_secs: get(51).filter(|v| v.len() == 4).map(|v| u32::from_be_bytes([v[0], v[1], v[2], v[3]])),
            server_id: get(54).and_then(addr),
        })
    }
}

/// The Internet checksum (RFC 1071) over `parts`, as one byte string.
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    let mut odd: Option<u8> = None;
    for p in parts {
        for &b in *p {
            match odd.take() {
                Some(hi) => sum += u32::from(u16::from_be_bytes([hi, b])),
                None => odd = Some(b),
            }
        }
    }
    if let Some(hi) = odd {
        sum += u32::from(u16::from_be_bytes([hi, 0]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4/UDP datagram from `src` to `dst` carrying `payload` (for a packet socket).
pub fn udp_packet(src: (Ipv4, u16), dst: (Ipv4, u16), payload: &[u8]) -> Vec<u8> {
    let ulen = (8 + payload.len()) as u16;
    let mut udp = Vec::with_capacity(ulen as usize);
    udp.extend_from_slice(&src.1.to_be_bytes());
    udp.extend_from_slice(&dst.1.to_be_bytes());
    udp.extend_from_slice(&ulen.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&src.0);
    pseudo.extend_from_slice(&dst.0);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&ulen.to_be_bytes());
    let c = match checksum(&[&pseudo, &udp]) {
        0 => 0xffff,
        c => c,
    };
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    let total = (20 + udp.len()) as u16;
    let mut ip = alloc::vec![0x45, 0x10, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src.0);
    ip.extend_from_slice(&dst.0);
    let c = checksum(&[&ip]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&udp);
    ip
}

/// The UDP payload of an IPv4 packet sent to `port`, if that is what it is. Lengths are
/// checked against the packet, never trusted.
pub fn udp_payload(p: &[u8], port: u16) -> Option<&[u8]> {
    let (&vihl, _) = p.split_first()?;
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 || p.get(9) != Some(&17) {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([*p.get(2)?, *p.get(3)?]));
    if total < ihl {
        return None;
    }
    let p = p.get(..total)?;
    // A fragment (more fragments, or an offset) is not a whole datagram.
    if u16::from_be_bytes([p[6], p[7]]) & 0x3fff != 0 {
        return None;
    }
    let udp = p.get(ihl..)?;
    let dport = u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]);
    let ulen = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
    if dport != port || ulen < 8 {
        return None;
    }
    udp.get(8..ulen)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply as a server writes it: the query's header turned round, with options.
    fn reply(kind: u8, xid: u32, opts: &[u8]) -> Vec<u8> {
        let mut m = Query { kind: DISCOVER, xid, mac: [2, 0, 0, 0, 0, 1], secs: 0, requested: None, hostname: None }
            .encode()[..240]
            .to_vec();
        m[0] = 2;
        m[16..20].copy_from_slice(&[10, 77, 0, 50]);
        m[20..24].copy_from_slice(&[10, 77, 0, 1]);
        m.extend_from_slice(&[53, 1, kind]);
        m.extend_from_slice(opts);
        m.push(255);
        m
    }

    #[test]
    fn a_lease_is_read() {
        let opts = [
            1, 4, 255, 255, 255, 0, 3, 8, 10, 77, 0, 1, 10, 77, 0, 254, 6, 4, 10, 77, 0, 1, 17, 14, b'1', b'0', b'.',
            b'7', b'7', b'.', b'0', b'.', b'1', b':', b'/', b'r', b'/', b'x', 51, 4, 0, 0, 0x0e, 0x10, 54, 4, 10, 77,
            0, 1, 0, 0, 12, 3, b'b', b'o', b'x',
        ];
        let r = Reply::parse(&reply(ACK, 0x1234_5678, &opts)).unwrap();
        assert_eq!((r.kind, r.xid, r.chaddr), (ACK, 0x1234_5678, [2, 0, 0, 0, 0, 1]));
        assert_eq!((r.address, r.next_server), ([10, 77, 0, 50], [10, 77, 0, 1]));
        assert_eq!(r.mask, Some([255, 255, 255, 0]));
        assert_eq!(r.routers, [[10, 77, 0, 1], [10, 77, 0, 254]]);
        assert_eq!(r.root_path.as_deref(), Some("10.77.0.1:/r/x"));
        assert_eq!((r.lease_secs, r.server_id), (Some(3600), Some([10, 77, 0, 1])));
        assert_eq!(r.hostname.as_deref(), Some("box"));
    }

    #[test]
    fn overloaded_and_split_options() {
        // Option 52 = 1: more options in the file field; the root path split in two there.
        let mut m = reply(OFFER, 7, &[52, 1, 1, 17, 2, b'/', b'a']);
        m[108..114].copy_from_slice(&[17, 2, b'/', b'b', 255, 0]);
        let r = Reply::parse(&m).unwrap();
        assert_eq!(r.root_path.as_deref(), Some("/a/b"));
    }

    #[test]
    fn bad_replies_are_refused_not_panicked_on() {
        assert_eq!(Reply::parse(&[2; 100]), Err(Bad::Short));
        let good = reply(OFFER, 1, &[]);
        let mut m = good.clone();
        m[0] = 1;
        assert_eq!(Reply::parse(&m), Err(Bad::NotReply));
        let mut m = good.clone();
        m[236] = 0;
        assert_eq!(Reply::parse(&m), Err(Bad::NoMagic));
        let mut m = good[..240].to_vec();
        m.extend_from_slice(&[3, 200, 1, 2]);
        assert_eq!(Reply::parse(&m), Err(Bad::Truncated));
        assert_eq!(Reply::parse(&good[..240]), Err(Bad::NoType));
        // Every truncation and every byte flipped: no panic.
        for n in 0..good.len() {
            let _ = Reply::parse(&good[..n]);
            for bit in [0x01, 0x80, 0xff] {
                let mut m = good.clone();
                m[n] ^= bit;
                let _ = Reply::parse(&m);
            }
        }
        // Short or wrong addresses are left out, not read past.
        let r = Reply::parse(&reply(ACK, 1, &[1, 3, 255, 255, 255, 3, 5, 1, 2, 3, 4, 5, 26, 1, 9])).unwrap();
        assert_eq!((r.mask, r.routers.len(), r.mtu), (None, 1, None));
    }

    /// Random replies (xorshift, fixed seed) with a valid header, so the options parser sees
    /// every shape of garbage: nothing panics, and what parses reads back its own fields.
    #[test]
    fn random_replies_never_panic() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let base = reply(ACK, 42, &[]);
        for _ in 0..20_000 {
            let len = 240 + (next() % 300) as usize;
            let mut m: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            m[..240].copy_from_slice(&base[..240]);
            // Small option codes and lengths more often than not: deeper walks.
            for b in m[240..].iter_mut() {
                if next().is_multiple_of(3) {
                    *b %= 20;
                }
            }
            if let Ok(r) = Reply::parse(&m) {
                assert_eq!(r.xid, 42);
            }
            let p = udp_packet(([10, 0, 0, 1], 67), ([255; 4], 68), &m);
            let mut q = p.clone();
            let i = (next() as usize) % q.len();
            q[i] = next() as u8;
            let _ = udp_payload(&q, 68);
            let _ = udp_payload(&m, 68);
        }
    }

    #[test]
    fn a_query_asks_for_broadcast_replies() {
        let q = Query {
            kind: REQUEST,
            xid: 9,
            mac: [2, 0, 0, 0, 0, 1],
            secs: 3,
            requested: Some(([10, 77, 0, 50], [10, 77, 0, 1])),
            hostname: Some("box"),
        }
        .encode();
        assert!(q.len() >= 300);
        assert_eq!((q[0], q[10] & 0x80, &q[236..240]), (1, 0x80, &MAGIC[..]));
        let mut opts = Vec::new();
        options(&q[240..], &mut opts).unwrap();
        let get = |c: u8| opts.iter().find(|(k, _)| *k == c).map(|(_, v)| v.clone());
        assert_eq!(get(53), Some(vec![REQUEST]));
        assert_eq!(get(50), Some(vec![10, 77, 0, 50]));
        assert_eq!(get(54), Some(vec![10, 77, 0, 1]));
        assert_eq!(get(12), Some(b"box".to_vec()));
    }

    #[test]
    fn udp_round_trip_and_checksums() {
        let p = udp_packet(([0, 0, 0, 0], 68), ([255, 255, 255, 255], 67), b"hello");
        assert_eq!(checksum(&[&p[..20]]), 0, "the IP header sums to zero");
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[12..20]);
        pseudo.extend_from_slice(&[0, 17, 0, 13]);
        assert_eq!(checksum(&[&pseudo, &p[20..]]), 0, "the UDP checksum holds");
        assert_eq!(udp_payload(&p, 67), Some(&b"hello"[..]));
        assert_eq!(udp_payload(&p, 68), None);
        for n in 0..p.len() {
            assert_eq!(udp_payload(&p[..n], 67), None, "{n} bytes");
        }
        // A total length the header cannot hold (a frame off the wire, unchecked by the IP
        // layer: the packet socket sees it first).
        for total in 0..28u16 {
            let mut q = p.clone();
            q[2..4].copy_from_slice(&total.to_be_bytes());
            assert_eq!(udp_payload(&q, 67), None, "total length {total}");
        }
    }
}
