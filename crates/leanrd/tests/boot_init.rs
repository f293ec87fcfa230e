//! Boot matrix: images made by `leanrd build` with the real static leanrd-init, under QEMU
//! TCG with the installed Debian kernel, on disks made here. Each root's /sbin/init prints a
//! marker and powers off. Each case of CASES is a test of its own:
//! `cargo test --release -p leanrd --test boot_init -- universal_ext4_usb_by_uuid_path`.
//! Needs root, qemu, mkfs.{ext4,xfs,btrfs}, sfdisk, busybox-static.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const MARK: &str = "LEANRD-ROOT-OK";

/// The root file system's content: busybox and an init that prints the marker.
fn root_tree(t: &TempDir) -> PathBuf {
    let r = busybox_root(t, &["dev", "proc", "sys", "run"]);
    fs::write(
        r.join("sbin/init"),
        format!(
            "#!/bin/sh\n/bin/busybox echo {MARK} $(/bin/busybox cat /proc/uptime)\n\
             /bin/busybox echo ROOT-MOUNT $(/bin/busybox grep ' / ' /proc/mounts)\n\
             /bin/busybox echo \"INIT-ARGS [$*] INIT-ENV [$leanrd_t]\"\n\
             /bin/busybox echo LOOP-PARAM $(/bin/busybox cat /sys/module/loop/parameters/max_loop || echo absent)\n\
             /bin/busybox poweroff -f\n"
        ),
    )
    .unwrap();
    let st = Command::new("chmod").arg("755").arg(r.join("sbin/init")).status().unwrap();
    assert!(st.success());
    r
}

const USR_UUID: &str = "88888888-9999-aaaa-bbbb-cccccccccccc";

/// A merged-/usr system split in two: a root whose /bin and /sbin point into /usr (with an
/// fstab naming /usr when `fstab`), and the /usr tree, whose init prints the marker and how
/// /usr is mounted.
fn split_usr_trees(t: &TempDir, fstab: bool) -> (PathBuf, PathBuf) {
    let (r, u) = (t.join("rootfs"), t.join("usrfs"));
    for d in ["dev", "proc", "sys", "run", "etc", "usr"] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    std::os::unix::fs::symlink("usr/bin", r.join("bin")).unwrap();
    std::os::unix::fs::symlink("usr/sbin", r.join("sbin")).unwrap();
    if fstab {
        fs::write(r.join("etc/fstab"), format!("UUID=11 / ext4 defaults 0 1\nUUID={USR_UUID} /usr xfs defaults 0 2\n"))
            .unwrap();
    }
    fs::create_dir_all(u.join("bin")).unwrap();
    fs::create_dir_all(u.join("sbin")).unwrap();
    fs::copy("/bin/busybox", u.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", u.join("bin/sh")).unwrap();
    fs::write(
        u.join("sbin/init"),
        format!(
            "#!/bin/sh\n/bin/busybox echo {MARK} $(/bin/busybox cat /proc/uptime)\n\
             /bin/busybox echo USR-MOUNT $(/bin/busybox grep ' /usr ' /proc/mounts)\n/bin/busybox poweroff -f\n"
        ),
    )
    .unwrap();
    sh(&format!("chmod 755 {}", u.join("sbin/init").display()));
    (r, u)
}

/// A btrfs raid1 (data and metadata) across two disk images, the tree in subvolume @, made on
/// loop devices (mkfs.btrfs --rootdir takes one device only).
/// Returns the two images and the file system's UUID (one per run: the host kernel remembers
/// the btrfs file systems it has seen).
fn btrfs_raid1(t: &TempDir, tree: &Path) -> (PathBuf, PathBuf, String) {
    let uuid = format!("bbbbbbbb-1111-2222-3333-{:012x}", std::process::id());
    let (a, b, mnt) = (t.join("raid1-a.img"), t.join("raid1-b.img"), t.join("raid1-mnt"));
    fs::create_dir_all(&mnt).unwrap();
    let (a, b) = (a.display().to_string(), b.display().to_string());
    sh_private(&format!(
        "set -e; truncate -s 300M {a} {b}; la=$(losetup -f --show {a}); lb=$(losetup -f --show {b}); \
         trap 'umount {m} 2>/dev/null || true; losetup -d $la $lb 2>/dev/null || true' EXIT; \
         mkfs.btrfs -q -f -d raid1 -m raid1 -U {uuid} -L raid1root $la $lb; \
         mount -o device=$la,device=$lb $la {m}; btrfs subvolume create {m}/@ >/dev/null; cp -a {tree}/. {m}/@/; \
         umount {m}",
        m = mnt.display(),
        tree = tree.display()
    ));
    (PathBuf::from(a), PathBuf::from(b), uuid)
}

/// A file system image of `kind` holding `tree`.
fn fs_image(t: &TempDir, tree: &Path, kind: &str, uuid: &str, label: &str) -> PathBuf {
    let img = t.join(format!("{kind}.fs"));
    let (p, tr) = (img.display(), tree.display());
    match kind {
        "ext4" => sh(&format!("truncate -s 64M {p} && mkfs.ext4 -q -d {tr} -U {uuid} -L {label} {p}")),
        "btrfs" => sh(&format!("truncate -s 200M {p} && mkfs.btrfs -q -f --rootdir {tr} -U {uuid} -L {label} {p}")),
        "xfs" => {
            let mnt = t.join("xfs-mnt");
            fs::create_dir_all(&mnt).unwrap();
            sh(&format!("truncate -s 300M {p} && mkfs.xfs -q -f -m uuid={uuid} -L {label} {p}"));
            sh_private(&format!("mount -o loop {p} {m} && cp -a {tr}/. {m}/ && umount {m}", m = mnt.display()));
        }
        _ => unreachable!(),
    }
    img
}

/// A disk with one partition (GPT or MBR) holding `fsimg`.
fn partitioned(t: &TempDir, fsimg: &Path, gpt: bool, partuuid: &str, name: &str) -> PathBuf {
    let disk = t.join(format!("{name}.disk"));
    let size = fs::metadata(fsimg).unwrap().len() / 512;
    let script = if gpt {
        format!(
            "label: gpt\nstart=2048, size={size}, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid={partuuid}, name=root\n"
        )
    } else {
        format!("label: dos\nstart=2048, size={size}, type=83\n")
    };
    sh(&format!("truncate -s {} {}", (size + 2048 + 2048) * 512, disk.display()));
    let o = run_stdin(Command::new("sfdisk").arg("-q").arg(&disk), script.as_bytes());
    assert!(o.status.success(), "sfdisk: {}", String::from_utf8_lossy(&o.stderr));
    sh(&format!("dd if={} of={} bs=512 seek=2048 conv=notrunc status=none", fsimg.display(), disk.display()));
    disk
}

fn tools_ok() -> bool {
    let need = ["mkfs.ext4", "mkfs.xfs", "mkfs.btrfs", "sfdisk", "qemu-system-x86_64"];
    if !is_root() || !Path::new("/bin/busybox").exists() || need.iter().any(|t| !have(t)) {
        return skip::<()>(&format!("needs root, /bin/busybox and {need:?}")).is_some();
    }
    true
}

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// The image a case boots.
#[derive(Clone, Copy)]
enum Img {
    /// Host-only, from a fixture of a virtio/ext4 machine's sysfs.
    Host,
    Universal,
    /// Universal from a target whose modprobe.d sets a loop parameter, a feature loading loop.
    ModOpts,
}

/// The disks a case attaches (snapshot=on: two VMs may boot one disk image at once).
#[derive(Clone, Copy)]
enum Disks {
    /// ext4 (UUID 1111…, LABEL extroot) on an MBR partition, on virtio-blk.
    Ext4VirtioBlk,
    /// XFS (LABEL xfsroot), whole disk, on virtio-scsi.
    XfsVirtioScsi,
    /// btrfs on a GPT partition (PARTUUID 4444…, PARTLABEL root), on AHCI.
    BtrfsAhci,
    /// The ext4 disk on NVMe and on USB storage behind xHCI.
    Ext4Nvme,
    Ext4Usb,
    /// An ext4 root (LABEL splitroot) whose fstab names an XFS /usr, and one (splitroot2) whose
    /// fstab does not; the /usr disk second.
    SplitUsrFstab,
    SplitUsrCmdline,
    /// A btrfs raid1, subvolume @: both members, or only the first or the second.
    Raid1,
    Raid1First,
    Raid1Second,
}

/// One boot: ten lines of data. `{raid}` in `append` is the raid1's UUID.
struct Case {
    name: &'static str,
    image: Img,
    append: &'static str,
    disks: Disks,
    expect: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "host_only_ext4_virtio_blk_uuid",
        image: Img::Host,
        append: "root=UUID=11111111-2222-3333-4444-555555555555",
        disks: Disks::Ext4VirtioBlk,
        expect: &[MARK],
    },
    Case {
        name: "universal_xfs_virtio_scsi_label",
        image: Img::Universal,
        append: "root=LABEL=xfsroot",
        disks: Disks::XfsVirtioScsi,
        expect: &[MARK],
    },
    Case {
        name: "universal_btrfs_ahci_gpt_partuuid",
        image: Img::Universal,
        append: "root=PARTUUID=44444444-5555-6666-7777-888888888888",
        disks: Disks::BtrfsAhci,
        expect: &[MARK],
    },
    // Words the kernel does not know go to init as arguments (`single`) or environment
    // (`leanrd_t=...`); /init hands them on to the root's init.
    Case {
        name: "universal_btrfs_partlabel_rw_rootflags_init_args",
        image: Img::Universal,
        append: "root=PARTLABEL=root rw rootflags=compress=zstd init=/sbin/init single leanrd_t=fwd",
        disks: Disks::BtrfsAhci,
        expect: &[MARK, "btrfs rw,", "compress=zstd", "INIT-ARGS [single] INIT-ENV [fwd]"],
    },
    Case {
        name: "universal_ext4_nvme_path",
        image: Img::Universal,
        append: "root=/dev/nvme0n1p1",
        disks: Disks::Ext4Nvme,
        expect: &[MARK],
    },
    // USB disks appear asynchronously (xhci, then the hub, then usb-storage, then sd): only
    // uevents bring them.
    Case {
        name: "universal_ext4_usb_by_uuid_path",
        image: Img::Universal,
        append: "root=/dev/disk/by-uuid/11111111-2222-3333-4444-555555555555 rootwait",
        disks: Disks::Ext4Usb,
        expect: &[MARK],
    },
    Case {
        name: "universal_xfs_usr_from_fstab",
        image: Img::Universal,
        append: "root=LABEL=splitroot",
        disks: Disks::SplitUsrFstab,
        expect: &[MARK, "USR-MOUNT /dev/vdb /usr xfs ro,"],
    },
    Case {
        name: "universal_xfs_usr_from_mount_usr",
        image: Img::Universal,
        append: "root=LABEL=splitroot2 mount.usr=UUID=88888888-9999-aaaa-bbbb-cccccccccccc mount.usrfstype=xfs",
        disks: Disks::SplitUsrCmdline,
        expect: &[MARK, "USR-MOUNT /dev/vdb /usr xfs ro,"],
    },
    Case {
        name: "universal_btrfs_raid1_subvol",
        image: Img::Universal,
        append: "root=UUID={raid} rootflags=subvol=@",
        disks: Disks::Raid1,
        expect: &[MARK, "subvol=/@"],
    },
    Case {
        name: "btrfs_raid1_member_missing_diagnosed",
        image: Img::Universal,
        append: "root=UUID={raid} rootflags=subvol=@ leanrd.timeout=5",
        disks: Disks::Raid1First,
        expect: &[
            "leanrd: cannot boot: waited 5 s for root=UUID=",
            "is btrfs with members missing",
            "(btrfs: members missing)",
        ],
    },
    Case {
        name: "btrfs_raid1_member_missing_mounts_degraded",
        image: Img::Universal,
        append: "root=UUID={raid} rootflags=subvol=@,degraded",
        disks: Disks::Raid1Second,
        expect: &[MARK, "degraded"],
    },
    Case {
        name: "wrong_uuid_diagnosed",
        image: Img::Host,
        append: "root=UUID=99999999-9999-9999-9999-999999999999 leanrd.timeout=5",
        disks: Disks::Ext4VirtioBlk,
        expect: &[
            "leanrd: cannot boot: waited 5 s for root=UUID=99999999-9999-9999-9999-999999999999",
            "block devices seen:",
            "/dev/vda1",
            "TYPE=ext4 UUID=11111111-2222-3333-4444-555555555555 LABEL=extroot",
        ],
    },
    // Module parameters: from the target's modprobe.d, overridden on the command line, and a
    // blacklist that keeps the module out.
    Case {
        name: "modprobe_d_options_reach_the_module",
        image: Img::ModOpts,
        append: "root=UUID=11111111-2222-3333-4444-555555555555",
        disks: Disks::Ext4VirtioBlk,
        expect: &[MARK, "LOOP-PARAM 3"],
    },
    Case {
        name: "command_line_module_parameter_wins",
        image: Img::ModOpts,
        append: "root=UUID=11111111-2222-3333-4444-555555555555 loop.max_loop=5",
        disks: Disks::Ext4VirtioBlk,
        expect: &[MARK, "LOOP-PARAM 5"],
    },
    Case {
        name: "modprobe_blacklist_keeps_a_module_out",
        image: Img::ModOpts,
        append: "root=UUID=11111111-2222-3333-4444-555555555555 modprobe.blacklist=loop",
        disks: Disks::Ext4VirtioBlk,
        expect: &[MARK, "LOOP-PARAM absent"],
    },
];

