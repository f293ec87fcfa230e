//! Mounting the root on /newroot: its type from `rootfstype=`, the probe or the
//! configuration (or every type the kernel knows), its options from `rootflags=`.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::{DeviceRef, InitConfig, Root, RootFeature};
use rustix::mount::MountFlags;

use crate::Init;
use crate::cmdline::{Cmdline, words};
use crate::devices::Dev;
use crate::sys::{self, Errno, strerror};
use crate::wait::{DeviceWaiter, Waiter};

/// Where the root is mounted in the initramfs, and moved to / from at the switch.
pub const NEWROOT: &str = "/newroot";

/// Where the root comes from: what to wait for, then how to mount it on [`NEWROOT`]. A block
/// device is [`BlockRoot`]; another kind (a network root) is another implementation, chosen
/// in [`source`].
pub trait RootSource {
    /// The kind of root it mounts.
    fn kind(&self) -> leanrd_contract::RootKind;
    /// What must appear before [`RootSource::connect`] (a network transport's interface);
    /// None: nothing, the root's device comes by itself.
    fn first(&mut self) -> Option<&mut dyn Waiter> {
        None
    }
    /// Make the root's device appear once [`RootSource::first`] is there (log in to the
    /// iSCSI targets over the network brought up).
    fn connect(&mut self, _init: &mut Init) -> Result<(), String> {
        Ok(())
    }
    /// Whether it brings the network up itself (`rd.neednet=1` then does nothing more).
    fn brings_network(&self) -> bool {
        self.kind().needs_network()
    }
    /// What must appear before the root can be mounted.
    fn waiter(&mut self) -> &mut dyn Waiter;
    /// Mount the root on [`NEWROOT`] once the waiter has found what it needs; Err says why it
    /// could not be.
    fn mount(&mut self, init: &mut Init) -> Result<(), String>;
    /// The disk the root was found on by partition type (DPS), where /usr is looked for by
    /// its type too; None: the root was named.
    fn dps_disk(&self) -> Option<String> {
        None
    }
}

/// A root on a block device (through whatever stack the image assembles).
pub struct BlockRoot(pub DeviceWaiter);

impl RootSource for BlockRoot {
    fn kind(&self) -> leanrd_contract::RootKind {
        leanrd_contract::RootKind::Block
    }
    fn waiter(&mut self) -> &mut dyn Waiter {
        &mut self.0
    }
    fn mount(&mut self, init: &mut Init) -> Result<(), String> {
        let dev = self.0.found.clone().ok_or("the root device was not found")?;
        init.log.step(&format!("{}{}", leanrd_contract::steplog::ROOT_FOUND, dev.path()));
        mount(init, &dev)
    }
}

/// A dm-verity root: its data and hash devices waited for, set up as /dev/mapper/root, mounted
/// read-only.
pub struct VerityRoot(pub crate::verity::Volume);

impl RootSource for VerityRoot {
    fn kind(&self) -> leanrd_contract::RootKind {
        leanrd_contract::RootKind::Block
    }
    fn waiter(&mut self) -> &mut dyn Waiter {
        &mut self.0
    }
    fn mount(&mut self, init: &mut Init) -> Result<(), String> {
        let dev = crate::verity::open(init, &self.0)?;
        mount_verified(init, &dev)
    }
}

/// A verity device is read-only whatever `rw` says.
fn mount_verified(init: &mut Init, dev: &Dev) -> Result<(), String> {
    init.log.step(&format!("{}{}", leanrd_contract::steplog::ROOT_FOUND, dev.path()));
    init.cmd.rw = false;
    mount(init, dev)
}

/// A root found by partition type (DPS), verified when a signature partition gives its hash.
/// The bool: only a verified root will do (root=/dev/mapper/root).
pub struct DpsRoot(pub crate::verity::DpsWaiter, pub bool);

