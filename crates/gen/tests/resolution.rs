//! Resolution against the reference tools and host detection on fixture trees: module sets
//! equal `modprobe --show-depends` plus soft dependencies, library sets equal `ldd`, and
//! the facts read from fixture proc/sys trees.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use leanrd_gen::Kernel;
use leanrd_gen::Resolver;
use leanrd_gen::StackLayer;
use leanrd_gen::host;
use leanrd_gen::plan::{Item, Plan};
use leanrd_testkit::*;

#[test]
fn module_sets_equal_modprobe_plus_softdeps() {
    let Some(k) = kver() else { return };
    if !have("modprobe") {
        skip::<()>("modprobe (kmod) missing");
        return;
    }
    let kernel = Kernel::load(Path::new("/"), &k).unwrap();
    let softdeps = fs::read_to_string(format!("/lib/modules/{k}/modules.softdep")).unwrap_or_default();
    for what in [
        "ext4",
        "xfs",
        "btrfs",
        "virtio_blk",
        "nvme",
        "ahci",
        "usb_storage",
        "dm_crypt",
        "raid1",
        "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00",
        "fs-vfat",
    ] {
        let (ours, missing) = kernel.resolve([what]);
        assert!(missing.is_empty(), "{what}: {missing:?}");
        let want = expected_modules(&k, what, &softdeps);
        assert_eq!(ours, want, "{what}");
    }
}

/// The real paths of the regular files in a plan (what would be in the image).
fn plan_files(p: &Plan) -> BTreeSet<String> {
    p.items
        .values()
        .filter_map(|i| match i {
            Item::File { src, .. } => Some(fs::canonicalize(src).unwrap().display().to_string()),
            _ => None,
        })
        .collect()
}

fn ldd(bin: &str) -> BTreeSet<String> {
    let o = Command::new("ldd").arg(bin).output().unwrap();
    let mut out = BTreeSet::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next().unwrap_or(""),
            None => line.split_whitespace().next().unwrap_or(""),
        };
        if path.starts_with('/') {
            out.insert(fs::canonicalize(path).unwrap().display().to_string());
        }
    }
    out.insert(fs::canonicalize(bin).unwrap().display().to_string());
    out
}

