//! A root on NFS: wait for a network interface (its driver comes by coldplug of the network
//! class), bring the network up ([`crate::net`]), find the server and path (the command line,
//! else the DHCP lease), and mount the export with mount(2)'s text options: no mount.nfs.
//!
//! NFSv3 is mounted `nolock` unless the options say `lock`: locking needs rpc.statd, which
//! the initramfs does not run, and the kernel's own nfsroot does the same. Locks are then
//! local to this client, which is what a root of its own (one client per export) needs.
//! NFSv4 has locking in the protocol.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::{NfsRoot, NfsVersion, Root};
use rustix::mount::MountFlags;

use crate::Init;
use crate::net::{self, Configured, NetWaiter};
use crate::netconf::{self, show};
use crate::root::{NEWROOT, RootSource};
use crate::sys::{self, Errno, strerror};
use crate::wait::Waiter;

/// A root on NFS: the network first, then the mount.
pub struct NfsSource {
    /// What `root=` (and `nfsroot=`) say; what they leave open comes from the lease.
    pub want: NfsRoot,
    /// Waits for an interface the network configuration can use.
    pub waiter: NetWaiter,
}

/// Where to mount from, once the lease is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The server: a host name, an IPv4 address, or an IPv6 address in brackets.
    pub server: String,
    /// The export's path on the server.
    pub path: String,
    /// Mount options as given (comma-separated); None: none.
    pub options: Option<String>,
    /// Which protocol versions to try.
    pub version: NfsVersion,
}

/// Fill what `root=` left open from the lease: DHCP's root path (option 17, the kernel's
/// `[SERVER:]PATH[,OPTIONS]` or dracut's `nfs:...`), else the server DHCP or `ip=` named and
/// the kernel's default path `/tftpboot/ADDRESS`.
pub fn target(want: &NfsRoot, net: &Configured) -> Result<Target, String> {
    let mut n = want.clone();
    if (n.server.is_none() || n.path.is_none())
        && let Some(rp) = &net.root_path
    {
        let from = match Root::parse(rp, None) {
            Ok(Root::Nfs(r)) if rp.starts_with("nfs") => r,
            _ => match Root::parse("/dev/nfs", Some(rp)) {
                Ok(Root::Nfs(r)) => r,
                _ => return Err(format!("the DHCP root path \"{rp}\" is not [SERVER:]PATH[,OPTIONS]")),
            },
        };
        n.server = n.server.or(from.server);
        n.path = n.path.or(from.path);
        n.options = n.options.or(from.options);
        if from.version == NfsVersion::V4 {
            n.version = NfsVersion::V4;
        }
    }
    let server =
        n.server.or_else(|| net.server.map(show)).ok_or("no NFS server: none in root=, and DHCP or ip= named none")?;
    let path = n.path.unwrap_or_else(|| format!("/tftpboot/{}", show(net.address)));
    Ok(Target { server, path, options: n.options, version: n.version })
}

/// The versions to try, and the options for each: `vers=` as given, else 4 then 3 (4 only
/// for `nfs4:`); `addr=` (the kernel resolves no names); `nolock` for v3 unless `lock`;
/// `clientaddr=` for v4 callbacks. `ro`/`rw` become mount flags.
pub fn attempts(t: &Target, addr: &str, client: Option<&str>, rw: bool) -> (MountFlags, Vec<(String, String)>) {
    let mut rw = rw;
    let mut keep: Vec<&str> = Vec::new();
    let mut given_vers = None;
    let mut minor = None;
    for o in t.options.iter().flat_map(|o| o.split(',')).filter(|o| !o.is_empty()) {
        match o {
            "rw" => rw = true,
            "ro" => rw = false,
            _ if o.starts_with("addr=") || o.starts_with("clientaddr=") => {}
            _ if o.starts_with("vers=") || o.starts_with("nfsvers=") => given_vers = o.split_once('=').map(|(_, v)| v),
            // The kernel's version flags; minorversion= with v4 (4.N).
            "v2" | "v3" | "v4" | "v4.0" | "v4.1" | "v4.2" => given_vers = Some(&o[1..]),
            _ if o.starts_with("minorversion=") => minor = o.split_once('=').map(|(_, v)| v),
            _ => keep.push(o),
        }
    }
    let with_minor = minor.map(|m| format!("4.{m}"));
    let given_vers = match (given_vers, &with_minor) {
        (None | Some("4"), Some(v)) => Some(v.as_str()),
        (v, _) => v,
    };
    let versions: Vec<&str> = match (given_vers, t.version) {
        (Some(v), _) => Vec::from([v]),
        (None, NfsVersion::V4) => Vec::from(["4.2", "4.1", "4.0"]),
        (None, NfsVersion::Any) => Vec::from(["4.2", "4.1", "4.0", "3"]),
    };
    let out = versions
        .into_iter()
        .map(|v| {
            let mut o: Vec<String> = keep.iter().map(|s| s.to_string()).collect();
            o.push(format!("vers={v}"));
            o.push(format!("addr={addr}"));
            if v.starts_with('4') {
                if let Some(c) = client {
                    o.push(format!("clientaddr={c}"));
                }
            } else if !keep.iter().any(|k| *k == "lock" || *k == "nolock") {
                o.push("nolock".into());
            }
            (v.to_string(), o.join(","))
        })
        .collect();
    (if rw { MountFlags::empty() } else { MountFlags::RDONLY }, out)
}