impl RootSource for DpsRoot {
    fn kind(&self) -> leanrd_contract::RootKind {
        leanrd_contract::RootKind::Block
    }
    fn waiter(&mut self) -> &mut dyn Waiter {
        &mut self.0
    }
    fn dps_disk(&self) -> Option<String> {
        self.0.found.as_ref().and_then(|f| f.root.disk.clone())
    }
    fn mount(&mut self, init: &mut Init) -> Result<(), String> {
        let f = self.0.found.clone().ok_or("no root partition was found by its type")?;
        init.log.step(&format!(
            "root by partition type on the booted disk {} (LoaderDevicePartUUID {}): {}{}",
            f.root.disk.as_deref().map(|d| format!("/dev/{d}")).unwrap_or_default(),
            self.0.esp.as_deref().unwrap_or("?"),
            f.root.path(),
            match &f.verity {
                Some((_, _, hash)) =>
                    format!(", its verity partition {}, the hash from a verity-sig partition", hash.path()),
                None => String::new(),
            }
        ));

        if self.1 && f.verity.is_none() {
            return Err(format!(
                "root=/dev/mapper/root is a verity device, and nothing gives its root hash: no roothash= and no \
                 verity-sig partition on the booted disk matches a root and a verity partition there (root partition \
                 found: {})",
                f.root.path()
            ));
        }
        let Some((sig, data, hash)) = f.verity.filter(|_| !init.cmd.verity.off) else {
            init.log.step(&format!("{}{} (by partition type)", leanrd_contract::steplog::ROOT_FOUND, f.root.path()));
            if f.read_only {
                init.cmd.rw = false;
            }
            mount(init, &f.root)?;
            if f.growfs {
                grow_root_later(init, NEWROOT);
            }
            return Ok(());
        };
        let spec = crate::cmdline::VeritySpec {
            hash: Some(sig.root_hash.clone()),
            data: Some(DeviceRef::DevNo { major: data.devno.0, minor: data.devno.1 }),
            hash_device: Some(DeviceRef::DevNo { major: hash.devno.0, minor: hash.devno.1 }),
            options: init.cmd.verity.root.options.clone(),
        };
        let mut vol = crate::verity::Volume::wanted("root", &spec, false, true)?.ok_or("no verity volume")?;
        vol.source = format!("the root hash of the verity-sig partition beside {}", data.path());
        vol.signature = Some(sig.signature);
        vol.signed_by = sig.fingerprint;
        vol.data.found = Some(data);
        vol.hash_dev.found = Some(hash);
        let dev = crate::verity::open(init, &vol)?;
        mount_verified(init, &dev)
    }
}

/// Where the root's systemd finds units /init leaves it (/run moves into the root).
const RUNTIME_UNITS: &str = "/run/systemd/system";
/// systemd's unit that grows the root's file system to its partition.
const GROWFS_ROOT: &str = "systemd-growfs-root.service";

/// DPS's growfs flag on the root partition: what systemd's gpt-auto-generator does in its
/// initrd (grow the file system to the partition once mounted), handed to the root's systemd:
/// its own systemd-growfs-root.service, wanted by local-fs.target from /run/systemd/system
/// (a unit directory of its, which /run carries into the root). The unit runs after the root
/// is remounted read-write; a read-only root (`ro` and no rw in its fstab) is not grown.
fn grow_root_later(init: &mut Init, root: &str) {
    match want_growfs(root, RUNTIME_UNITS) {
        Ok(said) => init.log.step(&said),
        Err(e) => init.notes.push(e),
    }
}

/// The wants link for [`GROWFS_ROOT`] under `runtime`, when the root at `root` has the unit.
fn want_growfs(root: &str, runtime: &str) -> Result<String, String> {
    let unit = format!("/usr/lib/systemd/system/{GROWFS_ROOT}");
    if !sys::exists(&format!("{root}{unit}")) {
        return Err(format!("root partition: growfs is set, and the root has no {unit}: it is not grown"));
    }
    let wants = format!("{runtime}/local-fs.target.wants");
    sys::mkdir_p(&wants);
    match rustix::fs::symlink(unit.as_str(), format!("{wants}/{GROWFS_ROOT}").as_str()) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {
            Ok(format!("root partition: growfs is set: {GROWFS_ROOT} wanted by the root's local-fs.target"))
        }
        Err(e) => Err(format!("root partition: growfs is set, and {wants}/{GROWFS_ROOT}: {}", strerror(e))),
    }
}

