//! The network, brought up only when the root (or `rd.neednet=1`) needs it: interfaces from
//! sysfs, links up and addresses and routes over rtnetlink, DHCP over a packet socket, a DNS
//! lookup for a server given by name, and the hand-over to the root (`/run/net-IFACE.conf`,
//! the klibc ipconfig file initramfs-tools writes and Debian's tools read).
//!
//! Hand-written: rtnetlink and DHCP crates need std; /init has none. The messages are a few
//! fixed structs (linux/netlink.h, linux/rtnetlink.h, linux/if_addr.h, linux/if_packet.h).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use rustix::fd::{AsFd, OwnedFd};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use crate::devices::Dev;
use crate::dhcp::{self, Query, Reply};
use crate::log::Log;
use crate::netconf::{self, IpParam, Ipv4, Method, Static, show, show_mac};
use crate::sys::{self, Errno, strerror};
use crate::wait::Waiter;
use leanrd_contract::DeviceRef;

/// A network interface, from /sys/class/net.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// Its name (eth0, enp1s0).
    pub name: String,
    /// Its interface index (sysfs `ifindex`), as rtnetlink and packet sockets name it.
    pub index: u32,
    /// Its MAC (sysfs `address`).
    pub mac: [u8; 6],
}

fn mac_of(s: &str) -> Option<[u8; 6]> {
    netconf::bootif(s.trim())
}

/// Ethernet-like interfaces (ARPHRD_ETHER), loopback and virtual ones left out.
pub fn interfaces() -> Vec<Iface> {
    let mut out = Vec::new();
    for (name, _) in sys::list_dir("/sys/class/net").unwrap_or_default() {
        let attr = |a: &str| sys::read_string(&format!("/sys/class/net/{name}/{a}")).unwrap_or_default();
        if attr("type").trim() != "1" || name == "lo" || sys::exists(&format!("/sys/class/net/{name}/bridge")) {
            continue;
        }
        let (Ok(index), Some(mac)) = (attr("ifindex").trim().parse(), mac_of(&attr("address"))) else { continue };
        out.push(Iface { name, index, mac });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What the command line asks of the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    /// `ip=` values, in command-line order; empty: DHCP.
    pub ip: Vec<IpParam>,
    /// `BOOTIF=`: the MAC of the only interface to use; None: any.
    pub bootif: Option<[u8; 6]>,
    /// `ifname=NAME:MAC`.
    pub names: Vec<(String, [u8; 6])>,
}

impl Wanted {
    /// The interfaces to configure among those present, and how: those `ip=` names (none
    /// if the one named is not here: another interface is not a stand-in), else the one
    /// `BOOTIF=` names, else every interface (the first to get a lease is used).
    pub fn pick(&self, ifaces: &[Iface]) -> Vec<(Iface, Method)> {
        if self.ip.iter().any(|p| p.device.is_some()) {
            return self
                .ip
                .iter()
                .filter_map(|p| {
                    let d = p.device.as_deref()?;
                    ifaces.iter().find(|i| i.name == d).map(|i| (i.clone(), p.method.clone()))
                })
                .collect();
        }
        // Several without a device: the last wins, as for the kernel.
        let general = self.ip.last().map(|p| p.method.clone()).unwrap_or(Method::Dhcp);
        ifaces.iter().filter(|i| self.bootif.is_none_or(|m| i.mac == m)).map(|i| (i.clone(), general.clone())).collect()
    }

    /// `ifname=NAME:MAC`: give the interfaces their names before anything looks for them
    /// (there is no udev in the initramfs to name them). Interfaces not here yet are named
    /// when they are.
    /// Returns what was done, for the step log.
    pub fn rename(&self) -> Vec<String> {
        let mut done = Vec::new();
        if self.names.is_empty() {
            return done;
        }
        let Ok(mut rt) = Rtnl::open() else { return done };
        for i in interfaces() {
            let Some((name, _)) = self.names.iter().find(|(n, m)| *m == i.mac && *n != i.name) else { continue };
            done.push(match rt.rename(i.index, name) {
                Ok(()) => format!("net: {} ({}) named {name}", i.name, show_mac(&i.mac)),
                Err(e) => format!("net: {} cannot be named {name}: {}", i.name, strerror(e)),
            });
        }
        done
    }

    /// For messages: what the boot waits for.
    pub fn describe(&self) -> String {
        let mut s = String::from("a network interface");
        if let Some(d) = self.ip.iter().find_map(|p| p.device.as_deref()) {
            s = format!("network interface {d}");
        }
        if let Some(m) = &self.bootif {
            s += &format!(" with BOOTIF={}", show_mac(m));
        }
        s
    }
}

/// The configuration an interface got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Configured {
    /// The interface's name.
    pub iface: String,
    /// Its interface index.
    pub index: u32,
    /// Its MAC.
    pub mac: [u8; 6],
    /// How it was configured, as ipconfig's `PROTO` says: `dhcp`, or `none` (a static address,
    /// or no IPv4 configuration at all).
    pub proto: &'static str,
    /// Its IPv4 address; 0.0.0.0 when it got none (`ip=off`, `ip=dhcp6`).
    pub address: Ipv4,
    /// The subnet's prefix length (24 for 255.255.255.0); 0 with no address.
    pub prefix: u8,
    /// The default route's gateway; None: no default route was set.
    pub gateway: Option<Ipv4>,
    /// The DNS servers, DHCP's or `ip=`'s, in order of preference.
    pub dns: Vec<Ipv4>,
    /// The server DHCP or `ip=` named (siaddr, or the server identifier).
    pub server: Option<Ipv4>,
    /// DHCP's root path (option 17, `[SERVER:]PATH[,OPTIONS]`); None: not given, or not DHCP.
    pub root_path: Option<String>,
    /// The host name: DHCP's, else `ip=`'s; None: neither gave one.
    pub hostname: Option<String>,
    /// DHCP's DNS domain (option 15); None: not given, or not DHCP.
    pub domain: Option<String>,
}

