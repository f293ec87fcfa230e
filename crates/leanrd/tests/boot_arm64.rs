//! arm64 beyond the boot scenarios. The scenarios (tests/boot/scenarios.toml, `debian13_arm64_*`)
//! boot a Debian 13 arm64 root (tools/debian-root trixie arm64: mmdebstrap through
//! qemu-user-static) with its own kernel on QEMU's virt board: universal images that this
//! x86_64 leanrd builds with the aarch64 /init (tools/arm64 init: Debian 13's rustc in a chroot),
//! on ext4 over virtio-mmio and btrfs over virtio-scsi-pci, LUKS with the passphrase typed, and
//! a host-only image that leanrd built for aarch64 makes inside the arm64 machine. Here, on the
//! same root, each boot reaching `systemctl is-system-running` = running:
//! - an arm64 UKI (`--uki`: the root's linuxaa64.efi.stub, chosen by its architecture) that
//!   AAVMF, the arm64 UEFI firmware, starts from a FAT ESP, with the machine's device tree
//!   (renamed) in its `.dtb` and two more as `.dtbauto` with a `.hwids`: on the machine the
//!   `.hwids` names, the kernel boots on the `.dtbauto` for it; on another, on the `.dtb`;
//! - the arm64 Debian package (tools/make-deb --arm64), installed with dpkg in the root (its
//!   maintainer scripts and leanrd run under qemu-user): it takes over update-initramfs, the
//!   kernel package's hooks write a leanrd image, that image boots the root, and removing the
//!   package gives update-initramfs back;
//! - the boot proof refuses the x86_64 /init for the arm64 kernel (no VM).
//!
//! Needs root, qemu-system-arm, qemu-user-static, qemu-efi-aarch64, mmdebstrap, e2fsprogs,
//! dosfstools, mtools, cargo-deb and binutils.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::debian::*;
use common::*;

/// The Debian 13 arm64 root and its kernel.
struct Setup {
    t: TempDir,
    /// The cached root (tools/debian-root trixie arm64): read, never written.
    root: PathBuf,
    kernel: PathBuf,
    kver: String,
}

fn setup() -> Option<&'static Setup> {
    static S: std::sync::OnceLock<Result<Option<Setup>, String>> = std::sync::OnceLock::new();
    once(&S, || {
        let need = ["qemu-system-aarch64", "qemu-aarch64-static", "mmdebstrap", "mkfs.ext4", "sfdisk"];
        if !is_root() || need.iter().any(|t| !have(t)) {
            return skip(&format!(
                "needs root and {need:?} (apt install qemu-system-arm qemu-user-static mmdebstrap e2fsprogs fdisk)"
            ));
        }
        // This x86-64 leanrd finds the aarch64 /init beside it (the development tree's
        // target/aarch64-unknown-linux-gnu/init/leanrd-init, where tools/arm64 puts it), by the
        // sysroot's architecture: no --init in the builds below.
        arm64_build("init")?;
        let root = debian_suite_root("trixie arm64", "")?;
        let kernel = root_kernel(&root);
        let kver = kver_of(&kernel);
        Some(Setup { t: TempDir::new("arm64"), root, kernel, kver })
    })
    .as_ref()
}

/// A copy of the root made a test system for `name` ([`finish_base_on`]: the report on
/// the arm64 console), and an ext4 disk (GPT) of it, UUID number `n` ([`uuid`]: each test its
/// own), once `change` has run on the copy.
fn root_disk(s: &Setup, name: &str, n: u32, change: impl FnOnce(&Path)) -> (Disk, String) {
    let tree = s.t.join(format!("tree-{name}"));
    sh(&format!("cp -a {} {}", s.root.display(), tree.display()));
    finish_base_on(&tree, AARCH64_CONSOLE);
    change(&tree);
    let f = Fs { kind: "ext4", uuid: uuid(n), subvol: false };
    let fstab = format!("UUID={} / ext4 defaults 0 1\n", f.uuid);
    let disks = make(&s.t, name, true, Bus::VirtioBlk, &f, &tree, Some(&fstab));
    sh(&format!("rm -rf {}", tree.display()));
    (disks.into_iter().next().expect("one disk"), f.uuid)
}

