//! The kernel command line: what /init takes from it, parsed once.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::{Chap, CryptKey, CryptOptions, DeviceRef, IscsiTarget, Mounts, NbdTarget, NvmfTarget, Root};

use crate::netconf::IpParam;
use crate::params;

/// Settings from the kernel command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cmdline {
    /// `root=`, `rootfstype=`, `rootflags=`, `mount.usr=`, `mount.usrfstype=`, `mount.usrflags=`.
    pub mounts: Mounts,
    /// `rw`: mount the root read-write (its file system checked first when the image has the
    /// checker); false: `ro`, read-only, the default. The last of the two given wins.
    pub rw: bool,
    /// `init=`: the program to start in the root; None: the first of /sbin/init, /etc/init,
    /// /bin/init and /bin/sh that exists.
    pub init: Option<String>,
    /// `rootwait`: wait for the root (and, for a network root, for DHCP and the storage server)
    /// however long it takes, ignoring `timeout`.
    pub rootwait: bool,
    /// `rootdelay=`: seconds to pause before looking for the root (0: none).
    pub rootdelay: u64,
    /// `panic=`: seconds to wait before rebooting when the boot fails and there is no rescue shell
    /// (negative: at once); None or 0: wait forever with the diagnosis on the screen.
    pub panic: Option<i64>,
    /// `quiet`: the kernel's; read but unused (/init prints only errors in any case).
    pub quiet: bool,
    /// `leanrd.debug`: send every step to the kernel log (/dev/kmsg) as it happens.
    pub debug: bool,
    /// `leanrd.shell`: open the rescue shell (when the image has one) just before the switch to
    /// the root.
    pub shell: bool,
    /// Seconds to wait for root (leanrd.timeout=, default 30).
    pub timeout: u64,
    /// rd.luks.uuid= (repeatable): LUKS containers to unlock.
    pub luks_uuids: Vec<String>,
    /// rd.luks.name=UUID=NAME: mapper names.
    pub luks_names: Vec<(String, String)>,
    /// `rd.luks.key=[UUID=]PATH[:DEVICE]`: a key file in the image or on a device, for one
    /// container (by UUID) or for all.
    pub luks_keys: Vec<(Option<String>, CryptKey)>,
    /// rd.luks.options=[UUID=]OPTIONS: crypttab options, for one container or for those
    /// crypttab says nothing about.
    pub luks_options: Vec<(Option<String>, CryptOptions)>,
    /// rd.luks.crypttab=0: ignore the image's crypttab entries.
    pub no_crypttab: bool,
    /// `rd.luks=0`: unlock no LUKS container.
    pub no_luks: bool,
    /// rd.vconsole.keymap= / vconsole.keymap=: the keymap (one the image holds) to apply.
    pub keymap: Option<String>,
    /// `splash`: show plymouth's splash when the image has plymouth.
    pub splash: bool,
    /// `plymouth.enable=`/`rd.plymouth=` (`nosplash`: false): start plymouthd or never; None:
    /// as `splash` says.
    pub plymouth: Option<bool>,
    /// `rd.lvm=0`: activate no LVM volume group.
    pub no_lvm: bool,
    /// `rd.md=0`: assemble no md RAID array.
    pub no_md: bool,
    /// `rd.multipath=0`: assemble no dm-multipath map.
    pub no_multipath: bool,
    /// `MODULE.PARAM=VALUE` words: parameters for a module when it is loaded, as modprobe
    /// takes them from the command line (after modprobe.d's, so they win).
    pub module_options: Vec<(String, String)>,
    /// `modprobe.blacklist=` and `rd.driver.blacklist=` (comma lists, repeatable).
    pub blacklist: Vec<String>,
    /// `rd.driver.pre=`: modules to load first, before the image's own list.
    pub driver_pre: Vec<String>,
    /// `rd.driver.post=`: modules to load once the root's devices are found, before it is mounted.
    pub driver_post: Vec<String>,
    /// `rd.leanrd.coldplug=all`: load drivers for every device at boot, not only storage and
    /// input.
    pub coldplug_all: bool,
    /// `resume=`: the swap device holding a hibernation image, as the kernel takes it; None:
    /// the one the image recorded, if any.
    pub resume: Option<DeviceRef>,
    /// `resume_offset=`: where a swap file starts on the resume device, in pages; None: the
    /// offset the image recorded with its resume device, if any.
    pub resume_offset: Option<u64>,
    /// `noresume`: boot afresh; a hibernation image found is discarded, as the kernel does.
    pub noresume: bool,
    /// `resumedelay=`: seconds to pause before looking for the resume device (0: none).
    pub resumedelay: u64,
    /// `resumewait`: wait for the resume device however long it takes.
    pub resumewait: bool,
    /// `fsck.mode=`: auto (the default), skip or force.
    pub fsck_mode: FsckMode,
    /// `fsck.repair=`: preen (the default), yes or no.
    pub fsck_repair: FsckRepair,
    /// `ip=` (repeatable): how to configure the network for a network root.
    pub ip: Vec<IpParam>,
    /// `BOOTIF=`: the interface to use, by MAC (PXE).
    pub bootif: Option<[u8; 6]>,
    /// `ifname=NAME:MAC` (repeatable): interface names, for `ip=` to use.
    pub ifnames: Vec<(String, [u8; 6])>,
    /// `rd.neednet=1`: bring the network up (and hand it to the root) even for a local root.
    pub neednet: bool,
    /// `rd.leanrd.tang_timeout=`: seconds each Tang server has (None: the image's setting).
    pub tang_timeout: Option<u64>,
    /// `rd.leanrd.exitrd=`: leave the exitrd at the switch or not (None: the image's setting).
    pub exitrd: Option<bool>,
    /// `rd.shutdown.timeout.umount=`: seconds each unmount of the way down has (None: the
    /// image's setting).
    pub umount_timeout: Option<u64>,
    /// `rd.break=shutdown`: the rescue shell before the teardown.
    pub break_shutdown: bool,
    /// iSCSI targets and settings (dracut's `netroot=iscsi:`, `root=iscsi:`, `rd.iscsi.*`).
    pub iscsi: IscsiCmd,
    /// NVMe over TCP (dracut's `rd.nvmf.*`).
    pub nvmf: NvmfCmd,
    /// A Network Block Device (dracut's `root=nbd:`, `netroot=nbd:`).
    pub nbd: NbdCmd,
    /// ZFS (zfs-initramfs's `rpool=`, `bootfs=`, `zfsforce`; booster's `zfs=`).
    pub zfs: ZfsCmd,
    /// Live media (dracut's `rd.live.*`, Debian's `boot=live`, `toram`, `live-media-path=`).
    pub live: LiveCmd,
    /// dm-verity and partitions found by type (systemd's `roothash=`, `systemd.verity_*`,
    /// `rd.systemd.gpt_auto=`).
    pub verity: VerityCmd,
    /// `systemd.volatile=`: a root whose writes go to memory.
    pub volatile: crate::volatile::Volatile,
    /// `systemd.set_credential=`, `systemd.set_credential_binary=`, `systemd.import_credentials=`.
    pub credentials: crate::stub::CmdlineCredentials,
    /// Values that could not be used, for the diagnosis.
    pub problems: Vec<String>,
}