impl Configured {
    fn summary(&self) -> String {
        let mut s = format!("{}: {} {}/{}", self.iface, self.proto, show(self.address), self.prefix);
        if let Some(g) = self.gateway {
            s += &format!(" gateway {}", show(g));
        }
        if !self.dns.is_empty() {
            s += &format!(" dns {}", self.dns.iter().map(|d| show(*d)).collect::<Vec<_>>().join(","));
        }
        if let Some(sv) = self.server {
            s += &format!(" server {}", show(sv));
        }
        if let Some(r) = &self.root_path {
            s += &format!(" root-path {r}");
        }
        s
    }

    /// initramfs-tools' (klibc ipconfig's) `/run/net-IFACE.conf`.
    pub fn handover_text(&self) -> String {
        let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0).to_be_bytes();
        let mut s = format!(
            "DEVICE='{}'\nPROTO='{}'\nIPV4ADDR='{}'\nIPV4BROADCAST='{}'\nIPV4NETMASK='{}'\nIPV4GATEWAY='{}'\n",
            self.iface,
            self.proto,
            show(self.address),
            show((u32::from_be_bytes(self.address) | !u32::from_be_bytes(mask)).to_be_bytes()),
            show(mask),
            self.gateway.map(show).unwrap_or_else(|| "0.0.0.0".into()),
        );
        for (i, d) in self.dns.iter().take(2).enumerate() {
            s += &format!("IPV4DNS{i}='{}'\n", show(*d));
        }
        let q = |v: &Option<String>| v.as_deref().unwrap_or("").replace('\'', "");
        s += &format!(
            "HOSTNAME='{}'\nDNSDOMAIN='{}'\nROOTSERVER='{}'\nROOTPATH='{}'\n",
            q(&self.hostname),
            q(&self.domain),
            self.server.map(show).unwrap_or_default(),
            q(&self.root_path)
        );
        s
    }
}

/// Satisfied once an interface the configuration can use is there (named by `ifname=` as
/// soon as it appears; what was named is kept for the step log).
pub struct NetWaiter(pub Wanted, pub Vec<String>);

impl Waiter for NetWaiter {
    fn describe(&self) -> String {
        format!("{} (no link: no driver bound to a network device)", self.0.describe())
    }
    fn wants(&self) -> Option<&DeviceRef> {
        None
    }
    fn offer(&mut self, _: &[Dev], _: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        for m in self.0.rename() {
            if !self.1.contains(&m) {
                self.1.push(m);
            }
        }
        !self.0.pick(&interfaces()).is_empty()
    }
}

impl NetWaiter {
    /// A waiter for an interface `want` can use; no renames yet.
    pub fn new(want: Wanted) -> NetWaiter {
        NetWaiter(want, Vec::new())
    }

    /// The renames done while waiting, into the step log.
    pub fn log_renames(&mut self, log: &mut Log) {
        for m in self.1.drain(..) {
            log.step(&m);
        }
    }
}

// ---- rtnetlink ----

const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_NEWROUTE: u16 = 24;
const IFF_UP: u32 = 1;
const AF_INET: u8 = 2;

/// One rtnetlink request: header, fixed part, attributes.
struct Msg(Vec<u8>);