/// An arm64 UKI, its stub chosen by the root's architecture, started by AAVMF from
/// \EFI\BOOT\BOOTAA64.EFI on a FAT ESP: the kernel's command line is the UKI's (its word is
/// checked in the root), the root found by its UUID. Its device trees: the machine's own,
/// renamed three ways (the kernel's "Machine model: " line says which it booted on), as `.dtb`
/// and two `.dtbauto`, with a `.hwids` that gives this machine's CHID (from the SMBIOS
/// manufacturer and product QEMU is told) the compatible of the second `.dtbauto`. AAVMF gives
/// no device tree of its own, so systemd-stub 257 chooses by `.hwids` (the first boot goes on to
/// the running root, the others end at the kernel's command line):
/// - with that SMBIOS, the second `.dtbauto` (leanrd,uki-dtb-2), not the first nor `.dtb`;
/// - with QEMU's own SMBIOS (another machine), no `.dtbauto`: `.dtb` (leanrd,uki-dtb-1);
/// - with a device-tree add-on (`leanrd addon --devicetree`) in the UKI's .extra.d, the add-on's
///   (leanrd,uki-dtb-4), over the `.dtbauto` chosen.
fn uki_aavmf(s: &Setup) {
    if !AAVMF.iter().all(|p| Path::new(p).exists()) || !have("mcopy") || !have("mkfs.vfat") || !have("openssl") {
        skip::<()>(&format!("needs {AAVMF:?} (apt install qemu-efi-aarch64), mtools, dosfstools and openssl"));
        return;
    }
    let (disk, uuid) = root_disk(s, "uki", 60, |_| {});
    let efi = s.t.join("arm64.efi");
    let cmdline = format!("console={AARCH64_CONSOLE} panic=-1 root=UUID={uuid} leanrd.uki=arm64");
    let dtb = |n: u32| virt_dtb(s, &format!("leanrd,uki-dtb-{n}"));
    let (manufacturer, product) = ("leanrd", "aavmf-dtbauto");
    let hwids = s.t.join("hwids");
    fs::create_dir_all(&hwids).unwrap();
    let board = serde_json::json!({
        "type": "devicetree",
        "name": "leanrd's AAVMF test machine",
        "compatible": "leanrd,uki-dtb-2",
        "hwids": [chid_manufacturer_product(manufacturer, product)],
    });
    fs::write(hwids.join("board.json"), board.to_string()).unwrap();
    let o = leanrd()
        .args(["build", "--universal", "-k", &s.kver, "--sysroot"])
        .arg(&s.root)
        .env_remove("LEANRD_INIT")
        .args(["--uki", "--cmdline", &cmdline, "--devicetree"])
        .arg(dtb(1))
        .arg("--devicetree-auto")
        .arg(dtb(3))
        .arg("--devicetree-auto")
        .arg(dtb(2))
        .arg("--hwids")
        .arg(&hwids)
        .arg("-o")
        .arg(&efi)
        .output()
        .unwrap();
    assert!(o.status.success(), "leanrd build --uki for arm64: {}", String::from_utf8_lossy(&o.stderr));
    // This machine's objdump reads x86 PE images only: leanrd's reader says what it is.
    let bytes = fs::read(&efi).unwrap();
    assert_eq!(leanrd_archive::uki::pe_arch(&bytes), Some("aarch64"), "not an arm64 PE image");
    let names: Vec<String> = leanrd_archive::uki::sections(&bytes).into_iter().map(|x| x.name).collect();
    for want in [".dtb", ".dtbauto", ".hwids", ".initrd", ".linux"] {
        assert!(names.iter().any(|n| n == want), "no {want} section: {names:?}");
    }
    let shown = String::from_utf8(ok(leanrd().arg("inspect").arg(&efi))).unwrap();
    for want in
        ["compatible \"leanrd,uki-dtb-3\"", "\"leanrd's AAVMF test machine\" -> compatible \"leanrd,uki-dtb-2\""]
    {
        assert!(shown.contains(want), "inspect shows no {want}:\n{shown}");
    }
    let esp_plain = esp(&s.t, "arm64", &efi, "BOOTAA64.EFI");
    // The same UKI with a device-tree add-on beside it (the root's addonaa64.efi.stub).
    let addon = s.t.join("dt.addon.efi");
    let o = leanrd()
        .arg("addon")
        .arg("--sysroot")
        .arg(&s.root)
        .arg("--devicetree")
        .arg(dtb(4))
        .arg("-o")
        .arg(&addon)
        .output()
        .unwrap();
    assert!(o.status.success(), "leanrd addon --devicetree: {}", String::from_utf8_lossy(&o.stderr));
    let addon_sections: Vec<String> =
        leanrd_archive::uki::sections(&fs::read(&addon).unwrap()).into_iter().map(|x| x.name).collect();
    assert!(addon_sections.contains(&".dtb".to_string()) && !addon_sections.contains(&".cmdline".to_string()));
    let esp_addon = esp(&s.t, "arm64-addon", &efi, "BOOTAA64.EFI");
    sh(&format!(
        "mmd -i {e} ::/EFI/BOOT/BOOTAA64.EFI.extra.d && mcopy -i {e} {a} ::/EFI/BOOT/BOOTAA64.EFI.extra.d/dt.addon.efi",
        e = esp_addon.display(),
        a = addon.display()
    ));
    // `whole`: to the running root; otherwise only as far as the kernel's command line, past
    // the "Machine model:" line (the device tree is all these boots are for).
    let boot = |name: &str, vars: &str, esp: &Path, smbios: Option<String>, model: &str, whole: bool| {
        let mut q = vec!["-drive".to_string(), format!("file={},if=virtio,format=raw,snapshot=on", esp.display())];
        if let Some(v) = smbios {
            q.extend(["-smbios".to_string(), v]);
        }
        q.extend(qemu_args(&[&disk], true));
        let mut b = Boot::new(name, &efi, "", q).expect("leanrd.uki=arm64").expect(&format!("Machine model: {model}"));
        if whole {
            b = b.expect("LEANRD-ROOT /dev/vd");
        } else {
            b.expect.retain(|e| !e.starts_with("LEANRD-"));
            b = b.stop("Kernel command line:");
        }
        // Its own variable store (QEMU's -drive takes no comma in a path).
        b.start = Start::Aavmf(s.t.join(format!("{vars}.fd")));
        b.secs = 900;
        b
    };
    let this_machine = format!("type=1,manufacturer={manufacturer},product={product}");
    let boots = [
        boot(
            "arm64: a UKI under AAVMF, its .dtbauto chosen by .hwids",
            "uki-dtbauto",
            &esp_plain,
            Some(this_machine.clone()),
            "leanrd,uki-dtb-2",
            true,
        ),
        boot(
            "arm64: a UKI under AAVMF on another machine, its .dtb",
            "uki-dtb",
            &esp_plain,
            None,
            "leanrd,uki-dtb-1",
            false,
        ),
        // The add-on's device tree goes in over the UKI's (here the .dtbauto the stub chose).
        boot(
            "arm64: a UKI under AAVMF with a device-tree add-on",
            "uki-addon",
            &esp_addon,
            Some(this_machine),
            "leanrd,uki-dtb-4",
            false,
        ),
    ];
    let failed = run(&s.kernel, &boots);
    assert!(failed.is_empty(), "{failed:?}");
}