/// What a failed mount's errno means for an NFS mount.
fn meaning(e: Errno) -> &'static str {
    match e {
        Errno::NOENT => " (the server has no such export)",
        Errno::ACCESS | Errno::PERM => " (the server refused this client)",
        Errno::TIMEDOUT | Errno::HOSTUNREACH | Errno::NETUNREACH | Errno::CONNREFUSED => " (the server is unreachable)",
        Errno::PROTONOSUPPORT | Errno::PROTO => " (the server does not speak this version)",
        Errno::NODEV => " (the kernel has no NFS client: its modules are missing)",
        _ => "",
    }
}

/// An NFS mount as /proc/self/mountinfo shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mounted {
    /// `SERVER:PATH`, as the kernel shows it.
    pub source: String,
    /// The protocol version the client and the server agreed on (`4.2`, `3`): the super
    /// block's `vers=`.
    pub version: Option<String>,
}

/// The NFS mount on `target` in a /proc/self/mountinfo text (the last one there: the one on
/// top); None when the mount there is not NFS, or there is none.
pub fn mounted(mountinfo: &str, target: &str) -> Option<Mounted> {
    let line = mountinfo.lines().rev().find(|l| l.split(' ').nth(4) == Some(target))?;
    let (_, after) = line.split_once(" - ")?;
    let mut f = after.split(' ');
    let (fstype, source, options) = (f.next()?, f.next()?, f.next().unwrap_or(""));
    if fstype != "nfs" && fstype != "nfs4" {
        return None;
    }
    let version = options.split(',').find_map(|o| o.strip_prefix("vers=")).map(String::from);
    Some(Mounted { source: source.into(), version })
}

/// The next version down from `v` that the kernel's client speaks; None below 3.
fn lower(v: &str) -> Option<&'static str> {
    match v {
        "4.2" => Some("4.1"),
        "4.1" => Some("4.0"),
        "4.0" | "4" => Some("3"),
        _ => None,
    }
}

/// What to add to "the root's init cannot be read/run" on an NFS root: the version the mount
/// is at and the lower one to force (servers that fail a version's reads, as nfs-ganesha with
/// NFSv4.2's READ_PLUS, serve the one below it).
pub fn exec_advice(m: Option<&Mounted>) -> String {
    let Some(m) = m else {
        return " (the root is on NFS: forcing another protocol version with vers= in the NFS options may help)".into();
    };
    let Some(v) = &m.version else {
        return format!(
            " (the root {} is on NFS, at a version the mount table does not show: forcing one with vers= in the \
             NFS options may help)",
            m.source
        );
    };
    match lower(v) {
        Some(l) => format!(
            " (the root {} is mounted with NFS vers={v}: a server that fails this version's reads may serve a \
             lower one: force vers={l} in the NFS options, as root=nfs:SERVER:PATH:vers={l} or \
             nfsroot=SERVER:PATH,vers={l})",
            m.source
        ),
        None => format!(" (the root {} is mounted with NFS vers={v}: the server fails its reads)", m.source),
    }
}

/// Make this client known to the server as itself. The NFSv4 client id is "Linux NFSv4.x
/// <uniquifier>/<host name>", and in an initramfs the host name is "(none)" on every machine:
/// without a uniquifier, two diskless machines look like one rebooting, and the server drops
/// the other's state. The host name comes from DHCP or `ip=` when they give one; the
/// uniquifier (when none is set) is the interface's MAC, stable across reboots, so a reboot
/// is still recognised as one.
fn identify(net: &Configured, log: &mut crate::log::Log) {
    if let Some(h) = net.hostname.as_deref().filter(|h| !h.is_empty()) {
        match rustix::system::sethostname(h.as_bytes()) {
            Ok(()) => log.step(&format!("net: host name {h}")),
            Err(e) => log.step(&format!("net: host name {h}: {}", strerror(e))),
        }
    }
    let p = "/sys/module/nfs/parameters/nfs4_unique_id";
    if sys::read_string(p).is_some_and(|v| v.trim().is_empty()) {
        let id = netconf::show_mac(&net.mac);
        match sys::write_file(p, &id) {
            Ok(()) => log.step(&format!("nfs: client id {id}")),
            Err(e) => log.step(&format!("nfs: client id not set: {}", strerror(e))),
        }
    }
}

