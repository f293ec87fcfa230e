//! The kind of root: what `root=` names and what the image was built for. One type for the
//! generator (host detection, feature selection, the proof) and /init (one source per kind).
//!
//! Adding a kind is one variant here (with its spelling in [`Root::parse`] and
//! [`fmt::Display`]), one `RootSource` file in /init and one feature that brings what it needs.

use alloc::string::{String, ToString};
use core::fmt;

use crate::config::Capability;
use crate::device::{DeviceRef, DeviceRefError};

/// Where the root file system comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    /// A block device, through whatever stack the image assembles (LUKS, LVM, md). Block
    /// devices that a network transport brings in (NVMe over TCP, iSCSI) are this kind too:
    /// the transport is a layer that makes the device appear.
    Block(DeviceRef),
    /// An NFS export, mounted over a network /init brings up.
    Nfs(NfsRoot),
    /// Live media: a squashfs (or erofs) image on a medium (a CD, a USB stick, a partition),
    /// mounted read-only through a loop device with a writable overlay on top.
    Live(LiveRoot),
    /// A ZFS dataset, in a pool /init imports.
    Zfs(ZfsRoot),
}

/// A ZFS root: `root=ZFS=POOL/DATASET` (zfs-initramfs's form), `root=zfs:POOL/DATASET`
/// (dracut's), `zfs=POOL/DATASET` (booster's), `bootfs=POOL/DATASET`, or `root=zfs:AUTO`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ZfsRoot {
    /// The dataset (a pool's name alone: its top dataset); None (`AUTO`): the `bootfs`
    /// property of the pool found (of `rpool=`'s pool, when given).
    pub dataset: Option<String>,
}

impl ZfsRoot {
    /// The root for `spec`, what follows `root=ZFS=` or `root=zfs:`: `POOL/DATASET`, `POOL`
    /// or `AUTO`.
    pub fn parse(spec: &str) -> Result<ZfsRoot, RootError> {
        if spec == "AUTO" || spec.is_empty() {
            return Ok(ZfsRoot::default());
        }
        Ok(ZfsRoot { dataset: Some(zfs_name(spec)?.to_string()) })
    }

    /// The pool the dataset is in; None: AUTO.
    pub fn pool(&self) -> Option<&str> {
        self.dataset.as_deref().map(|d| d.split('/').next().unwrap_or(d))
    }
}

/// Check a ZFS dataset name (`pool/a/b`): the characters `zfs create` takes (letters, digits,
/// `_-.: `), components not empty. A snapshot (`@`) is refused: booting a clone of one, as
/// zfs-initramfs does, is not something leanrd's /init does.
pub fn zfs_name(spec: &str) -> Result<&str, RootError> {
    let err = |why| RootError::Zfs { spec: spec.to_string(), why };
    if spec.contains('@') {
        return Err(err("a snapshot: leanrd boots a dataset, not a clone of a snapshot"));
    }
    if spec.len() > 255 {
        return Err(err("longer than ZFS's 255 characters"));
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | ' ');
    for part in spec.split('/') {
        if part.is_empty() {
            return Err(err("an empty component (a leading, trailing or double '/')"));
        }
        if !part.chars().all(ok) {
            return Err(err("a character ZFS names do not take (letters, digits and _-.: only)"));
        }
    }
    if !spec.as_bytes()[0].is_ascii_alphabetic() {
        return Err(err("a pool's name begins with a letter"));
    }
    Ok(spec)
}

/// A live root: `root=live:CDLABEL=...`, `live:LABEL=`, `live:UUID=`, `live:/dev/...`
/// (dracut's forms), or Debian's `boot=live` (the medium found by what it holds).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LiveRoot {
    /// The medium; None: the first one that holds a live image.
    pub medium: Option<DeviceRef>,
}

/// The kinds, by name (for messages, the proof and the docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RootKind {
    /// A block device ([`Root::Block`]).
    Block,
    /// An NFS export ([`Root::Nfs`]).
    Nfs,
    /// Live media ([`Root::Live`]).
    Live,
    /// A ZFS dataset ([`Root::Zfs`]).
    Zfs,
}

impl RootKind {
    /// Every kind, in the order messages list them.
    pub const ALL: [RootKind; 4] = [RootKind::Block, RootKind::Nfs, RootKind::Live, RootKind::Zfs];