/// What the cases boot, made once per process by the first case that runs.
struct Matrix {
    dir: TempDir,
    _usr: (TempDir, TempDir),
    kernel: PathBuf,
    images: [PathBuf; 3],
    ext4_disk: PathBuf,
    xfs: PathBuf,
    btrfs_disk: PathBuf,
    split: [PathBuf; 2],
    usr_fs: PathBuf,
    raid: (PathBuf, PathBuf, String),
    /// A root whose only init is on a block that cannot be read: its ext4 image and the
    /// blkdebug rules that fail that block's reads.
    eio: (PathBuf, PathBuf),
}

const EIO_UUID: &str = "55555555-6666-7777-8888-999999999999";

/// A root with /sbin/init alone (static busybox, never run) on ext4, and a blkdebug
/// configuration that fails every read of the sector its first block starts at with EIO.
fn unreadable_init(t: &TempDir) -> (PathBuf, PathBuf) {
    let tree = t.join("eio-tree");
    fs::create_dir_all(tree.join("sbin")).unwrap();
    fs::copy("/bin/busybox", tree.join("sbin/init")).unwrap();
    let img = t.join("eio.fs");
    sh(&format!(
        "truncate -s 16M {i} && mkfs.ext4 -q -b 4096 -d {} -U {EIO_UUID} {i}",
        tree.display(),
        i = img.display()
    ));
    let o = Command::new("debugfs").args(["-R", "bmap /sbin/init 0"]).arg(&img).output().unwrap();
    let block: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().expect("debugfs bmap: a block number");
    let conf = t.join("eio.blkdebug");
    fs::write(&conf, format!("[inject-error]\nevent = \"read_aio\"\nerrno = \"5\"\nsector = \"{}\"\n", block * 8))
        .unwrap();
    (img, conf)
}

