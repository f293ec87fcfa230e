//! A Network Block Device, a transport under a block root ([`crate::netblock`]): dracut's
//! `root=nbd:` (the device is the root) and `netroot=nbd:` (`root=` finds the root on it).
//!
//! How, and why not nbd-client: /init makes the TCP connection, does the NBD handshake itself
//! (fixed newstyle: NBD_OPT_GO, or NBD_OPT_EXPORT_NAME from a server that does not know it),
//! and gives the connected socket to the kernel through the nbd driver's generic netlink
//! family (`NBD_CMD_CONNECT` with `NBD_ATTR_SOCKETS`). The kernel then holds the socket: no
//! process is left to carry over the switch_root, and none for the root's systemd to kill or
//! to spare (nbd-client's `-systemd-mark`, `@` in argv[0]); the device has no
//! `NBD_CFLAG_DISCONNECT_ON_CLOSE`, so it stays connected when /init's netlink socket closes.
//! Debian's nbd-client (netlink by default, `-nonetlink` for the ioctl mode whose `NBD_DO_IT`
//! blocks a process for the device's life) would do the same handshake, but its failures come
//! as its own words on stderr and it would add a program and GnuTLS and libnl to the image;
//! the handshake is some 150 lines here, each step bounded and named in the diagnosis (the
//! TCP connection, the greeting, the export refused, the kernel's refusal). No crate: the NBD
//! crates need std and tokio, /init has neither.
//!
//! Not done: TLS (NBD_OPT_STARTTLS), several connections per device, reconnection after the
//! server goes away (the kernel's dead-connection timeout is not set: I/O fails).

use alloc::boxed::Box;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;

use leanrd_contract::{NbdTarget, RootFeature};
use rustix::fd::{AsFd, AsRawFd, OwnedFd};
use rustix::fs::OFlags;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use crate::Init;
use crate::net::{self, Configured};
use crate::netblock::{CONNECT_MS, Locate, Transport};
use crate::sys::{self, Errno, strerror};

/// How long the server has for the whole handshake once connected.
const HANDSHAKE_MS: u64 = 10_000;
/// The longest option reply read (a server's error text, an info reply).
const MAX_REPLY: usize = 64 * 1024;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const CLISERV_MAGIC: u64 = 0x0000_4202_8186_1253;
const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const OPT_EXPORT_NAME: u32 = 1;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
const INFO_EXPORT: u16 = 0;

/// The export to connect, and the device the kernel gave it once connected.
pub struct Nbd {
    /// What the command line names.
    pub target: NbdTarget,
    /// Whether the device is the root (`root=nbd:`).
    pub device_root: bool,
    /// The device's index (nbdN) once connected.
    index: Rc<Cell<Option<u32>>>,
}

impl Nbd {
    /// The command line's export, if it names one.
    pub fn wanted(init: &Init) -> Option<Nbd> {
        let c = &init.cmd.nbd;
        c.target.clone().map(|target| Nbd { target, device_root: c.device_root, index: Rc::new(Cell::new(None)) })
    }

    /// `HOST:PORT` and the export, for messages.
    fn what(&self, addr: &str) -> String {
        let at = net::host_port(addr, self.target.port);
        match &self.target.export {
            Some(e) => format!("NBD export \"{e}\" at {at}"),
            None => format!("the default NBD export at {at}"),
        }
    }
}

/// What the handshake learned of the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export {
    /// Its size in bytes.
    pub size: u64,
    /// Its transmission flags (read-only, flush, trim...), given to the kernel as they are.
    pub flags: u16,
}

/// A step of the handshake that failed, in words for the diagnosis.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub String);

/// Reads and writes on a non-blocking socket, each within the handshake's deadline.
struct Conn<'a> {
    fd: &'a OwnedFd,
    deadline: u64,
}

