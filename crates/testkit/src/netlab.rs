//! A network for network-root boots: a network namespace of the test's own with a bridge,
//! real servers on it (NFS by nfs-ganesha with rpcbind, iSCSI by tgt, DHCP and DNS by dnsmasq), and a tap
//! per guest NIC. QEMU runs inside the namespace, so the guests reach the servers and nothing
//! else: there is no route out of it. Everything is ended and the namespace deleted on drop.
//!
//! iSCSI targets are tgt's (userspace too), when the lab is asked for LUNs. NVMe/TCP needs
//! the kernel's nvmet, which the host kernel lacks: its target is a VM on the bridge.
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

/// The servers' address on the bridge (NFS, iSCSI, DHCP and DNS).
pub const SERVER: &str = "10.77.0.1";
/// A name dnsmasq answers with [`SERVER`]'s address.
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
    /// NVMe over TCP subsystems, served by a target VM (the host kernel has no nvmet).
    pub nvmf: Option<NvmfSpec<'a>>,
    /// A Tang server on [`SERVER`]:[`TANG_PORT`].
    pub tang: Option<TangServer<'a>>,
}

/// What listens on the Tang port.
#[derive(Debug, Clone, Copy)]
pub enum TangServer<'a> {
    /// Debian's tangd under socat (one process per connection), with this key directory.
    Keys(&'a Path),
    /// A server that takes each connection and never answers.
    Silent,
    /// tangd with this key directory, except for the first connection, which is closed
    /// unanswered (a server that was down, then came back).
    Back(&'a Path),
}

/// What the NBD server needs.
pub const NBD_TOOLS: [&str; 2] = ["nbd-server", "ss"];

/// The Tang server's port.
pub const TANG_PORT: u16 = 7500;
/// What a Tang server needs.
pub const TANG_TOOLS: [&str; 2] = ["socat", "/usr/libexec/tangd"];

/// The NVMe/TCP target VM: this kernel (with nvmet-tcp among its modules) serves each
/// subsystem's file as its namespace 1, at [`NVMF_SERVER`]:4420 (with the discovery
/// subsystem on the same port).
pub struct NvmfSpec<'a> {
    /// The target VM's kernel (vmlinuz-RELEASE); its modules come from the host's
    /// /lib/modules/RELEASE.
    pub kernel: &'a Path,
    /// The subsystems: each NQN with the image file that is its namespace 1.
    pub subsystems: &'a [(&'a str, &'a Path)],
}

/// The NVMe/TCP target VM's address on the bridge.
pub const NVMF_SERVER: &str = "10.77.0.2";

/// The tools a lab needs.
pub const TOOLS: [&str; 5] = ["ip", "ganesha.nfsd", "rpcbind", "dnsmasq", "qemu-system-x86_64"];
/// And for iSCSI targets.
pub const ISCSI_TOOLS: [&str; 2] = ["tgtd", "tgtadm"];