/// What the command line says of verified images.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerityCmd {
    /// `systemd.verity=0`: no verity device is set up.
    pub off: bool,
    /// `rd.systemd.gpt_auto=0`: no partition is found by its type or the root hash's halves.
    pub gpt_auto_off: bool,
    /// `root=gpt-auto`: the root found by partition type, as with no `root=`.
    pub gpt_auto_root: bool,
    /// The root's: `roothash=`, `systemd.verity_root_*`.
    pub root: VeritySpec,
    /// /usr's: `usrhash=`, `systemd.verity_usr_*`.
    pub usr: VeritySpec,
}

/// One verity device as the command line names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VeritySpec {
    /// The root hash.
    pub hash: Option<Vec<u8>>,
    /// The data device; None: by the hash's first half.
    pub data: Option<DeviceRef>,
    /// The hash device; None: by the hash's second half.
    pub hash_device: Option<DeviceRef>,
    /// veritytab's options.
    pub options: leanrd_contract::verity::VerityOptions,
}

/// What the command line says of iSCSI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IscsiCmd {
    /// `netroot=iscsi:...` (repeatable), `root=iscsi:...`, or the `rd.iscsi.target.*` set.
    pub targets: Vec<IscsiTarget>,
    /// `root=iscsi:...`: the root is the LUN itself (its target is the first one).
    pub lun_root: bool,
    /// `rd.iscsi.initiator=`.
    pub initiator: Option<String>,
    /// `rd.iscsi.param=NAME=VALUE` (repeatable): node settings for iscsistart.
    pub params: Vec<String>,
}