impl Conn<'_> {
    fn read(&mut self, buf: &mut [u8], step: &str) -> Result<(), Refused> {
        let mut got = 0;
        while got < buf.len() {
            let left = self.deadline.saturating_sub(sys::now_ms());
            if left == 0 {
                return Err(Refused(format!("{step}: no answer in {} s", HANDSHAKE_MS / 1000)));
            }
            if !net::readable(self.fd, left.min(500)) {
                continue;
            }
            match rustix::net::recv(self.fd, &mut buf[got..], RecvFlags::empty()) {
                Ok((0, _)) => return Err(Refused(format!("{step}: the server closed the connection"))),
                Ok((n, _)) => got += n,
                Err(Errno::AGAIN | Errno::INTR) => {}
                Err(e) => return Err(Refused(format!("{step}: {}", strerror(e)))),
            }
        }
        Ok(())
    }

    fn u16(&mut self, step: &str) -> Result<u16, Refused> {
        let mut b = [0u8; 2];
        self.read(&mut b, step)?;
        Ok(u16::from_be_bytes(b))
    }

    fn u32(&mut self, step: &str) -> Result<u32, Refused> {
        let mut b = [0u8; 4];
        self.read(&mut b, step)?;
        Ok(u32::from_be_bytes(b))
    }

    fn u64(&mut self, step: &str) -> Result<u64, Refused> {
        let mut b = [0u8; 8];
        self.read(&mut b, step)?;
        Ok(u64::from_be_bytes(b))
    }

    fn write(&mut self, mut b: &[u8], step: &str) -> Result<(), Refused> {
        while !b.is_empty() {
            if sys::now_ms() >= self.deadline {
                return Err(Refused(format!("{step}: the server takes nothing")));
            }
            match rustix::net::send(self.fd, b, SendFlags::NOSIGNAL) {
                Ok(n) => b = &b[n..],
                Err(Errno::AGAIN | Errno::INTR) => sys::sleep_ms(10),
                Err(e) => return Err(Refused(format!("{step}: {}", strerror(e)))),
            }
        }
        Ok(())
    }
}

/// An option request: IHAVEOPT, the option, its data's length, its data.
fn option(opt: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + data.len());
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// What an option's error reply means (the NBD protocol's NBD_REP_ERR_*).
fn rep_error(kind: u32) -> &'static str {
    match kind.wrapping_sub(1 << 31) {
        1 => "the server does not know the option",
        2 => "the server's policy refuses this client",
        3 => "the server calls the request invalid",
        4 => "the server cannot do it on its platform",
        5 => "the server requires TLS, which leanrd's /init does not speak",
        6 => "the server has no such export",
        7 => "the server is shutting down",
        8 => "the server requires block size negotiation",
        9 => "the request is too big for the server",
        _ => "an error the protocol does not name",
    }
}

/// The fixed newstyle handshake on a connected socket, for `export` ("" the default one).
pub fn handshake(fd: &OwnedFd, export: &str) -> Result<Export, Refused> {
    let mut c = Conn { fd, deadline: sys::now_ms().saturating_add(HANDSHAKE_MS) };
    let greeting = "the server's greeting";
    if c.u64(greeting)? != NBDMAGIC {
        return Err(Refused("the server does not speak NBD (no NBDMAGIC in its greeting)".into()));
    }
    match c.u64(greeting)? {
        IHAVEOPT => {}
        CLISERV_MAGIC => return Err(Refused("the server speaks only NBD's oldstyle handshake".into())),
        _ => return Err(Refused("the server's greeting is not NBD's newstyle one".into())),
    }
    let sflags = c.u16(greeting)?;
    if sflags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(Refused("the server does not offer the fixed newstyle handshake".into()));
    }
    let no_zeroes = sflags & FLAG_NO_ZEROES != 0;
    let cflags = u32::from(FLAG_FIXED_NEWSTYLE | if no_zeroes { FLAG_NO_ZEROES } else { 0 });
    c.write(&cflags.to_be_bytes(), "the client's flags")?;
    // NBD_OPT_GO: the name's length, the name, no information requests.
    let mut data = Vec::with_capacity(6 + export.len());
    data.extend_from_slice(&(export.len() as u32).to_be_bytes());
    data.extend_from_slice(export.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    c.write(&option(OPT_GO, &data), "NBD_OPT_GO")?;
    let mut export_info = None;
    loop {
        let step = "the reply to NBD_OPT_GO";
        if c.u64(step)? != REPLY_MAGIC {
            return Err(Refused(format!("{step} is not an option reply")));
        }
        let _opt = c.u32(step)?;
        let kind = c.u32(step)?;
        let len = c.u32(step)? as usize;
        if len > MAX_REPLY {
            return Err(Refused(format!("{step} is {len} bytes long")));
        }
        let mut body = vec![0u8; len];
        c.read(&mut body, step)?;
        match kind {
            REP_ACK => break,
            REP_INFO if body.len() >= 12 && u16::from_be_bytes([body[0], body[1]]) == INFO_EXPORT => {
                let size = u64::from_be_bytes(body[2..10].try_into().unwrap_or([0; 8]));
                export_info = Some(Export { size, flags: u16::from_be_bytes([body[10], body[11]]) });
            }
            REP_INFO => {}
            // An older server: NBD_OPT_EXPORT_NAME, whose refusal is a closed connection.
            REP_ERR_UNSUP => {
                c.write(&option(OPT_EXPORT_NAME, export.as_bytes()), "NBD_OPT_EXPORT_NAME")?;
                let step = "the reply to NBD_OPT_EXPORT_NAME (a server closes it for an export it has not)";
                let size = c.u64(step)?;
                let flags = c.u16(step)?;
                if !no_zeroes {
                    c.read(&mut [0u8; 124], step)?;
                }
                return Ok(Export { size, flags });
            }
            k if k & (1 << 31) != 0 => {
                let text = String::from_utf8_lossy(&body);
                let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
                let said = if text.is_empty() { String::new() } else { format!(": \"{text}\"") };
                return Err(Refused(format!("the export was refused: {}{said}", rep_error(k))));
            }
            _ => {}
        }
    }
    export_info.ok_or_else(|| Refused("the server accepted NBD_OPT_GO without saying the export's size".into()))
}