impl Msg {
    fn new(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Msg {
        let mut b = vec![0u8; 16];
        b[4..6].copy_from_slice(&kind.to_ne_bytes());
        b[6..8].copy_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        b[8..12].copy_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(body);
        Msg(b)
    }
    fn attr(mut self, kind: u16, data: &[u8]) -> Msg {
        let len = 4 + data.len() as u16;
        self.0.extend_from_slice(&len.to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(data);
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
        self
    }
    fn finish(mut self) -> Vec<u8> {
        let len = self.0.len() as u32;
        self.0[0..4].copy_from_slice(&len.to_ne_bytes());
        self.0
    }
}

/// A NETLINK_ROUTE socket.
pub(crate) struct Rtnl {
    fd: OwnedFd,
    seq: u32,
}

impl Rtnl {
    /// A NETLINK_ROUTE socket, bound for the kernel's acknowledgements.
    pub(crate) fn open() -> Result<Rtnl, Errno> {
        let fd = rustix::net::socket_with(AddressFamily::NETLINK, SocketType::RAW, SocketFlags::CLOEXEC, None)?;
        rustix::net::bind(&fd, &rustix::net::netlink::SocketAddrNetlink::new(0, 0))?;
        Ok(Rtnl { fd, seq: 1 })
    }

    /// Send one request and wait (up to 2 s) for its acknowledgement.
    fn call(&mut self, m: Msg) -> Result<(), Errno> {
        let seq = self.seq;
        self.seq += 1;
        let mut b = m.finish();
        b[8..12].copy_from_slice(&seq.to_ne_bytes());
        rustix::net::sendto(&self.fd, &b, SendFlags::empty(), &rustix::net::netlink::SocketAddrNetlink::new(0, 0))?;
        let mut buf = vec![0u8; 8192];
        let deadline = sys::now_ms() + 2000;
        while sys::now_ms() < deadline {
            if !readable(&self.fd, 200) {
                continue;
            }
            let (n, _) = rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::empty())?;
            let mut m = &buf[..n];
            while m.len() >= 16 {
                let len = u32::from_ne_bytes([m[0], m[1], m[2], m[3]]) as usize;
                if len < 16 {
                    break;
                }
                let len = len.min(m.len());
                let kind = u16::from_ne_bytes([m[4], m[5]]);
                let rseq = u32::from_ne_bytes([m[8], m[9], m[10], m[11]]);
                if kind == NLMSG_ERROR && rseq == seq && len >= 20 {
                    let e = i32::from_ne_bytes([m[16], m[17], m[18], m[19]]);
                    return if e == 0 { Ok(()) } else { Err(Errno::from_raw_os_error(e.saturating_neg())) };
                }
                m = m.get((len + 3) & !3..).unwrap_or(&[]);
            }
        }
        Err(Errno::TIMEDOUT)
    }

    fn link(&mut self, index: u32, up: bool) -> Result<(), Errno> {
        let mut body = vec![0u8; 16];
        body[4..8].copy_from_slice(&index.to_ne_bytes());
        body[8..12].copy_from_slice(&(if up { IFF_UP } else { 0 }).to_ne_bytes());
        body[12..16].copy_from_slice(&IFF_UP.to_ne_bytes());
        let seq = self.seq;
        self.call(Msg::new(RTM_NEWLINK, 0, seq, &body))
    }

    fn rename(&mut self, index: u32, name: &str) -> Result<(), Errno> {
        let mut body = vec![0u8; 16];
        body[4..8].copy_from_slice(&index.to_ne_bytes());
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        let seq = self.seq;
        self.call(Msg::new(RTM_NEWLINK, 0, seq, &body).attr(3, &n))
    }

    fn address(&mut self, add: bool, index: u32, a: Ipv4, prefix: u8) -> Result<(), Errno> {
        let mut body = vec![AF_INET, prefix, 0, 0];
        body.extend_from_slice(&index.to_ne_bytes());
        let bcast = (u32::from_be_bytes(a) | u32::MAX.checked_shr(u32::from(prefix)).unwrap_or(0)).to_be_bytes();
        let (kind, flags) = if add { (RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE) } else { (RTM_DELADDR, 0) };
        let seq = self.seq;
        let mut m = Msg::new(kind, flags, seq, &body).attr(2, &a).attr(1, &a);
        if prefix < 31 {
            m = m.attr(4, &bcast);
        }
        self.call(m)
    }

    /// The default route via `gw`; `onlink` when the gateway is outside the interface's
    /// subnet (a /32 lease): the kernel then takes it as reachable on the link.
    fn default_route(&mut self, index: u32, gw: Ipv4, onlink: bool) -> Result<(), Errno> {
        // rtmsg: AF_INET, dst_len 0, src_len 0, tos 0, RT_TABLE_MAIN, RTPROT_BOOT,
        // RT_SCOPE_UNIVERSE, RTN_UNICAST; flags: RTNH_F_ONLINK (4) or none.
        let mut body = [AF_INET, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0];
        if onlink {
            body[8..12].copy_from_slice(&4u32.to_ne_bytes());
        }
        let seq = self.seq;
        self.call(
            Msg::new(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, seq, &body).attr(5, &gw).attr(4, &index.to_ne_bytes()),
        )
    }
}

pub(crate) fn readable<Fd: AsFd>(fd: Fd, ms: u64) -> bool {
    use rustix::event::{PollFd, PollFlags};
    rustix::event::poll(&mut [PollFd::new(&fd, PollFlags::IN)], Some(&sys::timespec_ms(ms))).is_ok_and(|n| n > 0)
}

// ---- a packet socket for DHCP ----

/// `struct sockaddr_ll` (linux/if_packet.h): rustix has no type for it.
#[repr(C)]
struct SockaddrLl {
    family: u16,
    protocol: u16,
    ifindex: i32,
    hatype: u16,
    pkttype: u8,
    halen: u8,
    addr: [u8; 8],
}

const ETH_P_IP_BE: u16 = 0x0800u16.to_be();

// SAFETY: the pointer and length given to `f` are those of a live, fully initialised
// `sockaddr_ll` (the layout above, 20 bytes, as the kernel reads it for AF_PACKET).
unsafe impl rustix::net::addr::SocketAddrArg for SockaddrLl {
    unsafe fn with_sockaddr<R>(
        &self,
        f: impl FnOnce(*const rustix::net::addr::SocketAddrOpaque, rustix::net::addr::SocketAddrLen) -> R,
    ) -> R {
        f((self as *const SockaddrLl).cast(), core::mem::size_of::<SockaddrLl>() as u32)
    }
}

fn ll(index: u32, broadcast: bool) -> SockaddrLl {
    let (halen, addr) = if broadcast { (6, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0]) } else { (0, [0; 8]) };
    SockaddrLl {
        family: AddressFamily::PACKET.as_raw(),
        protocol: ETH_P_IP_BE,
        ifindex: index as i32,
        hatype: 0,
        pkttype: 0,
        halen,
        addr,
    }
}

