//! Block devices: what sysfs lists, what probing their contents finds, and which of them a
//! [`DeviceRef`] names.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::DeviceRef;

use crate::{probe, sys};

/// A block device and what probing found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dev {
    /// The kernel's name (sda2, dm-0).
    pub name: String,
    /// (major, minor).
    pub devno: (u32, u32),
    /// For a partition: its disk's kernel name (sda for sda2); None: not a partition.
    pub disk: Option<String>,
    /// Its partition number on `disk` (sysfs `partition`); 0: not a partition.
    pub partno: u32,
    /// A device-mapper device's name (/dev/mapper/NAME).
    pub dm_name: Option<String>,
    /// The devices it is built on (sysfs `slaves/`: a dm or md device's members).
    pub slaves: Vec<String>,
    /// A btrfs member: whether its file system has all its devices (None: not asked).
    pub complete: Option<bool>,
    /// What its contents say (type, UUID, label), with PARTUUID and PARTLABEL from its disk's
    /// partition table.
    pub probe: probe::Probe,
}

impl Dev {
    /// Its device node: /dev/NAME.
    pub fn path(&self) -> String {
        format!("/dev/{}", self.name)
    }

    /// The name to mount it by, which /proc/mounts, df and findmnt then show: a device-mapper
    /// device by its /dev/mapper name (as lvm and cryptsetup make it), else /dev/NAME.
    pub fn mount_source(&self) -> String {
        match &self.dm_name {
            Some(n) if sys::exists(&format!("/dev/mapper/{n}")) => format!("/dev/mapper/{n}"),
            _ => self.path(),
        }
    }

    /// A container to open rather than a file system to mount.
    pub fn is_luks(&self) -> bool {
        self.probe.fstype.as_deref() == Some(probe::LUKS)
    }
}

fn read_text(path: &str) -> String {
    sys::read_string(path).unwrap_or_default()
}

pub(crate) fn parse_devno(s: &str) -> (u32, u32) {
    let (a, b) = s.trim().split_once(':').unwrap_or(("0", "0"));
    (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
}

/// The kernel's block device names, sorted.
pub fn block_names() -> Vec<String> {
    let mut v: Vec<String> =
        sys::list_dir("/sys/class/block").map(|rd| rd.into_iter().map(|(n, _)| n).collect()).unwrap_or_default();
    // An insertion sort: a few dozen names, and no sort's kilobytes of code in /init.
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && v[j - 1] > v[j] {
            v.swap(j - 1, j);
            j -= 1;
        }
    }
    v
}

/// Probe every block device (file systems; partition tables of whole disks).
pub fn scan() -> Vec<Dev> {
    let mut devs: Vec<Dev> = Vec::new();
    for n in block_names() {
        let sys = format!("/sys/class/block/{n}");
        let Ok(f) = sys::open(&format!("/dev/{n}")) else { continue };
        let partno: u32 = read_text(&format!("{sys}/partition")).trim().parse().unwrap_or(0);
        // The link is ../../devices/.../DISK/PART for a partition of DISK.
        let disk =
            (partno > 0).then(|| sys::readlink(&sys).and_then(|l| l.rsplit('/').nth(1).map(str::to_string))).flatten();
        let devno = parse_devno(&read_text(&format!("{sys}/dev")));
        let dm_name = sys::read_string(&format!("{sys}/dm/name")).map(|s| s.trim().to_string());
        let slaves = sys::list_dir(&format!("{sys}/slaves")).map(|v| v.into_iter().map(|e| e.0).collect());
        let slaves = slaves.unwrap_or_default();
        devs.push(Dev { probe: probe::probe_fs(&f), name: n, devno, disk, partno, dm_name, slaves, complete: None });
    }
    // PARTUUID/PARTLABEL: from each disk's table, matched to its partitions by number.
    for i in 0..devs.len() {
        if devs[i].disk.is_some() || !devs.iter().any(|p| p.disk.as_ref() == Some(&devs[i].name)) {
            continue;
        }
        let Ok(f) = sys::open(&devs[i].path()) else { continue };
        let parts = probe::partitions(&f);
        let disk = devs[i].name.clone();
        for d in devs.iter_mut().filter(|p| p.disk.as_ref() == Some(&disk)) {
            if let Some(e) = parts.iter().find(|e| e.number == d.partno) {
                d.probe.partuuid = Some(e.partuuid.clone());
                d.probe.partlabel = e.partlabel.clone();
                d.probe.parttype = e.parttype.clone();
                d.probe.partflags = e.flags;
            }
        }
    }
    devs
}

/// The device number of a block device node (following links), for [`find`].
pub fn devno_of(path: &str) -> Option<(u32, u32)> {
    let st = rustix::fs::stat(path).ok()?;
    (rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::BlockDevice)
        .then(|| (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)))
}