fn matrix() -> Option<&'static Matrix> {
    static M: std::sync::OnceLock<Result<Option<Matrix>, String>> = std::sync::OnceLock::new();
    once(&M, make_matrix).as_ref()
}

fn make_matrix() -> Option<Matrix> {
    if !tools_ok() {
        return None;
    }
    let kernel = kernel()?;
    let init = init_binary()?;
    let kver = kver_of(&kernel);
    if !Path::new(&format!("/lib/modules/{kver}/modules.dep")).exists() {
        return skip(&format!("no modules for {kver}"));
    }
    let t = TempDir::new("bootinit");
    let tree = root_tree(&t);

    // Host-only image for a virtio/ext4 machine, from a fixture of that machine's sysfs.
    let fx = t.join("host");
    for d in ["proc/self", "sys/dev/block", "sys/bus/pci/drivers/virtio-pci", "sys/bus/virtio/drivers/virtio_blk"] {
        fs::create_dir_all(fx.join(d)).unwrap();
    }
    fs::write(fx.join("proc/self/mountinfo"), "22 1 254:1 / / rw - ext4 /dev/vda1 rw\n").unwrap();
    let pci = fx.join("sys/devices/pci0000:00/0000:00:04.0");
    fs::create_dir_all(pci.join("virtio1/block/vda/vda1")).unwrap();
    fs::write(pci.join("modalias"), "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00\n").unwrap();
    fs::write(pci.join("virtio1/modalias"), "virtio:d00000002v00001AF4\n").unwrap();
    fs::write(pci.join("virtio1/block/vda/vda1/partition"), "1\n").unwrap();
    std::os::unix::fs::symlink(fx.join("sys/bus/pci/drivers/virtio-pci"), pci.join("driver")).unwrap();
    std::os::unix::fs::symlink(fx.join("sys/bus/virtio/drivers/virtio_blk"), pci.join("virtio1/driver")).unwrap();
    std::os::unix::fs::symlink(
        "../../devices/pci0000:00/0000:00:04.0/virtio1/block/vda/vda1",
        fx.join("sys/dev/block/254:1"),
    )
    .unwrap();
    let host_img = t.join("host.img");
    ok(leanrd().args(["build", "-k", &kver, "--host-root"]).arg(&fx).arg("--init").arg(&init).arg("-o").arg(&host_img));
    let univ = t.join("universal.img");
    ok(leanrd().args(["build", "-k", &kver, "--universal", "--init"]).arg(&init).arg("-o").arg(&univ));

    // A target system whose modprobe.d sets a loop parameter; a user feature loads loop.
    let sr = t.join("sysroot");
    fs::create_dir_all(sr.join("etc/modprobe.d")).unwrap();
    fs::create_dir_all(sr.join("lib/modules")).unwrap();
    // Hard links (the same file system) or a copy: a symlink would point outside the sysroot,
    // and a bind mount inside a temporary directory is one rm -r away from the real tree.
    let mods = sr.join(format!("lib/modules/{kver}"));
    sh(&format!(
        "cp -al /lib/modules/{kver} {m} 2>/dev/null || {{ rm -rf {m} && cp -a /lib/modules/{kver} {m}; }}",
        m = mods.display()
    ));
    fs::write(sr.join("etc/modprobe.d/loop.conf"), "options loop max_loop=3\n").unwrap();
    let feats = t.join("features");
    fs::create_dir_all(&feats).unwrap();
    fs::write(feats.join("loop.toml"), "when = \"requested\"\nmodules = [\"loop\"]\n").unwrap();
    let modimg = t.join("modopts.img");
    ok(leanrd()
        .args(["build", "-k", &kver, "--universal", "--include", "loop", "--sysroot"])
        .arg(&sr)
        .arg("--features-dir")
        .arg(&feats)
        .arg("--init")
        .arg(&init)
        .arg("-o")
        .arg(&modimg));

    let ext4 = fs_image(&t, &tree, "ext4", "11111111-2222-3333-4444-555555555555", "extroot");
    let ext4_disk = partitioned(&t, &ext4, false, "", "ext4mbr");
    let xfs = fs_image(&t, &tree, "xfs", "22222222-3333-4444-5555-666666666666", "xfsroot");
    let btrfs = fs_image(&t, &tree, "btrfs", "33333333-4444-5555-6666-777777777777", "btrroot");
    let btrfs_disk = partitioned(&t, &btrfs, true, "44444444-5555-6666-7777-888888888888", "btrgpt");
    let raid = btrfs_raid1(&t, &tree);
    // A separate XFS /usr: named by the root's fstab, or by mount.usr= on the command line.
    let (tf, tc) = (TempDir::new("bootusr-fstab"), TempDir::new("bootusr-cmdline"));
    let (root_f, usr_tree) = split_usr_trees(&tf, true);
    let (root_c, _) = split_usr_trees(&tc, false);
    let root_fstab = fs_image(&tf, &root_f, "ext4", "99999999-0000-1111-2222-333333333333", "splitroot");
    let root_plain = fs_image(&tc, &root_c, "ext4", "99999999-0000-1111-2222-444444444444", "splitroot2");
    let usr_fs = fs_image(&tf, &usr_tree, "xfs", USR_UUID, "usr");
    let eio = unreadable_init(&t);
    Some(Matrix {
        dir: t,
        _usr: (tf, tc),
        kernel,
        images: [host_img, univ, modimg],
        ext4_disk,
        xfs,
        btrfs_disk,
        split: [root_fstab, root_plain],
        usr_fs,
        raid,
        eio,
    })
}

impl Matrix {
    fn qemu(&self, disks: Disks) -> Vec<String> {
        let d = |p: &Path| p.display().to_string();
        let virtio = |list: &[&Path]| -> Vec<String> {
            list.iter().flat_map(|p| args(&format!("-drive file={},if=virtio,format=raw,snapshot=on", d(p)))).collect()
        };
        let one =
            |dev: &str, p: &Path| args(&format!("{dev} -drive file={},if=none,id=d0,format=raw,snapshot=on", d(p)));
        match disks {
            Disks::Ext4VirtioBlk => virtio(&[&self.ext4_disk]),
            Disks::XfsVirtioScsi => {
                one("-device virtio-scsi-pci,id=scsi0 -device scsi-hd,drive=d0,bus=scsi0.0", &self.xfs)
            }
            Disks::BtrfsAhci => one("-device ahci,id=ahci0 -device ide-hd,drive=d0,bus=ahci0.0", &self.btrfs_disk),
            Disks::Ext4Nvme => one("-device nvme,serial=leanrd0,drive=d0", &self.ext4_disk),
            Disks::Ext4Usb => one("-device qemu-xhci,id=xhci -device usb-storage,bus=xhci.0,drive=d0", &self.ext4_disk),
            Disks::SplitUsrFstab => virtio(&[&self.split[0], &self.usr_fs]),
            Disks::SplitUsrCmdline => virtio(&[&self.split[1], &self.usr_fs]),
            Disks::Raid1 => virtio(&[&self.raid.0, &self.raid.1]),
            Disks::Raid1First => virtio(&[&self.raid.0]),
            Disks::Raid1Second => virtio(&[&self.raid.1]),
        }
    }
}

fn boot_case(c: &Case) -> Result<(), String> {
    let Some(m) = matrix() else { return Ok(()) };
    let image = &m.images[c.image as usize];
    let append = format!("quiet {}", c.append.replace("{raid}", &m.raid.2));
    let q = m.qemu(c.disks);
    let log = qemu_boot(&m.kernel, image, &append, &q.iter().map(String::as_str).collect::<Vec<_>>(), 150);
    if let Some(l) = log.lines().find(|l| l.contains(MARK)) {
        eprintln!("{}: {}", c.name, l.trim());
    }
    let missing: Vec<&str> = c.expect.iter().copied().filter(|e| !log.contains(e)).collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: missing {missing:?}\n{}",
            c.name,
            &log[log.floor_char_boundary(log.len().saturating_sub(4000))..]
        ))
    }
}

