//! Helpers shared by the integration tests: leanrd-testkit, and the leanrd binary.
//! Each test crate includes it (`mod common;`) and uses a part of it: its `pub` items are for
//! that crate, which the workspace's `unreachable_pub` cannot see.
#![allow(dead_code, unused_imports, unreachable_pub)]

/// The boot harness (crates/testkit): the Debian roots, disks, prep VMs and boots.
pub mod debian {
    pub use leanrd_testkit::boot::*;
}
pub mod prep {
    pub use leanrd_testkit::prep::*;
}

use std::path::PathBuf;
use std::process::Command;

/// `leanrd()` is the harness's: the executable cargo built beside the test.
pub use leanrd_testkit::boot::{boot_console_timed, init_binary, kver_of, leanrd, sh, sh_private};
pub use leanrd_testkit::*;

/// Which generator made an initramfs image (`leanrd inspect --json`'s `generator`).
pub fn made_by(img: &std::path::Path) -> String {
    let v: serde_json::Value = serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(img))).unwrap();
    v["generator"].as_str().unwrap_or("unknown").to_string()
}

/// Install the Debian package at `deb_in_tree` (a path inside the root `tree`) with dpkg in a
/// chroot (`apt_cache` as apt's package cache), check that it diverted update-initramfs to
/// leanrd's, and ask for universal images (a chroot has no machine of its own to detect).
pub fn install_deb(tree: &std::path::Path, apt_cache: Option<&std::path::Path>, deb_in_tree: &str) {
    let (done, log) = leanrd_testkit::boot::in_chroot(tree, apt_cache, &format!("dpkg -i {deb_in_tree}"));
    assert!(done, "dpkg -i: {log}");
    let diverted = std::fs::read_to_string(tree.join("usr/sbin/update-initramfs")).unwrap();
    assert!(diverted.contains("leanrd build"), "update-initramfs is not leanrd's:\n{diverted}");
    let conf = tree.join("etc/leanrd/leanrd.toml");
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{text}universal = true\n")).unwrap();
}

/// Boot, answering the passphrase prompt on the serial console; returns the console output.
pub fn boot_typing(
    kernel: &std::path::Path,
    initrd: &std::path::Path,
    append: &str,
    extra: &[String],
    answer: &str,
    secs: u64,
) -> String {
    boot_console_timed(kernel, initrd, append, extra, Some(answer), &[], secs).console
}

/// A FAT ESP at `t/NAME.esp` holding `efi` as the removable-media boot path
/// \EFI\BOOT\`file` (BOOTX64.EFI, BOOTAA64.EFI), with 16 MiB to spare.
pub fn esp(t: &TempDir, name: &str, efi: &std::path::Path, file: &str) -> PathBuf {
    let img = t.join(format!("{name}.esp"));
    let _ = std::fs::remove_file(&img);
    let mb = std::fs::metadata(efi).unwrap().len() / (1 << 20) + 16;
    sh(&format!(
        "mkfs.vfat -C {i} {k} >/dev/null && mmd -i {i} ::/EFI ::/EFI/BOOT && mcopy -i {i} {e} ::/EFI/BOOT/{file}",
        i = img.display(),
        k = mb * 1024,
        e = efi.display()
    ));
    img
}

/// A busybox root (see [`busybox_root`], with dev, proc, sys, run and tmp) whose /sbin/init is
/// this shell script, busybox as `$b`.
pub fn busybox_script_root(t: &TempDir, script: &str) -> PathBuf {
    let r = busybox_root(t, &["dev", "proc", "sys", "run", "tmp"]);
    let init = r.join("sbin/init");
    std::fs::write(&init, format!("#!/bin/sh\nb=/bin/busybox\n{script}")).unwrap();
    sh(&format!("chmod 755 {}", init.display()));
    r
}

/// Run the boots; `Err(why)` when one did not meet its expectations (its console is printed).
pub fn boots_pass(kernel: &std::path::Path, boots: &[leanrd_testkit::boot::Boot], why: String) -> Result<(), String> {
    if leanrd_testkit::boot::run(kernel, boots).is_empty() { Ok(()) } else { Err(why) }
}

/// A root tree at `t/rootfs` with static busybox as /bin/busybox and /bin/sh, and these
/// directories; its /sbin/init is the caller's.
pub fn busybox_root(t: &TempDir, dirs: &[&str]) -> PathBuf {
    let r = t.join("rootfs");
    for d in ["sbin", "bin"].iter().chain(dirs) {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", r.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", r.join("bin/sh")).unwrap();
    r
}

/// A system root that shares the host's programs, libraries and kernel modules (hard links
/// of /usr/bin, /usr/sbin, /usr/lib, /usr/lib64, the merged-/usr links) with an /etc of its
/// own: `etc` files as (path under etc/, content, mode). A sysroot's symlinks resolve inside
/// it, so links to the host's tree would not do.
pub fn host_sysroot(t: &TempDir, name: &str, etc: &[(&str, &[u8], u32)]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let sr = t.join(name);
    std::fs::create_dir_all(sr.join("usr")).unwrap();
    std::fs::create_dir_all(sr.join("etc")).unwrap();
    sh(&format!("cp -al /usr/lib /usr/sbin /usr/bin /usr/lib64 {}/usr/", sr.display()));
    for (l, target) in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")] {
        std::os::unix::fs::symlink(target, sr.join(l)).unwrap();
    }
    std::fs::copy("/etc/ld.so.cache", sr.join("etc/ld.so.cache")).unwrap();
    for (path, content, mode) in etc {
        let p = sr.join("etc").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    sr
}