fn packet_socket(index: u32) -> Result<OwnedFd, Errno> {
    let fd = rustix::net::socket_with(
        AddressFamily::PACKET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        Some(rustix::net::eth::IP),
    )?;
    rustix::net::bind(&fd, &ll(index, false))?;
    Ok(fd)
}

/// One interface's DHCP exchange in progress.
struct Exchange {
    iface: Iface,
    fd: OwnedFd,
    xid: u32,
    offer: Option<Reply>,
}

impl Exchange {
    fn send(&self, secs: u16, hostname: Option<&str>) -> Result<(), Errno> {
        let (kind, requested) = match &self.offer {
            Some(o) => (dhcp::REQUEST, Some((o.address, o.server_id.unwrap_or(o.next_server)))),
            None => (dhcp::DISCOVER, None),
        };
        let q = Query { kind, xid: self.xid, mac: self.iface.mac, secs, requested, hostname }.encode();
        let p = dhcp::udp_packet(([0; 4], dhcp::CLIENT_PORT), ([255; 4], dhcp::SERVER_PORT), &q);
        rustix::net::sendto(&self.fd, &p, SendFlags::empty(), &ll(self.iface.index, true)).map(|_| ())
    }

    /// Replies queued on the socket that answer this exchange.
    fn replies(&self) -> Vec<Reply> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 2048];
        // At most 64 packets a pass: a broadcast storm cannot hold the loop here.
        for _ in 0..64 {
            let Ok((n, _)) = rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::empty()) else { break };
            if let Some(r) = dhcp::udp_payload(&buf[..n], dhcp::CLIENT_PORT).and_then(|p| Reply::parse(p).ok())
                && r.xid == self.xid
                && r.chaddr == self.iface.mac
            {
                out.push(r);
            }
        }
        out
    }
}

/// DHCP on every candidate at once; the first acknowledged lease wins. Retries at 1, 2, 4,
/// 8... seconds, until `deadline_ms`.
fn dhcp_any(
    cands: &[Iface],
    hostname: Option<&str>,
    deadline_ms: u64,
    log: &mut Log,
) -> Result<(Iface, Reply), String> {
    let start = sys::now_ms();
    let seed = (start as u32) ^ 0x6c65_616e;
    let mut ex: Vec<Exchange> = Vec::new();
    for (n, i) in cands.iter().enumerate() {
        match packet_socket(i.index) {
            Ok(fd) => ex.push(Exchange {
                iface: i.clone(),
                fd,
                xid: seed
                    .wrapping_add(u32::from_be_bytes([i.mac[2], i.mac[3], i.mac[4], i.mac[5]]))
                    .wrapping_add(n as u32),
                offer: None,
            }),
            Err(e) => log.step(&format!("dhcp: {}: no packet socket: {}", i.name, strerror(e))),
        }
    }
    if ex.is_empty() {
        return Err("no interface could send DHCP requests".into());
    }
    let mut wait = 1000u64;
    let mut naks = Vec::new();
    loop {
        let secs = ((sys::now_ms() - start) / 1000).min(u16::MAX as u64) as u16;
        for e in &ex {
            if let Err(err) = e.send(secs, hostname) {
                log.step(&format!("dhcp: {}: send: {}", e.iface.name, strerror(err)));
            }
        }
        let until = (sys::now_ms() + wait).min(deadline_ms);
        while sys::now_ms() < until {
            use rustix::event::{PollFd, PollFlags};
            let mut fds: Vec<PollFd> = ex.iter().map(|e| PollFd::new(&e.fd, PollFlags::IN)).collect();
            let left = until.saturating_sub(sys::now_ms());
            if !rustix::event::poll(&mut fds, Some(&sys::timespec_ms(left.min(250)))).is_ok_and(|n| n > 0) {
                continue;
            }
            drop(fds);
            for e in ex.iter_mut() {
                for r in e.replies() {
                    match (r.kind, &e.offer) {
                        (dhcp::OFFER, None) => {
                            log.step(&format!(
                                "dhcp: {}: offer {} from {}",
                                e.iface.name,
                                show(r.address),
                                show(r.server_id.unwrap_or(r.next_server))
                            ));
                            e.offer = Some(r);
                            let _ = e.send(secs, hostname);
                        }
                        (dhcp::ACK, Some(o)) if r.address == o.address => return Ok((e.iface.clone(), r)),
                        (dhcp::NAK, Some(o)) if r.server_id.is_none() || r.server_id == o.server_id => {
                            naks.push(format!("{}: refused (DHCPNAK)", e.iface.name));
                            e.offer = None;
                        }
                        _ => {}
                    }
                }
            }
        }
        if sys::now_ms() >= deadline_ms {
            let names: Vec<&str> = ex.iter().map(|e| e.iface.name.as_str()).collect();
            let offered: Vec<String> = ex
                .iter()
                .filter_map(|e| e.offer.as_ref().map(|o| format!("{} offered {}", e.iface.name, show(o.address))))
                .collect();
            let mut why = format!("no DHCP lease on {} after {} s", names.join(", "), (sys::now_ms() - start) / 1000);
            if !offered.is_empty() {
                why += &format!(" ({}, but no acknowledgement)", offered.join("; "));
            } else if naks.is_empty() {
                why += " (no DHCP server answered)";
            }
            if !naks.is_empty() {
                why += &format!(" ({})", naks.join("; "));
            }
            return Err(why);
        }
        wait = (wait * 2).min(8000);
    }
}