/// A running lab: its namespace, servers and taps; the servers are ended and the namespace
/// deleted on drop.
pub struct NetLab {
    /// The network namespace's name (`lrPID-N-NAME`, at most 30 characters), for
    /// [`in_netns`].
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
        if !spec.exports.is_empty() {
            lab.nfs(spec.exports)?;
        }
        lab.dnsmasq(spec)?;
        if let Some(t) = spec.tang {
            lab.tang(t)?;
        }
        if !spec.luns.is_empty() {
            lab.iscsi(spec.luns)?;
        }
        if let Some(n) = &spec.nvmf {
            lab.nvmet(n)?;
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

    /// tangd on the bridge's address, started by socat for each connection (as
    /// systemd's tangd.socket does), or a silent listener. Waits (bounded, 10 s) until it
    /// listens.
    fn tang(&mut self, t: TangServer) -> Result<(), String> {
        let serve = match t {
            TangServer::Keys(db) => format!("/usr/libexec/tangd {}", db.display()),
            TangServer::Silent => "sleep 600".into(),
            TangServer::Back(db) => {
                // One process per connection: the first leaves a mark and goes.
                let (mark, script) = (self.dir.join("tang-first"), self.dir.join("tang-back.sh"));
                let text = format!(
                    "#!/bin/sh\n[ -e {m} ] && exec /usr/libexec/tangd {db}\ntouch {m}\n",
                    m = mark.display(),
                    db = db.display()
                );
                fs::write(&script, text).map_err(|e| e.to_string())?;
                fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                    .map_err(|e| e.to_string())?;
                script.display().to_string()
            }
        };
        let script = format!("exec socat TCP-LISTEN:{TANG_PORT},bind={SERVER},reuseaddr,fork EXEC:'{serve}'");
        self.spawn("tang", &script)?;
        for _ in 0..100 {
            let o = Command::new("ip").args(["netns", "exec", &self.ns, "ss", "-ltn"]).output();
            if o.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&format!(":{TANG_PORT}"))) {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(format!("tangd (socat) did not listen on {TANG_PORT}: {}", self.log("tang")))
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

    /// nbd-server on [`SERVER`]:10809 (NBD's port), each export by its name, read-only (one
    /// file served to several boots). Started on a lab already running; waits (bounded: 10 s)
    /// until the server listens. It forks a process per client (`-d`, one process, serves one
    /// client at a time, and a VM that powers off never closes its connection); the daemon,
    /// in the lab's namespace with a /run of its own, ends with the lab's processes.
    pub fn nbd(&mut self, exports: &[(&str, &Path)]) -> Result<(), String> {
        let mut conf = format!("[generic]\nlistenaddr = {SERVER}\nport = 10809\nallowlist = true\n");
        for (name, file) in exports {
            conf += &format!("[{name}]\nexportname = {}\nreadonly = true\n", file.display());
        }
        let path = self.dir.join("nbd-server.conf");
        fs::write(&path, conf).map_err(|e| format!("{}: {e}", path.display()))?;
        let script = format!(
            "mount -t tmpfs none /run && nbd-server -C {} && \
             for i in $(seq 100); do ss -Hltn 'sport = :10809' | grep -q . && break; sleep 0.1; done && \
             ss -Hltn 'sport = :10809' | grep -q . && echo LEANRD-NBD-READY",
            path.display()
        );
        self.spawn("nbd", &script)?;
        for _ in 0..100 {
            if self.log("nbd").contains("LEANRD-NBD-READY") {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(format!("nbd-server did not listen in 10 s: {}", self.log("nbd")))
    }

    /// The NVMe/TCP target: a VM on the bridge (TCG, one CPU, idle between requests) booting
    /// the kernel with a busybox initramfs that loads nvmet-tcp and the virtio drivers and
    /// sets the subsystems up in configfs. Waits (bounded) until it says it is serving.
    fn nvmet(&mut self, spec: &NvmfSpec) -> Result<(), String> {
        let dir = self.dir.join("nvmet");
        let tree = dir.join("tree");
        for d in ["bin", "proc", "sys", "dev"] {
            fs::create_dir_all(tree.join(d)).map_err(|e| e.to_string())?;
        }
        fs::copy("/bin/busybox", tree.join("bin/busybox")).map_err(|e| format!("/bin/busybox: {e}"))?;
        let kver = crate::boot::kver_of(spec.kernel);
        let mut depends = String::new();
        // One module a call: modprobe takes the words after the first as its parameters.
        for m in ["virtio_pci", "virtio_net", "virtio_blk", "nvmet_tcp"] {
            let o = Command::new("modprobe")
                .args(["-S", &kver, "--show-depends", m])
                .output()
                .map_err(|e| format!("modprobe: {e}"))?;
            if !o.status.success() {
                return Err(format!("modprobe --show-depends {m}: {}", String::from_utf8_lossy(&o.stderr)));
            }
            depends += &String::from_utf8_lossy(&o.stdout);
        }
        let mut insmod = Vec::new();
        for l in depends.lines() {
            let Some(path) = l.strip_prefix("insmod ").and_then(|r| r.split_whitespace().next()) else { continue };
            if insmod.iter().any(|p| p == path) {
                continue;
            }
            let to = tree.join(path.trim_start_matches('/'));
            fs::create_dir_all(to.parent().expect("a module's directory")).map_err(|e| e.to_string())?;
            fs::copy(path, &to).map_err(|e| format!("{path}: {e}"))?;
            insmod.push(path.to_string());
        }
        let cfg = "/sys/kernel/config/nvmet";
        let mut init = format!(
            "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nmount -t proc proc /proc\nmount -t sysfs sys /sys\n\
             mount -t devtmpfs dev /dev\nfor m in {}; do insmod $m; done\nmount -t configfs none /sys/kernel/config\n\
             for i in $(seq 100); do [ -b /dev/vd{last} ] && [ -e /sys/class/net/eth0 ] && break; sleep 0.1; done\n\
             ip link set eth0 up && ip addr add {NVMF_SERVER}/24 dev eth0\np={cfg}/ports/1\nmkdir $p\n\
             echo tcp > $p/addr_trtype; echo ipv4 > $p/addr_adrfam; echo {NVMF_SERVER} > $p/addr_traddr; \
             echo 4420 > $p/addr_trsvcid\n",
            insmod.join(" "),
            last = (b'a' + spec.subsystems.len().saturating_sub(1) as u8) as char
        );
        let mut drives = Vec::new();
        for (i, (nqn, file)) in spec.subsystems.iter().enumerate() {
            let disk = format!("/dev/vd{}", (b'a' + i as u8) as char);
            init += &format!(
                "d={cfg}/subsystems/{nqn}\nmkdir $d && echo 1 > $d/attr_allow_any_host && mkdir $d/namespaces/1 && \
                 echo -n {disk} > $d/namespaces/1/device_path && echo 1 > $d/namespaces/1/enable && \
                 ln -s $d $p/subsystems/{nqn} || echo LEANRD-NVMET-FAILED {nqn}\n"
            );
            drives.extend(["-drive".to_string(), format!("file={},if=virtio,format=raw", file.display())]);
        }
        init += "echo LEANRD-NVMET-READY\nwhile true; do sleep 3600; done\n";
        fs::write(tree.join("init"), init).map_err(|e| e.to_string())?;
        let img = dir.join("nvmet.cpio");
        let pack = format!(
            "chmod 755 {t}/init && cd {t} && find . | cpio -o -H newc --quiet > {}",
            img.display(),
            t = tree.display()
        );
        let st = Command::new("sh").args(["-c", &pack]).status().map_err(|e| e.to_string())?;
        if !st.success() {
            return Err("the target VM's initramfs could not be packed".into());
        }
        let mut extra = drives;
        extra.extend(self.nics(&["52:54:00:ff:00:02"], "virtio-net-pci", true)?);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let q = crate::qemu_command(spec.kernel, &img, "quiet", &extra, 6 * 3600);
        let log = self.dir.join("nvmet.log");
        let out = fs::File::create(&log).map_err(|e| e.to_string())?;
        let child = in_netns(&self.ns, &q)
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("the NVMe/TCP target VM: {e}"))?;
        self.children.lock().unwrap().push(child);
        // TCG boots it in about 10 s.
        for _ in 0..1200 {
            let log = self.log("nvmet");
            if log.contains("LEANRD-NVMET-FAILED") {
                return Err(format!("the NVMe/TCP target VM could not set a subsystem up:\n{log}"));
            }
            if log.contains("LEANRD-NVMET-READY") {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(format!("the NVMe/TCP target VM did not come up in 120 s:\n{}", self.log("nvmet")))
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

    /// tgt's targets as `tgtadm --op show --mode target` lists them now, with each I_T nexus
    /// (a session's initiator name): run in tgtd's own mount namespace, where its socket is.
    pub fn tgt_show(&self) -> Result<String, String> {
        let o = Command::new("ip").args(["netns", "pids", &self.ns]).output().map_err(|e| e.to_string())?;
        let pid = String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .find(|p| fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "tgtd"))
            .map(str::to_string)
            .ok_or("no tgtd in the lab")?;
        let o = Command::new("timeout")
            .args(["10", "nsenter", "-t", &pid, "-m", "tgtadm", "--lld", "iscsi", "--op", "show", "--mode", "target"])
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(format!("tgtadm --op show: {}", String::from_utf8_lossy(&o.stderr)));
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
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

    /// The lab's working directory: the servers' configurations and logs (`WHAT.log`).
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
