//! A reference to a block device, as `root=`, `resume=`, crypttab and fstab write them,
//! parsed once.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

/// A block device named the ways the kernel and udev's /dev/disk links name one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRef {
    /// `UUID=` or /dev/disk/by-uuid/: a file system's (or LUKS header's) UUID, compared
    /// without case.
    Uuid(String),
    /// `LABEL=` or /dev/disk/by-label/ (udev's `\xNN` escapes undone).
    Label(String),
    /// `PARTUUID=` or /dev/disk/by-partuuid/, with the kernel's `/PARTNROFF=N`.
    PartUuid {
        /// The partition's UUID (GPT) or `SSSSSSSS-PP` (MBR disk signature and number).
        uuid: String,
        /// `PARTNROFF=`: the partition this many numbers after (or before) that one; 0: it.
        offset: i32,
    },
    /// `PARTLABEL=` or /dev/disk/by-partlabel/.
    PartLabel(String),
    /// `MAJOR:MINOR`, as the kernel accepts.
    DevNo {
        /// The device's major number.
        major: u32,
        /// The device's minor number.
        minor: u32,
    },
    /// /dev/mapper/NAME: a device-mapper device by its name.
    Mapper(String),
    /// /dev/NAME (or NAME): a kernel device name (sda2, nvme0n1p3, md0).
    Kernel(String),
    /// Any other path to a block device node or link (/dev/VG/LV, /dev/md/NAME).
    Path(String),
}

/// Why a device reference is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{spec}\" is not a device: {why}")]
pub struct DeviceRefError {
    /// The reference as given.
    pub spec: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Undo udev's `\xNN` escapes in /dev/disk/by-label/ and by-partlabel/ names.
pub fn unescape_udev(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1) == Some(&b'x')
            && let Some(v) = s.get(i + 2..i + 4).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl DeviceRef {
    /// Parse a device reference; every form `root=` takes.
    pub fn parse(spec: &str) -> Result<DeviceRef, DeviceRefError> {
        let err = |why| DeviceRefError { spec: spec.to_string(), why };
        let value = |v: &str, what| if v.is_empty() { Err(err(what)) } else { Ok(v.to_string()) };
        if let Some(u) = spec.strip_prefix("UUID=").or_else(|| spec.strip_prefix("/dev/disk/by-uuid/")) {
            return value(u, "an empty UUID").map(DeviceRef::Uuid);
        }
        if let Some(l) = spec.strip_prefix("LABEL=") {
            return value(l, "an empty label").map(DeviceRef::Label);
        }
        if let Some(l) = spec.strip_prefix("/dev/disk/by-label/") {
            return value(&unescape_udev(l), "an empty label").map(DeviceRef::Label);
        }
        if let Some(u) = spec.strip_prefix("PARTUUID=").or_else(|| spec.strip_prefix("/dev/disk/by-partuuid/")) {
            let (u, offset) = match u.split_once("/PARTNROFF=") {
                Some((u, off)) => match off.parse::<i32>() {
                    Ok(n) => (u, n),
                    Err(_) => return Err(err("PARTNROFF= is not a number")),
                },
                None => (u, 0),
            };
            return value(u, "an empty PARTUUID").map(|uuid| DeviceRef::PartUuid { uuid, offset });
        }
        if let Some(l) = spec.strip_prefix("PARTLABEL=") {
            return value(l, "an empty partition label").map(DeviceRef::PartLabel);
        }
        if let Some(l) = spec.strip_prefix("/dev/disk/by-partlabel/") {
            return value(&unescape_udev(l), "an empty partition label").map(DeviceRef::PartLabel);
        }
        if let Some(m) = spec.strip_prefix("/dev/mapper/") {
            return value(m, "an empty mapper name").map(DeviceRef::Mapper);
        }
        if let Some((a, b)) = spec.split_once(':')
            && let (Ok(major), Ok(minor)) = (a.parse::<u32>(), b.parse::<u32>())
        {
            return Ok(DeviceRef::DevNo { major, minor });
        }
        if spec.is_empty() {
            return Err(err("empty"));
        }
        if spec.contains('\0') {
            return Err(err("a NUL character"));
        }
        let name = spec.strip_prefix("/dev/").unwrap_or(spec);
        if !name.is_empty() && !name.contains('/') {
            return Ok(DeviceRef::Kernel(name.to_string()));
        }
        if spec.starts_with('/') {
            return Ok(DeviceRef::Path(spec.to_string()));
        }
        Err(err("not UUID=, LABEL=, PARTUUID=, PARTLABEL=, MAJOR:MINOR or a /dev path"))
    }

    /// A UUID compared the way blkid and udev do: without case.
    pub fn is_uuid(&self, uuid: &str) -> bool {
        matches!(self, DeviceRef::Uuid(u) if u.eq_ignore_ascii_case(uuid))
    }
}

/// The canonical spelling, which [`DeviceRef::parse`] reads back as the same value.
impl fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRef::Uuid(u) => write!(f, "UUID={u}"),
            DeviceRef::Label(l) => write!(f, "LABEL={l}"),
            DeviceRef::PartUuid { uuid, offset: 0 } => write!(f, "PARTUUID={uuid}"),
            DeviceRef::PartUuid { uuid, offset } => write!(f, "PARTUUID={uuid}/PARTNROFF={offset}"),
            DeviceRef::PartLabel(l) => write!(f, "PARTLABEL={l}"),
            DeviceRef::DevNo { major, minor } => write!(f, "{major}:{minor}"),
            DeviceRef::Mapper(m) => write!(f, "/dev/mapper/{m}"),
            DeviceRef::Kernel(n) => write!(f, "/dev/{n}"),
            DeviceRef::Path(p) => f.write_str(p),
        }
    }
}