// ---- the kernel's nbd, over generic netlink (linux/genetlink.h, linux/nbd-netlink.h) ----

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NBD_CMD_CONNECT: u8 = 1;
const NBD_ATTR_INDEX: u16 = 1;
const NBD_ATTR_SIZE_BYTES: u16 = 2;
const NBD_ATTR_BLOCK_SIZE_BYTES: u16 = 3;
const NBD_ATTR_TIMEOUT: u16 = 4;
const NBD_ATTR_SERVER_FLAGS: u16 = 5;
const NBD_ATTR_SOCKETS: u16 = 7;
const NBD_SOCK_ITEM: u16 = 1;
const NBD_SOCK_FD: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;

/// One netlink attribute, padded to 4 bytes.
fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + data.len());
    b.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(data);
    while !b.len().is_multiple_of(4) {
        b.push(0);
    }
    b
}

/// A generic netlink request: header, genlmsghdr (command, version 1), attributes.
fn genl_msg(family: u16, cmd: u8, seq: u32, attrs: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 20];
    b[0..4].copy_from_slice(&((20 + attrs.len()) as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&family.to_ne_bytes());
    b[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    b[8..12].copy_from_slice(&seq.to_ne_bytes());
    b[16] = cmd;
    b[17] = 1;
    b.extend_from_slice(attrs);
    b
}

/// The attributes of a generic netlink reply (after its 20-byte headers): (type, data).
fn attrs(msg: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut a = msg.get(20..).unwrap_or(&[]);
    while a.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([a[0], a[1]]));
        if len < 4 || len > a.len() {
            break;
        }
        out.push((u16::from_ne_bytes([a[2], a[3]]) & !NLA_F_NESTED, &a[4..len]));
        a = a.get((len + 3) & !3..).unwrap_or(&[]);
    }
    out
}

/// Send a request and return its reply message (if any) once the kernel acknowledged it,
/// within 2 s.
fn call(fd: &OwnedFd, req: &[u8], seq: u32) -> Result<Option<Vec<u8>>, Errno> {
    rustix::net::sendto(fd, req, SendFlags::empty(), &rustix::net::netlink::SocketAddrNetlink::new(0, 0))?;
    let mut buf = vec![0u8; 8192];
    let mut reply = None;
    let deadline = sys::now_ms() + 2000;
    while sys::now_ms() < deadline {
        if !net::readable(fd, 200) {
            continue;
        }
        let (n, _) = rustix::net::recv(fd, &mut buf[..], RecvFlags::empty())?;
        let mut m = &buf[..n.min(buf.len())];
        while m.len() >= 16 {
            let len = (u32::from_ne_bytes([m[0], m[1], m[2], m[3]]) as usize).min(m.len());
            if len < 16 {
                break;
            }
            let kind = u16::from_ne_bytes([m[4], m[5]]);
            let rseq = u32::from_ne_bytes([m[8], m[9], m[10], m[11]]);
            if rseq == seq {
                if kind == NLMSG_ERROR && len >= 20 {
                    let e = i32::from_ne_bytes([m[16], m[17], m[18], m[19]]);
                    return if e == 0 { Ok(reply) } else { Err(Errno::from_raw_os_error(e.saturating_neg())) };
                }
                reply = Some(m[..len].to_vec());
            }
            m = m.get((len + 3) & !3..).unwrap_or(&[]);
        }
    }
    Err(Errno::TIMEDOUT)
}

