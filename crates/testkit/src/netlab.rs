//! A network for network-root boots: a network namespace of the test's own with a bridge,
//! real servers on it (NFS by nfs-ganesha with rpcbind, iSCSI by tgt, DHCP and DNS by dnsmasq), and a tap
//! per guest NIC. QEMU runs inside the namespace, so the guests reach the servers and nothing
//! else: there is no route out of it. Everything is ended and the namespace deleted on drop.
//!
//! iSCSI targets are tgt's (userspace too), when the lab is asked for LUNs.
//!
//! The host kernel here has no nfsd, so the NFS server is ganesha (userspace); rpcbind runs
//! beside it in a mount namespace with a /run of its own (its socket is there). A test killed
//! before it could stop its lab leaves the namespace; the next lab started removes it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::TempDir;

/// The server's address on the bridge, and a name dnsmasq answers for it.
pub const SERVER: &str = "10.77.0.1";
pub const SERVER_NAME: &str = "nfs.leanrd.test";

/// What the lab's servers do.
pub struct LabSpec<'a> {
    /// Directories exported read-write, with no root squashing (by their own paths, for
    /// NFSv3 and v4 alike).
    pub exports: &'a [&'a Path],
    /// Run a DHCP server (DNS always runs: it answers [`SERVER_NAME`]).
    pub dhcp: bool,
    /// DHCP's root path (option 17), if any.
    pub root_path: Option<&'a str>,
    /// iSCSI targets (served by tgt on port 3260): each name with the file that is its LUN 1.
    pub luns: &'a [(&'a str, &'a Path)],
}

/// The tools a lab needs.
pub const TOOLS: [&str; 5] = ["ip", "ganesha.nfsd", "rpcbind", "dnsmasq", "qemu-system-x86_64"];
/// And for iSCSI targets.
pub const ISCSI_TOOLS: [&str; 2] = ["tgtd", "tgtadm"];

pub struct NetLab {
    pub ns: String,
    dir: TempDir,
    children: Mutex<Vec<Child>>,
    taps: AtomicUsize,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()))
    }
}