impl core::str::FromStr for DeviceRef {
    type Err = DeviceRefError;
    fn from_str(s: &str) -> Result<DeviceRef, DeviceRefError> {
        DeviceRef::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn parses_every_form() {
        let p = |s: &str| DeviceRef::parse(s).unwrap();
        assert_eq!(p("UUID=ab-12"), DeviceRef::Uuid("ab-12".into()));
        assert_eq!(p("/dev/disk/by-uuid/ab-12"), DeviceRef::Uuid("ab-12".into()));
        assert_eq!(p("LABEL=my root"), DeviceRef::Label("my root".into()));
        assert_eq!(p("/dev/disk/by-label/my\\x20root"), DeviceRef::Label("my root".into()));
        assert_eq!(p("PARTUUID=aa-1/PARTNROFF=-1"), DeviceRef::PartUuid { uuid: "aa-1".into(), offset: -1 });
        assert_eq!(p("/dev/disk/by-partuuid/aa-1"), DeviceRef::PartUuid { uuid: "aa-1".into(), offset: 0 });
        assert_eq!(p("PARTLABEL=esp"), DeviceRef::PartLabel("esp".into()));
        assert_eq!(p("/dev/disk/by-partlabel/r\\x2fs"), DeviceRef::PartLabel("r/s".into()));
        assert_eq!(p("8:2"), DeviceRef::DevNo { major: 8, minor: 2 });
        assert_eq!(p("/dev/mapper/vg-root"), DeviceRef::Mapper("vg-root".into()));
        assert_eq!(p("/dev/vda1"), DeviceRef::Kernel("vda1".into()));
        assert_eq!(p("vda1"), DeviceRef::Kernel("vda1".into()));
        assert_eq!(p("/dev/vg/root"), DeviceRef::Path("/dev/vg/root".into()));
        for bad in ["", "UUID=", "LABEL=", "PARTUUID=x/PARTNROFF=y", "a/b", "/dev/mapper/", "x\0"] {
            assert!(DeviceRef::parse(bad).is_err(), "{bad:?}");
        }
        assert!(p("UUID=AB-12").is_uuid("ab-12"));
    }

    #[test]
    fn display_reads_back() {
        for s in [
            "UUID=1",
            "LABEL=a b",
            "PARTUUID=x/PARTNROFF=3",
            "PARTUUID=x",
            "PARTLABEL=p",
            "259:1",
            "/dev/mapper/m",
            "/dev/sda",
            "/dev/md/root",
            "/dev/disk/by-label/a\\x20b",
        ] {
            let d = DeviceRef::parse(s).unwrap();
            assert_eq!(DeviceRef::parse(&format!("{d}")).unwrap(), d, "{s}");
        }
    }

    #[test]
    fn unescapes_udev_names() {
        assert_eq!(unescape_udev("a\\x20b\\x2fc"), "a b/c");
        assert_eq!(unescape_udev("plain"), "plain");
        assert_eq!(unescape_udev("bad\\xZZ\\x"), "bad\\xZZ\\x");
    }
}