/// Give the connected socket to the kernel: the device's index (nbdN).
fn kernel_connect(sock: &OwnedFd, e: Export, t: &NbdTarget) -> Result<u32, String> {
    let nl = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        Some(rustix::net::netlink::GENERIC),
    )
    .map_err(|e| format!("generic netlink: {}", strerror(e)))?;
    rustix::net::bind(&nl, &rustix::net::netlink::SocketAddrNetlink::new(0, 0))
        .map_err(|e| format!("generic netlink: {}", strerror(e)))?;
    let req = genl_msg(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, &attr(CTRL_ATTR_FAMILY_NAME, b"nbd\0"));
    let family = match call(&nl, &req, 1) {
        Ok(Some(r)) => attrs(&r)
            .into_iter()
            .find(|(k, d)| *k == CTRL_ATTR_FAMILY_ID && d.len() >= 2)
            .map(|(_, d)| u16::from_ne_bytes([d[0], d[1]])),
        Ok(None) => None,
        Err(Errno::NOENT) => return Err("the kernel has no nbd (the module nbd is missing)".into()),
        Err(e) => return Err(format!("looking up the kernel's nbd netlink family: {}", strerror(e))),
    }
    .ok_or("the kernel's nbd netlink family has no ID")?;
    // The kernel's socket calls ignore O_NONBLOCK, but leave it as a blocking client would.
    let fl = rustix::fs::fcntl_getfl(sock).map_err(|e| strerror(e).to_string())?;
    let _ = rustix::fs::fcntl_setfl(sock, fl - OFlags::NONBLOCK);
    let fd = u32::try_from(sock.as_fd().as_raw_fd()).map_err(|_| "a negative descriptor")?;
    let item = attr(NBD_SOCK_ITEM | NLA_F_NESTED, &attr(NBD_SOCK_FD, &fd.to_ne_bytes()));
    let mut a = attr(NBD_ATTR_SIZE_BYTES, &e.size.to_ne_bytes());
    if let Some(bs) = t.block_size {
        a.extend(attr(NBD_ATTR_BLOCK_SIZE_BYTES, &u64::from(bs).to_ne_bytes()));
    }
    if let Some(s) = t.timeout {
        a.extend(attr(NBD_ATTR_TIMEOUT, &u64::from(s).to_ne_bytes()));
    }
    a.extend(attr(NBD_ATTR_SERVER_FLAGS, &u64::from(e.flags).to_ne_bytes()));
    a.extend(attr(NBD_ATTR_SOCKETS | NLA_F_NESTED, &item));
    match call(&nl, &genl_msg(family, NBD_CMD_CONNECT, 2, &a), 2) {
        Ok(r) => Ok(r
            .as_deref()
            .map(attrs)
            .and_then(|a| a.into_iter().find(|(k, d)| *k == NBD_ATTR_INDEX && d.len() >= 4))
            .map_or(0, |(_, d)| u32::from_ne_bytes([d[0], d[1], d[2], d[3]]))),
        Err(e) => Err(format!("the kernel refused the connected export: {} (its messages are above)", strerror(e))),
    }
}

