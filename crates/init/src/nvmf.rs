//! NVMe over TCP, a transport under a block root ([`crate::netblock`]): the kernel's nvme-tcp
//! connects when /dev/nvme-fabrics is written its options (`transport=tcp,traddr=...`); no
//! nvme-cli. A discovery controller (`rd.nvmf.discover=`) is connected the same way, asked
//! for its discovery log page (an admin command through the controller's character device),
//! and let go; each NVMe subsystem it lists is then connected. The root's namespaces appear
//! as /dev/nvmeXnY and are found like any block device.
//!
//! The firmware's NBFT is not read.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use leanrd_contract::{DISCOVERY_NQN, NvmfTarget, RootFeature, option_value};
use rustix::fd::OwnedFd;
use rustix::fs::OFlags;

use crate::Init;
use crate::net::{self, Configured};
use crate::netblock::{CONNECT_MS, Transport};
use crate::sys::{self, Errno, strerror};

const FABRICS: &str = "/dev/nvme-fabrics";
/// Discovery log entries read at most.
const MAX_RECORDS: usize = 64;
const NVMF_TRTYPE_TCP: u8 = 3;
const NVME_NQN_NVME: u8 = 2;

/// The targets, with the host's identity.
pub struct Nvmf {
    /// The controllers to connect to (discovery controllers, or subsystems by NQN): the command
    /// line's, else the image's.
    pub targets: Vec<NvmfTarget>,
    /// This host's NQN (`hostnqn=`): the command line's, else the image's; None: the kernel's.
    pub hostnqn: Option<String>,
    /// This host's ID (`hostid=`): the command line's, else the image's; None: the kernel's.
    pub hostid: Option<String>,
}

impl Nvmf {
    /// The command line's targets, else the image's (unless `rd.nvmf.nostatic`).
    pub fn wanted(init: &Init) -> Option<Nvmf> {
        let c = &init.cmd.nvmf;
        let targets = if !c.targets.is_empty() || c.nostatic { &c.targets } else { &init.conf.nvmf };
        (!targets.is_empty()).then(|| Nvmf {
            targets: targets.clone(),
            hostnqn: c.hostnqn.clone().or(init.conf.nvmf_hostnqn.clone()),
            hostid: c.hostid.clone().or(init.conf.nvmf_hostid.clone()),
        })
    }

    /// What /dev/nvme-fabrics is written to connect to `nqn` at `addr` (a literal).
    pub fn options(&self, nqn: &str, addr: &str, port: u16, host_address: Option<&str>) -> String {
        let mut o = format!("nqn={nqn},transport=tcp,traddr={addr},trsvcid={port}");
        // A root's controller reconnects for ever (the kernel's default gives up after 600 s
        // and the root's namespace goes with it).
        if nqn != DISCOVERY_NQN {
            o += ",ctrl_loss_tmo=-1";
        }
        if let Some(h) = host_address {
            o += &format!(",host_traddr={h}");
        }
        if let Some(n) = &self.hostnqn {
            o += &format!(",hostnqn={n}");
        }
        if let Some(i) = &self.hostid {
            o += &format!(",hostid={i}");
        }
        o
    }
}

/// One subsystem a discovery log page lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The subsystem's NQN (SUBNQN).
    pub nqn: String,
    /// Its transport address (TRADDR), as the log page writes it.
    pub address: String,
    /// Its TCP port (TRSVCID).
    pub port: u16,
}

/// A fixed-size text field of a log page entry: up to the first NUL, spaces trimmed.
fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).trim().to_string()
}

/// The NVMe subsystems over TCP in a discovery log page (NVMe-oF: a 1024-byte header with
/// the record count at 8, then 1024-byte entries: transport type at 0, subsystem type at 2,
/// TRSVCID at 32, SUBNQN at 256, TRADDR at 512). Short or odd pages give what they hold.
pub fn records(page: &[u8]) -> Vec<Record> {
    let n = records_count(page);
    page.get(1024..)
        .unwrap_or(&[])
        .chunks_exact(1024)
        .take(n)
        .filter(|e| e[0] == NVMF_TRTYPE_TCP && e[2] == NVME_NQN_NVME)
        .filter_map(|e| {
            let r =
                Record { nqn: text(&e[256..512]), address: text(&e[512..768]), port: text(&e[32..64]).parse().ok()? };
            (option_value(&r.nqn) && option_value(&r.address)).then_some(r)
        })
        .collect()
}

/// Connect: write the options, read back `instance=N,cntlid=M`; the controller's number.
fn connect(options: &str) -> Result<u32, Errno> {
    let fd = sys::open_node(FABRICS, OFlags::RDWR)?;
    // One write: the kernel reads the options from it and connects before it returns.
    rustix::io::write(&fd, options.as_bytes())?;
    let mut buf = [0u8; 128];
    let n = rustix::io::read(&fd, &mut buf)?;
    let reply = core::str::from_utf8(&buf[..n]).unwrap_or("");
    reply.trim().split(',').find_map(|kv| kv.strip_prefix("instance=")).and_then(|v| v.parse().ok()).ok_or(Errno::PROTO)
}

