//! iSCSI, a transport under a block root ([`crate::netblock`]): log in to each target with
//! iscsistart (open-iscsi's boot-time initiator: the kernel's iscsi_tcp does the I/O,
//! iscsistart the login), after a TCP connection to its portal shows it answers. The session
//! outlives the initramfs; the root's iscsid (if installed) takes it over. For `root=iscsi:`
//! the root is the LUN itself, found under the session in sysfs.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use leanrd_contract::{IscsiTarget, RootFeature};

use crate::Init;
use crate::net::{self, Configured};
use crate::netblock::{CONNECT_MS, Locate, Transport};
use crate::netconf::show_mac;
use crate::sys::{self, strerror};

/// The targets, with what the command line (else the image) says of logging in.
pub struct Iscsi {
    /// The targets to log in to, in order: the command line's, else the image's.
    pub targets: Vec<IscsiTarget>,
    /// `root=iscsi:`: the root is the first target's LUN.
    pub lun_root: bool,
}

impl Iscsi {
    /// The command line's targets, else the image's; None when there are none.
    pub fn wanted(init: &Init) -> Option<Iscsi> {
        let targets = if init.cmd.iscsi.targets.is_empty() { &init.conf.iscsi } else { &init.cmd.iscsi.targets };
        (!targets.is_empty()).then(|| Iscsi { targets: targets.clone(), lun_root: init.cmd.iscsi.lun_root })
    }
}

/// The initiator's name: `rd.iscsi.initiator=`, the image's (host-only: the machine's own),
/// else one made from the interface's MAC (stable across boots, one per machine).
pub fn initiator(given: Option<&str>, mac: &[u8; 6]) -> String {
    match given {
        Some(i) => i.to_string(),
        None => format!("iqn.2026-11.org.leanrd:{}", show_mac(mac).replace(':', "")),
    }
}

/// iscsistart's arguments for one target (the credentials among them: never logged).
pub fn arguments(t: &IscsiTarget, addr: &str, initiator: &str, params: &[String]) -> Vec<String> {
    let mut a: Vec<String> = Vec::from([
        "-i".into(),
        initiator.into(),
        "-t".into(),
        t.name.clone(),
        "-g".into(),
        format!("{}", t.group.unwrap_or(1)),
        "-a".into(),
        addr.into(),
        "-p".into(),
        format!("{}", t.port()),
    ]);
    if let Some(c) = &t.chap {
        a.extend(["-u".into(), c.user.clone(), "-w".into(), c.password.clone()]);
        if let (Some(u), Some(p)) = (&c.in_user, &c.in_password) {
            a.extend(["-U".into(), u.clone(), "-W".into(), p.clone()]);
        }
    }
    // iscsistart tries a boot login 30 times over; /init tries again itself until its
    // deadline, so one attempt is enough here (a parameter given on the command line, after
    // this one, wins).
    a.extend(["-P".into(), "node.session.initial_login_retry_max=1".into()]);
    for p in params {
        a.extend(["-P".into(), p.clone()]);
    }
    a
}

/// The disk a session's LUN became: /sys/class/iscsi_session/sessionN (its `targetname`)
/// holds targetH:C:T/H:C:T:LUN/block/NAME.
fn lun_disk(target: &str, lun: u32) -> Option<String> {
    let sessions = "/sys/class/iscsi_session";
    for (s, _) in sys::list_dir(sessions).unwrap_or_default() {
        let dir = format!("{sessions}/{s}");
        if sys::read_string(&format!("{dir}/targetname")).is_none_or(|n| n.trim() != target) {
            continue;
        }
        let dev = format!("{dir}/device");
        for (t, _) in sys::list_dir(&dev).unwrap_or_default().into_iter().filter(|(t, _)| t.starts_with("target")) {
            for (addr, _) in sys::list_dir(&format!("{dev}/{t}")).unwrap_or_default() {
                if !addr.contains(':') || addr.rsplit(':').next().and_then(|l| l.parse::<u32>().ok()) != Some(lun) {
                    continue;
                }
                let block = sys::list_dir(&format!("{dev}/{t}/{addr}/block")).unwrap_or_default();
                if let Some((name, _)) = block.into_iter().next() {
                    return Some(name);
                }
            }
        }
    }
    None
}