/// Wait for carrier on any of `ifaces`, up to `ms` (a link that is still negotiating drops
/// what is sent).
fn wait_carrier(ifaces: &[Iface], ms: u64) -> bool {
    let end = sys::now_ms() + ms;
    loop {
        if ifaces
            .iter()
            .any(|i| sys::read_string(&format!("/sys/class/net/{}/carrier", i.name)).is_some_and(|c| c.trim() == "1"))
        {
            return true;
        }
        if sys::now_ms() >= end {
            return false;
        }
        sys::sleep_ms(50);
    }
}

/// Bring the network up as `want` says, on the interfaces present; returns the interface
/// configured (for the root: its server, root path, DNS).
pub fn bring_up(want: &Wanted, deadline_ms: u64, log: &mut Log) -> Result<Configured, String> {
    for m in want.rename() {
        log.step(&m);
    }
    let mut rt = Rtnl::open().map_err(|e| format!("rtnetlink: {}", strerror(e)))?;
    // Loopback (index 1): RPC clients use it.
    let _ = rt.link(1, true);
    let all = interfaces();
    let picked = want.pick(&all);
    if picked.is_empty() {
        let seen: Vec<String> = all.iter().map(|i| format!("{} ({})", i.name, show_mac(&i.mac))).collect();
        return Err(format!(
            "no link: {} is not here (interfaces: {})",
            want.describe(),
            if seen.is_empty() { "none".to_string() } else { seen.join(", ") }
        ));
    }
    for (i, _) in &picked {
        rt.link(i.index, true).map_err(|e| format!("no link: {} would not come up: {}", i.name, strerror(e)))?;
    }
    let ifaces: Vec<Iface> = picked.iter().map(|(i, _)| i.clone()).collect();
    if !wait_carrier(&ifaces, 5000) {
        log.step("net: no carrier after 5 s; trying anyway");
    }
    // A static configuration for a named interface first; else DHCP on the rest.
    // What ip= says besides the method: the host name and the NFS server (which win over
    // DHCP's).
    let hostname = want.ip.iter().rev().find_map(|p| p.hostname.clone());
    let server = want.ip.iter().rev().find_map(|p| p.server);
    if let Some((i, Method::Static(s))) = picked.iter().find(|(_, m)| matches!(m, Method::Static(_))) {
        let mut c = apply_static(&mut rt, i, s)?;
        (c.hostname, c.server) = (hostname, server);
        log.step(&format!("net: {}", c.summary()));
        return Ok(c);
    }
    let dhcp_on: Vec<Iface> = picked.iter().filter(|(_, m)| *m == Method::Dhcp).map(|(i, _)| i.clone()).collect();
    if dhcp_on.is_empty() {
        // ip=off / dhcp6: the links are up, the kernel does IPv6 on its own.
        let i = &picked[0].0;
        log.step(&format!("net: {} up, no IPv4 configuration asked for", i.name));
        return Ok(Configured {
            iface: i.name.clone(),
            index: i.index,
            mac: i.mac,
            proto: "none",
            ..Default::default()
        });
    }
    let (iface, r) = dhcp_any(&dhcp_on, hostname.as_deref(), deadline_ms, log)?;
    let mask = r.mask.unwrap_or_else(|| netconf::default_mask(r.address));
    let prefix = netconf::prefix_len(mask).unwrap_or(24);
    rt.address(true, iface.index, r.address, prefix)
        .map_err(|e| format!("{}: cannot set address {}: {}", iface.name, show(r.address), strerror(e)))?;
    let gateway = r.routers.first().copied();
    if let Some(g) = gateway {
        rt.default_route(iface.index, g, !same_subnet(r.address, g, prefix))
            .map_err(|e| format!("{}: cannot route via {}: {}", iface.name, show(g), strerror(e)))?;
    }
    // The interfaces that did not win go down again.
    for i in ifaces.iter().filter(|i| i.index != iface.index) {
        let _ = rt.link(i.index, false);
    }
    let server = server.or(match r.next_server {
        [0, 0, 0, 0] => r.server_id,
        s => Some(s),
    });
    let c = Configured {
        iface: iface.name,
        index: iface.index,
        mac: iface.mac,
        proto: "dhcp",
        address: r.address,
        prefix,
        gateway,
        dns: r.dns,
        server,
        root_path: r.root_path,
        hostname: r.hostname.or(hostname),
        domain: r.domain,
    };
    log.step(&format!("net: lease {}{}", c.summary(), r.lease_secs.map(|s| format!(" for {s} s")).unwrap_or_default()));
    Ok(c)
}