/// What the command line says of NBD.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NbdCmd {
    /// `root=nbd:...`, else the first `netroot=nbd:...` (dracut's precedence).
    pub target: Option<NbdTarget>,
    /// `root=nbd:...`: the root is the device itself (its file system type and options are
    /// the target's, else `rootfstype=` and `rootflags=`).
    pub device_root: bool,
}

/// What the command line says of a ZFS root beyond `root=`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZfsCmd {
    /// `bootfs=` or `zfs=`: the root dataset, whatever `root=` says.
    pub dataset: Option<String>,
    /// `rpool=`: the pool whose `bootfs` is the root (with `root=zfs:AUTO`, or no root=).
    pub pool: Option<String>,
    /// `zfsforce=1` (`zfs_force=`, `zfs.force=`): import a pool another system has imported.
    pub force: bool,
}

/// What the command line says of a live root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveCmd {
    /// `rd.live.ram` (Debian's `toram`): copy the image into RAM first; the medium can go.
    pub ram: bool,
    /// `rd.live.check`: verify the medium's implanted MD5 (isomd5sum's) before using it.
    pub check: bool,
    /// `rd.live.eject`: eject an optical medium on the way down (the exitrd).
    pub eject: bool,
    /// live-boot's `noeject`: never eject it (whatever `rd.live.eject` says).
    pub noeject: bool,
    /// `rd.live.overlay=DEVICE`: a persistent upper layer on that file system.
    pub overlay: Option<DeviceRef>,
    /// `rd.live.overlay.size=`: the tmpfs upper layer's size (MiB, or tmpfs's `size=` form).
    pub overlay_size: Option<String>,
    /// `rd.live.dir=` (dracut's) or `live-media-path=` (Debian's): the directory on the medium
    /// holding the image, without leading or trailing '/'; None: LiveOS, else live.
    pub dir: Option<String>,
    /// `rd.live.squashimg=`: the image's file name (no '/') in that directory; None:
    /// squashfs.img, else filesystem.squashfs or any *.squashfs there.
    pub squashimg: Option<String>,
}

/// What the command line says of NVMe over TCP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NvmfCmd {
    /// `rd.nvmf.discover=tcp,TRADDR,[HOST_TRADDR],[TRSVCID]` (repeatable).
    pub targets: Vec<NvmfTarget>,
    /// `rd.nvmf.hostnqn=`: this host's NQN; None: the one the image recorded, else the kernel's.
    pub hostnqn: Option<String>,
    /// `rd.nvmf.hostid=`: this host's ID; None: the one the image recorded, else the kernel's.
    pub hostid: Option<String>,
    /// `rd.nvmf.nostatic`: not the subsystems the image recorded.
    pub nostatic: bool,
}

/// A command line being parsed: the settings, and the words read once all are seen.
#[derive(Default)]
pub(crate) struct Parse {
    pub c: Cmdline,
    /// `root=`, read with `nfsroot=` (which may come after it).
    pub root: Option<String>,
    pub nfsroot: Option<String>,
    pub iscsi: IscsiWords,
    /// `boot=`.
    pub boot: Option<String>,
}

/// The `rd.iscsi.*` words that name one target between them.
#[derive(Default)]
pub(crate) struct IscsiWords {
    pub name: Option<String>,
    pub ip: Option<String>,
    pub port: Option<String>,
    pub group: Option<String>,
    pub lun: Option<String>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub in_user: Option<String>,
    pub in_password: Option<String>,
}