/// The CHID systemd-stub computes from the SMBIOS manufacturer and product name (Microsoft's
/// HardwareID-09, as `fwupdtool hwids` shows it): a name-based UUID (version 5, SHA-1) in the
/// namespace 70ffd812-4c7f-4c7d-0000-000000000000 of "MANUFACTURER&PRODUCT" in UTF-16LE.
/// Computed here with OpenSSL, apart from leanrd (which takes CHIDs, and computes none).
fn chid_manufacturer_product(manufacturer: &str, product: &str) -> String {
    let mut input = vec![0x70, 0xff, 0xd8, 0x12, 0x4c, 0x7f, 0x4c, 0x7d, 0, 0, 0, 0, 0, 0, 0, 0];
    for u in format!("{manufacturer}&{product}").encode_utf16() {
        input.extend_from_slice(&u.to_le_bytes());
    }
    let o = leanrd_testkit::run_stdin(Command::new("openssl").args(["dgst", "-sha1", "-r"]), &input);
    assert!(o.status.success(), "openssl dgst -sha1: {}", String::from_utf8_lossy(&o.stderr));
    let hex = String::from_utf8(o.stdout).unwrap();
    let mut b: Vec<u8> = (0..16).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// The machine's own device tree with its model and root compatible renamed to `name` (16
/// characters, as QEMU's "linux,dummy-virt"), for the UKI's device-tree sections: AAVMF gives
/// the kernel ACPI and no device tree ("EFI stub: Generating empty DTB"), so the kernel's
/// "Machine model: " line shows that the stub installed the UKI's, which one, and that it
/// booted on it. Dumped once from the machine as it boots (its firmware loaded: QEMU then
/// leaves out the PL061 GPIO for ACPI's power button, and a tree that has it stops the kernel
/// on a bus error).
fn virt_dtb(s: &Setup, name: &str) -> PathBuf {
    assert_eq!(name.len(), 16, "{name}: renamed in place, the same length as linux,dummy-virt");
    let dumped = s.t.join("virt.dtb");
    if !dumped.exists() {
        let vars = s.t.join("dtb-vars.fd");
        let mut c = aavmf_command(&vars, &[], 60);
        // The board's own arguments again, with dumpdtb (the later -M wins).
        c.args(["-M", &format!("virt,dumpdtb={}", dumped.display())]);
        let o = c.output().unwrap();
        assert!(o.status.success(), "qemu-system-aarch64 dumpdtb: {}", String::from_utf8_lossy(&o.stderr));
    }
    let mut blob = fs::read(&dumped).unwrap();
    // Packed (as `dtc` or fdt_pack would): QEMU dumps it in a 1 MiB buffer, its header saying
    // so, and the kernel printed nothing on the 1 MiB blob, from the UKI or from QEMU's `-dtb`;
    // the blocks end at 7.5 KiB. The header: off_dt_struct at 8, off_dt_strings at 12, their sizes at 36 and 32.
    let be32 = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
    let end = (be32(&blob, 8) + be32(&blob, 36)).max(be32(&blob, 12) + be32(&blob, 32));
    blob.truncate(end as usize);
    blob[4..8].copy_from_slice(&end.to_be_bytes());
    // In place and of the same length (no dtc here): the model and the root's compatible
    // string, which nothing on arm64 matches drivers against.
    let from = b"linux,dummy-virt";
    let at: Vec<usize> = blob.windows(from.len()).enumerate().filter(|(_, w)| w == from).map(|(i, _)| i).collect();
    assert!(!at.is_empty(), "QEMU's virt device tree has no {:?}", String::from_utf8_lossy(from));
    for i in at {
        blob[i..i + name.len()].copy_from_slice(name.as_bytes());
    }
    let out = s.t.join(format!("{}.dtb", name.replace(',', "-")));
    fs::write(&out, blob).unwrap();
    out
}

/// The arm64 Debian package on the arm64 root, as a user installs it: `dpkg -i` (its maintainer
/// scripts run under qemu-user) diverts update-initramfs to leanrd's; the kernel package's
/// hooks (`dpkg-reconfigure`, as on a kernel install) then write /boot/initrd.img-KVER with the
/// package's aarch64 leanrd, and that image boots the root to running. `dpkg -r` gives
/// update-initramfs back to initramfs-tools.
fn debian_package(s: &Setup) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if !Command::new(&cargo).args(["deb", "--version"]).output().is_ok_and(|o| o.status.success()) || !have("readelf") {
        skip::<()>("needs cargo-deb (cargo install cargo-deb) and readelf (binutils)");
        return;
    }
    let deb = arm64_package();
    let kver = s.kver.clone();
    let img = s.t.join("deb.img");
    let (disk, uuid) = root_disk(s, "deb", 61, |tree| {
        fs::copy(&deb, tree.join("tmp/leanrd.deb")).unwrap();
        install_deb(tree, None, "/tmp/leanrd.deb");
        fs::remove_file(tree.join("tmp/leanrd.deb")).unwrap();
        let (done, log) = in_chroot(tree, None, &format!("dpkg-reconfigure -f noninteractive linux-image-{kver} 2>&1"));
        assert!(done, "dpkg-reconfigure linux-image-{kver}: {log}");
        assert!(log.contains(&format!("/boot/initrd.img-{kver} in ")), "no leanrd build summary:\n{log}");
        eprintln!("{}", log.lines().filter(|l| l.contains("leanrd")).collect::<Vec<_>>().join("\n"));
        let built = tree.join(format!("boot/initrd.img-{kver}"));
        assert_eq!(made_by(&built), "leanrd", "{log}");
        fs::copy(&built, &img).unwrap();
        // Removed: update-initramfs is initramfs-tools' again (not run: mkinitramfs takes
        // minutes under qemu-user; --test boot_deb runs it on amd64).
        let (done, log) = in_chroot(tree, None, "dpkg -r leanrd");
        assert!(done, "dpkg -r leanrd: {log}");
        let back = fs::read_to_string(tree.join("usr/sbin/update-initramfs")).unwrap();
        assert!(!back.contains("leanrd") && back.contains("initramfs"), "update-initramfs was not given back");
    });
    let mut b = Boot::new("arm64: the package's image", &img, &format!("root=UUID={uuid}"), qemu_args(&[&disk], true));
    b.start = Start::KernelAarch64;
    b.secs = 900;
    let failed = run(&s.kernel, &[b]);
    assert!(failed.is_empty(), "{failed:?}");
}