/// The root this boot uses: `root=` from the command line, else the one the image was built
/// for. One [`RootSource`] per kind of [`Root`].
pub fn source(init: &mut Init) -> Result<Box<dyn RootSource>, String> {
    // What this image cannot do, said at once rather than after a wait for what cannot come.
    if let Some(conf) = init.conf_read.then_some(&init.conf)
        && let Some(why) = missing_feature(&asked(&init.cmd, &init.cmdline_text, conf), conf)
    {
        // Nothing was looked for and no driver loaded yet: no block device seen says nothing
        // of a disk controller (the root may not even be on one).
        init.no_disk_hint = None;
        return Err(why);
    }
    if init.cmd.iscsi.lun_root || init.cmd.nbd.device_root {
        init.root_kind = Some(leanrd_contract::RootKind::Block);
        init.no_disk_hint = Some(crate::diagnose::NO_NETWORK_DISK);
        return Ok(crate::netblock::source(init, None));
    }
    // A verity root (roothash=): root= absent, gpt-auto or /dev/mapper/root.
    let v = &init.cmd.verity;
    let mapper_root = DeviceRef::Mapper("root".into());
    let verity_root = match &init.cmd.mounts.root {
        None => true,
        Some(Root::Block(d)) => *d == mapper_root,
        Some(_) => false,
    };
    if verity_root && let Some(vol) = crate::verity::Volume::wanted("root", &v.root, v.off, v.gpt_auto_off)? {
        init.root_kind = Some(leanrd_contract::RootKind::Block);
        init.no_disk_hint = Some(crate::diagnose::NO_DISK_CONTROLLER);
        return Ok(Box::new(VerityRoot(vol)));
    }
    if v.root.hash.is_some() && !v.off && !verity_root {
        init.notes.push("roothash= ignored: root= names another device than /dev/mapper/root".into());
    }
    let want = init.cmd.mounts.root.clone().or(init.conf.mounts.root.clone());
    // No root= anywhere (or root=gpt-auto): the root by partition type, on the booted disk.
    // /dev/mapper/root with no roothash= (the image's own, on a verity host): the booted disk's
    // verity-sig partition must give the hash.
    let need_verity = want == Some(Root::Block(mapper_root)) && !init.cmd.verity.off;
    if (want.is_none() || init.cmd.verity.gpt_auto_root || need_verity) && !init.cmd.verity.gpt_auto_off {
        init.root_kind = Some(leanrd_contract::RootKind::Block);
        init.no_disk_hint = Some(crate::diagnose::NO_DISK_CONTROLLER);
        let w = crate::verity::DpsWaiter::new(init);
        // Without the boot loader's word there is nothing to wait for.
        if w.esp.is_none() {
            init.no_disk_hint = None;
            return Err(crate::verity::dps_find(&[], None, &|_| Err(String::new())).err().unwrap_or_default());
        }
        return Ok(Box::new(DpsRoot(w, need_verity)));
    }
    let want = want.ok_or("no root= on the command line and none in the image (rd.systemd.gpt_auto=0)")?;
    init.mods.net |= want.kind().needs_network();
    init.root_kind = Some(want.kind());
    init.no_disk_hint = Some(crate::diagnose::NO_DISK_CONTROLLER);
    match want {
        Root::Block(d) => {
            let mut w = DeviceWaiter::new("root", d);
            let flags = init.cmd.mounts.rootflags.as_ref().or(init.conf.mounts.rootflags.as_ref());
            w.degraded = flags.is_some_and(|f| f.split(',').any(|o| o == "degraded"));
            // A block device that a network transport (iSCSI, NVMe/TCP) brings in.
            if crate::netblock::wanted(init) {
                init.no_disk_hint = Some(crate::diagnose::NO_NETWORK_DISK);
                return Ok(crate::netblock::source(init, Some(w)));
            }
            Ok(Box::new(BlockRoot(w)))
        }
        Root::Live(l) => {
            init.mods.optical = true;
            Ok(Box::new(crate::live::LiveSource::new(init, l)))
        }
        Root::Zfs(z) => Ok(Box::new(crate::zfs::ZfsSource::new(init, z))),
        Root::Nfs(n) => {
            // No block device has anything to do with it: the diagnosis lists none unless seen.
            init.no_disk_hint = None;
            let want = init.cmd.net_wanted();
            Ok(Box::new(crate::nfs::NfsSource { want: n, waiter: crate::net::NetWaiter::new(want) }))
        }
    }
}