/// The device `want` names, as the kernel and udev's /dev/disk links would find it. `devno_of`
/// looks up a node's device number for names sysfs does not give (/dev/VG/LV, /dev/md/NAME).
pub fn find<'a>(want: &DeviceRef, devs: &'a [Dev], devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> Option<&'a Dev> {
    let eq = |a: &Option<String>, b: &str| a.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(b));
    let by = |f: &dyn Fn(&Dev) -> bool| devs.iter().find(|d| f(d));
    let by_node = |path: &str| devno_of(path).and_then(|n| by(&|d| d.devno == n));
    match want {
        DeviceRef::Uuid(u) => by(&|d| eq(&d.probe.uuid, u)),
        DeviceRef::Label(l) => by(&|d| d.probe.label.as_deref() == Some(l)),
        DeviceRef::PartUuid { uuid, offset } => {
            let base = by(&|d| eq(&d.probe.partuuid, uuid))?;
            let want = i64::from(base.partno) + i64::from(*offset);
            if *offset == 0 {
                return Some(base);
            }
            by(&|d| d.disk.is_some() && d.disk == base.disk && i64::from(d.partno) == want)
        }
        DeviceRef::PartLabel(l) => by(&|d| d.probe.partlabel.as_deref() == Some(l)),
        DeviceRef::DevNo { major, minor } => by(&|d| d.devno == (*major, *minor)),
        DeviceRef::Mapper(m) => {
            by(&|d| d.dm_name.as_deref() == Some(m)).or_else(|| by_node(&format!("/dev/mapper/{m}")))
        }
        DeviceRef::Kernel(n) => by(&|d| d.name == *n).or_else(|| by_node(&format!("/dev/{n}"))),
        DeviceRef::Path(p) => by_node(p),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::vec;

    pub(crate) fn dev(name: &str, devno: (u32, u32), disk: Option<&str>, partno: u32, p: probe::Probe) -> Dev {
        Dev {
            name: name.into(),
            devno,
            disk: disk.map(Into::into),
            partno,
            dm_name: None,
            slaves: vec![],
            complete: None,
            probe: p,
        }
    }

    pub(crate) fn fs(t: &str, u: &str, l: Option<&str>, pu: Option<&str>, pl: Option<&str>) -> probe::Probe {
        probe::Probe {
            fstype: Some(t.into()),
            uuid: Some(u.into()),
            label: l.map(Into::into),
            partuuid: pu.map(Into::into),
            partlabel: pl.map(Into::into),
            ..probe::Probe::default()
        }
    }

    fn devs() -> Vec<Dev> {
        let mut m = dev("dm-0", (253, 0), None, 0, fs("ext4", "5555", None, None, None));
        m.dm_name = Some("vg-root".into());
        vec![
            dev("sda", (8, 0), None, 0, probe::Probe::default()),
            dev("sda1", (8, 1), Some("sda"), 1, fs("vfat", "AB12-CD34", Some("EFI"), Some("aaaa-1"), Some("esp"))),
            dev("sda2", (8, 2), Some("sda"), 2, fs("ext4", "1111-2222", Some("my root"), Some("aaaa-2"), Some("r"))),
            dev("vda", (254, 0), None, 0, fs("xfs", "3333-4444", Some("data"), None, None)),
            m,
        ]
    }

    #[test]
    fn finds_root_by_every_kind_of_name() {
        let d = devs();
        let nodes = |p: &str| (p == "/dev/vg/root").then_some((253, 0));
        let f = |s: &str| find(&DeviceRef::parse(s).unwrap(), &d, &nodes).map(Dev::path);
        assert_eq!(f("UUID=1111-2222").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("UUID=ab12-cd34").as_deref(), Some("/dev/sda1"), "UUIDs compare without case");
        assert_eq!(f("/dev/disk/by-uuid/3333-4444").as_deref(), Some("/dev/vda"));
        assert_eq!(f("LABEL=my root").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("/dev/disk/by-label/my\\x20root").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("PARTUUID=AAAA-2").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("PARTUUID=aaaa-1/PARTNROFF=1").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("PARTUUID=aaaa-1/PARTNROFF=5"), None);
        assert_eq!(f("PARTLABEL=esp").as_deref(), Some("/dev/sda1"));
        assert_eq!(f("/dev/disk/by-partlabel/r").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("8:2").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("/dev/vda").as_deref(), Some("/dev/vda"));
        assert_eq!(f("vda").as_deref(), Some("/dev/vda"));
        assert_eq!(f("/dev/mapper/vg-root").as_deref(), Some("/dev/dm-0"));
        assert_eq!(f("/dev/vg/root").as_deref(), Some("/dev/dm-0"));
        assert_eq!(f("UUID=none"), None);
        assert_eq!(f("LABEL=data2"), None);
        assert_eq!(f("/dev/nonexistent/x"), None);
    }
}