/// `struct nvme_passthru_cmd` (linux/nvme_ioctl.h): rustix has no type for it.
#[repr(C)]
#[derive(Default)]
struct AdminCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

/// Get Log Page (admin opcode 02h), the discovery log (70h), `len` bytes from the start.
fn log_page(ctrl: &OwnedFd, len: usize) -> Result<Vec<u8>, Errno> {
    const NVME_IOCTL_ADMIN_CMD: rustix::ioctl::Opcode = rustix::ioctl::opcode::read_write::<AdminCmd>(b'N', 0x41);
    let mut buf = vec![0u8; len];
    let dwords = u32::try_from(len / 4).map_err(|_| Errno::INVAL)?.saturating_sub(1);
    let mut cmd = AdminCmd {
        opcode: 0x02,
        addr: buf.as_mut_ptr() as u64,
        data_len: u32::try_from(len).map_err(|_| Errno::INVAL)?,
        cdw10: 0x70 | ((dwords & 0xffff) << 16),
        cdw11: dwords >> 16,
        ..AdminCmd::default()
    };
    // SAFETY: the opcode is NVME_IOCTL_ADMIN_CMD, whose argument is this struct; the kernel
    // writes at most `data_len` bytes to `addr`, which is `buf`, alive and that long until
    // the call returns.
    let status = unsafe { rustix::ioctl::ioctl(ctrl, AdminIoctl::<NVME_IOCTL_ADMIN_CMD>(&mut cmd))? };
    // A positive result is the command's NVMe status: refused, and `buf` holds nothing.
    if status != 0 {
        return Err(Errno::IO);
    }
    Ok(buf)
}

/// The admin command ioctl, keeping the call's result (rustix's `Updater` drops it): the
/// NVMe status of a command the controller refused.
struct AdminIoctl<'a, const OPCODE: rustix::ioctl::Opcode>(&'a mut AdminCmd);

// SAFETY: the argument is a pointer to the `struct nvme_passthru_cmd` the opcode takes, alive
// for the call; the output is the call's result, read from nothing.
unsafe impl<const OPCODE: rustix::ioctl::Opcode> rustix::ioctl::Ioctl for AdminIoctl<'_, OPCODE> {
    type Output = i32;
    const IS_MUTATING: bool = true;
    fn opcode(&self) -> rustix::ioctl::Opcode {
        OPCODE
    }
    fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        (self.0 as *mut AdminCmd).cast()
    }
    unsafe fn output_from_ptr(out: rustix::ioctl::IoctlOutput, _: *mut core::ffi::c_void) -> rustix::io::Result<i32> {
        Ok(out)
    }
}

/// Ask a discovery controller (connected as controller `n`) for its subsystems, then let it go.
fn discover(n: u32) -> Result<Vec<Record>, Errno> {
    let r = (|| {
        let ctrl = sys::open_node(&format!("/dev/nvme{n}"), OFlags::RDWR)?;
        let head = log_page(&ctrl, 1024)?;
        let count = records_count(&head);
        let page = log_page(&ctrl, 1024 * (1 + count))?;
        Ok(records(&page))
    })();
    let _ = sys::write_file(&format!("/sys/class/nvme/nvme{n}/delete_controller"), "1");
    r
}

/// The header's record count, at most [`MAX_RECORDS`].
fn records_count(head: &[u8]) -> usize {
    let n = head.get(8..16).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    usize::try_from(n).unwrap_or(usize::MAX).min(MAX_RECORDS)
}

/// What a failed connect's errno means.
fn meaning(e: Errno) -> &'static str {
    match e {
        Errno::NOENT | Errno::NODEV => " (the kernel has no NVMe over Fabrics: nvme-fabrics and nvme-tcp are missing)",
        Errno::CONNREFUSED | Errno::HOSTUNREACH | Errno::NETUNREACH | Errno::TIMEDOUT => " (the target is unreachable)",
        Errno::IO | Errno::INVAL | Errno::ACCESS | Errno::PERM => {
            " (the target refused this host, or has no such subsystem; the kernel's messages are above)"
        }
        _ => "",
    }
}