impl RootSource for NfsSource {
    fn kind(&self) -> leanrd_contract::RootKind {
        leanrd_contract::RootKind::Nfs
    }

    fn waiter(&mut self) -> &mut dyn Waiter {
        &mut self.waiter
    }

    fn mount(&mut self, init: &mut Init) -> Result<(), String> {
        self.waiter.log_renames(&mut init.log);
        let deadline = sys::now_ms().saturating_add(init.cmd.timeout.max(5).saturating_mul(1000));
        let net = net::bring_up(&self.waiter.0, deadline, &mut init.log)?;
        let t = target(&self.want, &net)?;
        // The server's address: a literal, or looked up in DNS.
        let addr = net::server_address(&t.server, &net, &mut init.log)?;
        let client = (net.address != [0; 4]).then(|| show(net.address));
        let (flags, tries) = attempts(&t, &addr, client.as_deref(), init.cmd.rw);
        init.mods.load("nfs", &mut init.log);
        identify(&net, &mut init.log);
        let host = net::host(&addr);
        let source = format!("{host}:{}", t.path);
        let mut failed = Vec::new();
        let mut skip_major = None;
        for (v, opts) in &tries {
            // A minor version the server lacks is answered "not supported": the next one
            // down is tried. Another failure says nothing of the other minors: on to v3.
            if skip_major.is_some_and(|m| v.starts_with(m)) {
                continue;
            }
            init.mods.load(if v.starts_with('4') { "nfsv4" } else { "nfsv3" }, &mut init.log);
            match sys::mount(&source, NEWROOT, "nfs", flags, Some(opts)) {
                Ok(()) => {
                    let ro = if flags.contains(MountFlags::RDONLY) { "ro" } else { "rw" };
                    init.log.step(&format!("{}{source}", leanrd_contract::steplog::ROOT_FOUND));
                    init.log.step(&format!("mounted {source} (nfs, {ro}, {opts}) on {NEWROOT}"));
                    net::hand_over(&net);
                    return Ok(());
                }
                Err(e) => {
                    if e != Errno::PROTONOSUPPORT {
                        skip_major = v.get(..1);
                    }
                    init.log.step(&format!("nfs: {source} vers={v}: {}", strerror(e)));
                    failed.push(format!("vers={v}: {}{}", strerror(e), meaning(e)));
                }
            }
        }
        Err(format!("mount refused: {} (server {}) on {}: {}", source, t.server, net.iface, failed.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(root_path: Option<&str>) -> Configured {
        Configured {
            iface: "ens3".into(),
            address: [10, 77, 0, 50],
            prefix: 24,
            server: Some([10, 77, 0, 1]),
            root_path: root_path.map(Into::into),
            ..Default::default()
        }
    }

    fn want(s: &str) -> NfsRoot {
        match Root::parse(s, None).unwrap() {
            Root::Nfs(n) => n,
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn the_lease_fills_what_root_left_open() {
        let t = target(&want("nfs:srv:/r:vers=3"), &lease(Some("10.9.9.9:/other"))).unwrap();
        assert_eq!((t.server.as_str(), t.path.as_str(), t.options.as_deref()), ("srv", "/r", Some("vers=3")));
        let t = target(&NfsRoot::default(), &lease(Some("10.9.9.9:/exp,vers=4.1"))).unwrap();
        assert_eq!((t.server.as_str(), t.path.as_str(), t.options.as_deref()), ("10.9.9.9", "/exp", Some("vers=4.1")));
        let t = target(&NfsRoot::default(), &lease(Some("nfs4:h:/x"))).unwrap();
        assert_eq!((t.server.as_str(), t.version), ("h", NfsVersion::V4));
        let t = target(&NfsRoot::default(), &lease(Some("/only/path"))).unwrap();
        assert_eq!((t.server.as_str(), t.path.as_str()), ("10.77.0.1", "/only/path"));
        let t = target(&NfsRoot::default(), &lease(None)).unwrap();
        assert_eq!(t.path, "/tftpboot/10.77.0.50");
        let mut l = lease(None);
        l.server = None;
        assert!(target(&NfsRoot::default(), &l).unwrap_err().starts_with("no NFS server"));
        assert!(target(&NfsRoot::default(), &lease(Some("relative"))).unwrap_err().contains("is not [SERVER:]PATH"));
    }

    /// The version is read from the super block's options of the mount on the target, the
    /// one on top when several are stacked there.
    #[test]
    fn the_negotiated_version_from_mountinfo() {
        let info = "22 1 0:21 / / rw,relatime - rootfs rootfs rw\n\
                    31 22 0:5 / /dev rw,nosuid - devtmpfs udev rw,size=1000k,mode=755\n\
                    40 22 0:40 / /newroot ro,relatime shared:1 - nfs4 10.77.0.1:/srv/root \
                    ro,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,\
                    sec=sys,clientaddr=10.77.0.50,local_lock=none,addr=10.77.0.1\n";
        let m = mounted(info, NEWROOT).unwrap();
        assert_eq!(m, Mounted { source: "10.77.0.1:/srv/root".into(), version: Some("4.2".into()) });
        assert_eq!(mounted(info, "/dev"), None, "not NFS");
        assert_eq!(mounted(info, "/nowhere"), None);
        // After the switch the root is /: the NFS mount over the initramfs's rootfs.
        let after = "22 1 0:21 / / rw - rootfs rootfs rw\n40 22 0:40 / / rw - nfs 10.0.0.1:/r rw,vers=3,nolock\n";
        assert_eq!(mounted(after, "/").unwrap().version.as_deref(), Some("3"));
        let bare = "40 22 0:40 / /newroot rw - nfs 10.0.0.1:/r rw,nolock\n";
        assert_eq!(mounted(bare, NEWROOT).unwrap().version, None);
    }

    #[test]
    fn exec_advice_names_the_version_and_a_lower_one() {
        let m = |v: Option<&str>| Mounted { source: "10.77.0.1:/srv/root".into(), version: v.map(Into::into) };
        assert_eq!(
            exec_advice(Some(&m(Some("4.2")))),
            " (the root 10.77.0.1:/srv/root is mounted with NFS vers=4.2: a server that fails this version's reads \
             may serve a lower one: force vers=4.1 in the NFS options, as root=nfs:SERVER:PATH:vers=4.1 or \
             nfsroot=SERVER:PATH,vers=4.1)"
        );
        assert!(exec_advice(Some(&m(Some("4.1")))).contains("force vers=4.0 "));
        assert!(exec_advice(Some(&m(Some("4.0")))).contains("force vers=3 "));
        let v3 = exec_advice(Some(&m(Some("3"))));
        assert!(v3.contains("vers=3: the server fails its reads") && !v3.contains("force"), "{v3}");
        assert!(exec_advice(Some(&m(None))).contains("at a version the mount table does not show"));
        assert!(exec_advice(None).contains("the root is on NFS"));
    }

    #[test]
    fn versions_and_options() {
        let t = |o: Option<&str>, v| Target {
            server: "s".into(),
            path: "/r".into(),
            options: o.map(Into::into),
            version: v,
        };
        let (f, a) = attempts(&t(None, NfsVersion::Any), "10.0.0.1", Some("10.0.0.5"), false);
        assert!(f.contains(MountFlags::RDONLY));
        let vers: Vec<&str> = a.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(vers, ["4.2", "4.1", "4.0", "3"]);
        assert_eq!(a[0].1, "vers=4.2,addr=10.0.0.1,clientaddr=10.0.0.5");
        assert_eq!(a[3].1, "vers=3,addr=10.0.0.1,nolock");
        let (f, a) = attempts(&t(Some("rw,nfsvers=3,tcp,lock,addr=evil"), NfsVersion::Any), "10.0.0.1", None, false);
        assert!(!f.contains(MountFlags::RDONLY));
        assert_eq!(a, [("3".to_string(), "tcp,lock,vers=3,addr=10.0.0.1".to_string())]);
        let (_, a) = attempts(&t(Some("v4.1,soft"), NfsVersion::Any), "10.0.0.1", None, false);
        assert_eq!(a, [("4.1".to_string(), "soft,vers=4.1,addr=10.0.0.1".to_string())]);
        let (_, a) = attempts(&t(Some("vers=4,minorversion=1"), NfsVersion::Any), "10.0.0.1", None, false);
        assert_eq!(a[0].0, "4.1");
        let (_, a) = attempts(&t(None, NfsVersion::V4), "fd00::1", None, true);
        assert_eq!(a[0], ("4.2".to_string(), "vers=4.2,addr=fd00::1".to_string()));
        assert_eq!(a.len(), 3);
    }
}