/// Whether `b` is in `a`'s subnet of `prefix` bits.
fn same_subnet(a: Ipv4, b: Ipv4, prefix: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
    u32::from_be_bytes(a) & mask == u32::from_be_bytes(b) & mask
}

fn apply_static(rt: &mut Rtnl, i: &Iface, s: &Static) -> Result<Configured, String> {
    rt.address(true, i.index, s.address, s.prefix)
        .map_err(|e| format!("{}: cannot set address {}: {}", i.name, show(s.address), strerror(e)))?;
    if let Some(g) = s.gateway {
        rt.default_route(i.index, g, !same_subnet(s.address, g, s.prefix))
            .map_err(|e| format!("{}: cannot route via {}: {}", i.name, show(g), strerror(e)))?;
    }
    Ok(Configured {
        iface: i.name.clone(),
        index: i.index,
        mac: i.mac,
        proto: "none",
        address: s.address,
        prefix: s.prefix,
        gateway: s.gateway,
        dns: s.dns.clone(),
        server: None,
        root_path: None,
        hostname: None,
        domain: None,
    })
}

/// Leave the configuration for the root: `/run/net-IFACE.conf` (the interface stays up with
/// its address: a network root depends on it).
pub fn hand_over(c: &Configured) {
    sys::mkdir_p("/run");
    let _ = sys::write_file_mode(&format!("/run/net-{}.conf", c.iface), &c.handover_text(), 0o644);
}

/// A note of an interface a child process configured (`INDEX ADDRESS PREFIX NAME`), for the
/// parent that must take it down or hand it over before the switch.
pub fn write_note(path: &str, c: &Configured) {
    let note = format!("{} {} {} {}\n", c.index, crate::netconf::show(c.address), c.prefix, c.iface);
    let _ = sys::write_file_mode(path, &note, 0o600);
}

/// The interface a [`write_note`] names (then the note is removed); None without one.
pub fn take_note(path: &str) -> Option<Configured> {
    let note = sys::read_string(path)?;
    sys::remove(path, false);
    let w: Vec<&str> = note.split_whitespace().collect();
    Some(Configured {
        index: w.first()?.parse().ok()?,
        address: crate::netconf::ipv4(w.get(1)?)?,
        prefix: w.get(2)?.parse().ok()?,
        iface: w.get(3)?.to_string(),
        ..Default::default()
    })
}

/// Take an interface [`bring_up`] configured down again: its address removed (the default
/// route goes with it), the link down.
pub fn take_down(c: &Configured) -> Result<(), String> {
    let mut rt = Rtnl::open().map_err(|e| format!("rtnetlink: {}", strerror(e)))?;
    if c.address != [0, 0, 0, 0] {
        rt.address(false, c.index, c.address, c.prefix)
            .map_err(|e| format!("cannot remove address {}: {}", show(c.address), strerror(e)))?;
    }
    rt.link(c.index, false).map_err(|e| format!("cannot take the link down: {}", strerror(e)))
}

// ---- DNS ----

/// A DNS query for `name`'s A record.
pub fn dns_query(id: u16, name: &str) -> Option<Vec<u8>> {
    let mut q = vec![0u8; 12];
    q[0..2].copy_from_slice(&id.to_be_bytes());
    q[2] = 0x01; // recursion desired
    q[5] = 1; // one question
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    (q.len() <= 512).then_some(q)
}