impl Transport for Nvmf {
    fn name(&self) -> &'static str {
        "NVMe/TCP"
    }

    fn feature(&self) -> RootFeature {
        RootFeature::Nvmf
    }

    fn connect(&mut self, init: &mut Init, up: &Configured) -> Result<Vec<String>, String> {
        let mut failed = Vec::new();
        let mut connected = 0;
        for t in &self.targets {
            let what = t.nqn.as_deref().unwrap_or("the discovery controller");
            let addr = match net::server_address(&t.address, up, &mut init.log) {
                Ok(a) => a,
                Err(e) => {
                    failed.push(format!("NVMe/TCP {what}: {e}"));
                    continue;
                }
            };
            let at = net::host_port(&addr, t.port());
            if let Err(e) = net::tcp_reachable(&addr, t.port(), CONNECT_MS) {
                failed.push(format!("NVMe/TCP {what} at {at} is unreachable from {}: {}", up.iface, strerror(e)));
                continue;
            }
            let subsystems = match &t.nqn {
                Some(n) => Vec::from([Record { nqn: n.clone(), address: addr.clone(), port: t.port() }]),
                None => {
                    let o = self.options(DISCOVERY_NQN, &addr, t.port(), t.host_address.as_deref());
                    let found = connect(&o).and_then(discover);
                    match found {
                        Ok(r) if r.is_empty() => {
                            failed.push(format!(
                                "NVMe/TCP discovery at {at}: the controller lists no subsystem over TCP"
                            ));
                            continue;
                        }
                        Ok(r) => {
                            let names: Vec<&str> = r.iter().map(|r| r.nqn.as_str()).collect();
                            init.log.step(&format!("nvmf: discovery at {at}: {}", names.join(", ")));
                            r
                        }
                        Err(e) => {
                            failed.push(format!("NVMe/TCP discovery at {at} failed: {}{}", strerror(e), meaning(e)));
                            continue;
                        }
                    }
                }
            };
            for s in subsystems {
                let sat = net::host_port(&s.address, s.port);
                match connect(&self.options(&s.nqn, &s.address, s.port, t.host_address.as_deref())) {
                    Ok(n) => {
                        connected += 1;
                        init.log.step(&format!("nvmf: connected to {} at {sat} as nvme{n}", s.nqn));
                    }
                    // Connected already (two discovery controllers listing one subsystem).
                    Err(Errno::ALREADY) => connected += 1,
                    Err(e) => failed.push(format!(
                        "NVMe/TCP connect to {} at {sat} failed: {}{}",
                        s.nqn,
                        strerror(e),
                        meaning(e)
                    )),
                }
            }
        }
        if connected == 0 { Err(failed.join("; ")) } else { Ok(failed) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(trtype: u8, subtype: u8, port: &str, nqn: &str, addr: &str) -> Vec<u8> {
        let mut e = vec![0u8; 1024];
        e[0] = trtype;
        e[2] = subtype;
        e[32..32 + port.len()].copy_from_slice(port.as_bytes());
        e[256..256 + nqn.len()].copy_from_slice(nqn.as_bytes());
        let a = format!("{addr:<255}");
        e[512..767].copy_from_slice(a.as_bytes());
        e
    }

    #[test]
    fn discovery_log_pages_are_read_and_bounded() {
        let mut page = vec![0u8; 1024];
        page[8] = 4;
        page.extend(entry(3, 2, "4420", "nqn.2026-11.test:a", "10.77.0.2"));
        page.extend(entry(3, 3, "8009", DISCOVERY_NQN, "10.77.0.2"));
        page.extend(entry(1, 2, "4420", "nqn.rdma", "10.77.0.2"));
        page.extend(entry(3, 2, "x", "nqn.bad-port", "10.77.0.2"));
        assert_eq!(
            records(&page),
            [Record { nqn: "nqn.2026-11.test:a".into(), address: "10.77.0.2".into(), port: 4420 }]
        );
        // A count larger than the page, a short page, an empty one: what is there.
        page[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(records(&page).len(), 1);
        assert_eq!(records_count(&page), MAX_RECORDS);
        assert!(records(&page[..1500]).is_empty());
        assert!(records(&[]).is_empty());
        // Values that would smuggle options into /dev/nvme-fabrics are dropped.
        let mut bad = vec![0u8; 1024];
        bad[8] = 1;
        bad.extend(entry(3, 2, "4420", "nqn.x,hostnqn=evil", "10.77.0.2"));
        assert!(records(&bad).is_empty());
    }

    #[test]
    fn options_name_the_host() {
        let n = Nvmf { targets: Vec::new(), hostnqn: Some("nqn.h".into()), hostid: Some("id".into()) };
        assert_eq!(
            n.options("nqn.s", "10.0.0.2", 4420, Some("10.0.0.9")),
            "nqn=nqn.s,transport=tcp,traddr=10.0.0.2,trsvcid=4420,ctrl_loss_tmo=-1,host_traddr=10.0.0.9,hostnqn=nqn.h,\
             hostid=id"
        );
        assert_eq!(core::mem::size_of::<AdminCmd>(), 72);
    }
}
