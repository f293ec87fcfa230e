//! A separate /usr, mounted on the new root before switching to it (systemd requires the
//! initramfs to do it; on a merged-/usr system /sbin/init is on /usr). Where it is: systemd's
//! `mount.usr=` (with `mount.usrfstype=`, `mount.usrflags=`), else the configuration the
//! generator wrote (host-only), else (a root found by partition type) the /usr partition on the
//! root's disk ([`by_type`]), else the new root's /etc/fstab, as initramfs-tools reads it.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use leanrd_contract::{DeviceRef, NOT_BLOCK_FSTYPES, fstab_entries};
use rustix::mount::MountFlags;

use crate::Init;
use crate::root::{NEWROOT, mount_at};
use crate::sys;
use crate::wait::DeviceWaiter;

/// A /usr to mount: the device, and the type and options when something said them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usr {
    /// The device holding /usr.
    pub device: DeviceRef,
    /// Its file system type (a comma list is tried in order); None: the probe's.
    pub fstype: Option<String>,
    /// Its mount options, fstab-style (flags such as `rw` and `noatime`, and the file system's
    /// own); None: none, read-only.
    pub options: Option<String>,
}

/// /usr as the command line or the configuration gives it (known before the root is mounted,
/// so it is waited for together with the root).
pub fn given(init: &Init) -> Option<Usr> {
    let (c, k) = (&init.cmd.mounts, &init.conf.mounts);
    if let Some(device) = c.usr.clone() {
        let fstype = c.usrfstype.clone();
        return Some(Usr { device, fstype, options: c.usrflags.clone() });
    }
    let device = k.usr.clone()?;
    Some(Usr {
        device,
        fstype: c.usrfstype.clone().or(k.usrfstype.clone()),
        options: c.usrflags.clone().or(k.usrflags.clone()),
    })
}

/// The /usr line of an fstab, if it has one (the last wins, as mount would).
pub fn from_fstab(text: &str) -> Option<Usr> {
    fstab_entries(text)
        .into_iter()
        .filter(|e| e.file.trim_end_matches('/') == "/usr")
        // A /usr that is not on a block device (network, tmpfs, overlay) or not to be
        // mounted at boot is left to the system; a swap line is no mount, whatever its
        // second field says (systemd's fstab-generator makes it a swap unit).
        .filter(|e| !e.noauto() && e.vfstype != "swap" && !NOT_BLOCK_FSTYPES.contains(&e.vfstype.as_str()))
        .filter_map(|e| {
            let device = DeviceRef::parse(&e.spec).ok()?;
            let fstype = Some(e.vfstype).filter(|t| t != "auto");
            Some(Usr { device, fstype, options: e.mntops.filter(|o| o != "defaults") })
        })
        .next_back()
}

/// fstab-style options split into mount flags and what the file system itself takes. /usr is
/// read-only unless the options say `rw` (systemd remounts it as fstab says).
pub fn flags_and_data(options: Option<&str>) -> (MountFlags, Option<String>) {
    let mut flags = MountFlags::RDONLY;
    let mut data = Vec::new();
    for o in options.unwrap_or("").split(',').filter(|o| !o.is_empty()) {
        match o {
            "ro" => flags |= MountFlags::RDONLY,
            "rw" => flags &= !MountFlags::RDONLY,
            "nosuid" => flags |= MountFlags::NOSUID,
            "nodev" => flags |= MountFlags::NODEV,
            "noexec" => flags |= MountFlags::NOEXEC,
            "noatime" => flags |= MountFlags::NOATIME,
            "nodiratime" => flags |= MountFlags::NODIRATIME,
            "relatime" => flags |= MountFlags::RELATIME,
            "strictatime" => flags |= MountFlags::STRICTATIME,
            "lazytime" => flags |= MountFlags::LAZYTIME,
            "sync" => flags |= MountFlags::SYNCHRONOUS,
            // Flags that are the default, and what only mount(8) or systemd read.
            "defaults" | "suid" | "dev" | "exec" | "async" | "atime" | "auto" | "noauto" | "nofail" | "user"
            | "nouser" | "users" | "owner" | "group" | "_netdev" => {}
            o if o.starts_with("x-") || o.starts_with("comment=") => {}
            o => data.push(o),
        }
    }
    (flags, (!data.is_empty()).then(|| data.join(",")))
}

/// A waiter for /usr's device.
pub fn waiter(u: &Usr) -> DeviceWaiter {
    DeviceWaiter::new("mount.usr", u.device.clone())
}

/// Mount /usr (found by `w`) on the new root's /usr.
pub fn mount(init: &mut Init, u: &Usr, w: &DeviceWaiter) -> Result<(), String> {
    let dev = w.found.clone().ok_or("the /usr device was not found")?;
    let target = format!("{NEWROOT}/usr");
    if !sys::is_dir(&target) {
        return Err(format!("{target} is not a directory in the root: cannot mount /usr ({}) there", u.device));
    }
    init.log.step(&format!("/usr is {}", dev.path()));
    let (flags, data) = flags_and_data(u.options.as_deref());
    let fstype = u.fstype.clone().or(dev.probe.fstype.clone());
    crate::fsck::check(init, &dev, fstype.as_deref(), !flags.contains(MountFlags::RDONLY))?;
    mount_at(init, &dev, &target, u.fstype.clone(), flags, data.as_deref())
}