/// /init under faults: each ends in the boot or in the diagnosis, within its timeout, never in
/// a hang without a word. (A uevent storm is the wait loop's unit test: `wait_tests.rs`.)
fn faults() -> Result<(), String> {
    let Some(m) = matrix() else { return Ok(()) };
    let disk = m.ext4_disk.display().to_string();
    let root = "root=UUID=11111111-2222-3333-4444-555555555555";
    let boot = |name: &str, append: String, qemu: String| {
        let mut b = common::debian::Boot::new(name, &m.images[Img::Universal as usize], &append, args(&qemu));
        b.expect = vec![];
        b.reject = vec![];
        b.secs = 150;
        b
    };
    // The root's disk is unplugged (QEMU's device_del) as soon as /init has started.
    let mut vanish = boot(
        "fault_disk_vanishes",
        format!("{root} leanrd.timeout=10 leanrd.debug"),
        format!("-drive file={disk},if=none,id=d0,format=raw,snapshot=on -device virtio-blk-pci,drive=d0,id=disk0"),
    );
    vanish.monitor = vec![("module tables read".into(), "device_del disk0".into())];
    // A drive that answers slowly: 256 KiB/s and 20 requests a second.
    let slow = boot(
        "fault_slow_disk",
        root.to_string(),
        format!(
            "-drive file={disk},if=virtio,format=raw,snapshot=on,throttling.bps-total=262144,throttling.iops-total=20"
        ),
    );
    // Too little memory for the universal image (24 MB compressed): the kernel runs out while it
    // unpacks it (at 72 MiB the loader stops before the kernel says anything: not /init's to
    // diagnose).
    let small = boot(
        "fault_too_little_memory",
        root.to_string(),
        format!("-m 128 -drive file={disk},if=virtio,format=raw,snapshot=on"),
    );
    // A module whose initialisation never returns (an out-of-tree test module that sleeps
    // uninterruptibly for an hour), asked for first (rd.driver.pre=: a load alone, which /init
    // once made in its own process) and among the listed modules of its own image: /init
    // waits for it as long as it would wait for the root (leanrd.timeout), once, names it,
    // and boots.
    let hang = hanging_module_image(m).map(|img| {
        let mut b = boot(
            "fault_module_hangs",
            format!("{root} leanrd.timeout=8 leanrd.debug rd.driver.pre=leanrd_hang"),
            format!("-drive file={disk},if=virtio,format=raw,snapshot=on"),
        );
        b.image = img;
        b
    });
    // The root's init on a bad sector: QEMU's blkdebug fails every read of its first block
    // with EIO. /init reads the init before the switch, says so, and takes the root down.
    let mut unreadable = boot(
        "fault_init_unreadable",
        format!("root=UUID={EIO_UUID} leanrd.debug"),
        format!("-drive file=blkdebug:{}:{},format=raw,if=virtio,readonly=on", m.eio.1.display(), m.eio.0.display()),
    );
    unreadable.stop = vec!["no rescue shell in this image".into()];
    let mut boots = vec![vanish, slow, small, unreadable];
    boots.extend(hang);
    const UNREADABLE: &str = "leanrd: cannot boot: the root's init cannot be read: /sbin/init: Input/output error";
    let outcomes = common::debian::run_all(&m.kernel, &boots);
    let mut bad = Vec::new();
    for (b, o) in boots.iter().zip(&outcomes) {
        let log = &o.log;
        let ended = |words: &[&str]| words.iter().find(|w| log.contains(*w)).map(|w| w.to_string());
        let how = match b.name.as_str() {
            // Either the root was mounted before the disk went, or /init says why it cannot boot.
            "fault_disk_vanishes" => ended(&[MARK, "leanrd: cannot boot: "]),
            "fault_slow_disk" => ended(&[MARK]),
            // It boots, and said which module it went on without: once when it gave up
            // waiting (not again for the listed modules), and when it left the initramfs.
            "fault_module_hangs"
                if log.matches("still loading after 8 s, going on without: leanrd_hang").count() == 1
                    && log.lines().any(|l| l.contains("left to the kernel:") && l.contains("leanrd_hang")) =>
            {
                ended(&[MARK])
            }
            "fault_module_hangs" => None,
            // Only /sbin/init, unreadable (no other init, no /bin/sh): said as such, nothing
            // more (a local root: no NFS advice), the root unmounted before the diagnosis.
            "fault_init_unreadable"
                if log.lines().any(|l| l.trim_end() == UNREADABLE)
                    && log.contains("leanrd: /newroot/sbin/init: Input/output error")
                    && log.contains("leanrd: /newroot unmounted")
                    && !log.contains("(the root ")
                    && !log.contains("exec ") =>
            {
                ended(&[UNREADABLE])
            }
            "fault_init_unreadable" => None,
            // The kernel cannot unpack it or runs out of memory: it says so and the VM ends.
            _ => ended(&["Initramfs unpacking failed", "Out of memory", "Kernel panic", "leanrd: cannot boot: "]),
        };
        match how {
            Some(h) => {
                let line = log.lines().find(|l| l.contains(&h)).unwrap_or("").trim();
                eprintln!("{}: ended with \"{line}\"", b.name);
            }
            None => bad.push(format!(
                "{}: neither the boot nor a diagnosis:\n{}",
                b.name,
                &log[log.floor_char_boundary(log.len().saturating_sub(3000))..]
            )),
        }
    }
    if bad.is_empty() { Ok(()) } else { Err(bad.join("\n\n")) }
}

/// A universal image whose `hang` feature (`--include hang`) lists leanrd_hang, a module
/// built here against the kernel's headers whose init sleeps for an hour; None (a skip) without
/// the headers (linux-headers-amd64).
fn hanging_module_image(m: &Matrix) -> Option<PathBuf> {
    let kver = kver_of(&m.kernel);
    let build = format!("/lib/modules/{kver}/build");
    if !Path::new(&build).join("Makefile").exists() {
        return skip(&format!("no headers for {kver} to build a test module: apt install linux-headers-amd64"));
    }
    let t = m.dir.join("hang");
    let src = t.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(
        src.join("leanrd_hang.c"),
        "#include <linux/module.h>\n#include <linux/delay.h>\n\
         static int __init hang_init(void) { pr_info(\"leanrd_hang: sleeping\\n\"); ssleep(3600); return 0; }\n\
         static void __exit hang_exit(void) {}\nmodule_init(hang_init);\nmodule_exit(hang_exit);\n\
         MODULE_LICENSE(\"GPL\");\nMODULE_DESCRIPTION(\"leanrd's test: an initialisation that does not return\");\n",
    )
    .unwrap();
    fs::write(src.join("Makefile"), "obj-m := leanrd_hang.o\n").unwrap();
    ok(Command::new("make").args(["-s", "-C", &build]).arg(format!("M={}", src.display())).arg("modules"));
    // A sysroot with the kernel's modules (hard links; the tables copied, since depmod
    // writes them anew) and the test module.
    let sr = t.join("sysroot");
    let mods = sr.join(format!("lib/modules/{kver}"));
    fs::create_dir_all(mods.parent().unwrap()).unwrap();
    sh(&format!(
        "cp -al /lib/modules/{kver} {m} 2>/dev/null || {{ rm -rf {m} && cp -a /lib/modules/{kver} {m}; }}; \
         rm -f {m}/modules.* {m}/build; \
         mkdir -p {m}/extra; cp {src}/leanrd_hang.ko {m}/extra/; cp /lib/modules/{kver}/modules.order \
         /lib/modules/{kver}/modules.builtin* {m}/; depmod -b {sr} {kver}",
        m = mods.display(),
        src = src.display(),
        sr = sr.display()
    ));
    let feats = t.join("features");
    fs::create_dir_all(&feats).unwrap();
    fs::write(feats.join("hang.toml"), "when = \"requested\"\nmodules = [\"leanrd_hang\"]\n").unwrap();
    let img = t.join("hang.img");
    ok(leanrd()
        .args(["build", "-k", &kver, "--universal", "--include", "hang", "--sysroot"])
        .arg(&sr)
        .arg("--features-dir")
        .arg(&feats)
        .arg("--init")
        .arg(init_binary()?)
        .arg("-o")
        .arg(&img));
    Some(img)
}