/// The first A record in a reply to query `id`; `Err` with the server's answer otherwise.
pub fn dns_answer(id: u16, r: &[u8]) -> Result<Ipv4, String> {
    let get = |i: usize| r.get(i).copied().ok_or_else(|| "a truncated reply".to_string());
    if r.len() < 12 || u16::from_be_bytes([r[0], r[1]]) != id || r[2] & 0x80 == 0 {
        return Err("not a reply to the query".into());
    }
    match r[3] & 0x0f {
        0 => {}
        3 => return Err("no such name (NXDOMAIN)".into()),
        c => return Err(format!("the server answered with error {c}")),
    }
    let (qd, an) = (u16::from_be_bytes([r[4], r[5]]), u16::from_be_bytes([r[6], r[7]]));
    let mut i = 12;
    let skip_name = |mut i: usize| -> Result<usize, String> {
        for _ in 0..128 {
            let l = get(i)?;
            if l & 0xc0 == 0xc0 {
                return Ok(i + 2);
            }
            if l == 0 {
                return Ok(i + 1);
            }
            i += 1 + usize::from(l);
        }
        Err("a name too long".into())
    };
    for _ in 0..qd {
        i = skip_name(i)? + 4;
    }
    for _ in 0..an {
        i = skip_name(i)?;
        let (t, len) =
            (u16::from_be_bytes([get(i)?, get(i + 1)?]), usize::from(u16::from_be_bytes([get(i + 8)?, get(i + 9)?])));
        i += 10;
        if t == 1 && len == 4 {
            return Ok([get(i)?, get(i + 1)?, get(i + 2)?, get(i + 3)?]);
        }
        i += len;
    }
    Err("no address in the answer".into())
}

/// Look `name` up with the servers given (UDP, 2 s each, twice round).
pub fn resolve(name: &str, servers: &[Ipv4], log: &mut Log) -> Result<Ipv4, String> {
    if servers.is_empty() {
        return Err(format!("{name}: a name, and no DNS server from DHCP or ip="));
    }
    let id = (sys::now_ms() as u16) ^ 0x4c52;
    let q = dns_query(id, name).ok_or_else(|| format!("{name}: not a host name"))?;
    let fd = rustix::net::socket_with(AddressFamily::INET, SocketType::DGRAM, SocketFlags::CLOEXEC, None)
        .map_err(|e| format!("{name}: {}", strerror(e)))?;
    let mut last = String::from("no answer");
    for round in 0..2 {
        for s in servers {
            let to = rustix::net::SocketAddrV4::new(rustix::net::Ipv4Addr::from(*s), 53);
            if rustix::net::sendto(&fd, &q, SendFlags::empty(), &to).is_err() {
                continue;
            }
            let end = sys::now_ms() + 2000;
            let mut buf = vec![0u8; 1500];
            while sys::now_ms() < end {
                if !readable(&fd, 200) {
                    continue;
                }
                let Ok((n, _)) = rustix::net::recv(&fd, &mut buf[..], RecvFlags::empty()) else { break };
                match dns_answer(id, &buf[..n]) {
                    Ok(a) => {
                        log.step(&format!("dns: {name} is {} (from {})", show(a), show(*s)));
                        return Ok(a);
                    }
                    Err(e) => last = format!("{}: {e}", show(*s)),
                }
                break;
            }
        }
        let _ = round;
    }
    Err(format!("{name}: cannot be resolved ({last})"))
}

/// An address as a URL-style host: an IPv6 one in brackets.
pub fn host(addr: &str) -> String {
    if addr.contains(':') { format!("[{addr}]") } else { addr.to_string() }
}

/// `HOST:PORT` for messages ([`host`]'s brackets for IPv6).
pub fn host_port(addr: &str, port: u16) -> String {
    format!("{}:{port}", host(addr))
}

/// A server named on the command line or by DHCP, as an address a mount or a login takes:
/// an IPv4 literal as it is, `[IPv6]` without its brackets, a name looked up in DNS.
pub fn server_address(server: &str, net: &Configured, log: &mut Log) -> Result<String, String> {
    if let Some(v6) = server.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
        Ok(v6.to_string())
    } else if netconf::ipv4(server).is_some() {
        Ok(server.to_string())
    } else {
        Ok(show(resolve(server, &net.dns, log)?))
    }
}

/// Whether a TCP server answers on `addr` (an IPv4 or IPv6 literal) and `port` within `ms`:
/// a connection made and closed, so that "unreachable" is told apart from a refused login.
pub fn tcp_reachable(addr: &str, port: u16, ms: u64) -> Result<(), Errno> {
    tcp_connect(addr, port, ms).map(drop)
}