impl Transport for Iscsi {
    fn name(&self) -> &'static str {
        "iSCSI"
    }

    fn feature(&self) -> RootFeature {
        RootFeature::Iscsi
    }

    fn root_disk(&self) -> Option<(String, Locate)> {
        let t = self.targets.first().filter(|_| self.lun_root)?;
        let (name, lun) = (t.name.clone(), t.lun.unwrap_or(0));
        Some((format!("LUN {lun} of iSCSI target {name}"), Box::new(move || lun_disk(&name, lun))))
    }

    fn connect(&mut self, init: &mut Init, up: &Configured) -> Result<Vec<String>, String> {
        let given = init.cmd.iscsi.initiator.clone().or(init.conf.iscsi_initiator.clone());
        let me = initiator(given.as_deref(), &up.mac);
        let params = init.cmd.iscsi.params.clone();
        let mut failed = Vec::new();
        let mut done: Vec<(String, u16, &str)> = Vec::new();
        for t in &self.targets {
            // One login per portal and name (several LUNs of one target are one session).
            if done.iter().any(|(s, p, n)| *s == t.server && *p == t.port() && *n == t.name) {
                continue;
            }
            done.push((t.server.clone(), t.port(), &t.name));
            let addr = match net::server_address(&t.server, up, &mut init.log) {
                Ok(a) => a,
                Err(e) => {
                    failed.push(format!("iSCSI target {}: {e}", t.name));
                    continue;
                }
            };
            let at = net::host_port(&addr, t.port());
            if let Err(e) = net::tcp_reachable(&addr, t.port(), CONNECT_MS) {
                failed.push(format!(
                    "iSCSI target {} at {at} is unreachable from {}: {}",
                    t.name,
                    up.iface,
                    strerror(e)
                ));
                continue;
            }
            init.log.step(&format!("iscsi: logging in to {} at {at} as {me}", t.name));
            let args = arguments(t, &addr, &me, &params);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = crate::process::run_status("iscsistart", &args);
            crate::process::reap();
            match r.map(crate::process::describe_status) {
                Ok(Ok(())) => init.log.step(&format!("iscsi: logged in to {} at {at}", t.name)),
                Ok(Err(how)) => failed.push(format!(
                    "iSCSI login to {} at {at} failed (iscsistart: {how}): the target refused this initiator \
                     ({me}), its credentials, or has no such target name; iscsistart's messages are above",
                    t.name
                )),
                Err(e) => failed.push(format!("iSCSI target {}: {e}", t.name)),
            }
        }
        if failed.len() == done.len() { Err(failed.join("; ")) } else { Ok(failed) }
    }
}

// ---- logging out, at the way down ----
//
// Hand-written: iscsistart logs in and exits, and the exitrd has no iscsiadm or iscsid. The
// kernel's iSCSI netlink interface (include/scsi/iscsi_if.h) takes the Logout PDU from
// userspace as iscsid sends it; no crate speaks it, and it is three fixed messages.

/// `sizeof(struct iscsi_uevent)`: the PDU follows it (its `u` union at 16, `r` at 40).
const UEVENT_SIZE: usize = 56;
/// Event types (enum iscsi_uevent_e: UEVENT_BASE 10, KEVENT_BASE 100).
const DESTROY_SESSION: u16 = 12;
const DESTROY_CONN: u16 = 14;
const STOP_CONN: u16 = 18;
const SEND_PDU: u16 = 19;
const KEVENT_RECV_PDU: u32 = 101;
const KEVENT_IF_ERROR: u32 = 103;
/// `STOP_CONN_TERM`: the connection ends for good (no recovery).
const STOP_CONN_TERM: u32 = 1;
/// The multicast group iscsid listens on (`ISCSI_NL_GRP_ISCSID`): PDUs received for userspace.
const GROUP_ISCSID: u32 = 1;
/// How long the target has to answer the Logout Request.
const LOGOUT_MS: u64 = 5_000;