fn main() -> std::process::ExitCode {
    // VMs are held to one per core by the harness's slots; the first case makes the matrix.
    let mut trials: Vec<Trial> = CASES.iter().map(|c| test(c.name, move || boot_case(c))).collect();
    trials.push(test("faults_end_in_the_boot_or_the_diagnosis", faults));
    trials.push(test("luks_lvm_and_md_roots", || {
        boot_luks_lvm_and_md_roots();
        Ok(())
    }));
    trials.push(test("lvm_pools_and_bcache_roots", || {
        boot_lvm_pools_and_bcache();
        Ok(())
    }));
    trials.push(test("multipath_roots", || {
        boot_multipath();
        Ok(())
    }));
    run_tests(trials, cores())
}

const LUKS_UUID: &str = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
const LUKS_ROOT_UUID: &str = "55555555-6666-7777-8888-999999999999";
const LVM_ROOT_UUID: &str = "66666666-7777-8888-9999-aaaaaaaaaaaa";
const MD_ROOT_UUID: &str = "77777777-8888-9999-aaaa-bbbbbbbbbbbb";
const PASS: &str = "leanrd-test-passphrase";

/// The prep VM: a LUKS2 disk on vda, an LVM disk on vdb, an md raid1 on vdc and vdd, each
/// holding the root tree.
fn prep_image(t: &TempDir, kver: &str, tree: &Path) -> Option<PathBuf> {
    let body = format!(
        "printf %s '{PASS}' > /tmp/key\n\
         $cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
           --uuid {LUKS_UUID} --key-file /tmp/key /dev/vda && \
         $cryptsetup open --key-file /tmp/key /dev/vda prep && \
         $mke2fs -q -t ext4 -U {LUKS_ROOT_UUID} -d /roottree /dev/mapper/prep && $cryptsetup close prep && \
         $lvm pvcreate -y --config \"$C\" /dev/vdb && $lvm vgcreate --config \"$C\" vg0 /dev/vdb && \
         $lvm lvcreate -y --config \"$C\" -L 40M -n root vg0 && \
         $mke2fs -q -t ext4 -U {LVM_ROOT_UUID} -d /roottree /dev/mapper/vg0-root && \
         $lvm vgchange -an --config \"$C\" vg0 && \
         $mdadm --create /dev/md0 --run --level=1 --raid-devices=2 --metadata=1.2 /dev/vdc /dev/vdd && \
         $mke2fs -q -t ext4 -U {MD_ROOT_UUID} -d /roottree /dev/md0 && $mdadm --stop /dev/md0 && \
         sync && echo PREP-DONE"
    );
    let tools = ["cryptsetup", "lvm", "mke2fs", "mdadm"];
    common::prep::image(t.path(), kver, &tools, common::prep::STACK_MODULES, "vdd", &body, Some(tree))
}

fn boot_luks_lvm_and_md_roots() {
    if !tools_ok() {
        return;
    }
    let Some(kernel) = kernel() else { return };
    let Some(init) = init_binary() else { return };
    let kver = kver_of(&kernel);
    let t = TempDir::new("bootstack");
    let tree = root_tree(&t);
    let Some(prep) = prep_image(&t, &kver, &tree) else { return };
    let disks: Vec<PathBuf> = ["luks", "lvm", "md0", "md1"].iter().map(|n| t.join(format!("{n}.disk"))).collect();
    for d in &disks {
        sh(&format!("truncate -s 64M {}", d.display()));
    }
    let (luks, lvm) = (&disks[0], &disks[1]);
    let drives = |list: &[&PathBuf]| -> Vec<String> {
        list.iter().flat_map(|d| args(&format!("-drive file={},if=virtio,format=raw", d.display()))).collect()
    };
    let boot = |append: &str, list: &[&PathBuf], img: &Path| {
        let d = drives(list);
        qemu_boot(&kernel, img, append, &d.iter().map(String::as_str).collect::<Vec<_>>(), 240)
    };
    let log = boot("quiet", &disks.iter().collect::<Vec<_>>(), &prep);
    assert!(
        log.contains("PREP-DONE"),
        "preparing the LUKS/LVM/md disks failed:\n{}",
        &log[log.len().saturating_sub(4000)..]
    );

    let univ = t.join("universal.img");
    ok(leanrd().args(["build", "-k", &kver, "--universal", "--init"]).arg(&init).arg("-o").arg(&univ));
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&univ))).unwrap();
    assert!(
        ls.contains("sbin/cryptsetup") && ls.contains("sbin/lvm") && ls.contains("sbin/mdadm"),
        "the universal image lacks cryptsetup, lvm or mdadm"
    );

    // LUKS2: the passphrase is typed on the serial console. The root is named by the UUID of
    // the file system inside, and nothing names the container (as a host-only image of a
    // LUKS root without crypttab has it): the container there is opened. (rd.luks.uuid= is
    // in the hibernation suite.)
    let log = boot_typing(&kernel, &univ, &format!("quiet root=UUID={LUKS_ROOT_UUID}"), &drives(&[luks]), PASS, 240);
    assert!(
        log.contains("Enter passphrase") && log.contains(MARK),
        "LUKS boot:\n{}",
        &log[log.len().saturating_sub(4000)..]
    );
    // ext4 on LVM, by mapper name.
    let log = boot("quiet root=/dev/mapper/vg0-root", &[lvm], &univ);
    assert!(log.contains(MARK), "LVM boot:\n{}", &log[log.len().saturating_sub(4000)..]);
    // ext4 on md RAID1, assembled by /init with mdadm.
    let log = boot(&format!("quiet root=UUID={MD_ROOT_UUID}"), &[&disks[2], &disks[3]], &univ);
    assert!(log.contains(MARK), "md RAID1 boot:\n{}", &log[log.len().saturating_sub(4000)..]);
}

const BCACHE_ROOT_UUID: &str = "bcbcbcbc-1111-2222-3333-444444444444";
const INTEGRITY_ROOT_UUID: &str = "1e1e1e1e-1111-2222-3333-444444444444";
const DM_INTEGRITY_ROOT_UUID: &str = "1e1e1e1e-5555-6666-7777-888888888888";