    /// The kind's name in messages and the proof (`block`, `nfs`, `live`).
    pub fn name(self) -> &'static str {
        match self {
            RootKind::Block => "block",
            RootKind::Nfs => "nfs",
            RootKind::Live => "live",
            RootKind::Zfs => "zfs",
        }
    }

    /// Whether /init must bring the network up before it can find this root.
    pub fn needs_network(self) -> bool {
        matches!(self, RootKind::Nfs)
    }

    /// What an image must have been built with for this kind of root; None: every image can
    /// mount it (a block root's drivers are the proof's business, not a feature's).
    pub fn feature(self) -> Option<RootFeature> {
        match self {
            RootKind::Block => None,
            RootKind::Nfs => Some(RootFeature::Nfs),
            RootKind::Live => Some(RootFeature::Live),
            RootKind::Zfs => Some(RootFeature::Zfs),
        }
    }
}

/// What a root can come through that not every image can use: a kind of root (NFS, live
/// media) or a network transport under a block root (iSCSI, NVMe over TCP). This is the one
/// place that says which /init [`Capability`] each needs; the feature that turns it on has
/// the capability's name (`--include nfs`). /init checks it before it waits for anything,
/// the boot proof before an image is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RootFeature {
    /// An NFS export (`root=/dev/nfs`, `root=nfs:`, `boot=nfs`).
    Nfs,
    /// Live media (`root=live:`, `boot=live`).
    Live,
    /// LUNs on iSCSI targets (`netroot=iscsi:`, `root=iscsi:`, `rd.iscsi.target.*`).
    Iscsi,
    /// Namespaces on NVMe over TCP subsystems (`rd.nvmf.discover=`).
    Nvmf,
    /// A Network Block Device (`root=nbd:`, `netroot=nbd:`).
    Nbd,
    /// A ZFS dataset (`root=ZFS=`, `root=zfs:`, `zfs=`).
    Zfs,
}

impl RootFeature {
    /// Every one, in the order messages list them.
    pub const ALL: [RootFeature; 6] = [
        RootFeature::Nfs,
        RootFeature::Live,
        RootFeature::Iscsi,
        RootFeature::Nvmf,
        RootFeature::Nbd,
        RootFeature::Zfs,
    ];

    /// The /init capability the image needs for it.
    pub fn capability(self) -> Capability {
        match self {
            RootFeature::Nfs => Capability::Nfs,
            RootFeature::Live => Capability::Live,
            RootFeature::Iscsi => Capability::Iscsi,
            RootFeature::Nvmf => Capability::Nvmf,
            RootFeature::Nbd => Capability::Nbd,
            RootFeature::Zfs => Capability::Zfs,
        }
    }

    /// The feature that turns the capability on: what `--include` takes.
    pub fn feature(self) -> &'static str {
        self.capability().name()
    }

    /// What the root is, for messages: "an NFS root".
    pub fn what(self) -> &'static str {
        match self {
            RootFeature::Nfs => "an NFS root",
            RootFeature::Live => "a live root",
            RootFeature::Iscsi => "a root on iSCSI",
            RootFeature::Nvmf => "a root on NVMe over TCP",
            RootFeature::Nbd => "a root on NBD",
            RootFeature::Zfs => "a ZFS root",
        }
    }
}

/// Which NFS protocol versions to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NfsVersion {
    /// `nfs:` and `root=/dev/nfs`: version 4 first, then 3 (as mount.nfs does), unless the
    /// options give `vers=`/`nfsvers=`.
    #[default]
    Any,
    /// `nfs4:`: version 4 only.
    V4,
}

/// An NFS root: `nfs:SERVER:PATH[:OPTIONS]`, `nfs4:...`, or the kernel's `root=/dev/nfs`
/// with `nfsroot=[SERVER:]PATH[,OPTIONS]`. A server or path left empty comes from DHCP
/// (the server's address, and option 17, the root path).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NfsRoot {
    /// A host name, an IPv4 address, or an IPv6 address (written in brackets); None: the DHCP
    /// server's address.
    pub server: Option<String>,
    /// The exported directory (absolute, without ':'); None: the root path DHCP gives (option 17).
    pub path: Option<String>,
    /// mount(8)-style options (`vers=3,proto=tcp,ro`), as given.
    pub options: Option<String>,
    /// Which protocol versions to try.
    pub version: NfsVersion,
}