impl Transport for Nbd {
    fn name(&self) -> &'static str {
        "NBD"
    }

    fn feature(&self) -> RootFeature {
        RootFeature::Nbd
    }

    fn connect(&mut self, init: &mut Init, up: &Configured) -> Result<Vec<String>, String> {
        if let Some(n) = self.index.get() {
            init.log.step(&format!("nbd: nbd{n} is connected already"));
            return Ok(Vec::new());
        }
        let addr = net::server_address(&self.target.server, up, &mut init.log).map_err(|e| format!("NBD: {e}"))?;
        let what = self.what(&addr);
        let sock = net::tcp_connect(&addr, self.target.port, CONNECT_MS)
            .map_err(|e| format!("{what} is unreachable from {}: {}", up.iface, strerror(e)))?;
        let export = handshake(&sock, self.target.export.as_deref().unwrap_or(""))
            .map_err(|Refused(why)| format!("{what}: {why}"))?;
        let n = kernel_connect(&sock, export, &self.target).map_err(|why| format!("{what}: {why}"))?;
        self.index.set(Some(n));
        let ro = if export.flags & 2 != 0 { ", read-only" } else { "" };
        init.log.step(&format!("nbd: connected {what} as nbd{n} ({} bytes{ro})", export.size));
        // `sock` closes here: the kernel holds its own reference.
        Ok(Vec::new())
    }

    fn root_disk(&self) -> Option<(String, Locate)> {
        if !self.device_root {
            return None;
        }
        let index = self.index.clone();
        let what = format!("the NBD device of {}", self.target);
        Some((what, Box::new(move || index.get().map(|n| format!("nbd{n}")))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    fn reply(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut b = REPLY_MAGIC.to_be_bytes().to_vec();
        b.extend_from_slice(&OPT_GO.to_be_bytes());
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend_from_slice(&(body.len() as u32).to_be_bytes());
        b.extend_from_slice(body);
        b
    }

    /// The handshake against a scripted server: what it sends, then what it answers.
    fn against(server: Vec<u8>) -> (Result<Export, Refused>, Vec<u8>) {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let fd: OwnedFd = a.into();
        b.write_all(&server).unwrap();
        b.shutdown(std::net::Shutdown::Write).unwrap();
        let r = handshake(&fd, "root");
        drop(fd);
        let mut sent = Vec::new();
        // A client that stopped early closed with the rest unread: a reset.
        let _ = b.read_to_end(&mut sent);
        (r, sent)
    }

    fn greeting(flags: u16) -> Vec<u8> {
        let mut g = NBDMAGIC.to_be_bytes().to_vec();
        g.extend_from_slice(&IHAVEOPT.to_be_bytes());
        g.extend_from_slice(&flags.to_be_bytes());
        g
    }

    #[test]
    fn opt_go_gives_the_size_and_flags() {
        let mut s = greeting(3);
        let mut info = INFO_EXPORT.to_be_bytes().to_vec();
        info.extend_from_slice(&(64u64 << 20).to_be_bytes());
        info.extend_from_slice(&3u16.to_be_bytes());
        s.extend(reply(REP_INFO, &info));
        s.extend(reply(REP_ACK, &[]));
        let (r, sent) = against(s);
        assert_eq!(r, Ok(Export { size: 64 << 20, flags: 3 }));
        let mut want = 3u32.to_be_bytes().to_vec();
        want.extend(option(OPT_GO, &[0, 0, 0, 4, b'r', b'o', b'o', b't', 0, 0]));
        assert_eq!(sent, want);
    }

    #[test]
    fn an_older_server_gets_export_name() {
        let mut s = greeting(1);
        s.extend(reply(REP_ERR_UNSUP, &[]));
        s.extend_from_slice(&4096u64.to_be_bytes());
        s.extend_from_slice(&1u16.to_be_bytes());
        s.extend_from_slice(&[0u8; 124]);
        assert_eq!(against(s).0, Ok(Export { size: 4096, flags: 1 }));
    }

    #[test]
    fn each_failure_names_its_step() {
        let why = |s: Vec<u8>| against(s).0.unwrap_err().0;
        assert_eq!(why(Vec::new()), "the server's greeting: the server closed the connection");
        assert_eq!(
            why(b"HTTP/1.1 400 Bad\r\n\r\n".to_vec()),
            "the server does not speak NBD (no NBDMAGIC in its greeting)"
        );
        let mut old = NBDMAGIC.to_be_bytes().to_vec();
        old.extend_from_slice(&CLISERV_MAGIC.to_be_bytes());
        assert_eq!(why(old), "the server speaks only NBD's oldstyle handshake");
        assert_eq!(why(greeting(0)), "the server does not offer the fixed newstyle handshake");
        let mut s = greeting(3);
        s.extend(reply((1 << 31) + 6, b"no such export\x1b[2J"));
        assert_eq!(why(s), "the export was refused: the server has no such export: \"no such export[2J\"");
        let mut s = greeting(3);
        s.extend(reply(REP_ACK, &[]));
        assert_eq!(why(s), "the server accepted NBD_OPT_GO without saying the export's size");
        let mut s = greeting(3);
        s.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
        s.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(why(s), "the reply to NBD_OPT_GO is 4294967295 bytes long");
    }

    #[test]
    fn netlink_attributes_nest_and_read_back() {
        let item = attr(NBD_SOCK_ITEM | NLA_F_NESTED, &attr(NBD_SOCK_FD, &7u32.to_ne_bytes()));
        assert_eq!(item.len(), 12);
        let m = genl_msg(30, NBD_CMD_CONNECT, 5, &attr(NBD_ATTR_INDEX, &3u32.to_ne_bytes()));
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize, m.len());
        assert_eq!(attrs(&m), [(NBD_ATTR_INDEX, &3u32.to_ne_bytes()[..])]);
        assert!(attrs(&m[..22]).is_empty());
        let mut bad = m.clone();
        bad[20] = 200;
        assert!(attrs(&bad).is_empty());
    }
}