/// The disks of [`boot_lvm_pools_and_bcache`], made once by one prep VM and kept in the test
/// cache by a hash of what makes them: vgs on vda and vdb (a thin LV in a thin pool, a raid1
/// LV, a cached LV (dm-cache) and a snapshot of a linear LV, each an ext4 of the root tree
/// with `/kind` naming it); vgbad on vdc (a thin LV in a pool whose metadata was swapped for
/// an LV with text written over its superblock: its check fails; lvm does not check a pool
/// whose superblock is all zeros, and the kernel formats that afresh); bcache on vdd (backing, writethrough) and vde (its cache),
/// the root tree on /dev/bcache0; a LUKS2 container formatted with `--integrity hmac-sha256`
/// on vdf (dm-integrity under dm-crypt); a standalone dm-integrity device on vdg (crc32c tags,
/// a journal: integritysetup's defaults).
fn pool_disks(kver: &str, tree: &Path) -> Option<PathBuf> {
    const DISKS: [(&str, u32); 7] = [
        ("vgs1", 128),
        ("vgs2", 128),
        ("bad", 64),
        ("back", 64),
        ("cache", 32),
        ("integrity", 32),
        ("dm-integrity", 32),
    ];
    let lvc = "$lvm lvcreate -y --config \"$C\"";
    let body = format!(
        "mk() {{ mkdir -p /tmp/t-$1 && cp -a /roottree/. /tmp/t-$1/ && echo $1 > /tmp/t-$1/kind && \
           $mke2fs -q -t ext4 -d /tmp/t-$1 $2; }}\n\
         $lvm pvcreate -y --config \"$C\" /dev/vda /dev/vdb && $lvm vgcreate --config \"$C\" vgs /dev/vda /dev/vdb && \
         {lvc} --type thin-pool -L 24M -n pool vgs /dev/vda && {lvc} -V 32M --thinpool vgs/pool -n thin && \
         mk thin /dev/mapper/vgs-thin && \
         {lvc} --type raid1 -m 1 -L 16M -n mirror vgs && mk mirror /dev/mapper/vgs-mirror && \
         {lvc} -L 16M -n cached vgs /dev/vda && mk cached /dev/mapper/vgs-cached && \
         {lvc} --type cache-pool -L 8M -n cpool vgs /dev/vdb && \
         $lvm lvconvert -y --config \"$C\" --type cache --cachepool vgs/cpool vgs/cached && \
         {lvc} -L 16M -n orig vgs /dev/vdb && mk orig /dev/mapper/vgs-orig && {lvc} -s -L 8M -n snap vgs/orig && \
         $lvm vgchange -an --config \"$C\" vgs && \
         $lvm pvcreate -y --config \"$C\" /dev/vdc && $lvm vgcreate --config \"$C\" vgbad /dev/vdc && \
         {lvc} --type thin-pool -L 16M -n pool vgbad && {lvc} -V 16M --thinpool vgbad/pool -n root && \
         mk bad /dev/mapper/vgbad-root && {lvc} -L 4M -n junk vgbad && \
         printf leanrd-damaged-metadata | dd of=/dev/mapper/vgbad-junk conv=notrunc 2>/dev/null && \
         $lvm vgchange -an --config \"$C\" vgbad && \
         $lvm lvconvert -y --config \"$C\" --thinpool vgbad/pool --poolmetadata vgbad/junk && \
         $lvm vgchange -an --config \"$C\" vgbad && \
         $make_bcache --bucket 16k -B /dev/vdd -C /dev/vde && \
         echo /dev/vdd > /sys/fs/bcache/register && echo /dev/vde > /sys/fs/bcache/register && \
         for i in $(seq 1 20); do [ -b /dev/bcache0 ] && break; sleep 1; done && \
         mkdir -p /tmp/t-b && cp -a /roottree/. /tmp/t-b/ && echo bcache > /tmp/t-b/kind && \
         $mke2fs -q -t ext4 -U {BCACHE_ROOT_UUID} -d /tmp/t-b /dev/bcache0 && sync && \
         echo 1 > /sys/block/bcache0/bcache/stop && for s in /sys/fs/bcache/*-*; do echo 1 > $s/stop; done && \
         printf %s '{PASS}' > /tmp/key && \
         $cryptsetup luksFormat --batch-mode --type luks2 --integrity hmac-sha256 --pbkdf pbkdf2 \
           --pbkdf-force-iterations 1000 --key-file /tmp/key /dev/vdf && \
         $cryptsetup open --key-file /tmp/key /dev/vdf integ && mkdir -p /tmp/t-i && cp -a /roottree/. /tmp/t-i/ && \
         echo luks2-hmac-sha256 > /tmp/t-i/kind && \
         $mke2fs -q -t ext4 -U {INTEGRITY_ROOT_UUID} -d /tmp/t-i /dev/mapper/integ && $cryptsetup close integ && \
         $integritysetup format --batch-mode /dev/vdg && $integritysetup open /dev/vdg prepint && \
         mkdir -p /tmp/t-d && cp -a /roottree/. /tmp/t-d/ && echo dm-integrity-crc32c > /tmp/t-d/kind && \
         $mke2fs -q -t ext4 -U {DM_INTEGRITY_ROOT_UUID} -d /tmp/t-d /dev/mapper/prepint && \
         $integritysetup close prepint && \
         sleep 1 && sync && echo PREP-DONE"
    );
    let tools = ["lvm", "mke2fs", "make-bcache", "thin_check", "cache_check", "cryptsetup", "integritysetup"];
    let mut modules = common::prep::STACK_MODULES.to_vec();
    modules.extend(["dm_thin_pool", "dm_raid", "raid1", "dm_cache", "dm_cache_smq", "dm_snapshot", "bcache", "ext4"]);
    modules.extend(["dm_integrity", "authenc", "hmac", "crc32c_generic"]);
    let tree_key: Vec<String> = describe(tree);
    let key = common::scenario::key_of(&[b"lvm-pools-bcache-1", body.as_bytes(), tree_key.join("\n").as_bytes()]);
    let mut skipped = false;
    let dir = common::scenario::cached("disks", &key, |d| {
        let t = TempDir::new("pool-prep");
        let Some(prep) = common::prep::image(t.path(), kver, &tools, &modules, "vdg", &body, Some(tree)) else {
            skipped = true;
            return;
        };
        let mut drives = Vec::new();
        for (name, mb) in DISKS {
            let disk = d.join(format!("{name}.disk"));
            sh(&format!("truncate -s {mb}M {}", disk.display()));
            drives.extend(args(&format!("-drive file={},if=virtio,format=raw", disk.display())));
        }
        let Some(kernel) = kernel() else { return };
        let log = qemu_boot(&kernel, &prep, "", &drives.iter().map(String::as_str).collect::<Vec<_>>(), 240);
        assert!(log.contains("PREP-DONE"), "the LVM pool and bcache prep VM failed:\n{}", common::debian::tail(&log));
    });
    if skipped {
        let _ = fs::remove_dir_all(&dir);
        return None;
    }
    Some(dir)
}