/// What this boot asks of the image beyond a block device's drivers, with the words that ask
/// for it: the root's kind (the command line's root, else the image's own) and the network
/// transports the command line names (iSCSI, NVMe over TCP). `text` is the command line as
/// shown (secrets redacted), for the parameters as they were given.
pub fn asked(cmd: &Cmdline, text: &str, conf: &InitConfig) -> Vec<(RootFeature, String)> {
    let words = words(text);
    let word = |f: &dyn Fn(&str) -> bool| words.iter().find(|w| f(w)).cloned();
    let mut out = Vec::new();
    match (&cmd.mounts.root, &conf.mounts.root) {
        (Some(r), _) => {
            if let Some(f) = r.kind().feature() {
                let given = match f {
                    RootFeature::Live => word(&|w| w.starts_with("root=live:")).or_else(|| word(&|w| w == "boot=live")),
                    _ => word(&|w| w.starts_with("root=")).or_else(|| word(&|w| w.starts_with("boot="))),
                };
                let given = given.unwrap_or_else(|| format!("root={r}"));
                out.push((f, format!("the command line asks for {} ({given})", f.what())));
            }
        }
        (None, Some(r)) => {
            if let Some(f) = r.kind().feature() {
                out.push((f, format!("the image was made for {} ({r})", f.what())));
            }
        }
        (None, None) => {}
    }
    let what = RootFeature::Iscsi.what();
    if !cmd.iscsi.targets.is_empty() {
        let given = word(&|w| w.starts_with("root=iscsi:") || w.starts_with("netroot=iscsi:"))
            .or_else(|| word(&|w| w.starts_with("rd.iscsi.target.")))
            .unwrap_or_else(|| format!("netroot={}", cmd.iscsi.targets[0]));
        out.push((RootFeature::Iscsi, format!("the command line asks for {what} ({given})")));
    } else if let Some(t) = conf.iscsi.first() {
        out.push((RootFeature::Iscsi, format!("the image was made for {what} (target {})", t.name)));
    }
    let what = RootFeature::Nvmf.what();
    if !cmd.nvmf.targets.is_empty() {
        let given = word(&|w| w.starts_with("rd.nvmf.discover="))
            .unwrap_or_else(|| format!("rd.nvmf.discover={}", cmd.nvmf.targets[0]));
        out.push((RootFeature::Nvmf, format!("the command line asks for {what} ({given})")));
    } else if let Some(t) = conf.nvmf.first().filter(|_| !cmd.nvmf.nostatic) {
        out.push((RootFeature::Nvmf, format!("the image was made for {what} ({t})")));
    }
    if let Some(t) = &cmd.nbd.target {
        let given = word(&|w| w.starts_with("root=nbd:") || w.starts_with("netroot=nbd:"))
            .unwrap_or_else(|| format!("netroot={t}"));
        out.push((RootFeature::Nbd, format!("the command line asks for {} ({given})", RootFeature::Nbd.what())));
    }
    out
}

