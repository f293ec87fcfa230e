//! Hibernation and resume, for real, under QEMU TCG: a busybox root boots through a leanrd
//! image, puts a random token in a tmpfs file and in a sleeping process's memory, and
//! hibernates (`echo disk > /sys/power/state`, QEMU powers off). The next boot of the same
//! disks with the same image must continue that system: the token comes back from both
//! places, and the root's fresh-boot line never appears. Around it: a boot with `noresume`
//! (a fresh boot; the debug log names the image it skipped) and a first boot on an empty
//! swap (a fresh boot, no image). Twice: a swap partition by UUID, and a swap file on the ext4
//! root with `resume_offset` (FIEMAP's offset, checked against filefrag), and a swap volume
//! next to the root volume on LVM on LUKS (the passphrase typed at each boot).
//!
//! Needs root, qemu, mkfs.ext4, mkswap, sfdisk, filefrag, busybox-static. About 3 minutes.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;

const ROOT_UUID: &str = "12121212-3434-5656-7878-9a9a9a9a9a9a";
const SWAP_UUID: &str = "5a5a5a5a-1111-2222-3333-444455556666";
const LUKS_UUID: &str = "c0c0c0c0-1111-2222-3333-444455556666";

/// The root's init: a fresh boot prints FRESH; with `leanrd.test=hibernate` it swaps on
/// `$swap`, leaves a token behind and hibernates; after a resume it prints what it finds.
fn root_tree(t: &TempDir, swap: &str) -> PathBuf {
    let r = busybox_root(t, &["dev", "proc", "sys", "run", "tmp"]);
    fs::write(
        r.join("sbin/init"),
        format!(
            "#!/bin/busybox sh\n/bin/busybox --install -s /bin\n\
             mount -t proc proc /proc 2>/dev/null; mount -t sysfs sys /sys 2>/dev/null\n\
             mount -t tmpfs tmp /tmp\n\
             echo LEANRD-FRESH-BOOT uptime $(cut -d' ' -f1 /proc/uptime)\n\
             if grep -qw leanrd.test=hibernate /proc/cmdline; then\n\
               tok=$(cat /proc/sys/kernel/random/uuid); echo $tok > /tmp/token\n\
               sh -c \"T=$tok; trap 'echo LEANRD-MEM \\$T' USR1; while :; do sleep 1; done\" &\n\
               mem=$!\n\
               swapon {swap} || echo LEANRD-SWAPON-FAILED\n\
               echo LEANRD-HIBERNATING $tok uptime $(cut -d' ' -f1 /proc/uptime)\n\
               echo shutdown > /sys/power/disk; echo disk > /sys/power/state\n\
               echo LEANRD-RESUMED file $(cat /tmp/token) uptime $(cut -d' ' -f1 /proc/uptime)\n\
               kill -USR1 $mem; sleep 2\n\
             fi\n\
             poweroff -f\n"
        ),
    )
    .unwrap();
    sh(&format!("chmod 755 {}", r.join("sbin/init").display()));
    r
}

fn qemu_args(disk: &Path) -> Vec<String> {
    vec!["-m".into(), "512".into(), "-drive".into(), format!("file={},if=virtio,format=raw", disk.display())]
}

const PASS: &str = "leanrd-resume-passphrase";

/// Boot (typing the passphrase when the disk is LUKS).
fn boot(kernel: &Path, img: &Path, disk: &Path, append: &str) -> String {
    let q = qemu_args(disk);
    if append.contains("rd.luks.uuid=") {
        return boot_typing(kernel, img, append, &q, PASS, 300);
    }
    qemu_boot(kernel, img, append, &q.iter().map(String::as_str).collect::<Vec<_>>(), 300)
}

/// The console's last 5,000 characters, without the root's `busybox --install` complaints
/// (a read-only root), which would fill them.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.ends_with(": Read-only file system")).collect();
    let text = lines.join("\n");
    text[text.floor_char_boundary(text.len().saturating_sub(5000))..].to_string()
}