/// LVM beyond linear and bcache, each the root of a busybox system booted by a universal image
/// with the host's kernel (one boot per root, in turn): a thin LV (the root's init mounts the
/// raid1, cached and snapshot LVs too and reads them), a raid1 LV, a cached LV and a
/// snapshot; bcache by UUID of the file system on /dev/bcache0; and the two failures, each
/// ending in its diagnosis: a thin pool whose metadata check fails, and bcache's backing
/// device without its cache device. And a root in a LUKS2 container with `--integrity
/// hmac-sha256`, and one on a standalone dm-integrity device (with and without integritytab).
fn boot_lvm_pools_and_bcache() {
    if !tools_ok() || ["make-bcache", "thin_check", "cache_check"].iter().any(|t| !have(t)) {
        skip::<()>("needs make-bcache (bcache-tools), thin_check and cache_check (thin-provisioning-tools)");
        return;
    }
    let Some(kernel) = kernel() else { return };
    let Some(init) = init_binary() else { return };
    let kver = kver_of(&kernel);
    let t = TempDir::new("bootpools");
    let tree = busybox_root(&t, &["dev", "proc", "sys", "run", "mnt"]);
    fs::write(
        tree.join("sbin/init"),
        format!(
            "#!/bin/sh\nexport PATH=/bin\nbusybox echo {MARK}\n\
             d=/sys/dev/block/$(busybox awk '$5==\"/\"{{print $3}}' /proc/self/mountinfo)\n\
             busybox echo ROOTDEV $(busybox basename $(busybox readlink $d)) $(busybox cat $d/dm/name 2>/dev/null) \
             $(busybox cat /kind)\n\
             for lv in thin mirror cached snap; do [ -b /dev/mapper/vgs-$lv ] || continue\n\
               busybox mount -o ro /dev/mapper/vgs-$lv /mnt && busybox echo LV-OK $lv $(busybox cat /mnt/kind) && \
               busybox umount /mnt; done\n\
             busybox poweroff -f\n"
        ),
    )
    .unwrap();
    sh(&format!("chmod 755 {}", tree.join("sbin/init").display()));
    let Some(dir) = pool_disks(&kver, &tree) else { return };

    let univ = t.join("universal.img");
    ok(leanrd().args(["build", "-k", &kver, "--universal", "--init"]).arg(&init).arg("-o").arg(&univ));
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&univ))).unwrap();
    for p in
        ["sbin/thin_check", "sbin/cache_check", "sbin/pdata_tools", "dm-thin-pool.ko", "dm-cache-smq.ko", "bcache.ko"]
    {
        assert!(ls.contains(p), "the universal image lacks {p}");
    }
    let disk =
        |n: &str| format!("-drive file={},if=virtio,format=raw,snapshot=on", dir.join(format!("{n}.disk")).display());
    let vgs = format!("{} {}", disk("vgs1"), disk("vgs2"));
    let boot = |name: &str, append: &str, qemu: &str, expect: &[&str]| {
        let mut b = common::debian::Boot::new(name, &univ, append, args(qemu));
        b.expect = expect.iter().map(|s| s.to_string()).collect();
        b.reject = vec![];
        b.secs = 150;
        b
    };
    let others = ["LV-OK mirror mirror", "LV-OK cached cached", "LV-OK snap orig"];
    let mut boots = vec![boot(
        "lvm_thin_root",
        "quiet root=/dev/mapper/vgs-thin",
        &vgs,
        &[&[MARK, "ROOTDEV dm-", "vgs-thin thin"], &others[..]].concat(),
    )];
    for (lv, kind) in [("mirror", "mirror"), ("cached", "cached"), ("snap", "orig")] {
        let want = format!("vgs-{lv} {kind}");
        boots.push(boot(&format!("lvm_{lv}_root"), &format!("quiet root=/dev/mapper/vgs-{lv}"), &vgs, &[MARK, &want]));
    }
    boots.push(boot(
        "lvm_thin_pool_check_fails",
        "root=/dev/mapper/vgbad-root leanrd.timeout=5",
        &disk("bad"),
        &["LVM pool vgbad/pool: the check of its metadata", "lvconvert --repair vgbad/pool"],
    ));
    boots.push(boot(
        "bcache_root",
        &format!("quiet root=UUID={BCACHE_ROOT_UUID}"),
        &format!("{} {}", disk("back"), disk("cache")),
        &[MARK, "ROOTDEV bcache0 bcache"],
    ));
    boots.push(boot(
        "bcache_without_its_cache",
        &format!("root=UUID={BCACHE_ROOT_UUID} leanrd.timeout=5"),
        &disk("back"),
        &["vda (bcache backing device", "is not started: its cache set", "leanrd waits for the cache device"],
    ));
    // LUKS2 with authenticated encryption: the passphrase typed, the container (and the
    // dm-integrity device under it) opened by cryptsetup, the root found by its UUID.
    let mut integrity = boot(
        "luks2_integrity_root",
        &format!("quiet root=UUID={INTEGRITY_ROOT_UUID}"),
        &disk("integrity"),
        &["Enter passphrase", MARK, "luks2-hmac-sha256"],
    );
    integrity.answer = Some(PASS);
    boots.push(integrity);
    // Standalone dm-integrity: found by the file system's UUID, opened under integritysetup's
    // defaults as integrity-vda; then under the name a system's /etc/integritytab gives it (a
    // universal image of a sysroot that has the table).
    boots.push(boot(
        "dm_integrity_root",
        &format!("quiet root=UUID={DM_INTEGRITY_ROOT_UUID}"),
        &disk("dm-integrity"),
        &[MARK, "integrity-vda dm-integrity-crc32c"],
    ));
    let sr = host_sysroot(
        &t,
        "sr-integritytab",
        &[("integritytab", b"# name device key options\nintroot /dev/vda -\n", 0o644)],
    );
    let univ_tab = t.join("universal-integritytab.img");
    ok(leanrd()
        .args(["build", "-k", &kver, "--universal", "--init"])
        .arg(&init)
        .arg("--sysroot")
        .arg(&sr)
        .arg("-o")
        .arg(&univ_tab));
    let mut tab = boot(
        "dm_integrity_root_by_integritytab",
        "quiet root=/dev/mapper/introot",
        &disk("dm-integrity"),
        &[MARK, "introot dm-integrity-crc32c"],
    );
    tab.image = univ_tab;
    boots.push(tab);
    // One at a time: these run beside the other tests' VMs.
    let mut failed = Vec::new();
    for b in boots {
        failed.extend(common::debian::run(&kernel, &[b]));
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

const MPATH_ROOT_UUID: &str = "3a3a3a3a-1111-2222-3333-444444444444";
const MPATH_LUKS_UUID: &str = "3a3a3a3a-9999-aaaa-bbbb-cccccccccccc";
const MPATH_LUKS_ROOT_UUID: &str = "3a3a3a3a-dddd-eeee-ffff-000000000000";

/// A disk with one GPT partition holding a LUKS2 container (`PASS`) with the root tree in ext4,
/// made by a prep VM (the host's kernel here has no device-mapper) and kept in the test cache's
/// `disks/` by a hash of what makes it.
fn multipath_luks_disk(kver: &str, tree: &Path) -> Option<PathBuf> {
    let body = format!(
        "printf %s '{PASS}' > /tmp/key && \
         $cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
           --uuid {MPATH_LUKS_UUID} --key-file /tmp/key /dev/vda1 && \
         $cryptsetup open --key-file /tmp/key /dev/vda1 prep && \
         $mke2fs -q -t ext4 -U {MPATH_LUKS_ROOT_UUID} -d /roottree /dev/mapper/prep && $cryptsetup close prep && \
         sync && echo PREP-DONE"
    );
    let tree_key: Vec<String> = describe(tree);
    let key = common::scenario::key_of(&[b"multipath-luks-1", body.as_bytes(), tree_key.join("\n").as_bytes()]);
    let mut skipped = false;
    let dir = common::scenario::cached("disks", &key, |d| {
        let t = TempDir::new("mpath-luks-prep");
        let Some(prep) = common::prep::image(
            t.path(),
            kver,
            &["cryptsetup", "mke2fs"],
            common::prep::STACK_MODULES,
            "vda1",
            &body,
            Some(tree),
        ) else {
            skipped = true;
            return;
        };
        let disk = d.join("luks.disk");
        sh(&format!("truncate -s 64M {}", disk.display()));
        let o = run_stdin(Command::new("sfdisk").arg("-q").arg(&disk), b"label: gpt\nstart=2048, type=L\n");
        assert!(o.status.success(), "sfdisk: {}", String::from_utf8_lossy(&o.stderr));
        let Some(kernel) = kernel() else { return };
        let drive = args(&format!("-drive file={},if=virtio,format=raw", disk.display()));
        let log = qemu_boot(&kernel, &prep, "", &drive.iter().map(String::as_str).collect::<Vec<_>>(), 240);
        assert!(log.contains("PREP-DONE"), "the multipath LUKS prep VM failed:\n{}", common::debian::tail(&log));
    });
    if skipped {
        let _ = fs::remove_dir_all(&dir);
        return None;
    }
    Some(dir)
}
/// QEMU's `wwn=` for both paths, and the WWID multipath-tools makes of it (NAA 5: `3` first).
const MPATH_WWN: &str = "0x5000c50015ea71ac";

/// dm-multipath: one disk file seen through two virtio-scsi controllers as one LUN (the same
/// `serial=` and `wwn=`, `share-rw=on`), a GPT partition holding the busybox root (by UUID: the
/// same file system is on sda1 and sdb1 too, and must be found on the map). A universal image
/// of a sysroot with the host's multipath.conf (user_friendly_names), bindings (`mpatha`) and
/// wwids; the root's init reports the map's name and DM UUID, its partition's (kpartx's
/// naming) and the paths under the map. Then the first path failing every read from the start
/// (QEMU's blkdebug; the paths in one group, round-robin): the kernel fails it and the boot
/// goes on on the other; then both failing:
/// the diagnosis names the map with no working path.
fn boot_multipath() {
    if !tools_ok() {
        return;
    }
    let Some(kernel) = kernel() else { return };
    let Some(init) = init_binary() else { return };
    let kver = kver_of(&kernel);
    let t = TempDir::new("bootmpath");
    let tree = busybox_root(&t, &["dev", "proc", "sys", "run"]);
    fs::write(
        tree.join("sbin/init"),
        format!(
            "#!/bin/sh\nexport PATH=/bin\nbusybox echo {MARK}\n\
             d=/sys/dev/block/$(busybox awk '$5==\"/\"{{print $3}}' /proc/self/mountinfo)\n\
             busybox echo LEANRD-MPATH-ROOT $(busybox basename $(busybox readlink $d)) $(busybox cat $d/dm/name) \
             $(busybox cat $d/dm/uuid)\n\
             for m in /sys/block/dm-*; do [ -e $m ] || continue\n\
               busybox echo LEANRD-MPATH-DM $(busybox basename $m) $(busybox cat $m/dm/name) $(busybox cat $m/dm/uuid) \
             slaves: $(busybox ls $m/slaves); done\n\
             busybox poweroff -f\n"
        ),
    )
    .unwrap();
    sh(&format!("chmod 755 {}", tree.join("sbin/init").display()));
    let fsimg = fs_image(&t, &tree, "ext4", MPATH_ROOT_UUID, "mproot");
    let disk = partitioned(&t, &fsimg, true, "3a3a3a3a-5555-6666-7777-888888888888", "mpath");
    let wwid = format!("3{}", MPATH_WWN.trim_start_matches("0x"));
    // Active/active, as many SANs are: both paths in one group, I/O turned between them at each
    // request, so a failing path is used (and failed by the kernel) whichever the kernel names
    // first; with failover the first group's path alone carries I/O, and which controller's
    // disk is sda is a race of their probes.
    let conf = b"defaults {\n\tuser_friendly_names yes\n\tfind_multipaths strict\n\tpath_grouping_policy multibus\n\
                 \tpath_selector \"round-robin 0\"\n}\n";
    let bindings = format!("# Multipath bindings, Version : 1.0\nmpatha {wwid}\n");
    let wwids = format!("# Multipath wwids, Version : 1.0\n/{wwid}/\n");
    let sr = host_sysroot(
        &t,
        "sr-multipath",
        &[
            ("multipath.conf", &conf[..], 0o644),
            ("multipath/bindings", bindings.as_bytes(), 0o644),
            ("multipath/wwids", wwids.as_bytes(), 0o644),
        ],
    );
    let univ = t.join("universal-multipath.img");
    ok(leanrd()
        .args(["build", "-k", &kver, "--universal", "--init"])
        .arg(&init)
        .arg("--sysroot")
        .arg(&sr)
        .arg("-o")
        .arg(&univ));
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&univ))).unwrap();
    for p in ["etc/multipath/bindings", "etc/multipath/wwids", "etc/multipath.conf", "dm-multipath.ko"] {
        assert!(ls.contains(p), "the universal image lacks {p}");
    }
    let blkdebug = t.join("fail-reads.conf");
    fs::write(&blkdebug, "[inject-error]\nevent = \"read_aio\"\nerrno = \"5\"\n").unwrap();
    // Path i on its own virtio-scsi controller; `fail`: every read through it fails.
    let path_to = |disk: &Path, i: u32, fail: bool| {
        let mut a = format!(
            "-device virtio-scsi-pci,id=scsi{i} -blockdev driver=file,filename={},node-name=f{i},locking=off",
            disk.display()
        );
        let mut file = format!("f{i}");
        if fail {
            a.push_str(&format!(" -blockdev driver=blkdebug,config={},image=f{i},node-name=b{i}", blkdebug.display()));
            file = format!("b{i}");
        }
        a.push_str(&format!(
            " -blockdev driver=raw,file={file},node-name=p{i} \
             -device scsi-hd,bus=scsi{i}.0,drive=p{i},serial=LEANRDMPATH,wwn={MPATH_WWN},share-rw=on"
        ));
        a
    };
    let path = |i: u32, fail: bool| path_to(&disk, i, fail);
    let boot = |name: &str, append: &str, qemu: String, expect: Vec<String>| {
        let mut b = common::debian::Boot::new(name, &univ, append, args(&qemu));
        b.expect = expect;
        b.reject = vec![];
        b.secs = 150;
        b
    };
    let map = format!("LEANRD-MPATH-DM dm-0 mpatha mpath-{wwid} slaves: sda sdb");
    let on_map = vec![MARK.to_string(), format!("LEANRD-MPATH-ROOT dm-1 mpatha-part1 part1-mpath-{wwid}"), map.clone()];
    let append = format!("ro root=UUID={MPATH_ROOT_UUID}");
    let mut boots = vec![
        boot(
            "multipath_root",
            &format!("quiet {append}"),
            format!("{} {}", path(0, false), path(1, false)),
            on_map.clone(),
        ),
        boot(
            "multipath_no_working_path",
            &format!("{append} leanrd.timeout=5"),
            format!("{} {}", path(0, true), path(1, true)),
            vec![
                format!("multipath map mpatha (WWID {wwid}) has no working path (sda failed, sdb failed)"),
                "rd.multipath=0".to_string(),
            ],
        ),
    ];
    // LUKS2 on the map's partition, the first path failing every read from the start: the
    // kernel fails it, the passphrase is typed, the container is opened on the map.
    if let Some(luks) = multipath_luks_disk(&kver, &tree) {
        let copy = t.join("mpath-luks.disk");
        sh(&format!("cp --reflink=auto {} {}", luks.join("luks.disk").display(), copy.display()));
        let mut b = boot(
            "multipath_luks_root_one_path_failing",
            &format!("ro root=UUID={MPATH_LUKS_ROOT_UUID}"),
            format!("{} {}", path_to(&copy, 0, true), path_to(&copy, 1, false)),
            vec![
                "Enter passphrase".to_string(),
                MARK.to_string(),
                format!("LEANRD-MPATH-ROOT dm-2 luks-{MPATH_LUKS_UUID} CRYPT-LUKS2-"),
                format!("LEANRD-MPATH-DM dm-1 mpatha-part1 part1-mpath-{wwid} slaves: dm-0"),
                map.clone(),
                "Failing path 8:".to_string(),
            ],
        );
        b.answer = Some(PASS);
        boots.insert(1, b);
    } else {
        boots.insert(
            1,
            boot(
                "multipath_root_one_path_failing",
                &append,
                format!("{} {}", path(0, true), path(1, false)),
                [on_map.clone(), vec!["Failing path 8:".to_string()]].concat(),
            ),
        );
    }
    // rd.multipath=0: no map; the root is found on a path's partition (what the first boot
    // would see if /init made no map).
    let mut off = boot(
        "multipath_off",
        &format!("quiet {append} rd.multipath=0"),
        format!("{} {}", path(0, false), path(1, false)),
        vec![MARK.to_string(), "LEANRD-MPATH-ROOT sd".to_string()],
    );
    off.reject = vec!["mpatha".to_string()];
    boots.push(off);
    // One at a time: these run beside the other tests' VMs.
    let mut failed = Vec::new();
    for b in boots {
        failed.extend(common::debian::run(&kernel, &[b]));
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}