impl IscsiWords {
    /// The target they name, and the credentials for every target given without its own.
    fn finish(self, c: &mut Cmdline) {
        let chap = match (self.user, self.password) {
            (Some(user), Some(password)) => Some(Chap {
                user,
                password,
                in_user: self.in_user.clone(),
                in_password: self.in_password.clone().filter(|_| self.in_user.is_some()),
            }),
            (None, None) => None,
            _ => {
                c.problems.push("rd.iscsi.username= and rd.iscsi.password= go together (ignored)".into());
                None
            }
        };
        let spec = match (self.name, self.ip) {
            // The words are put together as one netroot=: none may bring a field separator
            // where it does not belong (an '@' makes credentials of what is before it).
            (Some(n), Some(ip))
                if n.contains('@')
                    || ip.contains('@')
                    || [&self.port, &self.lun]
                        .into_iter()
                        .flatten()
                        .any(|v| !v.bytes().all(|b| b.is_ascii_digit())) =>
            {
                c.problems.push(
                    "rd.iscsi.target.*: an '@' in the name or address, or a port or LUN that is no number (ignored)"
                        .into(),
                );
                String::new()
            }
            (Some(n), Some(ip)) => {
                let ip = if ip.contains(':') && !ip.starts_with('[') { format!("[{ip}]") } else { ip };
                format!("iscsi:{ip}::{}:{}:{n}", self.port.unwrap_or_default(), self.lun.unwrap_or_default())
            }
            (None, None) => String::new(),
            _ => {
                c.problems.push("rd.iscsi.target.name= and rd.iscsi.target.ip= go together (ignored)".into());
                String::new()
            }
        };
        if !spec.is_empty() {
            match IscsiTarget::parse(&spec) {
                Ok(mut t) => {
                    match self.group.as_deref().map(str::parse) {
                        Some(Ok(g)) => t.group = Some(g),
                        Some(Err(_)) => c.problems.push("rd.iscsi.target.group= is not a number (1 used)".into()),
                        None => {}
                    }
                    c.iscsi.targets.push(t);
                }
                Err(e) => c.problems.push(format!("rd.iscsi.target.*: {e} (ignored)")),
            }
        }
        for t in c.iscsi.targets.iter_mut().filter(|t| t.chap.is_none()) {
            t.chap = chap.clone();
        }
    }
}

/// Whether to check a file system the initramfs mounts read-write (systemd's `fsck.mode=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FsckMode {
    /// Check when the checker finds the file system needs it: the default.
    #[default]
    Auto,
    /// Never check.
    Skip,
    /// Check even a file system that looks clean (`-f`; fsck.fat has no such option).
    Force,
}

/// What the checker may repair (systemd's `fsck.repair=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FsckRepair {
    /// What is safe to repair without asking.
    #[default]
    Preen,
    /// Repair everything, answering yes to every question (`-y`).
    Yes,
    /// Repair nothing: only report (`-n`).
    No,
}

/// systemd's `[UUID=]VALUE` for rd.luks.key= and rd.luks.options=: a value that does not
/// start with '/' and has '=' before any '/' names a container (`luks-` prefix allowed).
pub(crate) fn for_uuid(v: &str) -> (Option<String>, &str) {
    match v.split_once('=') {
        Some((u, rest))
            if !v.starts_with('/')
                && !u.contains('/')
                && !u.contains(',')
                && u.trim_start_matches("luks-").bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') =>
        {
            (Some(u.trim_start_matches("luks-").to_string()), rest)
        }
        _ => (None, v),
    }
}