/// A Logout Request's header (RFC 7143 11.14): immediate, final, reason 0 (close the
/// session), for connection `cid`. The kernel fills in the task tag, CmdSN and ExpStatSN.
fn logout_request(cid: u16) -> [u8; 48] {
    let mut h = [0u8; 48];
    h[0] = 0x40 | 0x06;
    h[1] = 0x80;
    h[20..22].copy_from_slice(&cid.to_be_bytes());
    h
}

/// One request to the kernel's iSCSI transport: a netlink header, a `struct iscsi_uevent`
/// with `u` (its fields as 32-bit words at their offsets), then `tail`.
fn uevent(kind: u16, seq: u32, handle: u64, u: &[(usize, u32)], tail: &[u8]) -> Vec<u8> {
    let len = 16 + UEVENT_SIZE + tail.len();
    let mut b = vec![0u8; len];
    b[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&kind.to_ne_bytes());
    b[6..8].copy_from_slice(&1u16.to_ne_bytes()); // NLM_F_REQUEST
    b[8..12].copy_from_slice(&seq.to_ne_bytes());
    let ev = &mut b[16..];
    ev[0..4].copy_from_slice(&u32::from(kind).to_ne_bytes());
    ev[8..16].copy_from_slice(&handle.to_ne_bytes());
    for (at, v) in u {
        ev[16 + at..20 + at].copy_from_slice(&v.to_ne_bytes());
    }
    ev[UEVENT_SIZE..].copy_from_slice(tail);
    b
}

/// What one netlink message from the transport says: (event type, iferror, `r`'s first
/// word (retcode, or a received PDU's sid), the received PDU's header bytes).
fn parse_event(m: &[u8]) -> Option<(u32, i32, u32, &[u8])> {
    let ev = m.get(16..16 + UEVENT_SIZE)?;
    let word = |at: usize| u32::from_ne_bytes([ev[at], ev[at + 1], ev[at + 2], ev[at + 3]]);
    Some((word(0), word(4) as i32, word(40), m.get(16 + UEVENT_SIZE..).unwrap_or(&[])))
}

/// The kernel's iSCSI netlink socket, in iscsid's group.
struct Nl {
    fd: rustix::fd::OwnedFd,
    seq: u32,
    handle: u64,
    /// A Logout Response seen while waiting for a reply: its response code.
    logout_response: Option<u8>,
}

impl Nl {
    fn open(handle: u64) -> Result<Nl, String> {
        use rustix::net::{AddressFamily, SocketFlags, SocketType, netlink};
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            Some(netlink::ISCSI),
        )
        .map_err(|e| format!("the iSCSI netlink socket: {}", strerror(e)))?;
        rustix::net::bind(&fd, &netlink::SocketAddrNetlink::new(0, GROUP_ISCSID))
            .map_err(|e| format!("the iSCSI netlink socket: {}", strerror(e)))?;
        Ok(Nl { fd, seq: 1, handle, logout_response: None })
    }

    /// Read what comes within `ms`; `want`: stop at the reply to this request type (its
    /// retcode), else at a Logout Response for session `sid`.
    fn read(&mut self, ms: u64, want: Option<u16>, sid: u32) -> Result<Option<i32>, String> {
        let end = sys::now_ms() + ms;
        let mut buf = vec![0u8; 8192];
        while sys::now_ms() < end {
            if !net::readable(&self.fd, (end - sys::now_ms()).min(200)) {
                continue;
            }
            let n = match rustix::net::recv(&self.fd, &mut buf[..], rustix::net::RecvFlags::empty()) {
                Ok((n, _)) => n,
                Err(rustix::io::Errno::INTR | rustix::io::Errno::NOBUFS) => continue,
                Err(e) => return Err(format!("reading the iSCSI netlink socket: {}", strerror(e))),
            };
            let mut m = &buf[..n];
            while m.len() >= 16 {
                let len = (u32::from_ne_bytes([m[0], m[1], m[2], m[3]]) as usize).clamp(16, m.len());
                let ty = u16::from_ne_bytes([m[4], m[5]]);
                if let Some((kind, iferror, r0, pdu)) = parse_event(&m[..len]) {
                    if kind == KEVENT_RECV_PDU && r0 == sid && pdu.first().is_some_and(|o| o & 0x3f == 0x26) {
                        self.logout_response = Some(pdu.get(2).copied().unwrap_or(0xff));
                        if want.is_none() {
                            return Ok(None);
                        }
                    } else if want == Some(ty) && (kind == u32::from(ty) || kind == KEVENT_IF_ERROR) {
                        return Ok(Some(if kind == KEVENT_IF_ERROR { iferror } else { r0 as i32 }));
                    }
                }
                m = &m[len.next_multiple_of(4).min(m.len())..];
            }
        }
        Ok(None)
    }

    /// One request and its reply: Ok when the kernel did it.
    fn call(&mut self, kind: u16, u: &[(usize, u32)], tail: &[u8], sid: u32) -> Result<(), String> {
        let b = uevent(kind, self.seq, self.handle, u, tail);
        self.seq += 1;
        rustix::net::sendto(
            &self.fd,
            &b,
            rustix::net::SendFlags::empty(),
            &rustix::net::netlink::SocketAddrNetlink::new(0, 0),
        )
        .map_err(|e| format!("sending to the iSCSI transport: {}", strerror(e)))?;
        match self.read(2_000, Some(kind), sid)? {
            Some(0) => Ok(()),
            Some(e) => Err(strerror(rustix::io::Errno::from_raw_os_error(e.unsigned_abs() as i32))),
            None => Err("no reply from the kernel in 2 s".into()),
        }
    }
}