#[test]
fn library_sets_equal_ldd() {
    if !have("ldd") {
        return;
    }
    let t = TempDir::new("elf");
    let mut bins: Vec<String> = ["busybox", "cryptsetup", "lvm", "mdadm", "ls"]
        .iter()
        .filter_map(|b| {
            let p = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
                .iter()
                .map(|d| format!("{d}/{b}"))
                .find(|p| Path::new(p).exists());
            if p.is_none() {
                eprintln!("note: {b} not installed, not compared");
            }
            p
        })
        .collect();
    // A binary with DT_RUNPATH=$ORIGIN/../lib and a library of its own there.
    if have("cc") {
        let d = t.path();
        fs::create_dir_all(d.join("lib")).unwrap();
        fs::create_dir_all(d.join("bin")).unwrap();
        fs::write(d.join("foo.c"), "int foo(void) { return 42; }\n").unwrap();
        fs::write(d.join("main.c"), "int foo(void); int main(void) { return foo() - 42; }\n").unwrap();
        let st = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(d.join("lib/libfoo.so"))
            .arg(d.join("foo.c"))
            .status()
            .unwrap();
        assert!(st.success());
        let st = Command::new("cc")
            .arg("-o")
            .arg(d.join("bin/prog"))
            .arg(d.join("main.c"))
            .arg(format!("-L{}", d.join("lib").display()))
            .args(["-lfoo", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib"])
            .status()
            .unwrap();
        assert!(st.success());
        bins.push(d.join("bin/prog").display().to_string());
    }
    assert!(!bins.is_empty());
    for b in bins {
        let mut plan = Plan::new(Path::new("/"));
        Resolver::new(&mut plan).add_binary(&b).unwrap();
        assert_eq!(plan_files(&plan), ldd(&b), "{b}");
    }
}

/// The facts compose needs from the host are gathered with the others: the by-uuid links,
/// this boot's command line, the system's fstab and the CPU's microcode file.
#[test]
fn host_facts_hold_what_compose_reads() {
    let t = TempDir::new("hostfacts");
    let f = virtio_ext4(&t);
    let (root, sysroot) = (f.root.clone(), t.join("sysroot"));
    fs::create_dir_all(root.join("dev/disk/by-uuid")).unwrap();
    symlink("../../vda1", root.join("dev/disk/by-uuid/1111-2222")).unwrap();
    symlink("../../vdb", root.join("dev/disk/by-uuid/3333-4444")).unwrap();
    fs::write(root.join("proc/cmdline"), "root=UUID=1111-2222 rw quiet\n").unwrap();
    fs::write(root.join("proc/cpuinfo"), "vendor_id\t: AuthenticAMD\ncpu family\t: 25\n").unwrap();
    fs::create_dir_all(sysroot.join("etc")).unwrap();
    fs::write(sysroot.join("etc/fstab"), "UUID=1111-2222 / ext4 defaults 0 1\n").unwrap();
    let x = host::detect_all(&root, &sysroot).unwrap();
    assert_eq!(
        x.by_uuid.into_iter().collect::<Vec<_>>(),
        [("vda1".to_string(), "1111-2222".to_string()), ("vdb".into(), "3333-4444".into())]
    );
    assert_eq!(x.cmdline, "root=UUID=1111-2222 rw quiet\n");
    assert_eq!(x.fstab, "UUID=1111-2222 / ext4 defaults 0 1\n");
    assert_eq!(x.cpu_microcode, Some(("AuthenticAMD", "/lib/firmware/amd-ucode/microcode_amd_fam19h.bin".into())));
}

#[test]
fn host_detection_on_fixture_trees() {
    let t = TempDir::new("hostfix");
    // virtio ext4
    let f = virtio_ext4(&t);
    let x = host::detect(&f.root).unwrap();
    assert_eq!(x.root.fstype, "ext4");
    assert_eq!(x.modaliases, BTreeSet::from([VIRTIO_PCI.to_string(), "virtio:d00000002v00001AF4".to_string()]));
    assert!(x.drivers.contains("virtio_blk") && x.drivers.contains("virtio_pci"));
    assert!(x.stack.is_empty());
    // NVMe partition, XFS
    let f = nvme_base(&t, "nvme", "22 1 259:2 / / rw - xfs /dev/nvme0n1p2 rw\n");
    let x = host::detect(&f.root).unwrap();
    assert_eq!(x.root.fstype, "xfs");
    assert_eq!(x.modaliases, BTreeSet::from([NVME_PCI.to_string()]));
    assert!(x.drivers.contains("nvme"));
    // LUKS on NVMe
    let f = nvme_base(&t, "luks", "22 1 253:0 / / rw - ext4 /dev/mapper/root rw\n");
    f.dm("dm-0", "CRYPT-LUKS2-0123456789abcdef-root", &["pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1/nvme0n1p2"]).block(
        "virtual/block/dm-0",
        "253:0",
        false,
    );
    let x = host::detect(&f.root).unwrap();
    assert_eq!(x.stack, BTreeSet::from([StackLayer::Crypt, StackLayer::Dm]));
    assert!(x.modules.contains("dm_crypt"));
    assert!(x.modaliases.contains(NVME_PCI));
    // LVM on LUKS
    let f = nvme_base(&t, "lvm-luks", "22 1 253:1 / / rw - ext4 /dev/mapper/vg-root rw\n");
    f.dm("dm-0", "CRYPT-LUKS2-0123-root", &["pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1/nvme0n1p2"])
        .block("virtual/block/dm-0", "253:0", false)
        .dm("dm-1", "LVM-abcdefabcdef", &["virtual/block/dm-0"])
        .block("virtual/block/dm-1", "253:1", false);
    let x = host::detect(&f.root).unwrap();
    assert_eq!(x.stack, BTreeSet::from([StackLayer::Crypt, StackLayer::Dm, StackLayer::Lvm]));
    assert!(x.modaliases.contains(NVME_PCI));
    // md RAID1 over two SATA disks
    let f = md_raid1_sata(&t);
    let x = host::detect(&f.root).unwrap();
    assert_eq!(x.stack, BTreeSet::from([StackLayer::Md]));
    assert!(x.modules.contains("raid1") && x.modules.contains("md_mod"));
    assert!(x.modaliases.contains("scsi:t-0x00"));
    assert!(x.drivers.contains("ahci"));
    // A root whose block device is not in sysfs: a clear error.
    let f = Fixture::new(&t, "broken", "22 1 8:99 / / rw - ext4 /dev/sdz9 rw\n");
    let e = host::detect(&f.root).unwrap_err();
    assert!(format!("{e:#}").contains("8:99"), "{e:#}");
}

/// btrfs shows no block device number: its members come from /sys/fs/btrfs, every one walked
/// to its driver; without them detection fails instead of building an image that cannot boot.
#[test]
fn btrfs_roots_are_resolved_to_every_member() {
    let t = TempDir::new("hostbtrfs");
    let f = btrfs_two_disks(&t);
    let x = host::detect(&f.root).unwrap();
    assert_eq!((x.root.fstype.as_str(), x.root.dev, x.root.fsroot.as_str()), ("btrfs", (0, 31), "/@"));
    assert_eq!(x.devices, ["vda2", "vdb"]);
    assert!(x.modaliases.contains(VIRTIO_PCI) && x.drivers.contains("virtio_blk"), "{x:?}");
    let lone = Fixture::new(&t, "btrfs-nosysfs", BTRFS_MOUNTINFO);
    let e = host::detect(&lone.root).unwrap_err().to_string();
    assert!(e.contains("cannot find its block devices in /sys/fs/btrfs"), "{e}");
    // A network root needs an interface to reach it: none up is an error, and the NIC's
    // driver is walked like a disk's.
    let nfs = Fixture::new(&t, "nfs", "22 1 0:40 / / rw - nfs4 10.0.0.1:/srv/root rw\n");
    fs::create_dir_all(nfs.root.join("sys/class/net")).unwrap();
    let e = host::detect(&nfs.root).unwrap_err().to_string();
    assert!(e.contains("no network interface with a device is up"), "{e}");
    let x = host::detect(&nfs_virtio(&t, "nfs-virtio").root).unwrap();
    assert_eq!(x.devices, ["eth0"]);
    assert!(x.drivers.contains("virtio_net") && x.root_kind() == leanrd_contract::RootKind::Nfs, "{x:?}");
    // The image mounts the subvolume the host runs from.
    let Some(k) = kver() else { return };
    let (g, conf) = host_only(&t, &f, k);
    assert_eq!(conf.mounts.rootflags.as_deref(), Some("subvol=@"));
    assert!(g.modules.contains("virtio_blk") && g.modules.contains("btrfs"), "{:?}", g.modules);
}

/// The host-only image for a fixture machine (a stand-in /init), and the configuration it
/// gives /init.
fn host_only(t: &TempDir, f: &Fixture, kver: String) -> (leanrd_gen::Generated, leanrd_contract::InitConfig) {
    let init = t.join("init");
    fs::write(&init, b"#!/bin/sh\n").unwrap();
    let s = leanrd_gen::Settings {
        kver: Some(kver),
        host_root: Some(f.root.clone()),
        init: Some(init),
        ..Default::default()
    };
    let g = leanrd_gen::generate(&leanrd_gen::Request::new(s, t.path()).unwrap()).unwrap();
    let Some(Item::Inline { data, .. }) = g.main.items.get("/etc/leanrd/init.conf") else { panic!("no config") };
    let conf = leanrd_contract::InitConfig::decode(std::str::from_utf8(data).unwrap()).unwrap();
    (g, conf)
}

/// A root on an iSCSI LUN: the session's target (portal, port, LUN) and initiator name are
/// recorded, the NIC's driver is walked, and the image logs in to it: the iscsi feature comes
/// with the network's, and /init's configuration names the target.
#[test]
fn iscsi_roots_record_their_target() {
    let t = TempDir::new("hostiscsi");
    let f = iscsi_virtio(&t, "iscsi");
    let x = host::detect(&f.root).unwrap();
    assert_eq!(x.iscsi.len(), 1);
    assert_eq!(x.iscsi[0].to_string(), "iscsi:10.77.0.1::3261::iqn.2026-11.test.leanrd:root");
    assert_eq!(x.iscsi_initiator.as_deref(), Some("iqn.2026-11.test:client"));
    assert!(
        x.stack.contains(&StackLayer::Iscsi) && x.drivers.contains("virtio_net") && x.drivers.contains("sd_mod"),
        "{x:?}"
    );
    assert_eq!(x.interfaces, ["eth0"]);
    // No interface up: the root cannot be reached, and detection says so.
    fs::write(f.root.join("sys/class/net/eth0/operstate"), "down\n").unwrap();
    let e = host::detect(&f.root).unwrap_err().to_string();
    assert!(e.contains("the root is on iSCSI (iqn.2026-11.test.leanrd:root at 10.77.0.1:3261), but no network"), "{e}");
    fs::write(f.root.join("sys/class/net/eth0/operstate"), "up\n").unwrap();
    // An offloading adapter's session is refused by name.
    fs::create_dir_all(f.root.join("sys/class/scsi_host/host2")).unwrap();
    fs::write(f.root.join("sys/class/scsi_host/host2/proc_name"), "qla4xxx\n").unwrap();
    let e = host::detect(&f.root).unwrap_err().to_string();
    assert!(e.contains("the root is on iSCSI through qla4xxx"), "{e}");
    fs::write(f.root.join("sys/class/scsi_host/host2/proc_name"), "iscsi_tcp\n").unwrap();
    let Some(k) = kver() else { return };
    if !Path::new("/usr/sbin/iscsistart").exists() {
        eprintln!("skipped the image half: no iscsistart (open-iscsi)");
        return;
    }
    let (g, conf) = host_only(&t, &f, k);
    assert_eq!(conf.iscsi, x.iscsi);
    assert_eq!(conf.iscsi_initiator.as_deref(), Some("iqn.2026-11.test:client"));
    assert!(conf.layer(leanrd_contract::Capability::Iscsi).is_some(), "{conf:?}");
    assert!(g.main.items.contains_key("/usr/sbin/iscsistart"), "no iscsistart in the image");
    assert!(g.modules.contains("iscsi_tcp") && g.modules.contains("virtio_net"), "{:?}", g.modules);
}

/// A root on NVMe over TCP: the subsystem (address, port, NQN) and the host NQN and ID are
/// recorded, the NIC's driver walked, and /init is told to connect; another transport is an
/// error naming it.
#[test]
fn nvmf_roots_record_their_subsystem() {
    let t = TempDir::new("hostnvmf");
    let f = nvmf_virtio(&t, "nvmf");
    let x = host::detect(&f.root).unwrap();
    assert_eq!(x.nvmf.len(), 1);
    assert_eq!(x.nvmf[0].to_string(), "tcp,10.77.0.2,,4420,nqn.2026-11.test.leanrd:root");
    assert_eq!(x.nvmf_hostid.as_deref(), Some("6c65616e-7264-0000-0000-000000000001"));
    assert!(x.stack.contains(&StackLayer::Nvmf) && x.drivers.contains("virtio_net"), "{x:?}");
    let Some(k) = kver() else { return };
    let (g, conf) = host_only(&t, &f, k);
    assert_eq!(conf.nvmf, x.nvmf);
    assert!(conf.layer(leanrd_contract::Capability::Nvmf).is_some(), "{conf:?}");
    assert!(g.modules.contains("nvme_tcp") && g.modules.contains("virtio_net"), "{:?}", g.modules);
    fs::write(f.root.join("sys/class/nvme/nvme0/transport"), "rdma\n").unwrap();
    let e = host::detect(&f.root).unwrap_err().to_string();
    assert!(e.contains("the root is on NVMe over rdma (nvme0): leanrd's /init connects to NVMe over TCP only"), "{e}");
}

/// A root on /dev/nbd0 (a virtual block device, no parent): the nbd layer, its module, the
/// NIC's driver, and /init's nbd capability in a host-only image.
#[test]
fn nbd_roots_are_detected() {
    let t = TempDir::new("hostnbd");
    let f = leanrd_testkit::nbd_virtio(&t, "nbd");
    let x = host::detect(&f.root).unwrap();
    assert!(x.stack.contains(&StackLayer::Nbd) && x.drivers.contains("virtio_net"), "{x:?}");
    assert!(x.modules.contains("nbd"), "{:?}", x.modules);
    let Some(k) = kver() else { return };
    let (g, conf) = host_only(&t, &f, k);
    assert!(conf.layer(leanrd_contract::Capability::Nbd).is_some(), "{conf:?}");
    assert!(g.modules.contains("nbd") && g.modules.contains("virtio_net"), "{:?}", g.modules);
}

/// A system booted live: its root an overlay, its medium on /run/initramfs/live. The medium
/// is recorded by UUID (not the overlay), its CD drive's drivers walked, and the image gets
/// the loop device, squashfs, the overlay and the medium's file system.
#[test]
fn live_systems_record_their_medium() {
    let t = TempDir::new("hostlive");
    let f = Fixture::new(
        &t,
        "live",
        "22 1 0:31 / / rw,relatime - overlay overlay rw,lowerdir=/run/initramfs/rootfs,upperdir=/u,workdir=/w\n\
         30 22 11:0 / /run/initramfs/live ro,relatime - iso9660 /dev/sr0 ro\n",
    );
    let cd = "pci0000:00/0000:00:01.1/ata2/host1/target1:0:0/1:0:0:0";
    f.dev("pci0000:00/0000:00:01.1", Some("pci:v00008086d00007010sv00001AF4sd00001100bc01sc01i80"), Some("ata_piix"))
        .dev(cd, Some("scsi:t-0x05"), Some("sr_mod"))
        .block(&format!("{cd}/block/sr0"), "11:0", false)
        .uuid("2026-11-25-10-00-00-00", "sr0");
    let x = host::detect(&f.root).unwrap();
    let want = leanrd_contract::Root::parse("live:UUID=2026-11-25-10-00-00-00", None).unwrap();
    assert_eq!(x.root_source, Some(want));
    assert!(x.drivers.contains("sr_mod") && x.drivers.contains("ata_piix"), "{x:?}");
    for m in ["loop", "squashfs", "overlay", "fs-iso9660"] {
        assert!(x.modules.contains(m), "{m}: {:?}", x.modules);
    }
    // An overlay root that is not a live system's is refused by name.
    let o = Fixture::new(&t, "overlay", "22 1 0:31 / / rw - overlay overlay rw,lowerdir=/a,upperdir=/b,workdir=/c\n");
    let e = host::detect(&o.root).unwrap_err().to_string();
    assert!(
        e.contains("the root is overlay (overlay): leanrd boots roots of these kinds only: block, nfs, live"),
        "{e}"
    );
}

/// The resume device: the kernel's setting first, then the largest active swap, then the
/// system's configuration; its drivers come in even when the root does not need them.
#[test]
fn resume_devices_are_detected() {
    use leanrd_contract::DeviceRef;
    let t = TempDir::new("resume");
    let detect = |f: &Fixture, sysroot: &Path| {
        let mut x = host::detect(&f.root).unwrap();
        host::detect_resume(&f.root, sysroot, &mut x).unwrap();
        x
    };
    // /sys/power/resume names a swap partition on another disk (NVMe): by its UUID, with the
    // NVMe driver.
    let f = virtio_ext4(&t);
    f.dev("pci0000:00/0000:00:05.0", Some(NVME_PCI), Some("nvme"))
        .block("pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1", "259:0", false)
        .block("pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1/nvme0n1p2", "259:2", true)
        .uuid("5a5a0000-1111-2222-3333-444455556666", "nvme0n1p2");
    fs::create_dir_all(f.root.join("sys/power")).unwrap();
    fs::write(f.root.join("sys/power/resume"), "259:2\n").unwrap();
    fs::write(f.root.join("sys/power/resume_offset"), "0\n").unwrap();
    let x = detect(&f, &f.root);
    let r = x.resume.unwrap();
    assert_eq!(r.device, DeviceRef::Uuid("5a5a0000-1111-2222-3333-444455556666".into()));
    assert_eq!((r.offset, r.source.as_str()), (None, "/sys/power/resume"));
    assert!(x.modaliases.contains(NVME_PCI), "{:?}", x.modaliases);

    // Nothing set in the kernel: the largest active swap partition.
    fs::write(f.root.join("sys/power/resume"), "0:0\n").unwrap();
    f.block("pci0000:00/0000:00:04.0/virtio1/block/vda/vda3", "254:3", true).uuid("77-3", "vda3");
    fs::write(
        f.root.join("proc/swaps"),
        "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
         /dev/nvme0n1p2                          partition\t1048572\t\t0\t\t-2\n\
         /dev/vda3                               partition\t4194300\t\t0\t\t-3\n",
    )
    .unwrap();
    let r = detect(&f, &f.root).resume.unwrap();
    assert_eq!((r.device, r.source.as_str()), (DeviceRef::Uuid("77-3".into()), "/proc/swaps"));

    // No active swap: initramfs-tools' RESUME=, else the fstab's swap line.
    fs::remove_file(f.root.join("proc/swaps")).unwrap();
    let sysroot = t.join("sysroot");
    fs::create_dir_all(sysroot.join("etc/initramfs-tools/conf.d")).unwrap();
    fs::write(sysroot.join("etc/fstab"), "UUID=1 / ext4 defaults 0 1\nUUID=77-3 none swap sw 0 0\n").unwrap();
    let r = detect(&f, &sysroot).resume.unwrap();
    assert_eq!(r.device, DeviceRef::Uuid("77-3".into()));
    assert!(r.source.ends_with("etc/fstab"), "{}", r.source);
    fs::write(sysroot.join("etc/initramfs-tools/conf.d/resume"), "RESUME=UUID=5a5a0000-1111-2222-3333-444455556666\n")
        .unwrap();
    let x = detect(&f, &sysroot);
    assert_eq!(x.resume.unwrap().device, DeviceRef::Uuid("5a5a0000-1111-2222-3333-444455556666".into()));
    fs::write(sysroot.join("etc/initramfs-tools/conf.d/resume"), "RESUME=none\n").unwrap();
    assert_eq!(detect(&f, &sysroot).resume, None);

    // A resume device whose stack cannot be walked (a broken slave link): a note, no resume,
    // and the build goes on.
    fs::remove_file(sysroot.join("etc/initramfs-tools/conf.d/resume")).unwrap();
    fs::remove_file(sysroot.join("etc/fstab")).unwrap();
    f.dm("dm-7", "LVM-broken", &["pci0000:00/gone/block/sdz"]);
    symlink("../../devices/virtual/block/dm-7", f.root.join("sys/dev/block/253:7")).unwrap();
    fs::write(f.root.join("sys/power/resume"), "253:7\n").unwrap();
    let x = detect(&f, &sysroot);
    assert_eq!(x.resume, None);
    assert!(x.notes.iter().any(|n| n.contains("resume device dm-7") && n.contains("will not resume")), "{:?}", x.notes);

    // A machine without swap records nothing.
    let t2 = TempDir::new("noswap");
    let g = virtio_ext4(&t2);
    assert_eq!(detect(&g, &g.root).resume, None);
}

/// A swap file's resume device and offset, on real file systems (loop devices): ext4 by
/// FIEMAP (as filefrag gives it), btrfs by btrfs-progs' map-swapfile (FIEMAP's addresses
/// are btrfs' own there).
#[test]
fn swap_file_offsets() {
    if !is_root() || !have("mkfs.btrfs") || !have("filefrag") || !have("mkswap") {
        skip::<()>("needs root, mkfs.btrfs, filefrag, mkswap");
        return;
    }
    let t = TempDir::new("swapfile");
    for kind in ["ext4", "btrfs"] {
        // 600 MB: mkfs.ext4 gives a smaller one 1 KiB blocks, and a swap file wants whole pages.
        let Some(fs) = LoopFs::new(kind, "600M") else {
            skip::<()>(&format!("{kind}: no loop mount"));
            continue;
        };
        let mnt = fs.path();
        let file = mnt.join("swapfile");
        let (f, m) = (file.display().to_string(), mnt.display().to_string());
        let made = if kind == "btrfs" {
            Command::new("btrfs").args(["filesystem", "mkswapfile", "--size", "64m", &f]).status()
        } else {
            Command::new("sh")
                .arg("-c")
                .arg(format!("dd if=/dev/zero of={f} bs=1M count=64 status=none && chmod 600 {f} && mkswap -q {f}"))
                .status()
        };
        if !made.is_ok_and(|s| s.success()) {
            skip::<()>(&format!("{kind}: cannot make a swap file"));
            continue;
        }
        let _ = Command::new("sync").status();
        let (name, offset) = host::swap_file(Path::new("/"), &f).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let dev = String::from_utf8(ok(Command::new("findmnt").args(["-n", "-o", "SOURCE", "--target", &m]))).unwrap();
        assert_eq!(format!("/dev/{name}"), dev.trim().split('[').next().unwrap(), "{kind}: the device");
        let want: u64 = if kind == "btrfs" {
            let o = ok(Command::new("btrfs").args(["inspect-internal", "map-swapfile", "-r", &f]));
            String::from_utf8(o).unwrap().trim().parse().unwrap()
        } else {
            let o = String::from_utf8(ok(Command::new("filefrag").args(["-v", "-b4096", &f]))).unwrap();
            let first = o.lines().find(|l| l.trim_start().starts_with("0:")).unwrap().to_string();
            first.split(':').nth(2).unwrap().split("..").next().unwrap().trim().parse().unwrap()
        };
        assert_eq!(offset, want, "{kind}: resume_offset");
    }
    drop(t);
}

/// A display card at 0000:00:02.0 bound to `driver`, with these PCI ids, as the boot display
/// (sys/class/drm/card0).
fn display(f: &Fixture, driver: &str, vendor: u16, device: u16) {
    let path = "pci0000:00/0000:00:02.0";
    f.dev(path, Some(&format!("pci:v0000{vendor:04X}d0000{device:04X}sv00001002sd00000E3Abc03sc00i00")), Some(driver));
    let d = f.root.join("sys/devices").join(path);
    for (name, v) in
        [("vendor", format!("0x{vendor:04x}")), ("device", format!("0x{device:04x}")), ("revision", "0xc1".into())]
    {
        fs::write(d.join(name), format!("{v}\n")).unwrap();
    }
    fs::write(d.join("boot_vga"), "1\n").unwrap();
    fs::create_dir_all(d.join("drm/card0")).unwrap();
    symlink(&d, d.join("drm/card0/device")).unwrap();
    fs::create_dir_all(f.root.join("sys/class/drm")).unwrap();
    symlink(d.join("drm/card0"), f.root.join("sys/class/drm/card0")).unwrap();
}

/// Host-only, the drm feature takes from the display driver's modinfo firmware list only what
/// the boot display's GPU loads (a Navi 21: sienna_cichlid's files); a GPU the table does not
/// know takes the whole list, and the build says so (when its driver lists firmware). This machine has no firmware installed:
/// the build's "not found" warnings name what it looked for.
#[test]
fn the_drm_feature_takes_the_boot_gpus_firmware_only() {
    let Some(k) = kver() else { return };
    if !Path::new(&format!("/lib/modules/{k}/kernel/drivers/gpu/drm/amd/amdgpu")).exists() {
        return;
    }
    let build = |name: &str, driver: &str, vendor: u16, device: u16| {
        let t = TempDir::new(name);
        let f = virtio_ext4(&t);
        display(&f, driver, vendor, device);
        let init = t.join("init");
        fs::write(&init, b"#!/bin/sh\n").unwrap();
        let s = leanrd_gen::Settings {
            kver: Some(k.clone()),
            host_root: Some(f.root.clone()),
            init: Some(init),
            include: vec!["drm".into()],
            ..Default::default()
        };
        let g = leanrd_gen::generate(&leanrd_gen::Request::new(s, t.path()).unwrap()).unwrap();
        assert!(g.modules.contains(driver), "{:?}", g.modules);
        let fw: Vec<String> = g
            .warnings
            .iter()
            .filter_map(|w| w.strip_prefix("firmware amdgpu/")?.strip_suffix(" not found under /lib/firmware"))
            .map(str::to_string)
            .collect();
        (g.warnings, fw)
    };
    let (w, fw) = build("gpu-navi21", "amdgpu", 0x1002, 0x73bf);
    assert!(fw.len() >= 10 && fw.iter().all(|f| f.starts_with("sienna_cichlid_")), "{fw:?}");
    assert!(!w.iter().any(|w| w.contains("GPU firmware table")), "{w:?}");
    let (w, fw) = build("gpu-unknown", "amdgpu", 0x1002, 0xffff);
    assert!(fw.len() > 300, "{}", fw.len());
    assert!(w.iter().any(|w| w.contains("GPU 1002:ffff (amdgpu) is not in leanrd's GPU firmware table")), "{w:?}");
    // QEMU's std VGA: a driver with no firmware, not in the table, costs nothing to say.
    let (w, fw) = build("gpu-bochs", "bochs", 0x1234, 0x1111);
    assert!(fw.is_empty() && !w.iter().any(|w| w.contains("GPU firmware table")), "{w:?}");
}

/// A root on a partition of a dm-multipath map (two virtio-scsi paths): the multipath layer and
/// dm_multipath, both controllers' drivers; a host-only image gets /init's multipath
/// capability, the selectors and hardware handlers, and the system's multipath.conf, bindings,
/// wwids and conf.d's `*.conf` (a sysroot that has them).
#[test]
fn multipath_roots_are_detected_with_their_configuration() {
    let t = TempDir::new("hostmpath");
    let f = leanrd_testkit::multipath_scsi(&t, "mpath");
    let x = host::detect(&f.root).unwrap();
    assert!(x.stack.contains(&StackLayer::Multipath) && x.stack.contains(&StackLayer::Dm), "{x:?}");
    assert!(x.modules.contains("dm_multipath") && x.drivers.contains("virtio_scsi"), "{x:?}");
    assert!(x.devices.iter().any(|d| d == "sda") && x.devices.iter().any(|d| d == "sdb"), "{:?}", x.devices);
    // Without the mpath- UUID (an LVM LV), no multipath layer.
    let g = leanrd_testkit::multipath_scsi(&t, "not-mpath");
    fs::write(g.root.join("sys/devices/virtual/block/dm-0/dm/uuid"), "LVM-abc\n").unwrap();
    fs::write(g.root.join("sys/devices/virtual/block/dm-1/dm/uuid"), "LVM-def\n").unwrap();
    assert!(!host::detect(&g.root).unwrap().stack.contains(&StackLayer::Multipath));
    let Some(k) = kver() else { return };
    let sr = t.join("sysroot");
    fs::create_dir_all(sr.join("etc/multipath")).unwrap();
    // The kernel's modules (hard links), as a merged-/usr system has them.
    fs::create_dir_all(sr.join("usr/lib/modules")).unwrap();
    symlink("usr/lib", sr.join("lib")).unwrap();
    let copied = Command::new("cp")
        .arg("-al")
        .arg(Path::new("/lib/modules").join(&k))
        .arg(sr.join("usr/lib/modules"))
        .status()
        .unwrap();
    assert!(copied.success());
    let wwid = leanrd_testkit::MULTIPATH_WWID;
    fs::write(sr.join("etc/multipath.conf"), "defaults {\n\tuser_friendly_names yes\n}\n").unwrap();
    fs::write(sr.join("etc/multipath/bindings"), format!("mpatha {wwid}\n")).unwrap();
    fs::write(sr.join("etc/multipath/wwids"), format!("/{wwid}/\n")).unwrap();
    fs::create_dir_all(sr.join("etc/multipath/conf.d")).unwrap();
    fs::write(sr.join("etc/multipath/conf.d/site.conf"), "defaults {\n\tno_path_retry queue\n}\n").unwrap();
    fs::write(sr.join("etc/multipath/conf.d/notes.txt"), "not a .conf\n").unwrap();
    let init = t.join("init");
    fs::write(&init, b"#!/bin/sh\n").unwrap();
    let s = leanrd_gen::Settings {
        kver: Some(k),
        host_root: Some(f.root.clone()),
        sysroot: Some(sr.clone()),
        init: Some(init),
        ..Default::default()
    };
    let g = leanrd_gen::generate(&leanrd_gen::Request::new(s, t.path()).unwrap()).unwrap();
    let Some(Item::Inline { data, .. }) = g.main.items.get("/etc/leanrd/init.conf") else { panic!("no config") };
    let conf = leanrd_contract::InitConfig::decode(std::str::from_utf8(data).unwrap()).unwrap();
    let layer = conf.layer(leanrd_contract::Capability::Multipath).expect("the multipath capability");
    assert!(layer.modules.iter().any(|m| m == "dm_service_time"), "{layer:?}");
    assert!(g.modules.contains("dm_multipath") && g.modules.contains("virtio_scsi"), "{:?}", g.modules);
    assert!(!g.main.items.contains_key("/etc/multipath/conf.d/notes.txt"));
    for p in
        ["/etc/multipath.conf", "/etc/multipath/bindings", "/etc/multipath/wwids", "/etc/multipath/conf.d/site.conf"]
    {
        assert!(matches!(g.main.items.get(p), Some(Item::File { .. })), "{p} is not in the image");
    }
}