/// Split a command line into words, honouring double quotes.
pub fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(core::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

impl Cmdline {
    /// Whether the command line asks for plymouth's splash (`splash`, or `plymouth.enable=1`;
    /// never with `nosplash`, `plymouth.enable=0` or `rd.plymouth=0`).
    pub fn splash_wanted(&self) -> bool {
        self.plymouth.unwrap_or(self.splash)
    }

    /// What the network settings ask for.
    pub fn net_wanted(&self) -> crate::net::Wanted {
        crate::net::Wanted { ip: self.ip.clone(), bootif: self.bootif, names: self.ifnames.clone() }
    }

    /// Parse a command line: each word through [`crate::params::PARAMS`]; a word of a known
    /// family (`rd.luks.`, ...) it does not know is reported, and any other `MODULE.PARAM`
    /// word is a module parameter.
    pub fn parse(s: &str) -> Cmdline {
        let mut p = Parse { c: Cmdline { timeout: 30, ..Cmdline::default() }, ..Parse::default() };
        for w in words(s) {
            let (k, v) = match w.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (w.as_str(), None),
            };
            if let Some(param) = params::find(k) {
                if let Err(e) = param.form.read(v).and_then(|value| (param.apply)(&mut p, value)) {
                    p.c.problems.push(format!("{} ignored: {e}", leanrd_contract::redact_secrets(&w)));
                }
            } else if let Some((_, hint)) = params::FAMILIES.iter().find(|(f, _)| k.starts_with(f)) {
                p.c.problems
                    .push(format!("{}: not known to leanrd's /init{hint}", leanrd_contract::redact_secrets(&w)));
            } else if let Some((m, param)) = k.split_once('.')
                && !m.is_empty()
                && !param.is_empty()
            {
                let param = match v {
                    Some(v) if v.contains(' ') => format!("{param}=\"{v}\""),
                    Some(v) => format!("{param}={v}"),
                    None => param.to_string(),
                };
                p.c.module_options.push((leanrd_kmod::normalize(m), param));
            }
        }
        let Parse { mut c, mut root, nfsroot, iscsi, boot } = p;
        if let Some(v) = root.as_deref().filter(|v| v.starts_with("iscsi:")) {
            match IscsiTarget::parse(v) {
                Ok(t) => {
                    c.iscsi.targets.insert(0, t);
                    c.iscsi.lun_root = true;
                }
                Err(e) => c.problems.push(format!("root= ignored: {e}")),
            }
            root = None;
        }
        iscsi.finish(&mut c);
        if let Some(v) = root.as_deref().filter(|v| v.starts_with("nbd:")) {
            match NbdTarget::parse(v) {
                Ok(t) => {
                    if c.nbd.target.is_some() {
                        c.problems.push("netroot=nbd: ignored: root=nbd: takes precedence (as in dracut)".into());
                    }
                    // dracut: the target's fields replace rootfstype= and rootflags=.
                    if let Some(fs) = &t.fstype {
                        c.mounts.rootfstype = Some(fs.clone());
                    }
                    // ro and rw among them say how the root is mounted (as dracut's nbdroot.sh
                    // reads them), unless the command line's own `ro` or `rw` does; the rest are
                    // the file system's options.
                    if let Some(fl) = &t.rootflags {
                        let given = words(s).iter().any(|w| w == "ro" || w == "rw");
                        let mut rest = Vec::new();
                        for o in fl.split(',') {
                            match o {
                                "ro" | "rw" if given => {}
                                "ro" | "rw" => c.rw = o == "rw",
                                _ => rest.push(o),
                            }
                        }
                        c.mounts.rootflags = (!rest.is_empty()).then(|| rest.join(","));
                    }
                    c.nbd = NbdCmd { target: Some(t), device_root: true };
                }
                Err(e) => c.problems.push(format!("root= ignored: {e}")),
            }
            root = None;
        }
        if let Some(t) = c.nbd.target.as_ref().filter(|t| !t.ignored.is_empty()) {
            let ignored = t.ignored.join(",");
            c.problems.push(format!("nbd: options not acted on by leanrd's /init: {ignored}"));
        }
        // ZFS: `bootfs=`/`zfs=` name the dataset whatever root= says (zfs-initramfs's and
        // booster's precedence); `rpool=` alone: that pool's bootfs.
        if let Some(d) = c.zfs.dataset.clone() {
            if root.as_deref().is_some_and(|r| r != format!("ZFS={d}") && r != format!("zfs:{d}")) {
                c.problems.push(format!("root= ignored: the ZFS dataset {d} is the root (bootfs= or zfs=)"));
            }
            root = Some(format!("ZFS={d}"));
        } else if c.zfs.pool.is_some() && root.is_none() {
            root = Some("zfs:AUTO".into());
        }
        // Debian's live-boot: no root=, the medium found by what it holds.
        match boot.as_deref() {
            Some("live") if root.as_deref().is_none_or(|r| !r.starts_with("live:")) => root = Some("live:".into()),
            // initramfs-tools' NFS root.
            Some("nfs") if root.is_none() => root = Some("/dev/nfs".into()),
            _ => {}
        }
        // systemd's: the root found by partition type, as when root= is absent.
        if root.as_deref() == Some("gpt-auto") {
            c.verity.gpt_auto_root = true;
            root = None;
        }
        if let Some(v) = root {
            match Root::parse(&v, nfsroot.as_deref()) {
                Ok(r) => c.mounts.root = Some(r),
                Err(e) => c.problems.push(format!("root={v} ignored: {e}")),
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_command_line() {
        let c = Cmdline::parse(
            "BOOT_IMAGE=/vmlinuz root=UUID=1234-5678 rootflags=\"subvol=@,compress=zstd\" rw quiet panic=-1 \
             rd.luks.uuid=luks-abcd rd.luks.name=luks-ef01=cryptroot leanrd.debug rootwait init=/bin/sh",
        );
        assert_eq!(c.mounts.root, Some(Root::Block(DeviceRef::Uuid("1234-5678".into()))));
        assert_eq!(c.mounts.rootflags.as_deref(), Some("subvol=@,compress=zstd"));
        assert!(c.rw && c.quiet && c.debug && c.rootwait);
        assert_eq!(c.panic, Some(-1));
        assert_eq!(c.luks_uuids, ["abcd", "ef01"]);
        assert_eq!(c.luks_names, [("ef01".to_string(), "cryptroot".to_string())]);
        assert_eq!(c.init.as_deref(), Some("/bin/sh"));
        assert_eq!(c.timeout, 30);
        assert!(c.problems.is_empty());
        let c = Cmdline::parse("mount.usr=PARTLABEL=usr mount.usrfstype=xfs mount.usrflags=ro,noatime");
        assert_eq!(c.mounts.usr, Some(DeviceRef::PartLabel("usr".into())));
        assert_eq!((c.mounts.usrfstype.as_deref(), c.mounts.usrflags.as_deref()), (Some("xfs"), Some("ro,noatime")));
        let c = Cmdline::parse("resume=UUID=5a-1 resume_offset=34816 resumedelay=2 resumewait");
        assert_eq!((c.resume, c.resume_offset), (Some(DeviceRef::Uuid("5a-1".into())), Some(34816)));
        assert!(c.resumewait && !c.noresume && c.resumedelay == 2 && c.module_options.is_empty());
        let c = Cmdline::parse("resume=/dev/mapper/vg-swap noresume resume_offset=x");
        assert_eq!(c.resume, Some(DeviceRef::Mapper("vg-swap".into())));
        assert!(c.noresume);
        assert_eq!(c.problems, ["resume_offset=x ignored: not a number of pages"]);
    }

    #[test]
    fn module_parameters_and_blacklists() {
        let c = Cmdline::parse(
            "root=/dev/vda loop.max_loop=3 nvme_core.default_ps_max_latency_us=0 usb-storage.quirks=\"a:b:u\" \
             modprobe.blacklist=pcspkr,floppy rd.driver.blacklist=nouveau rd.driver.pre=virtio-scsi rd.driver.post=loop \
             rd.leanrd.coldplug=all",
        );
        assert!(c.coldplug_all);
        assert!(!Cmdline::parse("root=/dev/vda").coldplug_all);
        assert_eq!(
            c.module_options,
            [
                ("loop".to_string(), "max_loop=3".to_string()),
                ("nvme_core".to_string(), "default_ps_max_latency_us=0".to_string()),
                ("usb_storage".to_string(), "quirks=a:b:u".to_string()),
            ]
        );
        assert_eq!(c.blacklist, ["pcspkr", "floppy", "nouveau"]);
        assert_eq!(
            (c.driver_pre.as_slice(), c.driver_post.as_slice()),
            (&["virtio_scsi".to_string()][..], &["loop".to_string()][..])
        );
    }

    #[test]
    fn luks_settings() {
        let c = Cmdline::parse(
            "rd.luks.key=/k.bin rd.luks.key=ab-12=/keys/r.key:LABEL=STICK rd.luks.options=discard,tries=1 \
             rd.luks.options=luks-ab-12=timeout=10s rd.luks.crypttab=0 rd.vconsole.keymap=de rd.luks.bogus=1",
        );
        assert_eq!(
            c.luks_keys,
            [
                (None, CryptKey::File("/k.bin".into())),
                (
                    Some("ab-12".into()),
                    CryptKey::OnDevice { path: "/keys/r.key".into(), device: DeviceRef::Label("STICK".into()) }
                ),
            ]
        );
        assert_eq!(c.luks_options.len(), 2);
        assert!(c.luks_options[0].0.is_none() && c.luks_options[0].1.discard && c.luks_options[0].1.tries == 1);
        assert_eq!((c.luks_options[1].0.as_deref(), c.luks_options[1].1.timeout), (Some("ab-12"), 10));
        assert!(c.no_crypttab && !c.no_luks);
        assert_eq!(c.keymap.as_deref(), Some("de"));
        assert_eq!(c.problems, ["rd.luks.bogus=1: not known to leanrd's /init"]);
        assert!(c.module_options.is_empty());
        assert!(Cmdline::parse("rd.luks=no").no_luks);
    }

    #[test]
    fn network_roots_and_their_settings() {
        let c = Cmdline::parse(
            "nfsroot=10.0.0.1:/srv/r,vers=3 root=/dev/nfs ip=dhcp BOOTIF=01-52-54-00-00-00-02 rd.neednet=1",
        );
        let Some(Root::Nfs(n)) = &c.mounts.root else { panic!("{:?}", c.mounts.root) };
        assert_eq!(
            (n.server.as_deref(), n.path.as_deref(), n.options.as_deref()),
            (Some("10.0.0.1"), Some("/srv/r"), Some("vers=3"))
        );
        assert_eq!(c.ip.len(), 1);
        assert_eq!(c.bootif, Some([0x52, 0x54, 0, 0, 0, 2]));
        assert!(c.neednet && c.problems.is_empty(), "{:?}", c.problems);
        let c = Cmdline::parse("root=nfs:srv:rel ip=1.2.3.x BOOTIF=zz ifname=x");
        assert_eq!(c.mounts.root, None);
        assert_eq!(c.problems.len(), 4, "{:?}", c.problems);
    }

    #[test]
    fn a_bad_root_is_a_problem_not_a_panic() {
        let c = Cmdline::parse("root=UUID= quiet");
        assert_eq!(c.mounts.root, None);
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
    }

    #[test]
    fn iscsi_targets_every_way() {
        let c = Cmdline::parse("root=UUID=ab netroot=iscsi:10.0.0.1::::iqn.2026-11.x:root rd.iscsi.initiator=iqn.me");
        assert_eq!(c.iscsi.targets.len(), 1);
        assert_eq!(
            (c.iscsi.targets[0].server.as_str(), c.iscsi.targets[0].name.as_str()),
            ("10.0.0.1", "iqn.2026-11.x:root")
        );
        assert_eq!(c.iscsi.initiator.as_deref(), Some("iqn.me"));
        assert!(!c.iscsi.lun_root && c.mounts.root.is_some(), "{:?}", c.problems);
        let c = Cmdline::parse("root=iscsi:10.0.0.1:::1:iqn.2026-11.x:root rd.iscsi.username=u rd.iscsi.password=p");
        assert!(c.iscsi.lun_root && c.mounts.root.is_none());
        assert_eq!(c.iscsi.targets[0].lun, Some(1));
        assert_eq!(c.iscsi.targets[0].chap.as_ref().map(|a| a.user.as_str()), Some("u"));
        let c = Cmdline::parse(
            "root=LABEL=r rd.iscsi.target.name=iqn.t:x rd.iscsi.target.ip=fd00::1 rd.iscsi.target.port=3261 \
             rd.iscsi.target.group=2 rd.iscsi.param=node.session.timeo.replacement_timeout=-1",
        );
        let t = &c.iscsi.targets[0];
        assert_eq!((t.server.as_str(), t.port, t.group), ("[fd00::1]", Some(3261), Some(2)));
        assert_eq!(c.iscsi.params, ["node.session.timeo.replacement_timeout=-1"]);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let c = Cmdline::parse(
            "netroot=iscsi:u:secret@h:x::iqn.a rd.iscsi.target.name=iqn.b rd.iscsi.firmware=1 netroot=afs:h:1",
        );
        assert!(c.iscsi.targets.is_empty());
        assert_eq!(c.problems.len(), 4, "{:?}", c.problems);
        assert!(c.problems.iter().all(|p| !p.contains("secret")), "{:?}", c.problems);
    }

    /// The rd.iscsi.target.* words are put together as a netroot= spelling: an '@' in the
    /// address made credentials of what came before it, a ':' in the port shifted the fields
    /// (found by fuzz/ `cmdline`).
    #[test]
    fn iscsi_target_words_cannot_bring_credentials_or_fields() {
        for bad in [
            "rd.iscsi.target.name=iqn.t:x rd.iscsi.target.ip=fd00:p@ss:u:ip@",
            "rd.iscsi.target.name=u:p@iqn.t:x rd.iscsi.target.ip=10.0.0.1",
        ] {
            let c = Cmdline::parse(bad);
            assert!(c.iscsi.targets.is_empty(), "{bad}: {:?}", c.iscsi.targets);
            assert_eq!(c.problems.len(), 1, "{bad}: {:?}", c.problems);
        }
        // A port or LUN that is no number is refused as every number is: reported, and the
        // default (3260, the LUN the root is found on) used.
        for bad in [
            "rd.iscsi.target.name=iqn.t:x rd.iscsi.target.ip=10.0.0.1 rd.iscsi.target.port=3260:x:eth1",
            "rd.iscsi.target.name=iqn.t:x rd.iscsi.target.ip=10.0.0.1 rd.iscsi.lun=0:1",
        ] {
            let c = Cmdline::parse(bad);
            let t = &c.iscsi.targets;
            assert!(t.len() == 1 && t[0].port.is_none() && t[0].lun.is_none() && t[0].netdev.is_none(), "{bad}: {t:?}");
            assert_eq!(c.problems.len(), 1, "{bad}: {:?}", c.problems);
            assert!(c.problems[0].contains("ignored: not a number"), "{bad}: {:?}", c.problems);
        }
        let c = Cmdline::parse("rd.iscsi.target.name=iqn.t:x rd.iscsi.target.ip=10.0.0.1 rd.iscsi.target.port=3261");
        assert_eq!(c.iscsi.targets[0].port, Some(3261));
    }

    #[test]
    fn nbd_roots_as_dracut_reads_them() {
        let c = Cmdline::parse("root=nbd:10.0.0.1:10809:ext4:rw,noatime rootflags=x netroot=nbd:10.0.0.2:1");
        let t = c.nbd.target.as_ref().unwrap();
        assert!(c.nbd.device_root && c.mounts.root.is_none());
        assert_eq!((t.server.as_str(), t.port), ("10.0.0.1", 10809));
        assert_eq!(c.mounts.rootfstype.as_deref(), Some("ext4"));
        assert_eq!((c.mounts.rootflags.as_deref(), c.rw), (Some("noatime"), true));
        assert_eq!(c.problems, ["netroot=nbd: ignored: root=nbd: takes precedence (as in dracut)"]);
        let c = Cmdline::parse("root=nbd:h:1::rw,errors=panic ro");
        assert_eq!((c.mounts.rootflags.as_deref(), c.rw), (Some("errors=panic"), false));
        let c = Cmdline::parse("root=LABEL=r netroot=nbd:[fd00::1]:root netroot=nbd:h:2");
        let t = c.nbd.target.as_ref().unwrap();
        assert!(!c.nbd.device_root && c.mounts.root.is_some());
        assert_eq!((t.host(), t.export.as_deref()), ("fd00::1", Some("root")));
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let c = Cmdline::parse("root=nbd:h:99999 netroot=nbd:h netroot=nbd:h:1:::persist");
        assert!(!c.nbd.device_root && c.mounts.root.is_none());
        assert_eq!(c.nbd.target.as_ref().map(|t| t.port), Some(1));
        assert_eq!(c.problems.len(), 3, "{:?}", c.problems);
    }

    #[test]
    fn nvmf_targets() {
        let c = Cmdline::parse(
            "root=UUID=ab rd.nvmf.discover=tcp,10.0.0.2,,4420 rd.nvmf.hostnqn=nqn.2014-08.org.nvmexpress:uuid:1 \
             rd.nvmf.hostid=1 rd.nvmf.nonbft rd.nvmf.discover=rdma,10.0.0.3 rd.nvmf.bogus=1",
        );
        assert_eq!(c.nvmf.targets, [NvmfTarget::parse("tcp,10.0.0.2,,4420").unwrap()]);
        assert_eq!(
            (c.nvmf.hostnqn.as_deref(), c.nvmf.hostid.as_deref()),
            (Some("nqn.2014-08.org.nvmexpress:uuid:1"), Some("1"))
        );
        assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
    }

    #[test]
    fn live_roots_and_options() {
        let c = Cmdline::parse(
            "root=live:CDLABEL=LEANRD rd.live.ram rd.live.overlay.size=512 rd.live.overlay=LABEL=persist rd.live.check",
        );
        let Some(Root::Live(l)) = &c.mounts.root else { panic!("{:?}", c.mounts.root) };
        assert_eq!(l.medium, Some(DeviceRef::Label("LEANRD".into())));
        assert!(c.live.ram && c.live.check);
        assert_eq!(c.live.overlay_size.as_deref(), Some("512"));
        assert_eq!(c.live.overlay, Some(DeviceRef::Label("persist".into())));
        let c = Cmdline::parse("boot=live toram live-media-path=/live/ rd.live.bogus=1");
        assert_eq!(c.mounts.root, Some(Root::Live(leanrd_contract::LiveRoot { medium: None })));
        assert!(c.live.ram);
        assert_eq!(c.live.dir.as_deref(), Some("live"));
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
    }
}