/// The xHCI controller, USB keyboard interface and HID device of [`keyboard_host`].
pub const XHCI_PCI: &str = "pci:v00001B36d0000000Dsv00001AF4sd00001100bc0Csc03i30";
pub const USB_KEYBOARD: &str = "usb:v0627p0001d0000dc00dsc00dp00ic03isc01ip01in00";
pub const HID_KEYBOARD: &str = "hid:b0003g0001v00000627p00000001";

/// A host (as a fixture) with a PS/2 keyboard, a USB keyboard behind xHCI and a power button
/// (not a keyboard), whose root is ext4 on the third partition of a virtio disk — through
/// dm-crypt (`sda3_crypt`, the LUKS header's UUID given) or directly.
pub fn keyboard_host(t: &TempDir, luks_uuid: Option<&str>) -> Fixture {
    keyboard_host_on(t, luks_uuid, false)
}

/// [`keyboard_host`] with the disk on NVMe (nvme0n1p3) instead of virtio when `nvme`.
pub fn keyboard_host_on(t: &TempDir, luks_uuid: Option<&str>, nvme: bool) -> Fixture {
    let (part, devno) = if nvme { ("nvme0n1p3", "259:3") } else { ("vda3", "254:3") };
    let mountinfo = match luks_uuid {
        Some(_) => "25 1 253:0 / / rw,relatime shared:1 - ext4 /dev/mapper/sda3_crypt rw\n".to_string(),
        None => format!("25 1 {devno} / / rw,relatime shared:1 - ext4 /dev/{part} rw\n"),
    };
    let name = if nvme { "keyboard-host-nvme" } else { "keyboard-host" };
    let f = Fixture::new(t, name, &format!("{mountinfo}26 25 0:5 / /proc rw - proc proc rw\n"));
    f.dev("pci0000:00", None, None);
    let disk_part = if nvme {
        f.dev("pci0000:00/0000:00:04.0", Some(NVME_PCI), Some("nvme"))
            .dev("pci0000:00/0000:00:04.0/nvme/nvme0", None, None)
            .block("pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1", "259:0", false)
            .block("pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1/nvme0n1p3", devno, true);
        "pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1/nvme0n1p3"
    } else {
        f.dev("pci0000:00/0000:00:04.0", Some(VIRTIO_PCI), Some("virtio-pci"))
            .dev("pci0000:00/0000:00:04.0/virtio1", Some("virtio:d00000002v00001AF4"), Some("virtio_blk"))
            .block("pci0000:00/0000:00:04.0/virtio1/block/vda", "254:0", false)
            .block("pci0000:00/0000:00:04.0/virtio1/block/vda/vda3", devno, true);
        "pci0000:00/0000:00:04.0/virtio1/block/vda/vda3"
    };
    if let Some(u) = luks_uuid {
        f.dm("dm-0", &format!("CRYPT-LUKS2-{}-sda3_crypt", u.replace('-', "")), &[disk_part]).dm_name(
            "dm-0",
            "sda3_crypt",
            "253:0",
        );
    }
    let usb = "pci0000:00/0000:00:05.0/usb1/1-1/1-1:1.0";
    f.dev("platform/i8042", Some("platform:i8042"), Some("i8042"))
        .dev("platform/i8042/serio0", Some("serio:ty06pr00id00ex00"), Some("atkbd"))
        .dev("platform/i8042/serio0/input", None, None)
        .input("platform/i8042/serio0/input/input1", KEYBOARD_KEYS)
        .dev("pci0000:00/0000:00:05.0", Some(XHCI_PCI), Some("xhci_hcd"))
        .dev("pci0000:00/0000:00:05.0/usb1", Some("usb:v1D6Bp0003d0601dc09dsc00dp03ic09isc00ip00in00"), Some("usb"))
        .dev("pci0000:00/0000:00:05.0/usb1/1-1", None, Some("usb"))
        .dev(usb, Some(USB_KEYBOARD), Some("usbhid"))
        .dev(&format!("{usb}/0003:0627:0001.0001"), Some(HID_KEYBOARD), Some("hid-generic"))
        .dev(&format!("{usb}/0003:0627:0001.0001/input"), None, None)
        .input(&format!("{usb}/0003:0627:0001.0001/input/input2"), KEYBOARD_KEYS)
        .dev("LNXSYSTM:00", None, None)
        .dev("LNXSYSTM:00/LNXPWRBN:00", Some("acpi:LNXPWRBN:"), Some("button"))
        .dev("LNXSYSTM:00/LNXPWRBN:00/input", None, None)
        .input("LNXSYSTM:00/LNXPWRBN:00/input/input0", POWER_BUTTON_KEYS);
    f
}

/// A named test body, given what its binary's setup made.
pub type Case<S> = (&'static str, fn(&S));

/// Each case a test of its own, given what `setup` made once for the process; none runs
/// (each is skipped, or fails in strict mode, inside `setup`) when it made nothing.
pub fn cases<S: Sync + 'static>(cases: Vec<Case<S>>, setup: fn() -> Option<&'static S>) -> Vec<leanrd_testkit::Trial> {
    cases
        .into_iter()
        .map(|(name, f)| {
            test(name, move || {
                if let Some(s) = setup() {
                    f(s)
                }
                Ok(())
            })
        })
        .collect()
}