/// Hibernate, skip with `noresume`, resume: the three boots of one case, in order.
/// `noresume_sees`: where the noresume boot must find the image (None: no noresume boot).
fn hibernate_and_resume(kernel: &Path, img: &Path, disk: &Path, resume: &str, what: &str, noresume_sees: Option<&str>) {
    // An empty swap: a fresh boot; /init says there was no image. Then it hibernates.
    let log = boot(kernel, img, disk, &format!("{resume} leanrd.debug leanrd.test=hibernate"));
    let tok = log
        .lines()
        .find_map(|l| l.strip_prefix("LEANRD-HIBERNATING "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("{what}: did not hibernate:\n{}", tail(&log)))
        .to_string();
    assert!(log.contains("LEANRD-FRESH-BOOT"), "{what}");
    assert!(log.contains("holds no hibernation image; booting normally"), "{what}: first boot:\n{}", tail(&log));
    assert!(!log.contains("LEANRD-RESUMED"), "{what}: the hibernation did not power off:\n{}", tail(&log));

    // noresume: a fresh boot that says what it skipped; the image stays. (Only where the
    // root is read-only: a read-write root would be checked and mounted under the
    // hibernated system's feet, which is why noresume loses the session on real machines.)
    if let Some(swap_path) = noresume_sees {
        let log = boot(kernel, img, disk, &format!("{resume} noresume leanrd.debug"));
        assert!(log.contains("LEANRD-FRESH-BOOT"), "{what}: noresume:\n{}", tail(&log));
        assert!(
            log.contains(&format!("hibernation image found on {swap_path} but resume was skipped (noresume)")),
            "{what}: noresume:\n{}",
            tail(&log)
        );
    }

    // Resume: the same system goes on.
    let log = boot(kernel, img, disk, resume);
    assert!(
        log.contains(&format!("LEANRD-RESUMED file {tok}")) && log.contains(&format!("LEANRD-MEM {tok}")),
        "{what}: the hibernated system did not come back (token {tok}):\n{}",
        tail(&log)
    );
    assert!(!log.contains("LEANRD-FRESH-BOOT"), "{what}: a fresh boot instead of a resume:\n{}", tail(&log));
    eprintln!("{what}: {}", log.lines().find(|l| l.contains("LEANRD-RESUMED")).unwrap_or_default());
}

/// Hibernate to a swap partition (vda1 the root, vda2 the swap) and resume from it.
fn swap_partition(kernel: &Path, img: &Path, what: &str) {
    let tp = TempDir::new("resume-part");
    let tree = root_tree(&tp, "/dev/vda2");
    let (rootfs, swap, disk) = (tp.join("root.fs"), tp.join("swap.fs"), tp.join("disk"));
    let (r, w, d) = (rootfs.display(), swap.display(), disk.display());
    sh(&format!("truncate -s 64M {r} && mkfs.ext4 -q -U {ROOT_UUID} -d {} {r}", tree.display()));
    sh(&format!("truncate -s 256M {w} && mkswap -q -U {SWAP_UUID} {w}"));
    sh(&format!(
        "truncate -s 330M {d} && printf 'label: gpt\\nstart=2048, size=64M\\nsize=256M, type=S\\n' | sfdisk -q {d} \
         && dd if={r} of={d} bs=1M seek=1 conv=notrunc,sparse status=none \
         && dd if={w} of={d} bs=1M seek=65 conv=notrunc,sparse status=none"
    ));
    let resume = format!("root=UUID={ROOT_UUID} resume=UUID={SWAP_UUID}");
    hibernate_and_resume(kernel, img, &disk, &resume, what, Some("/dev/vda2"));
}

/// Debian 13's kernel (6.12, .ko.xz modules, from the trixie root's /boot) hibernates and
/// resumes through a universal image built from that root.
#[test]
fn hibernated_debian13_resumes() {
    let need = ["mkfs.ext4", "mkswap", "sfdisk", "qemu-system-x86_64"];
    if !is_root() || !Path::new("/bin/busybox").exists() || need.iter().any(|t| !have(t)) {
        skip::<()>(&format!("needs root, /bin/busybox and {need:?}"));
        return;
    }
    let Some(root) = debian_suite_root("trixie", "") else { return };
    let Some(init) = init_binary() else { return };
    let kernel = root_kernel(&root);
    let kver = kver_of(&kernel);
    let t = TempDir::new("resume-trixie");
    let img = t.join("universal.img");
    ok(leanrd()
        .args(["build", "-k", &kver, "--universal", "--sysroot"])
        .arg(&root)
        .arg("--init")
        .arg(&init)
        .arg("-o")
        .arg(&img));
    swap_partition(&kernel, &img, "Debian 13 kernel, swap partition");
}

#[test]
fn hibernated_systems_resume() {
    let need = ["mkfs.ext4", "mkswap", "sfdisk", "filefrag", "losetup", "qemu-system-x86_64"];
    if !is_root() || !Path::new("/bin/busybox").exists() || need.iter().any(|t| !have(t)) {
        skip::<()>(&format!("needs root, /bin/busybox and {need:?}"));
        return;
    }
    let Some(kernel) = kernel() else { return };
    let Some(init) = init_binary() else { return };
    let kver = kver_of(&kernel);
    let t = TempDir::new("resume");
    let img = t.join("universal.img");
    ok(leanrd().args(["build", "-k", &kver, "--universal", "--init"]).arg(&init).arg("-o").arg(&img));

    std::thread::scope(|s| {
        // A swap partition: vda1 the root, vda2 the swap.
        let part = s.spawn(|| swap_partition(&kernel, &img, "swap partition"));
        // A swap file on the (read-write) root: resume= names the root, resume_offset= where
        // the file starts on it.
        let file = s.spawn(|| {
            let tf = TempDir::new("resume-file");
            let tree = root_tree(&tf, "/swapfile");
            let (disk, mnt) = (tf.join("disk"), tf.join("mnt"));
            fs::create_dir_all(&mnt).unwrap();
            let (d, m) = (disk.display(), mnt.display());
            // 4 KiB blocks, as real roots have (mkfs picks 1 KiB for one this small, and a swap file's
            // pages must be whole blocks on the device).
            sh(&format!("truncate -s 400M {d} && mkfs.ext4 -q -b 4096 -U {ROOT_UUID} -d {} {d}", tree.display()));
            // Written in place (a copy by mkfs would leave holes where the zeros are).
            sh_private(&format!(
                "set -e; l=$(losetup -f --show {d}); trap 'umount {m} 2>/dev/null || true; losetup -d $l' EXIT; \
                 mount $l {m}; dd if=/dev/zero of={m}/swapfile bs=1M count=256 status=none; \
                 chmod 600 {m}/swapfile; mkswap -q {m}/swapfile; filefrag -v -b4096 {m}/swapfile > {}; sync",
                tf.join("filefrag").display()
            ));
            // The offset FIEMAP gives (leanrd's host detection) is filefrag's first extent.
            // (Mounted until the offset is read: no trap that would unmount it at once.)
            sh(&format!("l=$(losetup -f --show -r {d}) && mount -o ro $l {m} || {{ losetup -d $l; exit 1; }}"));
            let f = fs::File::open(mnt.join("swapfile"));
            let ours = f.ok().and_then(|f| leanrd_archive::fiemap::physical_start(&f).ok().flatten());
            sh(&format!("umount {m}; losetup -j {d} | cut -d: -f1 | xargs -r losetup -d"));
            let text = fs::read_to_string(tf.join("filefrag")).unwrap();
            let first = text.lines().find(|l| l.trim_start().starts_with("0:")).expect(&text);
            let theirs: u64 = first.split(':').nth(2).unwrap().split("..").next().unwrap().trim().parse().unwrap();
            let ours = ours.expect("FIEMAP gave no place for the swap file") / 4096;
            assert_eq!(ours, theirs, "resume_offset: FIEMAP vs filefrag:\n{text}");
            let resume = format!("root=UUID={ROOT_UUID} rw resume=UUID={ROOT_UUID} resume_offset={ours}");
            hibernate_and_resume(&kernel, &img, &disk, &resume, "swap file", None);
        });
        // Swap and root as logical volumes on LUKS (the passphrase typed at each boot), made in
        // a prep VM (the host has no device-mapper).
        let luks = s.spawn(|| {
            let tl = TempDir::new("resume-luks");
            let tree = root_tree(&tl, "/dev/mapper/vg-swap");
            let disk = tl.join("disk");
            sh(&format!("truncate -s 400M {}", disk.display()));
            let body = format!(
                "printf %s '{PASS}' > /tmp/key\n\
                 $cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
                   --uuid {LUKS_UUID} --key-file /tmp/key /dev/vda && \
                 $cryptsetup open --key-file /tmp/key /dev/vda crypt && \
                 $lvm pvcreate -y --config \"$C\" /dev/mapper/crypt && $lvm vgcreate --config \"$C\" vg /dev/mapper/crypt && \
                 $lvm lvcreate -y --config \"$C\" -L 64M -n root vg && $lvm lvcreate -y --config \"$C\" -L 256M -n swap vg && \
                 $mke2fs -q -t ext4 -U {ROOT_UUID} -d /roottree /dev/mapper/vg-root && \
                 $mkswap -U {SWAP_UUID} /dev/mapper/vg-swap && $lvm vgchange -an --config \"$C\" vg && \
                 $cryptsetup close crypt && sync && echo PREP-DONE"
            );
            let mods = ["virtio_pci", "virtio_blk", "dm_mod", "dm_crypt", "xts", "aes_generic", "sha256_generic", "cbc", "ecb"];
            let Some(prep) = common::prep::image(tl.path(), &kver, &["cryptsetup", "lvm", "mke2fs", "mkswap"], &mods, "vda", &body, Some(&tree))
            else {
                return;
            };
            let log = boot(&kernel, &prep, &disk, "quiet");
            assert!(log.contains("PREP-DONE"), "preparing LUKS/LVM:\n{}", tail(&log));
            let resume = format!("root=/dev/mapper/vg-root rd.luks.uuid={LUKS_UUID} resume=UUID={SWAP_UUID}");
            hibernate_and_resume(&kernel, &img, &disk, &resume, "swap on LVM on LUKS", Some("/dev/mapper/vg-swap"));
        });
        for h in [part, file, luks] {
            if let Err(e) = h.join() {
                std::panic::resume_unwind(e);
            }
        }
    });
}