/// Why `root=` (or `nfsroot=`) could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootError {
    /// A device reference (the block root's, or a live root's medium) that could not be read.
    #[error(transparent)]
    Device(#[from] DeviceRefError),
    /// An NFS form (`nfs:`, `nfs4:`, `nfsroot=`) that could not be read.
    #[error("\"{spec}\" is not an NFS root: {why}")]
    Nfs {
        /// The text that was given.
        spec: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A ZFS form (`ZFS=`, `zfs:`, `zfs=`, `bootfs=`, `rpool=`) that could not be read.
    #[error("\"{spec}\" is not a ZFS dataset: {why}")]
    Zfs {
        /// The text that was given.
        spec: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// Split `[SERVER:]PATH[SEP OPTIONS]` (SEP is ':' for dracut's forms, ',' for `nfsroot=`); the
/// server may be `[IPv6]`.
fn server_path_options(spec: &str, rest: &str, sep: char) -> Result<NfsRoot, RootError> {
    let err = |why| RootError::Nfs { spec: spec.to_string(), why };
    let (server, after) = if let Some(r) = rest.strip_prefix('[') {
        let (v6, after) = r.split_once(']').ok_or(err("an IPv6 server without its closing ]"))?;
        if v6.is_empty() || !v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return Err(err("the bracketed server is not an IPv6 address"));
        }
        let after = after.strip_prefix(':').ok_or(err("no ':' after the server"))?;
        (Some(alloc::format!("[{v6}]")), after)
    } else if rest.starts_with('/') {
        // No server (dracut's `nfs:/PATH`, the kernel's bare `nfsroot=/PATH`): DHCP's.
        (None, rest)
    } else {
        match rest.split_once(':') {
            Some((s, after)) if !s.contains('/') => ((!s.is_empty()).then(|| s.to_string()), after),
            _ => return Err(err("not [SERVER:]PATH")),
        }
    };
    let (path, options) = match after.split_once(sep) {
        Some((p, o)) => (p, (!o.is_empty()).then(|| o.to_string())),
        None => (after, None),
    };
    if !path.is_empty() && !path.starts_with('/') {
        return Err(err("the path is not absolute"));
    }
    // `root=nfs:` ends the path at a ':', so a path with one could not be written back.
    if path.contains(':') {
        return Err(err("a ':' in the path"));
    }
    if path.contains('\0') || options.as_deref().is_some_and(|o| o.contains('\0')) {
        return Err(err("a NUL character"));
    }
    Ok(NfsRoot { server, path: (!path.is_empty()).then(|| path.to_string()), options, version: NfsVersion::Any })
}

impl Root {
    /// `root=` as the command line gives it, with `nfsroot=` when there is one: dracut's
    /// `nfs:`/`nfs4:` forms and `root=dhcp` (server and path from the DHCP lease), the
    /// kernel's `/dev/nfs`, else a block device reference.
    pub fn parse(spec: &str, nfsroot: Option<&str>) -> Result<Root, RootError> {
        if let Some(rest) = spec.strip_prefix("nfs4:") {
            let mut n = server_path_options(spec, rest, ':')?;
            n.version = NfsVersion::V4;
            return Ok(Root::Nfs(n));
        }
        if let Some(rest) = spec.strip_prefix("nfs:") {
            return Ok(Root::Nfs(server_path_options(spec, rest, ':')?));
        }
        if let Some(rest) = spec.strip_prefix("live:") {
            if rest.is_empty() {
                return Ok(Root::Live(LiveRoot::default()));
            }
            // dracut's CDLABEL= is a label like any other.
            let rest = rest.strip_prefix("CDLABEL=").map(|l| alloc::format!("LABEL={l}"));
            let dev = DeviceRef::parse(rest.as_deref().unwrap_or(&spec[5..]))?;
            return Ok(Root::Live(LiveRoot { medium: Some(dev) }));
        }
        if let Some(rest) = spec.strip_prefix("ZFS=").or_else(|| spec.strip_prefix("zfs:")) {
            return Ok(Root::Zfs(ZfsRoot::parse(rest)?));
        }
        if spec == "/dev/nfs" || spec == "dhcp" {
            return match nfsroot {
                Some(v) => Ok(Root::Nfs(server_path_options(v, v, ',')?)),
                None => Ok(Root::Nfs(NfsRoot::default())),
            };
        }
        Ok(Root::Block(DeviceRef::parse(spec)?))
    }

    /// Which kind of root this is.
    pub fn kind(&self) -> RootKind {
        match self {
            Root::Block(_) => RootKind::Block,
            Root::Nfs(_) => RootKind::Nfs,
            Root::Live(_) => RootKind::Live,
            Root::Zfs(_) => RootKind::Zfs,
        }
    }

    /// The block device, for a block root.
    pub fn device(&self) -> Option<&DeviceRef> {
        match self {
            Root::Block(d) => Some(d),
            Root::Nfs(_) | Root::Live(_) | Root::Zfs(_) => None,
        }
    }
}

/// The spelling [`Root::parse`] reads back as the same value (without `nfsroot=`).
impl fmt::Display for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A device named nfs: written /dev/nfs, it would read back as the kernel's NFS root.
            Root::Block(DeviceRef::Kernel(n)) if n == "nfs" => f.write_str(n),
            Root::Block(d) => d.fmt(f),
            Root::Zfs(z) => match &z.dataset {
                Some(d) => write!(f, "ZFS={d}"),
                None => f.write_str("zfs:AUTO"),
            },
            Root::Live(l) => match &l.medium {
                Some(d) => write!(f, "live:{d}"),
                None => f.write_str("live:"),
            },
            Root::Nfs(n) => {
                let scheme = if n.version == NfsVersion::V4 { "nfs4" } else { "nfs" };
                write!(f, "{scheme}:{}:{}", n.server.as_deref().unwrap_or(""), n.path.as_deref().unwrap_or(""))?;
                match &n.options {
                    Some(o) => write!(f, ":{o}"),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nfs(server: Option<&str>, path: Option<&str>, options: Option<&str>, version: NfsVersion) -> Root {
        Root::Nfs(NfsRoot {
            server: server.map(Into::into),
            path: path.map(Into::into),
            options: options.map(Into::into),
            version,
        })
    }

    #[test]
    fn every_spelling_of_an_nfs_root() {
        use NfsVersion::*;
        let p = |s, n| Root::parse(s, n).unwrap();
        assert_eq!(p("nfs:10.0.0.1:/srv/root", None), nfs(Some("10.0.0.1"), Some("/srv/root"), None, Any));
        assert_eq!(
            p("nfs4:srv.example:/r:vers=4.2,rw", None),
            nfs(Some("srv.example"), Some("/r"), Some("vers=4.2,rw"), V4)
        );
        assert_eq!(p("nfs:[fd00::1]:/r", None), nfs(Some("[fd00::1]"), Some("/r"), None, Any));
        assert_eq!(p("nfs::/r", None), nfs(None, Some("/r"), None, Any));
        assert_eq!(p("nfs:/r:ro", None), nfs(None, Some("/r"), Some("ro"), Any));
        assert_eq!(
            p("/dev/nfs", Some("10.0.0.1:/r,vers=3,tcp")),
            nfs(Some("10.0.0.1"), Some("/r"), Some("vers=3,tcp"), Any)
        );
        assert_eq!(p("/dev/nfs", Some("/tftpboot/x")), nfs(None, Some("/tftpboot/x"), None, Any));
        assert_eq!(p("/dev/nfs", None), nfs(None, None, None, Any));
        assert_eq!(p("dhcp", None), nfs(None, None, None, Any));
        assert_eq!(p("UUID=ab", None), Root::Block(DeviceRef::Uuid("ab".into())));
        assert_eq!(p("/dev/nfs0", None), Root::Block(DeviceRef::Kernel("nfs0".into())));
    }

    #[test]
    fn the_spelling_reads_back() {
        for s in
            ["nfs:10.0.0.1:/srv/root", "nfs4:h:/r:vers=4.1,rw", "nfs:[fd00::1]:/r", "nfs::", "UUID=ab", "/dev/sda2"]
        {
            let r = Root::parse(s, None).unwrap();
            assert_eq!(r.to_string(), s);
            assert_eq!(Root::parse(&r.to_string(), None).unwrap(), r);
        }
    }

    #[test]
    fn every_spelling_of_a_zfs_root() {
        let z = |d: Option<&str>| Root::Zfs(ZfsRoot { dataset: d.map(Into::into) });
        assert_eq!(Root::parse("ZFS=rpool/ROOT/debian", None).unwrap(), z(Some("rpool/ROOT/debian")));
        assert_eq!(Root::parse("zfs:tank/root", None).unwrap(), z(Some("tank/root")));
        assert_eq!(Root::parse("zfs:AUTO", None).unwrap(), z(None));
        assert_eq!(Root::parse("ZFS=tank", None).unwrap(), z(Some("tank")));
        let Root::Zfs(r) = Root::parse("ZFS=tank/a/b", None).unwrap() else { panic!() };
        assert_eq!(r.pool(), Some("tank"));
        for (bad, why) in [
            ("ZFS=tank/root@snap", "snapshot"),
            ("ZFS=/tank", "empty component"),
            ("zfs:tank//a", "empty component"),
            ("zfs:tank/", "empty component"),
            ("zfs:tank/a$b", "character"),
            ("zfs:1tank", "begins with a letter"),
        ] {
            let e = Root::parse(bad, None).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        for s in ["ZFS=rpool/ROOT/debian", "zfs:AUTO"] {
            assert_eq!(Root::parse(s, None).unwrap().to_string(), s);
        }
    }

    /// `root=nfs` names a block device (/dev/nfs is the kernel's NFS root): its spelling must
    /// not turn it into one (found by fuzz/ `cmdline`).
    #[test]
    fn a_device_named_nfs_stays_a_device() {
        let r = Root::parse("nfs", None).unwrap();
        assert_eq!(r, Root::Block(DeviceRef::Kernel("nfs".into())));
        assert_eq!(Root::parse(&r.to_string(), None).unwrap(), r);
        assert_eq!(Root::parse("/dev/nfs", None).unwrap().kind(), RootKind::Nfs);
    }

    /// Every kind of root but a block device needs a feature, each feature its own capability,
    /// spelled so that a configuration's `layer` line reads it back.
    #[test]
    fn each_root_feature_has_its_capability() {
        let kinds: alloc::vec::Vec<_> = RootKind::ALL.iter().map(|k| (k.name(), k.feature())).collect();
        assert_eq!(
            kinds,
            [
                ("block", None),
                ("nfs", Some(RootFeature::Nfs)),
                ("live", Some(RootFeature::Live)),
                ("zfs", Some(RootFeature::Zfs))
            ]
        );
        let names: alloc::vec::Vec<&str> = RootFeature::ALL.iter().map(|f| f.feature()).collect();
        assert_eq!(names, ["nfs", "live", "iscsi", "nvmf", "nbd", "zfs"]);
        for f in RootFeature::ALL {
            assert_eq!(Capability::from_name(f.feature()), Some(f.capability()), "{f:?}");
        }
    }

    #[test]
    fn live_roots() {
        let p = |s| Root::parse(s, None).unwrap();
        let live = |d: Option<DeviceRef>| Root::Live(LiveRoot { medium: d });
        assert_eq!(p("live:CDLABEL=Debian_Live"), live(Some(DeviceRef::Label("Debian_Live".into()))));
        assert_eq!(p("live:UUID=2026-11-25-10-00-00-00"), live(Some(DeviceRef::Uuid("2026-11-25-10-00-00-00".into()))));
        assert_eq!(p("live:/dev/sr0"), live(Some(DeviceRef::Kernel("sr0".into()))));
        assert_eq!(p("live:"), live(None));
        for s in ["live:LABEL=x", "live:/dev/sr0", "live:"] {
            let again = p(s).to_string();
            assert_eq!(Root::parse(&again, None).unwrap(), p(s), "{s}");
        }
        assert!(Root::parse("live:LABEL=", None).is_err());
    }

    #[test]
    fn bad_nfs_roots_say_why() {
        let e = |s: &str| Root::parse(s, None).unwrap_err().to_string();
        assert_eq!(e("nfs:srv:rel/path"), "\"nfs:srv:rel/path\" is not an NFS root: the path is not absolute");
        assert_eq!(
            e("nfs:[fd00::1:/r"),
            "\"nfs:[fd00::1:/r\" is not an NFS root: an IPv6 server without its closing ]"
        );
        assert_eq!(e("nfs:srv"), "\"nfs:srv\" is not an NFS root: not [SERVER:]PATH");
        let e2 = Root::parse("/dev/nfs", Some("10.0.0.1:/srv/a:b")).unwrap_err().to_string();
        assert_eq!(e2, "\"10.0.0.1:/srv/a:b\" is not an NFS root: a ':' in the path");
        assert!(e("UUID=").contains("is not a device"));
    }
}