/// A TCP connection to `addr` (an IPv4 or IPv6 literal) and `port`, made within `ms`; the
/// socket is non-blocking.
pub fn tcp_connect(addr: &str, port: u16, ms: u64) -> Result<OwnedFd, Errno> {
    use rustix::net::{SocketAddrV4, SocketAddrV6};
    let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
    let started = if let Some(a) = netconf::ipv4(addr) {
        let fd = rustix::net::socket_with(AddressFamily::INET, SocketType::STREAM, flags, None)?;
        (rustix::net::connect(&fd, &SocketAddrV4::new(a.into(), port)), fd)
    } else if let Ok(a) = addr.parse::<core::net::Ipv6Addr>() {
        let fd = rustix::net::socket_with(AddressFamily::INET6, SocketType::STREAM, flags, None)?;
        (rustix::net::connect(&fd, &SocketAddrV6::new(a, port, 0, 0)), fd)
    } else {
        return Err(Errno::INVAL);
    };
    match started {
        (Ok(()), fd) => Ok(fd),
        (Err(e), fd) if e == Errno::INPROGRESS => {
            let end = sys::now_ms().saturating_add(ms);
            loop {
                let left = end.saturating_sub(sys::now_ms());
                let mut p = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::OUT)];
                match rustix::event::poll(&mut p, Some(&sys::timespec_ms(left))) {
                    Ok(0) => return Err(Errno::TIMEDOUT),
                    Ok(_) => break,
                    Err(Errno::INTR) if left > 0 => continue,
                    Err(e) => return Err(e),
                }
            }
            match rustix::net::sockopt::socket_error(&fd)? {
                Ok(()) => Ok(fd),
                Err(e) => Err(e),
            }
        }
        (Err(e), _) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, last: u8) -> Iface {
        Iface { name: name.into(), index: u32::from(last), mac: [0x52, 0x54, 0, 0, 0, last] }
    }

    #[test]
    fn which_interfaces_are_configured() {
        let all = [iface("ens3", 1), iface("ens4", 2)];
        let names = |w: &Wanted| w.pick(&all).into_iter().map(|(i, _)| i.name).collect::<Vec<_>>();
        assert_eq!(names(&Wanted::default()), ["ens3", "ens4"]);
        let w = Wanted { bootif: Some([0x52, 0x54, 0, 0, 0, 2]), ..Default::default() };
        assert_eq!(names(&w), ["ens4"]);
        let w = Wanted { ip: vec![IpParam::parse("ens3:dhcp").unwrap()], ..Default::default() };
        assert_eq!(names(&w), ["ens3"]);
        let w = Wanted {
            ip: vec![IpParam::parse("eth9:dhcp").unwrap()],
            bootif: Some([0x52, 0x54, 0, 0, 0, 2]),
            names: vec![],
        };
        assert!(names(&w).is_empty(), "a named interface that is not here is not replaced by another");
        let w = Wanted { bootif: Some([1; 6]), ..Default::default() };
        assert!(names(&w).is_empty());
    }

    #[test]
    fn the_handover_file() {
        let c = Configured {
            iface: "ens3".into(),
            proto: "dhcp",
            address: [10, 77, 0, 50],
            prefix: 24,
            gateway: Some([10, 77, 0, 1]),
            dns: vec![[10, 77, 0, 1]],
            server: Some([10, 77, 0, 1]),
            root_path: Some("/srv/root".into()),
            hostname: Some("box".into()),
            ..Default::default()
        };
        let t = c.handover_text();
        for l in [
            "DEVICE='ens3'",
            "PROTO='dhcp'",
            "IPV4ADDR='10.77.0.50'",
            "IPV4NETMASK='255.255.255.0'",
            "IPV4BROADCAST='10.77.0.255'",
            "IPV4GATEWAY='10.77.0.1'",
            "IPV4DNS0='10.77.0.1'",
            "ROOTSERVER='10.77.0.1'",
            "ROOTPATH='/srv/root'",
        ] {
            assert!(t.lines().any(|x| x == l), "{l} in\n{t}");
        }
    }

    #[test]
    fn netlink_messages_are_laid_out_as_the_kernel_reads_them() {
        let m =
            Msg::new(RTM_NEWADDR, NLM_F_CREATE, 7, &[AF_INET, 24, 0, 0, 3, 0, 0, 0]).attr(2, &[10, 0, 0, 1]).finish();
        assert_eq!(m.len(), 16 + 8 + 8);
        assert_eq!(u32::from_ne_bytes([m[0], m[1], m[2], m[3]]), 32);
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]), NLM_F_CREATE | NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(&m[24..32], &[8, 0, 2, 0, 10, 0, 0, 1]);
        assert_eq!(core::mem::size_of::<SockaddrLl>(), 20);
    }

    #[test]
    fn dns_query_and_answer() {
        let q = dns_query(0x1234, "nfs.test").unwrap();
        assert_eq!(&q[12..], b"\x03nfs\x04test\x00\x00\x01\x00\x01");
        let mut r = q.clone();
        r[2] |= 0x80;
        r[7] = 1;
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 77, 0, 1]);
        assert_eq!(dns_answer(0x1234, &r), Ok([10, 77, 0, 1]));
        assert!(dns_answer(0x1235, &r).is_err());
        let mut nx = q.clone();
        nx[2] |= 0x80;
        nx[3] = 3;
        assert_eq!(dns_answer(0x1234, &nx), Err("no such name (NXDOMAIN)".into()));
        for n in 0..r.len() {
            let _ = dns_answer(0x1234, &r[..n]);
        }
        assert!(dns_query(1, "a..b").is_none());
        // Random answers behind a valid header: no panic, no endless walk.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            let mut a = r[..12].to_vec();
            let n = (x % 200) as usize;
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                a.push(if x.is_multiple_of(4) { 0xc0 | (x >> 8) as u8 } else { (x >> 16) as u8 % 70 });
            }
            a[4..8].copy_from_slice(&[0, (x % 3) as u8, 0, (x >> 3) as u8 % 5]);
            let _ = dns_answer(0x1234, &a);
        }
    }
}