impl NetLab {
    /// Start the lab; Err says what did not start. Waits (bounded) until the NFS server
    /// listens.
    pub fn start(name: &str, spec: &LabSpec) -> Result<NetLab, String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let ns = format!("lr{}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst), name);
        let ns: String = ns.chars().take(30).collect();
        sweep();
        let dir = TempDir::new(&format!("netlab-{name}"));
        ip(&["netns", "add", &ns])?;
        let mut lab = NetLab { ns: ns.clone(), dir, children: Mutex::new(Vec::new()), taps: AtomicUsize::new(0) };
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &ns, "addr", "add", &format!("{SERVER}/24"), "dev", "br0"])?;
        ip(&["-n", &ns, "link", "set", "br0", "up"])?;
        lab.nfs(spec.exports)?;
        lab.dnsmasq(spec)?;
        if !spec.luns.is_empty() {
            lab.iscsi(spec.luns)?;
        }
        Ok(lab)
    }

    fn spawn(&mut self, what: &str, script: &str) -> Result<(), String> {
        let log = self.dir.join(format!("{what}.log"));
        let out = fs::File::create(&log).map_err(|e| e.to_string())?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, "unshare", "-m", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("{what}: {e}"))?;
        self.children.lock().unwrap().push(child);
        Ok(())
    }

    /// NFSv4 owners as numbers (as Linux's nfsd sends them to sec=sys clients): the
    /// initramfs runs no idmapd, and names it cannot map would read as nobody.
    fn nfs(&mut self, exports: &[&Path]) -> Result<(), String> {
        let d = self.dir.0.display();
        let mut conf = format!(
            "NFS_CORE_PARAM {{ Protocols = 3, 4; NFS_Port = 2049; MNT_Port = 20048; Enable_NLM = false; \
             Enable_RQUOTA = false; Bind_addr = {SERVER}; }}\n\
             NFSV4 {{ Graceless = true; Lease_Lifetime = 10; Allow_Numeric_Owners = true; Only_Numeric_Owners = true; \
             RecoveryBackend = fs; RecoveryRoot = {d}/recovery; }}\n\
             NFS_KRB5 {{ Active_krb5 = false; }}\n\
             LOG {{ Default_Log_Level = WARN; }}\n"
        );
        for (i, e) in exports.iter().enumerate() {
            conf += &format!(
                "EXPORT {{ Export_Id = {}; Path = {p}; Pseudo = {p}; Access_Type = RW; Squash = No_Root_Squash; \
                 SecType = sys; Protocols = 3, 4; Transports = TCP; FSAL {{ Name = VFS; }} }}\n",
                i + 1,
                p = e.display()
            );
        }
        let cf = self.dir.join("ganesha.conf");
        fs::write(&cf, conf).map_err(|e| e.to_string())?;
        let script = format!(
            "mount -t tmpfs none /run && mkdir -p /run/ganesha && rpcbind -w -h {SERVER} && \
             exec ganesha.nfsd -F -L {d}/ganesha-server.log -f {} -p /run/ganesha.pid",
            cf.display()
        );
        self.spawn("ganesha", &script)?;
        // Listening: bounded wait (30 s).
        for _ in 0..300 {
            let o = Command::new("ip").args(["netns", "exec", &self.ns, "ss", "-ltn"]).output();
            if o.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(":2049")) {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(format!("ganesha did not listen on 2049: {}", self.log("ganesha")))
    }

    /// tgt (a userspace iSCSI target) on the bridge's address: one target per LUN file, open
    /// to every initiator. tgtadm reaches tgtd by a socket under /run, so both run in one
    /// mount namespace with a /run of its own. Waits (bounded) until the targets are set up.
    fn iscsi(&mut self, luns: &[(&str, &Path)]) -> Result<(), String> {
        let mut script = format!(
            "mount -t tmpfs none /run && mkdir -p /run/lock && {{ tgtd -f --iscsi portal={SERVER}:3260 & }} && \
             for i in $(seq 100); do [ -S /run/tgtd/socket.0 ] && break; sleep 0.1; done && "
        );
        for (i, (name, file)) in luns.iter().enumerate() {
            let tid = i + 1;
            script += &format!(
                "tgtadm --lld iscsi --op new --mode target --tid {tid} -T {name} && \
                 tgtadm --lld iscsi --op new --mode logicalunit --tid {tid} --lun 1 -b {} && \
                 tgtadm --lld iscsi --op bind --mode target --tid {tid} -I ALL && ",
                file.display()
            );
        }
        script += "echo LEANRD-TGT-READY && wait";
        self.spawn("tgt", &script)?;
        for _ in 0..300 {
            let log = self.log("tgt");
            if log.contains("LEANRD-TGT-READY") {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(format!("tgt did not set its targets up: {}", self.log("tgt")))
    }

    fn dnsmasq(&mut self, spec: &LabSpec) -> Result<(), String> {
        let mut script = format!(
            "exec dnsmasq --no-daemon --conf-file=/dev/null --user=root --interface=br0 --bind-interfaces \
             --no-resolv --no-hosts --leasefile-ro --log-dhcp --address=/{SERVER_NAME}/{SERVER} \
             --pid-file={}/dnsmasq.pid",
            self.dir.0.display()
        );
        if spec.dhcp {
            // --no-ping: dnsmasq holds a new client's offer for 3 s while it pings the address
            // (a server's habit, not the client's time).
            script += &format!(
                " --no-ping --dhcp-authoritative --dhcp-range=10.77.0.50,10.77.0.199,255.255.255.0,10m \
                 --dhcp-option=option:router,{SERVER} --dhcp-option=option:dns-server,{SERVER}"
            );
            if let Some(rp) = spec.root_path {
                script += &format!(" --dhcp-option=option:root-path,{rp}");
            }
        }
        self.spawn("dnsmasq", &script)
    }

    /// A server's log, for a failure message.
    pub fn log(&self, what: &str) -> String {
        fs::read_to_string(self.dir.join(format!("{what}.log"))).unwrap_or_default()
    }

    /// QEMU arguments for NICs on the bridge (one tap each), with these MACs; `wired: false`
    /// gives a NIC on a tap that is on no bridge: a link with nobody on it.
    pub fn nics(&self, macs: &[&str], model: &str, wired: bool) -> Result<Vec<String>, String> {
        let mut a = Vec::new();
        for mac in macs {
            let n = self.taps.fetch_add(1, Ordering::SeqCst);
            let tap = format!("tap{n}");
            ip(&["-n", &self.ns, "tuntap", "add", &tap, "mode", "tap"])?;
            if wired {
                ip(&["-n", &self.ns, "link", "set", &tap, "master", "br0"])?;
            }
            ip(&["-n", &self.ns, "link", "set", &tap, "up"])?;
            a.extend([
                "-netdev".into(),
                format!("tap,id=n{n},ifname={tap},script=no,downscript=no"),
                "-device".into(),
                format!("{model},netdev=n{n},mac={mac}"),
            ]);
        }
        Ok(a)
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.0.clone()
    }
}

/// Namespaces a killed test left (`lrPID-...` whose process is gone): their servers are
/// ended and the namespaces deleted.
fn sweep() {
    let Ok(o) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name.strip_prefix("lr").and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        kill_all(name);
        let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
    }
}

/// Kill every process in a namespace.
fn kill_all(ns: &str) {
    if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
    }
}

/// A command (a QEMU command line) run inside network namespace `ns`.
pub fn in_netns(ns: &str, q: &Command) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(q.get_program()).args(q.get_args());
    c
}

impl NetLab {
    /// End the servers and delete the namespace (a lab held in a static is never dropped:
    /// its binary's main calls this). Once is enough; again does nothing.
    pub fn stop(&self) {
        for mut c in self.children.lock().unwrap().drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Whatever is left in the namespace (rpcbind forks itself away).
        kill_all(&self.ns);
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).stderr(Stdio::null()).status();
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        self.stop();
    }
}