/// /usr by partition type (DPS) on `disk`, the disk the root was found on by its type, when
/// nothing named /usr: verified as /dev/mapper/usr when a usr-verity-sig partition there signs
/// the hash whose halves name the /usr and usr-verity partitions, else the first /usr partition
/// of this architecture's type not marked no-auto. Mounted read-only (`mount.usrflags=` may say
/// `rw` unless it is verified or its GPT flags say read-only); None: the disk has none.
pub fn by_type(init: &mut Init, disk: &str) -> Result<Option<(DeviceWaiter, Usr)>, String> {
    let Some(f) = crate::verity::dps_usr(disk) else {
        init.log.step(&format!(
            "/usr by partition type: no partition of /usr's type ({}, {}) without no-auto on the root's disk /dev/{disk}",
            leanrd_contract::verity::part_type(crate::verity::ARCH, leanrd_contract::verity::PartRole::Usr)
                .unwrap_or("?"),
            crate::verity::ARCH
        ));
        return Ok(None);
    };
    let c = &init.cmd.mounts;
    let (fstype, mut options) = (c.usrfstype.clone(), c.usrflags.clone());
    if f.read_only || f.verity.is_some() {
        options = Some(match options {
            Some(o) => format!("{o},ro"),
            None => "ro".into(),
        });
    }
    init.log.step(&format!(
        "/usr by partition type on the root's disk /dev/{disk}: {}{}",
        f.usr.path(),
        match &f.verity {
            Some((_, v)) => format!(", its verity partition {}, the hash from a usr-verity-sig partition", v.path()),
            None => String::new(),
        }
    ));
    let (dev, device) = match f.verity.filter(|_| !init.cmd.verity.off) {
        Some((sig, hash)) => {
            let spec = crate::cmdline::VeritySpec {
                hash: Some(sig.root_hash.clone()),
                data: Some(DeviceRef::DevNo { major: f.usr.devno.0, minor: f.usr.devno.1 }),
                hash_device: Some(DeviceRef::DevNo { major: hash.devno.0, minor: hash.devno.1 }),
                options: init.cmd.verity.usr.options.clone(),
            };
            let mut vol = crate::verity::Volume::wanted("usr", &spec, false, true)?.ok_or("no verity volume")?;
            vol.source = format!("the root hash of the usr-verity-sig partition beside {}", f.usr.path());
            vol.signature = Some(sig.signature);
            vol.signed_by = sig.fingerprint;
            vol.data.found = Some(f.usr);
            vol.hash_dev.found = Some(hash);
            (crate::verity::open(init, &vol)?, DeviceRef::Mapper("usr".into()))
        }
        None => {
            let n = DeviceRef::DevNo { major: f.usr.devno.0, minor: f.usr.devno.1 };
            (f.usr, n)
        }
    };
    let u = Usr { device, fstype, options };
    let mut w = waiter(&u);
    w.found = Some(dev);
    Ok(Some((w, u)))
}

/// /usr named by the mounted root's /etc/fstab, when nothing else named it.
pub fn from_root() -> Option<Usr> {
    from_fstab(&sys::read_string(&format!("{NEWROOT}/etc/fstab"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_usr_in_an_fstab() {
        let t = "# /etc/fstab\nUUID=1 / ext4 errors=remount-ro 0 1\n\
                 UUID=2-3 /usr xfs defaults 0 2\n/dev/sda3 /usr/local ext4 defaults 0 2\n";
        let u = from_fstab(t).unwrap();
        assert_eq!(u, Usr { device: DeviceRef::Uuid("2-3".into()), fstype: Some("xfs".into()), options: None });
        let u = from_fstab("LABEL=my\\040usr /usr/ auto ro,noatime,x-systemd.device-timeout=5 0 0").unwrap();
        assert_eq!(u.device, DeviceRef::Label("my usr".into()));
        assert_eq!((u.fstype, u.options.as_deref()), (None, Some("ro,noatime,x-systemd.device-timeout=5")));
        assert_eq!(from_fstab("UUID=1 / ext4 defaults 0 1\n#UUID=2 /usr xfs defaults 0 2\n"), None);
        assert_eq!(from_fstab("server:/usr /usr nfs4 ro 0 0\ntmpfs /usr tmpfs defaults 0 0\n"), None);
        assert_eq!(from_fstab("UUID=2 /usr xfs noauto,ro 0 0\n"), None);
        // Found by fuzz/ `crypttab_fstab`: a swap line naming /usr as its mount point was
        // taken for /usr, and the boot tried to mount a swap file there.
        assert_eq!(from_fstab("/swapfile /usr swap sw 5 0\n"), None);
        let u = from_fstab("UUID=2 /usr xfs defaults 0 2\n/swapfile /usr swap sw 0 0\n").unwrap();
        assert_eq!(u.device, DeviceRef::Uuid("2".into()));
    }

    #[test]
    fn options_split_into_flags_and_data() {
        let (f, d) = flags_and_data(None);
        assert_eq!((f, d), (MountFlags::RDONLY, None));
        let (f, d) = flags_and_data(Some("rw,noatime,nodev,subvol=@usr,compress=zstd,x-systemd.after=a,nofail"));
        assert_eq!(f, MountFlags::NOATIME | MountFlags::NODEV);
        assert_eq!(d.as_deref(), Some("subvol=@usr,compress=zstd"));
    }
}