/// The SCSI devices of a session (`H:C:T:L` under its target), whose `delete` removes them.
pub fn session_devices(session: &str) -> Vec<String> {
    let dir = format!("/sys/class/iscsi_session/{session}/device");
    let mut out = Vec::new();
    for (t, _) in sys::list_dir(&dir).unwrap_or_default().into_iter().filter(|(t, _)| t.starts_with("target")) {
        for (d, _) in sys::list_dir(&format!("{dir}/{t}")).unwrap_or_default() {
            if d.contains(':') && sys::exists(&format!("{dir}/{t}/{d}/delete")) {
                out.push(format!("{dir}/{t}/{d}"));
            }
        }
    }
    out
}

/// Log out of `session` (`sessionN`) as iscsid would: the Logout Request, the target's
/// response awaited (bounded), then the connection stopped and destroyed and the session
/// destroyed. Its devices must be gone first (their caches written back while the
/// connection was up). Ok: what happened, for the log.
pub fn logout(session: &str) -> Result<String, String> {
    let sid: u32 = session.strip_prefix("session").and_then(|n| n.parse().ok()).ok_or("not an iSCSI session name")?;
    // The transport's handle: the session's SCSI host's driver (`iscsi_tcp`) is transport `tcp`.
    let link = sys::readlink(&format!("/sys/class/iscsi_session/{session}")).unwrap_or_default();
    let host = link.split('/').find(|p| p.starts_with("host")).ok_or("no SCSI host above the session in sysfs")?;
    let proc_name = sys::read_string(&format!("/sys/class/scsi_host/{host}/proc_name")).unwrap_or_default();
    let proc_name = proc_name.trim();
    let transport = proc_name.strip_prefix("iscsi_").unwrap_or(proc_name);
    let handle: u64 = sys::read_string(&format!("/sys/class/iscsi_transport/{transport}/handle"))
        .and_then(|h| h.trim().parse().ok())
        .ok_or_else(|| format!("no iSCSI transport \"{transport}\" (of {host}'s driver {proc_name})"))?;
    let cids: Vec<u32> = sys::list_dir("/sys/class/iscsi_connection")
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(c, _)| {
            let (s, c) = c.strip_prefix("connection")?.split_once(':')?;
            (s.parse::<u32>().ok()? == sid).then_some(c.parse::<u32>().ok()?)
        })
        .collect();
    let mut nl = Nl::open(handle)?;
    let cid = cids.first().copied().unwrap_or(0);
    let pdu = logout_request(cid as u16);
    nl.call(SEND_PDU, &[(0, sid), (4, cid), (8, pdu.len() as u32), (12, 0)], &pdu, sid)
        .map_err(|e| format!("the Logout Request: {e}"))?;
    if nl.logout_response.is_none() {
        nl.read(LOGOUT_MS, None, sid)?;
    }
    let answered = match nl.logout_response {
        Some(0) => "logged out".to_string(),
        Some(r) => format!("the target answered the logout with response {r}"),
        None => format!("no Logout Response in {} s", LOGOUT_MS / 1000),
    };
    let mut after = Vec::new();
    for c in &cids {
        if let Err(e) = nl.call(STOP_CONN, &[(0, sid), (4, *c), (16, STOP_CONN_TERM)], &[], sid) {
            after.push(format!("stopping connection {c}: {e}"));
        }
        if let Err(e) = nl.call(DESTROY_CONN, &[(0, sid), (4, *c)], &[], sid) {
            after.push(format!("destroying connection {c}: {e}"));
        }
    }
    if let Err(e) = nl.call(DESTROY_SESSION, &[(0, sid)], &[], sid) {
        after.push(format!("destroying the session: {e}"));
    }
    if nl.logout_response != Some(0) {
        return Err(if after.is_empty() { answered } else { format!("{answered}; {}", after.join("; ")) });
    }
    Ok(if after.is_empty() { answered } else { format!("{answered} ({})", after.join("; ")) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iscsistart_is_told_everything() {
        let t = IscsiTarget::parse("iscsi:u:pw:iu:ipw@h::3261:1:iqn.x:y").unwrap();
        let a = arguments(&t, "10.0.0.1", "iqn.me", &["node.session.timeo.replacement_timeout=-1".into()]);
        assert_eq!(
            a.join(" "),
            "-i iqn.me -t iqn.x:y -g 1 -a 10.0.0.1 -p 3261 -u u -w pw -U iu -W ipw \
             -P node.session.initial_login_retry_max=1 -P node.session.timeo.replacement_timeout=-1"
        );
        let t = IscsiTarget { group: Some(3), ..IscsiTarget::parse("iscsi:[fd00::1]::::iqn.z").unwrap() };
        assert_eq!(
            arguments(&t, "fd00::1", "i", &[]).join(" "),
            "-i i -t iqn.z -g 3 -a fd00::1 -p 3260 -P node.session.initial_login_retry_max=1"
        );
    }

    #[test]
    fn an_initiator_name_per_machine() {
        assert_eq!(initiator(None, &[0x52, 0x54, 0, 0x12, 0x34, 0x56]), "iqn.2026-11.org.leanrd:525400123456");
        assert_eq!(initiator(Some("iqn.given"), &[0; 6]), "iqn.given");
    }

    #[test]
    fn the_logout_is_laid_out_as_the_kernel_reads_it() {
        let h = logout_request(3);
        assert_eq!((h[0], h[1], &h[20..22]), (0x46, 0x80, &[0u8, 3][..]));
        assert!(h[4..20].iter().all(|b| *b == 0), "the task tag and sequence numbers are the kernel's");
        let m = uevent(SEND_PDU, 7, 0x1122, &[(0, 5), (4, 3), (8, 48), (12, 0)], &h);
        assert_eq!(m.len(), 16 + 56 + 48);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize, m.len());
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 19);
        assert_eq!(u32::from_ne_bytes(m[16..20].try_into().unwrap()), 19);
        assert_eq!(u64::from_ne_bytes(m[24..32].try_into().unwrap()), 0x1122);
        assert_eq!(u32::from_ne_bytes(m[32..36].try_into().unwrap()), 5, "u.send_pdu.sid");
        assert_eq!(u32::from_ne_bytes(m[40..44].try_into().unwrap()), 48, "u.send_pdu.hdr_size");
        assert_eq!(&m[72..], &h[..], "the PDU right after the struct");
        // A received Logout Response, as the kernel multicasts it: r.recv_req.sid at 40.
        let mut r = uevent(0, 0, 0, &[], &[0x26, 0x80, 0, 0]);
        r[16..20].copy_from_slice(&KEVENT_RECV_PDU.to_ne_bytes());
        r[56..60].copy_from_slice(&5u32.to_ne_bytes());
        assert_eq!(parse_event(&r), Some((KEVENT_RECV_PDU, 0, 5, &[0x26u8, 0x80, 0, 0][..])));
    }
}