/// The arm64 Debian package (tools/make-deb --arm64), checked: its architecture, its files
/// of that architecture, and the C library it depends on new enough for every GLIBC symbol
/// version its leanrd needs (cargo-deb cannot work that out for a foreign binary: the
/// manifest names it; weak symbols, which std looks up at run time, do not count).
fn arm64_package() -> PathBuf {
    let o = Command::new(workspace().join("tools/make-deb")).arg("--arm64").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tools/make-deb --arm64: {out}");
    let deb =
        PathBuf::from(out.lines().rev().find(|l| l.trim_end().ends_with(".deb")).expect("the .deb's path").trim());
    let field = |f: &str| String::from_utf8(ok(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(f))).unwrap();
    assert_eq!(field("Architecture").trim(), "arm64");
    let depends = field("Depends");
    let version = |v: &str| v.split('.').map(|n| n.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    let libc = depends
        .split(',')
        .find_map(|d| d.trim().strip_prefix("libc6 (>= ")?.strip_suffix(')').map(version))
        .unwrap_or_else(|| panic!("no libc6 version in Depends: {depends}"));
    let t = TempDir::new("arm64-deb");
    let x = t.join("x");
    sh(&format!("dpkg-deb -x {} {}", deb.display(), x.display()));
    for f in ["usr/bin/leanrd", "usr/lib/leanrd/leanrd-init"] {
        let head = fs::read(x.join(f)).unwrap();
        assert_eq!(u16::from_le_bytes([head[18], head[19]]), 183, "{f}: not an aarch64 ELF (EM_AARCH64)");
    }
    let syms = String::from_utf8(ok(Command::new("readelf").args(["-W", "--dyn-syms"]).arg(x.join("usr/bin/leanrd"))))
        .unwrap();
    let needed = syms
        .lines()
        .filter(|l| !l.split_whitespace().any(|w| w == "WEAK"))
        .filter_map(|l| l.split("@GLIBC_").nth(1))
        .map(|v| version(v.split_whitespace().next().unwrap_or(v)))
        .max()
        .expect("leanrd needs some GLIBC symbol");
    assert!(needed <= libc, "the package depends on libc6 >= {libc:?}, its leanrd needs GLIBC {needed:?}");
    eprintln!("{}: arm64, Depends: {}", deb.display(), depends.trim());
    deb
}

/// The x86_64 /init for the arm64 kernel: the boot proof names the mismatch and no image is
/// written.
fn x86_init_refused(s: &Setup) {
    let Some(x86) = init_binary() else { return };
    let out = s.t.join("x86-init.img");
    let o = leanrd()
        .args(["build", "--universal", "-k", &s.kver, "--sysroot"])
        .arg(&s.root)
        .arg("--init")
        .arg(&x86)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && !out.exists(), "an x86_64 /init for an arm64 kernel was written:\n{err}");
    assert!(err.contains("is built for x86-64, and the kernel (its modules) for aarch64"), "{err}");
}

fn main() -> std::process::ExitCode {
    let trials = cases(
        vec![("x86_init_refused", x86_init_refused), ("uki_aavmf", uki_aavmf), ("debian_package", debian_package)],
        setup,
    );
    run_tests(trials, cores())
}
