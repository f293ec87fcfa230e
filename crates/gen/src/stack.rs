//! The layers a root's block stack can have between its file system and the hardware, in one
//! table: host detection records them, feature files name them (`stack = [...]`), the boot
//! proof checks each against the program and /init capability it needs, and the feature
//! reference and leanrd-features(5) list them, all from [`LAYERS`].

use leanrd_contract::Capability;

/// A layer of a root's block stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum StackLayer {
    /// Any device-mapper device.
    Dm,
    /// A dm-crypt mapping (LUKS).
    Crypt,
    /// An LVM logical volume.
    Lvm,
    /// An md RAID array.
    Md,
    /// A disk reached over iSCSI.
    Iscsi,
    /// A namespace reached over NVMe over TCP.
    Nvmf,
    /// An LVM thin pool (a thin LV's, or a snapshot's of one).
    Thin,
    /// An LVM cache LV (dm-cache).
    Cache,
    /// A bcache device: a backing device cached by a cache set.
    Bcache,
    /// A standalone dm-integrity device.
    Integrity,
    /// A dm-verity device (veritysetup's or systemd's, or leanrd's /init's).
    Verity,
    /// A Network Block Device (/dev/nbdN).
    Nbd,
    /// A dm-multipath map (DM UUID `mpath-WWID`), or a partition of one (kpartx's).
    Multipath,
}

/// What one layer is and what booting through it takes.
pub struct LayerDef {
    /// Which layer this entry is for.
    pub layer: StackLayer,
    /// Its name in feature files and messages.
    pub name: &'static str,
    /// What the layer is, for docs/features.md and leanrd-features(5).
    pub doc: &'static str,
    /// The program /init runs to open it, when one is needed.
    pub program: Option<&'static str>,
    /// The /init capability that opens it, when one is needed.
    pub capability: Option<Capability>,
}

/// Every layer.
pub const LAYERS: &[LayerDef] = &[
    LayerDef {
        layer: StackLayer::Dm,
        name: "dm",
        doc: "any device-mapper device (dm_mod)",
        program: None,
        capability: None,
    },
    LayerDef {
        layer: StackLayer::Crypt,
        name: "crypt",
        doc: "a dm-crypt mapping: LUKS, unlocked by cryptsetup",
        program: Some("cryptsetup"),
        capability: Some(Capability::Luks),
    },
    LayerDef {
        layer: StackLayer::Lvm,
        name: "lvm",
        doc: "an LVM logical volume, activated by lvm",
        program: Some("lvm"),
        capability: Some(Capability::Lvm),
    },
    LayerDef {
        layer: StackLayer::Md,
        name: "md",
        doc: "an md RAID array, assembled by mdadm",
        program: Some("mdadm"),
        capability: Some(Capability::Md),
    },
    LayerDef {
        layer: StackLayer::Iscsi,
        name: "iscsi",
        doc: "a disk on an iSCSI target, logged in to by iscsistart",
        program: Some("iscsistart"),
        capability: Some(Capability::Iscsi),
    },
    LayerDef {
        layer: StackLayer::Nvmf,
        name: "nvmf",
        doc: "a namespace on an NVMe over TCP subsystem, connected to by the kernel's nvme-tcp",
        program: None,
        capability: Some(Capability::Nvmf),
    },
    LayerDef {
        layer: StackLayer::Thin,
        name: "thin",
        doc: "an LVM thin pool: lvm runs thin_check (thin-provisioning-tools) on its metadata before activating it",
        program: Some("thin_check"),
        capability: Some(Capability::Lvm),
    },
    LayerDef {
        layer: StackLayer::Cache,
        name: "cache",
        doc: "an LVM cache LV (dm-cache): lvm runs cache_check (thin-provisioning-tools) on its metadata first",
        program: Some("cache_check"),
        capability: Some(Capability::Lvm),
    },
    LayerDef {
        layer: StackLayer::Bcache,
        name: "bcache",
        doc: "a bcache device (/dev/bcacheN): its backing and cache devices registered by /init through sysfs",
        program: None,
        capability: Some(Capability::Bcache),
    },
    LayerDef {
        layer: StackLayer::Integrity,
        name: "integrity",
        doc: "a standalone dm-integrity device, opened by integritysetup with /etc/integritytab's options",
        program: Some("integritysetup"),
        capability: Some(Capability::Integrity),
    },
    LayerDef {
        layer: StackLayer::Verity,
        name: "verity",
        doc: "a dm-verity device, set up by /init itself (roothash=, usrhash=, a verity-sig partition)",
        program: None,
        capability: None,
    },
    LayerDef {
        layer: StackLayer::Nbd,
        name: "nbd",
        doc: "a Network Block Device (/dev/nbdN): /init does the NBD handshake and gives the socket to the kernel's nbd",
        program: None,
        capability: Some(Capability::Nbd),
    },
    LayerDef {
        layer: StackLayer::Multipath,
        name: "multipath",
        doc: "a dm-multipath map of the paths to one LUN, and its partitions (kpartx's), made by /init with the DM \
              ioctls as the host's multipath.conf, bindings and wwids say",
        program: None,
        capability: Some(Capability::Multipath),
    },
];

impl StackLayer {
    /// Its entry in [`LAYERS`].
    pub(crate) fn def(self) -> &'static LayerDef {
        LAYERS.iter().find(|d| d.layer == self).expect("every layer is in LAYERS")
    }

    /// Its name in feature files and messages.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The layer named `s` in feature files; None for an unknown name.
    pub fn from_name(s: &str) -> Option<StackLayer> {
        LAYERS.iter().find(|d| d.name == s).map(|d| d.layer)
    }
}

impl std::fmt::Display for StackLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl TryFrom<String> for StackLayer {
    type Error = String;
    fn try_from(s: String) -> Result<StackLayer, String> {
        StackLayer::from_name(&s).ok_or_else(|| {
            let known: Vec<&str> = LAYERS.iter().map(|d| d.name).collect();
            format!("unknown stack layer {s:?} (one of: {})", known.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layer_once_and_its_name_read_back() {
        for d in LAYERS {
            assert_eq!(LAYERS.iter().filter(|x| x.layer == d.layer || x.name == d.name).count(), 1, "{}", d.name);
            assert_eq!(StackLayer::from_name(d.name), Some(d.layer));
            assert_eq!(d.layer.def().name, d.name);
        }
        let e = StackLayer::try_from("raid".to_string()).unwrap_err();
        assert!(e.contains("\"raid\"") && e.contains("crypt, lvm, md"), "{e}");
    }
}
