//! The boot proof: on fixture machines (virtio, NVMe, AHCI, USB storage, btrfs @ on one NVMe
//! disk and on two disks, LUKS on virtio and on NVMe with a USB keyboard, md RAID1, LVM, a thin
//! LV, bcache, LUKS2 with --integrity, dm-integrity) leanrd's host-only image proves its boot;
//! built without a driver the machine needs (`--omit-module`), the build fails naming it and
//! leaves the previous image byte for byte; `leanrd verify` says the same of both images.

mod common;

use std::fs;
use std::path::Path;

use common::*;

fn build(k: &str, f: &Fixture, out: &Path, extra: &[&str]) -> std::process::Output {
    leanrd().args(["build", "-k", k, "--host-root"]).arg(&f.root).arg("-o").arg(out).args(extra).output().unwrap()
}

fn verify(k: &str, f: &Fixture, img: &Path) -> (bool, String) {
    let o = leanrd().args(["verify", "--kernel", k, "--host-root"]).arg(&f.root).arg(img).output().unwrap();
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
}

/// A USB stick root: xHCI, the mass-storage interface (usb-storage), its SCSI disk.
fn usb_storage(t: &TempDir) -> Fixture {
    let f = Fixture::new(t, "usb", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
    let intf = "pci0000:00/0000:00:05.0/usb1/1-1/1-1:1.0";
    f.dev("pci0000:00/0000:00:05.0", Some(XHCI_PCI), Some("xhci_hcd"))
        .dev("pci0000:00/0000:00:05.0/usb1", Some("usb:v1D6Bp0003d0601dc09dsc00dp03ic09isc00ip00in00"), Some("usb"))
        .dev("pci0000:00/0000:00:05.0/usb1/1-1", None, Some("usb"))
        .dev(intf, Some("usb:v0781p5581d0100dc00dsc00dp00ic08isc06ip50in00"), Some("usb-storage"))
        .dev(&format!("{intf}/host2/target2:0:0/2:0:0:0"), Some("scsi:t-0x00"), Some("sd"))
        .block(&format!("{intf}/host2/target2:0:0/2:0:0:0/block/sda"), "8:0", false)
        .block(&format!("{intf}/host2/target2:0:0/2:0:0:0/block/sda/sda1"), "8:1", true);
    f
}

/// An ext4 root on LVM (vg-root) on a virtio disk's second partition.
fn lvm(t: &TempDir) -> Fixture {
    let f = Fixture::new(t, "lvm", "22 1 253:0 / / rw - ext4 /dev/mapper/vg-root rw\n");
    let vda2 = "pci0000:00/0000:00:04.0/virtio1/block/vda/vda2";
    f.dev("pci0000:00/0000:00:04.0", Some(VIRTIO_PCI), Some("virtio-pci"))
        .dev("pci0000:00/0000:00:04.0/virtio1", Some("virtio:d00000002v00001AF4"), Some("virtio_blk"))
        .block("pci0000:00/0000:00:04.0/virtio1/block/vda", "254:0", false)
        .block(vda2, "254:2", true)
        .dm("dm-0", "LVM-abcdefabcdefabcdef", &[vda2])
        .dm_name("dm-0", "vg-root", "253:0");
    f
}

/// An ext4 root on a thin LV (vg-root) in a thin pool (vg-pool-tpool, its metadata and data
/// sub-LVs on a virtio disk's second partition), as device-mapper shows it.
fn lvm_thin(t: &TempDir) -> Fixture {
    let f = Fixture::new(t, "lvm-thin", "22 1 253:3 / / rw - ext4 /dev/mapper/vg-root rw\n");
    let vda2 = "pci0000:00/0000:00:04.0/virtio1/block/vda/vda2";
    f.dev("pci0000:00/0000:00:04.0", Some(VIRTIO_PCI), Some("virtio-pci"))
        .dev("pci0000:00/0000:00:04.0/virtio1", Some("virtio:d00000002v00001AF4"), Some("virtio_blk"))
        .block("pci0000:00/0000:00:04.0/virtio1/block/vda", "254:0", false)
        .block(vda2, "254:2", true)
        .dm("dm-0", "LVM-abcdefabcdefabcdeftmeta", &[vda2])
        .dm_name("dm-0", "vg-pool_tmeta", "253:0")
        .dm("dm-1", "LVM-abcdefabcdefabcdeftdata", &[vda2])
        .dm_name("dm-1", "vg-pool_tdata", "253:1")
        .dm("dm-2", "LVM-abcdefabcdefabcdefpool0-tpool", &["virtual/block/dm-0", "virtual/block/dm-1"])
        .dm_name("dm-2", "vg-pool-tpool", "253:2")
        .dm("dm-3", "LVM-abcdefabcdefabcdefroot0", &["virtual/block/dm-2"])
        .dm_name("dm-3", "vg-root", "253:3");
    f
}

/// An ext4 root on /dev/bcache0, its backing device a virtio disk's second partition.
fn bcache(t: &TempDir) -> Fixture {
    let f = Fixture::new(t, "bcache", "22 1 252:0 / / rw - ext4 /dev/bcache0 rw\n");
    let vda2 = "pci0000:00/0000:00:04.0/virtio1/block/vda/vda2";
    f.dev("pci0000:00/0000:00:04.0", Some(VIRTIO_PCI), Some("virtio-pci"))
        .dev("pci0000:00/0000:00:04.0/virtio1", Some("virtio:d00000002v00001AF4"), Some("virtio_blk"))
        .block("pci0000:00/0000:00:04.0/virtio1/block/vda", "254:0", false)
        .block(vda2, "254:2", true)
        .block("virtual/block/bcache0", "252:0", false);
    let b = f.root.join("sys/devices/virtual/block/bcache0");
    fs::create_dir_all(b.join("bcache")).unwrap();
    fs::create_dir_all(b.join("slaves")).unwrap();
    std::os::unix::fs::symlink(f.root.join("sys/devices").join(vda2), b.join("slaves/vda2")).unwrap();
    f
}

/// A root in a LUKS2 container formatted with `--integrity`: sda3_crypt (dm-1) on cryptsetup's
/// integrity subdevice sda3_crypt_dif (dm-0) on vda3, with a keyboard.
fn luks_integrity(t: &TempDir) -> Fixture {
    let f = keyboard_host_on(t, None, false);
    fs::write(
        f.root.join("proc/self/mountinfo"),
        "25 1 253:1 / / rw,relatime shared:1 - ext4 /dev/mapper/sda3_crypt rw\n26 25 0:5 / /proc rw - proc proc rw\n",
    )
    .unwrap();
    let hex = "0c0c0c0c11114222833377777777777";
    f.dm("dm-0", &format!("CRYPT-SUBDEV-{hex}7-sda3_crypt_dif"), &["pci0000:00/0000:00:04.0/virtio1/block/vda/vda3"])
        .dm_name("dm-0", "sda3_crypt_dif", "253:0")
        .dm("dm-1", &format!("CRYPT-LUKS2-{hex}7-sda3_crypt"), &["virtual/block/dm-0"])
        .dm_name("dm-1", "sda3_crypt", "253:1");
    f
}

/// An ext4 root on a standalone dm-integrity device (integritysetup's, dm-0) on a virtio disk's
/// second partition.
fn dm_integrity(t: &TempDir) -> Fixture {
    let f = Fixture::new(t, "dm-integrity", "22 1 253:0 / / rw - ext4 /dev/mapper/introot rw\n");
    let vda2 = "pci0000:00/0000:00:04.0/virtio1/block/vda/vda2";
    f.dev("pci0000:00/0000:00:04.0", Some(VIRTIO_PCI), Some("virtio-pci"))
        .dev("pci0000:00/0000:00:04.0/virtio1", Some("virtio:d00000002v00001AF4"), Some("virtio_blk"))
        .block("pci0000:00/0000:00:04.0/virtio1/block/vda", "254:0", false)
        .block(vda2, "254:2", true)
        .dm("dm-0", "CRYPT-INTEGRITY-introot", &[vda2])
        .dm_name("dm-0", "introot", "253:0");
    f
}

/// A btrfs root in subvolume @ on one NVMe disk, as distributions install it: mountinfo
/// shows an anonymous device (0:31); the member is found through /sys/fs/btrfs.
fn btrfs_nvme(t: &TempDir, name: &str) -> Fixture {
    let f = nvme_base(t, name, &BTRFS_MOUNTINFO.replace("/dev/vda2", "/dev/nvme0n1p2"));
    let devs = f.root.join("sys/fs/btrfs/0a1b2c3d-0000-4000-8000-000000000002/devices");
    fs::create_dir_all(&devs).unwrap();
    std::os::unix::fs::symlink(
        f.root.join("sys/devices/pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1/nvme0n1p2"),
        devs.join("nvme0n1p2"),
    )
    .unwrap();
    f
}

/// An ext4 root on AHCI (SATA), second partition.
fn ahci(t: &TempDir) -> Fixture {
    let f = Fixture::new(t, "ahci", "22 1 8:2 / / rw - ext4 /dev/sda2 rw\n");
    let disk = "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0";
    f.dev("pci0000:00/0000:00:1f.2", Some("pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01"), Some("ahci"))
        .dev(disk, Some("scsi:t-0x00"), Some("sd"))
        .block(&format!("{disk}/block/sda"), "8:0", false)
        .block(&format!("{disk}/block/sda/sda2"), "8:2", true);
    f
}

#[test]
fn host_only_images_prove_their_boot_and_a_missing_driver_is_named() {
    let Some(k) = kver() else { return };
    let need = ["cryptsetup", "lvm", "mdadm", "iscsistart", "thin_check", "integritysetup"];
    if need.iter().any(|t| !have(t)) {
        skip::<()>(&format!("needs {need:?} (the stacks' programs go into the images)"));
        return;
    }
    let t = TempDir::new("proof");
    let luks = TempDir::new("proof-luks");
    let luks2 = TempDir::new("proof-luks2");
    let integ = TempDir::new("proof-integrity");
    let machines: Vec<(&str, Fixture, &str)> = vec![
        ("virtio-blk ext4", virtio_ext4(&t), "virtio_blk"),
        ("NVMe xfs", nvme_base(&t, "nvme", "22 1 259:2 / / rw - xfs /dev/nvme0n1p2 rw\n"), "nvme"),
        ("AHCI ext4", ahci(&t), "ahci"),
        ("USB stick ext4", usb_storage(&t), "usb_storage"),
        ("btrfs @ on one NVMe disk", btrfs_nvme(&t, "btrfs-nvme"), "nvme"),
        ("btrfs @ on one NVMe disk (its file system)", btrfs_nvme(&t, "btrfs-nvme-2"), "btrfs"),
        ("btrfs raid1 on two virtio disks", btrfs_two_disks(&t), "virtio_blk"),
        ("md RAID1 on SATA", md_raid1_sata(&t), "raid1"),
        ("LVM on virtio", lvm(&t), "dm_mod"),
        ("a thin LV on virtio", lvm_thin(&t), "dm_thin_pool"),
        ("bcache on virtio", bcache(&t), "bcache"),
        ("dm-integrity on virtio", dm_integrity(&t), "dm_integrity"),
        ("LUKS2 with --integrity on virtio", luks_integrity(&integ), "dm_integrity"),
        ("NFS root over virtio-net", nfs_virtio(&t, "nfs"), "virtio_net"),
        ("NFS root (its client)", nfs_virtio(&t, "nfs-client"), "nfsv4"),
        ("root on an iSCSI LUN over virtio-net", iscsi_virtio(&t, "iscsi"), "virtio_net"),
        ("root on an iSCSI LUN (the initiator's transport)", iscsi_virtio(&t, "iscsi-tcp"), "iscsi_tcp"),
        ("root on an iSCSI LUN (its disk)", iscsi_virtio(&t, "iscsi-sd"), "sd_mod"),
        ("root on NVMe over TCP via virtio-net", nvmf_virtio(&t, "nvmf"), "virtio_net"),
        ("root on NVMe over TCP (its transport)", nvmf_virtio(&t, "nvmf-tcp"), "nvme_tcp"),
        ("root on NBD via virtio-net", nbd_virtio(&t, "nbd"), "virtio_net"),
        ("root on NBD (its module)", nbd_virtio(&t, "nbd-mod"), "nbd"),
        ("root on a dm-multipath map over two virtio-scsi paths", multipath_scsi(&t, "mpath"), "virtio_scsi"),
        ("root on a dm-multipath map (its target)", multipath_scsi(&t, "mpath-dm"), "dm_multipath"),
        ("LUKS with a USB keyboard", keyboard_host(&luks, Some("0c0c0c0c-1111-4222-8333-444444444444")), "usbhid"),
        (
            "LUKS on NVMe with a USB keyboard",
            keyboard_host_on(&luks, Some("0c0c0c0c-1111-4222-8333-555555555555"), true),
            "usbhid",
        ),
        (
            "LUKS on NVMe with a USB keyboard (its disk)",
            keyboard_host_on(&luks2, Some("0c0c0c0c-1111-4222-8333-666666666666"), true),
            "nvme",
        ),
    ];
    for (name, f, needed) in &machines {
        let img = t.join(format!("{}.img", name.replace(' ', "-")));
        let o = build(&k, f, &img, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{name}: {err}");
        assert!(err.contains("boot proof: "), "{name}: {err}");
        let (ok, out) = verify(&k, f, &img);
        assert!(ok && out.contains("boots this machine"), "{name}: verify: {out}");
        // The thin pool's checker is in the image for lvm (and lvm-thin's feature detected).
        if name.starts_with("dm-integrity") {
            let ls = String::from_utf8(common::ok(leanrd().arg("ls").arg(&img))).unwrap();
            assert!(ls.contains("sbin/integritysetup"), "{name}: {ls}");
        }
        if name.contains("thin LV") {
            let ls = String::from_utf8(common::ok(leanrd().arg("ls").arg(&img))).unwrap();
            assert!(ls.contains("sbin/thin_check") && !ls.contains("sbin/cache_check"), "{name}: {ls}");
        }
        // Without the driver the machine needs: no new image, the old one byte for byte.
        let before = fs::read(&img).unwrap();
        let o = build(&k, f, &img, &["--omit-module", needed]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{name}: built without {needed}: {err}");
        assert!(err.contains("would not boot this machine") && err.contains(needed), "{name}: {err}");
        assert!(err.contains("left as it is"), "{name}: {err}");
        assert_eq!(fs::read(&img).unwrap(), before, "{name}: the previous image changed");
        // --force writes it anyway, and verify names the same link.
        let broken = t.join("broken.img");
        let o = build(&k, f, &broken, &["--omit-module", needed, "--force"]);
        assert!(o.status.success(), "{name}: --force: {}", String::from_utf8_lossy(&o.stderr));
        let (ok, out) = verify(&k, f, &broken);
        assert!(!ok && out.contains("would NOT boot") && out.contains(needed), "{name}: verify: {out}");
        eprintln!("{name}: without {needed}: {}", out.lines().next().unwrap_or(""));
    }
    // A root with no /dev/disk/by-uuid link (udev has not named it yet) is named by its kernel
    // name, which the build says may change; with the link, by UUID, and nothing is said.
    let named = TempDir::new("proof-uuid");
    let f = virtio_ext4(&named);
    let img = t.join("by-name.img");
    let said = |o: std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let err = said(build(&k, &f, &img, &[]));
    assert!(err.contains("the root is named /dev/vda1, a kernel name that may differ on the next boot"), "{err}");
    f.uuid("0a1b2c3d-0000-4000-8000-00000000abcd", "vda1");
    let err = said(build(&k, &f, &img, &[]));
    assert!(!err.contains("kernel name"), "{err}");
    let x = named.join("x");
    ok(leanrd().arg("extract").arg(&img).arg("etc/leanrd/init.conf").arg("-C").arg(&x));
    let conf = fs::read_to_string(x.join("etc/leanrd/init.conf")).unwrap();
    assert!(conf.contains("0a1b2c3d-0000-4000-8000-00000000abcd"), "{conf}");
}

/// A root of a kind /init cannot mount is refused at build time, by name, with the kinds it
/// can; an NFS root is recorded by address and version, with its NIC's driver.
#[test]
fn root_kinds_are_matched_and_an_unknown_kind_is_refused() {
    let Some(k) = kver() else { return };
    let t = TempDir::new("proof-kinds");
    let f = Fixture::new(&t, "cifs", "22 1 0:40 / / rw - cifs //srv/root rw\n");
    let o = build(&k, &f, &t.join("cifs.img"), &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("the root is cifs (//srv/root): leanrd boots roots of these kinds only: block, nfs, live"),
        "{err}"
    );
    assert!(!t.join("cifs.img").exists());
    let f = nfs_virtio(&t, "nfs");
    let img = t.join("nfs.img");
    let o = build(&k, &f, &img, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = t.join("x");
    ok(leanrd().arg("extract").arg(&img).arg("-C").arg(&dir).arg("etc/leanrd/init.conf"));
    let conf = fs::read_to_string(dir.join("etc/leanrd/init.conf")).unwrap();
    assert!(conf.lines().any(|l| l == "root nfs4:10.0.2.2:/srv/root:vers=4.2,proto=tcp,rw"), "{conf}");
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&img))).unwrap();
    for m in ["virtio_net.ko", "nfsv4.ko", "sunrpc.ko"] {
        assert!(ls.lines().any(|l| l.ends_with(m)), "{m} not in the NFS image");
    }
    assert!(!ls.lines().any(|l| l.ends_with("ext4.ko") || l.ends_with("e1000.ko")), "more than the NFS root needs");
    // A root on iSCSI: its target and initiator recorded; without the iscsi feature the
    // proof names each piece the boot would lack.
    if !have("iscsistart") {
        return;
    }
    let f = iscsi_virtio(&t, "iscsi");
    let img = t.join("iscsi.img");
    let o = build(&k, &f, &img, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = t.join("y");
    ok(leanrd().arg("extract").arg(&img).arg("-C").arg(&dir).arg("etc/leanrd/init.conf"));
    let conf = fs::read_to_string(dir.join("etc/leanrd/init.conf")).unwrap();
    for want in
        ["iscsi iscsi:10.77.0.1::3261::iqn.2026-11.test.leanrd:root ", "iscsi_initiator iqn.2026-11.test:client"]
    {
        assert!(conf.lines().any(|l| l.starts_with(want)), "{want}: {conf}");
    }
    let o = build(&k, &f, &t.join("iscsi-without.img"), &["--exclude", "iscsi"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("the iscsi layer under the root: iscsistart"), "{err}");
    assert!(err.contains("/init's configuration does not turn on iscsi"), "{err}");
    // A root on NVMe over TCP: the subsystem recorded; without the nvmf feature, refused.
    let f = nvmf_virtio(&t, "nvmf");
    let img = t.join("nvmf.img");
    let o = build(&k, &f, &img, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = t.join("z");
    ok(leanrd().arg("extract").arg(&img).arg("-C").arg(&dir).arg("etc/leanrd/init.conf"));
    let conf = fs::read_to_string(dir.join("etc/leanrd/init.conf")).unwrap();
    assert!(conf.lines().any(|l| l == "nvmf tcp,10.77.0.2,,4420,nqn.2026-11.test.leanrd:root"), "{conf}");
    let o = build(&k, &f, &t.join("nvmf-without.img"), &["--exclude", "nvmf"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("NVMe/TCP subsystem nqn.2026-11.test.leanrd:root: /init's configuration does not turn on nvmf"),
        "{err}"
    );
    // A root on NBD: without the nbd feature, refused.
    let f = nbd_virtio(&t, "nbd-without");
    let o = build(&k, &f, &t.join("nbd-without.img"), &["--exclude", "nbd"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("the nbd layer under the root: /init's configuration does not turn on nbd"), "{err}");
    // A root on a multipath map: without the multipath feature, refused.
    let f = multipath_scsi(&t, "mpath-without");
    let o = build(&k, &f, &t.join("mpath-without.img"), &["--exclude", "multipath"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("the multipath layer under the root: /init's configuration does not turn on multipath"),
        "{err}"
    );
}

/// A universal image proves the classes its features promise: every storage driver, every
/// file system, every program; one built without a promised driver is refused.
#[test]
fn universal_images_keep_their_promise() {
    let Some(k) = kver() else { return };
    let t = TempDir::new("proof-universal");
    let img = t.join("universal.img");
    let run = |extra: &[&str]| {
        leanrd().args(["build", "-k", &k, "--universal"]).arg("-o").arg(&img).args(extra).output().unwrap()
    };
    let o = run(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains("boot proof: "), "{err}");
    let before = fs::read(&img).unwrap();
    let o = run(&["--omit-module", "nvme"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("a universal image promises nvme"), "{err}");
    assert_eq!(fs::read(&img).unwrap(), before, "the previous image changed");
}