/// Why the image cannot boot what [`asked`] found, when it was built without a feature that
/// needs: one sentence each, naming the feature and the option that adds it; None: it has
/// all of them.
pub fn missing_feature(asked: &[(RootFeature, String)], conf: &InitConfig) -> Option<String> {
    let missing: Vec<String> = asked
        .iter()
        .filter(|(f, _)| conf.layer(f.capability()).is_none())
        .map(|(f, why)| {
            let name = f.feature();
            format!("{why}, but this image was built without the `{name}` feature: rebuild it with `--include {name}`")
        })
        .collect();
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// The types to try, in order: `rootfstype=` may list several, as for the kernel.
pub fn types(given: Option<&str>, known: &str) -> Vec<String> {
    match given {
        Some(t) => t.split(',').filter(|t| !t.is_empty()).map(str::to_string).collect(),
        None => known.lines().filter(|l| !l.starts_with("nodev")).map(|l| l.trim().to_string()).collect(),
    }
}

/// Mount `dev` on `target`: as `fstype` says (a comma list; `auto` or none: the probe's type,
/// else every type the kernel knows), with `flags` and the file system's own `options`.
pub fn mount_at(
    init: &mut Init,
    dev: &Dev,
    target: &str,
    fstype: Option<String>,
    flags: MountFlags,
    options: Option<&str>,
) -> Result<(), String> {
    let fstype = fstype.filter(|t| t != "auto").or(dev.probe.fstype.clone());
    let known =
        if fstype.is_none() { sys::read_string("/proc/filesystems").unwrap_or_default() } else { String::new() };
    let types = types(fstype.as_deref(), &known);
    for t in &types {
        init.mods.load(&format!("fs-{t}"), &mut init.log);
    }
    let mut last = Errno::NODEV;
    let source = dev.mount_source();
    for t in &types {
        match sys::mount(&source, target, t, flags, options) {
            Ok(()) => {
                let ro = if flags.contains(MountFlags::RDONLY) { "ro" } else { "rw" };
                let opts = options.filter(|o| !o.is_empty()).map(|o| format!(", {o}")).unwrap_or_default();
                init.log.step(&format!("mounted {source} ({t}, {ro}{opts}) on {target}"));
                return Ok(());
            }
            Err(e) => last = e,
        }
    }
    Err(format!("cannot mount {} ({}) on {target}: {}", dev.path(), types.join(","), strerror(last)))
}

/// The root: type from `rootfstype=`, the probe or the configuration; read-only unless `rw`;
/// `rootflags=` (else the configuration's) as its options.
pub fn mount(init: &mut Init, dev: &Dev) -> Result<(), String> {
    let fstype =
        init.cmd.mounts.rootfstype.clone().or(dev.probe.fstype.clone()).or(init.conf.mounts.rootfstype.clone());
    let flags = if init.cmd.rw { MountFlags::empty() } else { MountFlags::RDONLY };
    let options = init.cmd.mounts.rootflags.clone().or(init.conf.mounts.rootflags.clone());
    crate::fsck::check(init, dev, fstype.as_deref(), init.cmd.rw)?;
    mount_at(init, dev, NEWROOT, fstype, flags, options.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    use leanrd_contract::{Capability, Layer};

    /// What a universal image without network roots or live media has: no nfs, iscsi, nvmf
    /// or live layer.
    fn without() -> InitConfig {
        let mut c = InitConfig { kver: Some("6.12.0".into()), ..InitConfig::default() };
        c.layers.push(Layer { capability: Capability::Luks, modules: Vec::new() });
        c
    }

    fn with(c: Capability) -> InitConfig {
        let mut conf = without();
        conf.layers.push(Layer { capability: c, modules: Vec::new() });
        conf
    }

    fn why(text: &str, conf: &InitConfig) -> Option<String> {
        missing_feature(&asked(&Cmdline::parse(text), text, conf), conf)
    }

    #[test]
    fn growfs_is_handed_to_the_roots_own_unit() {
        let base = format!("/tmp/leanrd-growfs-{}", rustix::process::getpid().as_raw_nonzero());
        let (root, run) = (format!("{base}/root"), format!("{base}/run"));
        // A root without systemd's unit: said, nothing made.
        sys::mkdir_p(&root);
        let e = want_growfs(&root, &run).unwrap_err();
        assert!(e.contains("it is not grown"), "{e}");
        assert!(!sys::exists(&format!("{run}/local-fs.target.wants")));
        sys::mkdir_p(&format!("{root}/usr/lib/systemd/system"));
        sys::write_file_mode(&format!("{root}/usr/lib/systemd/system/{GROWFS_ROOT}"), "[Unit]\n", 0o644).unwrap();
        assert!(want_growfs(&root, &run).is_ok());
        let link = format!("{run}/local-fs.target.wants/{GROWFS_ROOT}");
        assert_eq!(sys::readlink(&link).as_deref(), Some("/usr/lib/systemd/system/systemd-growfs-root.service"));
        // Twice: the same link.
        assert!(want_growfs(&root, &run).is_ok());
        let _ = std::process::Command::new("rm").args(["-rf", &base]).status();
    }

    #[test]
    fn a_root_the_image_was_built_without_is_named_with_its_feature() {
        let nfs = "root=/dev/nfs nfsroot=10.0.0.1:/srv/root ip=dhcp";
        assert_eq!(
            why(nfs, &without()).as_deref(),
            Some(
                "the command line asks for an NFS root (root=/dev/nfs), but this image was built without the \
                 `nfs` feature: rebuild it with `--include nfs`"
            )
        );
        assert_eq!(why(nfs, &with(Capability::Nfs)), None);
        assert!(why("boot=nfs nfsroot=10.0.0.1:/srv/root", &without()).unwrap().contains("(boot=nfs)"));
        assert!(why("root=nfs4:10.0.0.1:/r", &without()).unwrap().contains("(root=nfs4:10.0.0.1:/r)"));

        let iscsi = "root=UUID=1b2c netroot=iscsi:10.0.0.1::::iqn.2026-11.org.example:root";
        assert_eq!(
            why(iscsi, &without()).as_deref(),
            Some(
                "the command line asks for a root on iSCSI (netroot=iscsi:10.0.0.1::::iqn.2026-11.org.example:root), \
                 but this image was built without the `iscsi` feature: rebuild it with `--include iscsi`"
            )
        );
        assert_eq!(why(iscsi, &with(Capability::Iscsi)), None);
        assert!(why("root=iscsi:10.0.0.1::::iqn.a:root", &without()).unwrap().contains("(root=iscsi:10.0.0.1"));

        let nvmf = "root=UUID=1b2c rd.nvmf.discover=tcp,10.0.0.2,,4420";
        assert_eq!(
            why(nvmf, &without()).as_deref(),
            Some(
                "the command line asks for a root on NVMe over TCP (rd.nvmf.discover=tcp,10.0.0.2,,4420), but this \
                 image was built without the `nvmf` feature: rebuild it with `--include nvmf`"
            )
        );
        assert_eq!(why(nvmf, &with(Capability::Nvmf)), None);

        let live = "root=live:CDLABEL=MY_LIVE rd.live.ram";
        assert_eq!(
            why(live, &without()).as_deref(),
            Some(
                "the command line asks for a live root (root=live:CDLABEL=MY_LIVE), but this image was built \
                 without the `live` feature: rebuild it with `--include live`"
            )
        );
        assert_eq!(why(live, &with(Capability::Live)), None);
        assert!(why("boot=live", &without()).unwrap().contains("a live root (boot=live)"));

        // A local root needs no feature; an image's own root is checked when the command line
        // names none.
        assert_eq!(why("root=UUID=1b2c", &without()), None);
        let mut own = without();
        own.mounts.root = Some(Root::parse("nfs:10.0.0.1:/r", None).unwrap());
        assert_eq!(
            why("quiet", &own).as_deref(),
            Some(
                "the image was made for an NFS root (nfs:10.0.0.1:/r), but this image was built without the `nfs` \
                 feature: rebuild it with `--include nfs`"
            )
        );
        // An image made for a root on a transport names it when the command line does not.
        let mut own = without();
        own.iscsi.push(leanrd_contract::IscsiTarget::parse("iscsi:10.0.0.1::::iqn.a:root").unwrap());
        assert_eq!(
            why("root=UUID=1b2c", &own).as_deref(),
            Some(
                "the image was made for a root on iSCSI (target iqn.a:root), but this image was built without the \
                 `iscsi` feature: rebuild it with `--include iscsi`"
            )
        );
        // Two at once: both said.
        let both = why("root=UUID=1b2c netroot=iscsi:10.0.0.1::::iqn.a:r rd.nvmf.discover=tcp,10.0.0.2", &without());
        assert!(both.as_deref().is_some_and(|w| w.contains("`--include iscsi`; ") && w.ends_with("`--include nvmf`")));
    }

    /// Secrets on the command line stay out of the message: the words come from the text the
    /// diagnosis shows, redacted.
    #[test]
    fn the_missing_feature_message_shows_no_secret() {
        let raw = "root=iscsi:u:secret@10.0.0.1::::iqn.a:root";
        let shown = leanrd_contract::redact_secrets(raw);
        let w = missing_feature(&asked(&Cmdline::parse(raw), &shown, &without()), &without()).unwrap();
        assert!(!w.contains("secret") && w.contains("root=iscsi:"), "{w}");
    }

    #[test]
    fn types_come_from_the_option_or_the_kernel() {
        assert_eq!(types(Some("btrfs,,ext4"), ""), ["btrfs", "ext4"]);
        assert_eq!(types(None, "nodev\tsysfs\n\text4\nnodev\ttmpfs\n\tvfat\n"), ["ext4", "vfat"]);
    }
}
