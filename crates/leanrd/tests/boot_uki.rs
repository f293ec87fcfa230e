//! Unified Kernel Images (`leanrd build --uki`) started by UEFI firmware: OVMF under QEMU TCG
//! finds each UKI as \EFI\BOOT\BOOTX64.EFI on a FAT ESP and starts it; the kernel's command
//! line must come from the UKI's .cmdline (a word from it is checked inside the booted root).
//! Universal with zstd, universal uncompressed and reflinked (built on loop XFS from a sysroot
//! there: ≥ 90 % of the .initrd section and the kernel shared with their sources), host-only
//! (a virtio fixture) and a signed one (Debian 13's, signed by its systemd-sbsign; sbverify
//! accepts it). `objdump -h` shows the sections, `leanrd ls`/`inspect` read the initramfs
//! inside. Each UKI is a test of its own. The signed one boots with Secure Boot enforced (keys
//! of the test's own enrolled by virt-fw-vars) from a GPT disk systemd-repart made, with no
//! root= and `dm-verity.require_signatures=1`: /init takes the verity root on the disk
//! LoaderDevicePartUUID names, not the other disk's, and the kernel accepts its root hash's
//! signature by the db key (issue 55). The firmware refuses it unsigned, signed by
//! another key (with sbsign), or changed after signing. Debian 13's stub (systemd 257) takes the microcode in a .ucode section, and
//! starts a multi-profile UKI's profile 0 by default and profile 1 from the UEFI shell with
//! `@1` (PCR 11 as systemd-measure predicts it for that profile, each profile's .pcrsig; two
//! `.dtbauto` trees it does not choose on this machine, the signature for none among them).
//!
//! Needs root, qemu, ovmf, systemd-boot-efi (the stub), mtools, dosfstools, xfsprogs,
//! sbsigntool, openssl, binutils, busybox-static and virt-fw-vars (PyPI's virt-firmware).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const MARK: &str = "LEANRD-UKI-ROOT-OK";
/// The root's line with PCR 11 (sha256) as it found it.
const PCR11: &str = "LEANRD-PCR11";
/// systemd's userspace measurement log, as /init leaves it in /run, and the marks the root
/// prints it between.
const MLOG: &str = "/run/log/systemd/tpm2-measure.log";
const MLOG_MARK: &str = "LEANRD-MEASURE-LOG";
const STUB: &str = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub";

/// A FAT ESP holding `efi` as the removable-media boot path.
fn esp(t: &TempDir, name: &str, efi: &Path) -> PathBuf {
    common::esp(t, name, efi, "BOOTX64.EFI")
}

/// Boot an ESP with OVMF and the root disk; the console.
fn boot(t: &TempDir, name: &str, esp: &Path, root: &Path) -> String {
    boot_with(t, name, esp, root, &[])
}

/// [`boot`] with more QEMU arguments (a TPM).
fn boot_with(t: &TempDir, name: &str, esp: &Path, root: &Path, extra: &[String]) -> String {
    let vars = t.join(format!("{name}.vars"));
    fs::copy(OVMF_VARS, &vars).unwrap();
    let _slot = vm_slot();
    let esp = format!("file={},format=raw,if=virtio", esp.display());
    let root = format!("file={},format=raw,if=virtio,snapshot=on", root.display());
    let mut args = vec!["-m", "1024", "-drive", &esp, "-drive", &root];
    args.extend(extra.iter().map(String::as_str));
    let o = firmware_command(&vars, &args, 300).stdin(std::process::Stdio::null()).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A 1×1 24-bit BMP (file header, BITMAPINFOHEADER, one padded pixel row).
fn bmp_1x1() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"BM");
    b.extend_from_slice(&58u32.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&54u32.to_le_bytes());
    b.extend_from_slice(&40u32.to_le_bytes());
    b.extend_from_slice(&1i32.to_le_bytes());
    b.extend_from_slice(&1i32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&24u16.to_le_bytes());
    b.extend_from_slice(&[0; 24]);
    b.extend_from_slice(&[0x20, 0x40, 0x80, 0]);
    b
}

fn cmdline(word: &str) -> String {
    format!("console=ttyS0 root=/dev/vdb panic=-1 leanrd.uki={word}")
}

/// The signed UKI's command line: no root= (the root by partition type, DPS), signatures
/// required of dm-verity.
const SIGNED_CMDLINE: &str = "console=ttyS0 panic=-1 leanrd.uki=signed dm-verity.require_signatures=1";
/// The lines the verity roots print, before [`MARK`]'s.
const DPS: &str = "LEANRD-DPS";

/// A GPT disk made by Debian 13's systemd-repart (run with its own loader) from repart.d
/// definitions: a busybox ext4 root (`Verity=data`), its hash tree (`root-verity`) and the
/// signature partition (`root-verity-sig`: the root hash signed with the setup's db key, the
/// JSON systemd writes), the partitions' UUIDs the root hash's halves; a /usr the same way
/// (`usr`, `usr-verity`, `usr-verity-sig`, a file naming the disk); with `esp`, first an
/// ESP holding it as \EFI\BOOT\BOOTX64.EFI. The root prints which disk it is (`name`), how
/// / and /usr are mounted, whether dm-verity requires signatures and /init's verity lines from its log,
/// then [`MARK`] with the command line. The disk, its root hash and its ESP's PARTUUID.
fn repart_disk(s: &Setup, trixie: &Path, name: &str, esp: Option<&Path>) -> (PathBuf, String, Option<String>) {
    let t = &s.t;
    let tree = t.join(format!("{name}-tree"));
    let _ = fs::remove_dir_all(&tree);
    sh(&format!("cp -a {} {}", t.join("rootfs").display(), tree.display()));
    fs::create_dir_all(tree.join("etc")).unwrap();
    fs::create_dir_all(tree.join("usr")).unwrap();
    fs::write(tree.join("etc/leanrd-disk"), format!("{name}\n")).unwrap();
    // Its /usr: a partition of its own, found by type on the root's disk (its verity by the
    // usr-verity-sig partition's hash), a file there naming the disk.
    let usr = t.join(format!("{name}-usr"));
    let _ = fs::remove_dir_all(&usr);
    fs::create_dir_all(&usr).unwrap();
    fs::write(usr.join("leanrd-usr"), format!("{name}\n")).unwrap();
    fs::write(
        tree.join("sbin/init"),
        format!(
            "#!/bin/sh\nb=/bin/busybox\n$b echo {DPS}-DISK $($b cat /etc/leanrd-disk)\n\
             $b echo {DPS}-ROOT $($b grep ' / ' /proc/mounts) dm-0=$($b cat /sys/block/dm-0/dm/name) \
             ro=$($b cat /sys/block/dm-0/ro)\n\
             $b echo {DPS}-SIGNATURES require_signatures=$($b cat /sys/module/dm_verity/parameters/require_signatures)\n\
             $b echo {DPS}-USR $($b grep ' /usr ' /proc/mounts) file=$($b cat /usr/leanrd-usr)\n\
             $b grep -e verity -e 'root is ' -e 'partition type' /run/initramfs/leanrd.log | $b sed 's/^/{DPS}-LOG /'\n\
             $b echo {MARK} $($b cat /proc/cmdline)\n$b poweroff -f\n"
        ),
    )
    .unwrap();
    let defs = t.join(format!("{name}.repart.d"));
    let _ = fs::remove_dir_all(&defs);
    fs::create_dir_all(&defs).unwrap();
    if let Some(efi) = esp {
        let dir = t.join(format!("{name}-esp"));
        fs::create_dir_all(dir.join("EFI/BOOT")).unwrap();
        fs::copy(efi, dir.join("EFI/BOOT/BOOTX64.EFI")).unwrap();
        let mb = fs::metadata(efi).unwrap().len() / (1 << 20) + 100;
        fs::write(
            defs.join("00-esp.conf"),
            format!("[Partition]\nType=esp\nFormat=vfat\nCopyFiles={}:/\nSizeMinBytes={mb}M\n", dir.display()),
        )
        .unwrap();
    }
    fs::write(
        defs.join("10-root.conf"),
        format!(
            "[Partition]\nType=root\nFormat=ext4\nCopyFiles={}:/\nVerity=data\nVerityMatchKey=root\nMinimize=guess\n",
            tree.display()
        ),
    )
    .unwrap();
    fs::write(
        defs.join("20-root-verity.conf"),
        "[Partition]\nType=root-verity\nVerity=hash\nVerityMatchKey=root\nMinimize=best\n",
    )
    .unwrap();
    fs::write(
        defs.join("30-root-verity-sig.conf"),
        "[Partition]\nType=root-verity-sig\nVerity=signature\nVerityMatchKey=root\n",
    )
    .unwrap();
    fs::write(
        defs.join("40-usr.conf"),
        format!(
            "[Partition]\nType=usr\nFormat=ext4\nCopyFiles={}:/\nVerity=data\nVerityMatchKey=usr\nMinimize=guess\n",
            usr.display()
        ),
    )
    .unwrap();
    fs::write(
        defs.join("50-usr-verity.conf"),
        "[Partition]\nType=usr-verity\nVerity=hash\nVerityMatchKey=usr\nMinimize=best\n",
    )
    .unwrap();
    fs::write(
        defs.join("60-usr-verity-sig.conf"),
        "[Partition]\nType=usr-verity-sig\nVerity=signature\nVerityMatchKey=usr\n",
    )
    .unwrap();
    let disk = t.join(format!("{name}.disk"));
    let _ = fs::remove_file(&disk);
    let mut c = leanrd_gen::sysroot_command(trixie, "/usr/bin/systemd-repart").unwrap();
    // 512-byte sectors: the disk QEMU gives the firmware (repart's default for a file is 4096).
    let o = c
        .args(["--empty=create", "--size=auto", "--dry-run=no", "--offline=yes", "--sector-size=512", "--json=short"])
        .arg(format!("--definitions={}", defs.display()))
        .arg(format!("--private-key={}", s.key.display()))
        .arg(format!("--certificate={}", s.cert.display()))
        .arg(&disk)
        .output()
        .unwrap();
    assert!(o.status.success(), "systemd-repart ({name}): {}", String::from_utf8_lossy(&o.stderr));
    let parts: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let part = |ty: &str| parts.iter().find(|p| p["type"] == ty).unwrap_or_else(|| panic!("no {ty}: {parts:?}"));
    let hash = part("root-x86-64")["roothash"].as_str().unwrap().to_string();
    let uuid = |p: &serde_json::Value| p["uuid"].as_str().unwrap().replace('-', "");
    assert_eq!(
        (uuid(part("root-x86-64")), uuid(part("root-x86-64-verity"))),
        (hash[..32].to_string(), hash[32..].to_string()),
        "the partitions' UUIDs are not the root hash's halves"
    );
    // The signature partition: the JSON at its start names the hash and the db certificate.
    let sig = part("root-x86-64-verity-sig");
    let bytes = fs::read(&disk).unwrap();
    let at = sig["offset"].as_u64().unwrap() as usize;
    let json = &bytes[at..at + sig["raw_size"].as_u64().unwrap() as usize];
    let json: serde_json::Value = serde_json::from_slice(&json[..json.iter().position(|&b| b == 0).unwrap()]).unwrap();
    let fp =
        ok(Command::new("sh").arg("-c").arg(format!("openssl x509 -outform der -in {} | sha256sum", s.cert.display())));
    let fp = String::from_utf8_lossy(&fp).split_whitespace().next().unwrap_or_default().to_string();
    assert_eq!(
        (json["rootHash"].as_str(), json["certificateFingerprint"].as_str()),
        (Some(hash.as_str()), Some(fp.as_str())),
        "{json}"
    );
    let esp = parts.iter().find(|p| p["type"] == "esp").map(|p| p["uuid"].as_str().unwrap().to_string());
    (disk, hash, esp)
}

/// What the UKIs share, made once per process by the first test.
struct Setup {
    t: TempDir,
    kernel: PathBuf,
    kver: String,
    /// The root: prints the marker and the command line the kernel got.
    root: PathBuf,
    splash: PathBuf,
    key: PathBuf,
    cert: PathBuf,
}

fn setup() -> Option<&'static Setup> {
    static S: std::sync::OnceLock<Result<Option<Setup>, String>> = std::sync::OnceLock::new();
    once(&S, || {
        let need = ["qemu-system-x86_64", "mkfs.vfat", "mcopy", "mkfs.xfs", "sbsign", "sbverify", "openssl", "objdump"];
        if !is_root()
            || need.iter().any(|t| !have(t))
            || ![STUB, OVMF_CODE, "/bin/busybox"].iter().all(|p| Path::new(p).exists())
        {
            return skip(&format!("needs root, {need:?}, {STUB}, {OVMF_CODE} and busybox-static"));
        }
        let kernel = kernel()?;
        let kver = kver_of(&kernel);
        let t = TempDir::new("uki");
        let r = busybox_root(&t, &["dev", "proc", "sys", "run"]);
        fs::write(
            r.join("sbin/init"),
            format!(
                "#!/bin/sh\n/bin/busybox mount -t proc proc /proc\n/bin/busybox mount -t sysfs sys /sys\n\
                 /bin/busybox echo {MARK} $(/bin/busybox cat /proc/cmdline)\n\
                 /bin/busybox echo {PCR11} $(/bin/busybox cat /sys/class/tpm/tpm0/pcr-sha256/11 2>/dev/null)\n\
                 if [ -e {MLOG} ]; then /bin/busybox echo {MLOG_MARK}-BEGIN; /bin/busybox tr -d '\\036' < {MLOG}; \
                 /bin/busybox echo {MLOG_MARK}-END; fi\n\
                 /bin/busybox poweroff -f\n"
            ),
        )
        .unwrap();
        sh(&format!("chmod 755 {}", r.join("sbin/init").display()));
        let root = t.join("root.ext4");
        sh(&format!("truncate -s 64M {d} && mkfs.ext4 -q -d {r} {d}", d = root.display(), r = r.display()));
        let splash = t.join("splash.bmp");
        fs::write(&splash, bmp_1x1()).unwrap();
        let (key, cert) = (t.join("db.key"), t.join("db.crt"));
        sh(&format!(
            "openssl req -new -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=leanrd-test -keyout {} -out {} 2>/dev/null",
            key.display(),
            cert.display()
        ));
        Some(Setup { t, kernel, kver, root, splash, key, cert })
    })
    .as_ref()
}

fn build(s: &Setup, extra: &[&str], out: &Path) -> String {
    let o = leanrd().args(["build", "-k", &s.kver, "--uki", "-o"]).arg(out).args(extra).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{}: {err}", out.display());
    err
}

/// Boot a UKI from an ESP under OVMF: it must reach the root with its own command line.
fn boots(s: &Setup, word: &str, efi: &Path) {
    let e = esp(&s.t, word, efi);
    let log = boot(&s.t, word, &e, &s.root);
    let line = log.lines().find(|l| l.contains(MARK));
    assert!(
        line.is_some_and(|l| l.contains(&format!("leanrd.uki={word}"))),
        "{word}: the UKI did not boot to the root with its own command line:\n{}",
        &log[log.floor_char_boundary(log.len().saturating_sub(6000))..]
    );
    eprintln!("{word}: {}", line.unwrap_or(""));
}

/// Universal, zstd, with a splash: every section; `leanrd ls` reads it; a signed stub gives
/// the same UKI (its signature, which would not cover the new sections, is dropped).
fn uki_zstd(s: &Setup) {
    let zstd = s.t.join("universal-zstd.efi");
    let splash = s.splash.to_str().unwrap();
    build(s, &["--universal", "--cmdline", &cmdline("zstd"), "--splash", splash], &zstd);
    let sections = String::from_utf8(ok(Command::new("objdump").arg("-h").arg(&zstd))).unwrap();
    for sec in [".osrel", ".cmdline", ".uname", ".splash", ".initrd", ".linux", ".sbat", ".text"] {
        assert!(sections.contains(&format!(" {sec} ")), "no {sec} section:\n{sections}");
    }
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&zstd))).unwrap();
    assert!(ls.lines().any(|l| l == "init"), "leanrd ls does not read the UKI:\n{ls}");
    let signed_stub = s.t.join("signed-stub.efi");
    let o = Command::new("sbsign")
        .args(["--key", s.key.to_str().unwrap(), "--cert", s.cert.to_str().unwrap(), "--output"])
        .arg(&signed_stub)
        .arg(STUB)
        .output()
        .unwrap();
    assert!(o.status.success(), "sbsign the stub: {}", String::from_utf8_lossy(&o.stderr));
    let from_signed = s.t.join("from-signed-stub.efi");
    let stub = signed_stub.to_str().unwrap();
    build(s, &["--universal", "--cmdline", &cmdline("zstd"), "--splash", splash, "--stub", stub], &from_signed);
    assert_eq!(fs::read(&from_signed).unwrap(), fs::read(&zstd).unwrap(), "a signed stub gives another UKI");
    boots(s, "zstd", &zstd);
}

/// Secure Boot enforced: the test's own PK, KEK and db (the setup's key), enrolled by
/// virt-fw-vars into a copy of OVMF's variable store with Secure Boot on, and OVMF's secboot
/// build. The UKI signed with the db key (sbverify accepts it) boots to the root, the kernel
/// locked down; unsigned, changed after signing (a byte of its .initrd), or signed by a key
/// not in db, the firmware refuses it: "Access Denied" on its console, and no root.
///
/// The signed one (Debian 13's kernel) boots from the ESP of a disk Debian 13's systemd-repart
/// made ([`repart_disk`]), after another disk with a verity root of its own, with no root= and
/// `dm-verity.require_signatures=1` in its signed command line: systemd-stub sets
/// LoaderDevicePartUUID to its ESP's PARTUUID, /init takes the root partition on that disk by
/// its type (DPS) and the root hash from the signature partition there, and the kernel checks
/// the signature against the db certificate it loaded into its platform keyring ("Loaded
/// X.509 cert 'leanrd-test..." from UEFI:db). The root says it is the booted disk's,
/// /dev/mapper/root read-only, signatures required, and /init's log says the kernel accepted
/// the signature. (The same disk signed by a key not in db stops at /init's diagnosis, "the
/// kernel refused the root hash's signature" with -ENOKEY; boot_verity boots that refusal.)
fn uki_signed(s: &Setup) {
    if !have("virt-fw-vars") || !Path::new(OVMF_CODE_SECURE).exists() {
        skip::<()>(&format!("needs virt-fw-vars (PyPI's virt-firmware) and {OVMF_CODE_SECURE}"));
        return;
    }
    let t = &s.t;
    let key = |name: &str| {
        let (k, c) = (t.join(format!("{name}.key")), t.join(format!("{name}.crt")));
        sh(&format!(
            "openssl req -new -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=leanrd-test-{name} -keyout {} -out {} 2>/dev/null",
            k.display(),
            c.display()
        ));
        (k, c)
    };
    let ((_, pk), (_, kek), (other_key, other_cert)) = (key("pk"), key("kek"), key("other"));
    let vars = t.join("secure-boot.vars");
    let owner = "6c65616e-7264-7465-7374-000000000001";
    let o = Command::new("virt-fw-vars")
        .args(["--input", OVMF_VARS, "--set-pk", owner])
        .arg(&pk)
        .args(["--add-kek", owner])
        .arg(&kek)
        .args(["--add-db", owner])
        .arg(&s.cert)
        .args(["--sb", "--output"])
        .arg(&vars)
        .output()
        .unwrap();
    assert!(o.status.success(), "virt-fw-vars: {}", String::from_utf8_lossy(&o.stderr));

    // The one that boots: Debian 13's kernel and stub, signed by that system's systemd-sbsign
    // (run with its own loader: this machine's systemd is 252, which has none).
    let Some(trixie) = debian_suite_root("trixie", "") else { return };
    let signed = t.join("universal-signed.efi");
    let o = leanrd()
        .args(["build", "--universal", "--uki", "--cmdline", SIGNED_CMDLINE, "-k"])
        .arg(kver_of(&root_kernel(&trixie)))
        .arg("--sysroot")
        .arg(&trixie)
        .args(["--sign-tool", "systemd-sbsign", "--sign-key"])
        .arg(&s.key)
        .arg("--sign-cert")
        .arg(&s.cert)
        .arg("-o")
        .arg(&signed)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success() && err.contains("signed for Secure Boot by ") && err.contains("/systemd-sbsign"),
        "{err}"
    );
    let v = Command::new("sbverify").arg("--cert").arg(&s.cert).arg(&signed).output().unwrap();
    assert!(v.status.success(), "sbverify of systemd-sbsign's signature: {}", String::from_utf8_lossy(&v.stderr));
    // The one signed by a key not in db: this machine's kernel, and sbsign.
    let other = t.join("signed-by-another-key.efi");
    let sign = ["--sign-tool", "sbsign", "--sign-key", other_key.to_str().unwrap(), "--sign-cert"];
    let said = build(
        s,
        &[&["--universal", "--cmdline", &cmdline("signed")][..], &sign, &[other_cert.to_str().unwrap()]].concat(),
        &other,
    );
    assert!(said.contains("signed for Secure Boot by sbsign"), "{said}");
    // Signed by pesign with the key in db (this machine's kernel): pesign takes keys from an
    // NSS database, which leanrd makes of its own from the PEM files.
    let pesigned = t.join("pesign-signed.efi");
    if have("pesign") && have("pk12util") {
        let sign = ["--sign-tool", "pesign", "--sign-key", s.key.to_str().unwrap(), "--sign-cert"];
        let said = build(
            s,
            &[&["--universal", "--cmdline", &cmdline("pesigned")][..], &sign, &[s.cert.to_str().unwrap()]].concat(),
            &pesigned,
        );
        assert!(said.contains("signed for Secure Boot by pesign"), "{said}");
        let v = Command::new("sbverify").arg("--cert").arg(&s.cert).arg(&pesigned).output().unwrap();
        assert!(v.status.success(), "sbverify of pesign's signature: {}", String::from_utf8_lossy(&v.stderr));
    } else {
        skip::<()>("pesign: needs pesign and pk12util (apt install pesign libnss3-tools)");
    }
    let unsigned = t.join("unsigned.efi");
    build(s, &["--universal", "--cmdline", &cmdline("signed")], &unsigned);
    // A byte in the middle of .initrd, after signing (where it is: build's summary).
    let initrd = err
        .split(".initrd at ")
        .nth(1)
        .and_then(|r| {
            let (at, rest) = r.split_once(" (")?;
            Some((at.parse::<usize>().ok()?, rest.split_once(" B)")?.0.parse::<usize>().ok()?))
        })
        .unwrap_or_else(|| panic!("no .initrd in build's summary: {err}"));
    let changed = t.join("changed-after-signing.efi");
    let mut bytes = fs::read(&signed).unwrap();
    bytes[initrd.0 + initrd.1 / 2] ^= 0x01;
    fs::write(&changed, bytes).unwrap();

    // The disks, in this order: one with another verity root and no ESP (the first the kernel
    // sees), then the booted one, whose ESP holds the signed UKI: both made by systemd-repart,
    // signed by the db key.
    let (other_disk, ..) = repart_disk(s, &trixie, "other-disk", None);
    let (booted_disk, booted_hash, esp_uuid) = repart_disk(s, &trixie, "booted-disk", Some(&signed));
    let esp_uuid = esp_uuid.expect("the booted disk's ESP");
    let secure = |name: &str, disks: &[&Path], stop: &[String]| {
        let vars_copy = t.join(format!("{name}.vars"));
        fs::copy(&vars, &vars_copy).unwrap();
        let drives: Vec<String> =
            disks.iter().map(|d| format!("file={},format=raw,if=virtio,snapshot=on", d.display())).collect();
        let mut args = vec!["-m", "1024"];
        for d in &drives {
            args.extend(["-drive", d.as_str()]);
        }
        let cmd = secure_firmware_command(&vars_copy, &args, 300);
        leanrd_testkit::boot::run_console(cmd, None, stop, &[])
    };
    let firmware = |name: &str, efi: &Path, stop: &[String]| secure(name, &[&esp(t, name, efi), &s.root], stop).console;
    // Signed, under Secure Boot, with no root= and signatures required: systemd-stub names its
    // ESP in LoaderDevicePartUUID, /init takes the verity root on that disk by partition type,
    // its hash from the signature partition, and the kernel checks the signature against the
    // db certificate it loaded into its platform keyring.
    let stop = [MARK.into(), "Access Denied".into(), "leanrd: cannot boot".into()];
    let c = secure("secure-boot-signed", &[&other_disk, &booted_disk], &stop);
    let log = c.console;
    let tail = &log[log.floor_char_boundary(log.len().saturating_sub(6000))..];
    let line = log.lines().find(|l| l.contains(MARK)).unwrap_or("");
    assert!(
        log.contains("Secure Boot is enabled") && line.contains("leanrd.uki=signed"),
        "the signed UKI did not boot to the root under Secure Boot:\n{tail}"
    );
    assert!(log.contains("Kernel is locked down from EFI Secure Boot"), "no lockdown:\n{log}");
    eprintln!("signed, Secure Boot enforced: {line} ({:.1} s)", c.ran.as_secs_f64());
    let said: Vec<&str> = log.lines().filter(|l| l.contains(DPS)).map(str::trim).collect();
    let has = |what: &str| said.iter().any(|l| l.contains(what));
    assert!(
        has(&format!("{DPS}-DISK booted-disk"))
            && has(&format!("{DPS}-ROOT /dev/mapper/root / ext4 ro"))
            && has("dm-0=root ro=1")
            && has("require_signatures=Y")
            && has(&format!("verity root: the kernel accepted the signature of the root hash {booted_hash}"))
            && has(&format!("by partition type on the booted disk /dev/vdb (LoaderDevicePartUUID {esp_uuid})"))
            && has("root is /dev/dm-0")
            && has(&format!("{DPS}-USR /dev/mapper/usr /usr ext4 ro"))
            && has("file=booted-disk"),
        "not the booted disk's verity root, its signature checked by the kernel:\n{}\n{tail}",
        said.join("\n")
    );
    // The db certificate, in the kernel's platform keyring (what it checked the signature with).
    let cert = log.lines().find(|l| l.contains("Loaded X.509 cert 'leanrd-test:")).unwrap_or_default().trim();
    assert!(
        log.contains("integrity: Loading X.509 certificate: UEFI:db") && !cert.is_empty(),
        "the kernel did not load the db certificate:\n{tail}"
    );
    eprintln!("signed: {}\nsigned: {cert}", said.join("\nsigned: "));
    if pesigned.exists() {
        let log = firmware("secure-boot-pesigned", &pesigned, &[MARK.into(), "Access Denied".into()]);
        let line = log.lines().find(|l| l.contains(MARK)).unwrap_or("");
        assert!(
            log.contains("Secure Boot is enabled") && line.contains("leanrd.uki=pesigned"),
            "the UKI pesign signed did not boot to the root under Secure Boot:\n{}",
            &log[log.floor_char_boundary(log.len().saturating_sub(6000))..]
        );
        eprintln!("signed by pesign, Secure Boot enforced: {line}");
    }
    for (name, efi) in
        [("unsigned", &unsigned), ("signed by a key not in db", &other), ("changed after signing", &changed)]
    {
        let slug = name.replace(' ', "-");
        let log = firmware(&slug, efi, &["Access Denied".into(), MARK.into()]);
        let refusal = log.lines().find(|l| l.contains("Access Denied")).map(str::trim);
        assert!(
            refusal.is_some() && !log.contains(MARK),
            "{name}: the firmware did not refuse it:\n{}",
            &log[log.floor_char_boundary(log.len().saturating_sub(6000))..]
        );
        eprintln!("{name}: {}", refusal.unwrap_or_default());
    }
}

/// Universal, uncompressed, on loop XFS from a sysroot there: cloned.
fn uki_reflinked(s: &Setup) {
    let Some(xfs) = LoopFs::new("xfs", "1G") else { return };
    let sr = xfs.path().join("sysroot");
    sh(&format!(
        "mkdir -p {s}/lib/modules {s}/boot {s}/usr/lib/systemd/boot/efi {s}/etc && cp -a /lib/modules/{kver} {s}/lib/modules/ \
         && cp {kernel} {s}/boot/ && cp {STUB} {s}/usr/lib/systemd/boot/efi/ && cp /etc/os-release {s}/etc/",
        s = sr.display(),
        kver = s.kver,
        kernel = s.kernel.display()
    ));
    let none = xfs.path().join("universal-none.efi");
    let sysroot = sr.to_str().unwrap();
    let err = build(
        s,
        &["--universal", "--compress", "none", "--sysroot", sysroot, "--cmdline", &cmdline("reflinked")],
        &none,
    );
    let v: serde_json::Value = serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(&none))).unwrap();
    let u = &v["uki"]["initrd_fiemap"];
    let (shared, total) = (u["shared"].as_u64().unwrap(), v["uki"]["initrd_length"].as_u64().unwrap());
    eprintln!("reflinked UKI: .initrd {shared} of {total} bytes shared; {}", err.lines().last().unwrap_or(""));
    assert!(shared * 10 >= total * 9, "only {shared} of {total} bytes of .initrd shared");
    assert!(!err.contains("kernel 0 B cloned"), "the kernel was copied: {err}");
    assert_eq!(v["aligned_percent"], 100.0, "{v}");
    let copy = s.t.join("universal-none.efi");
    fs::copy(&none, &copy).unwrap();
    boots(s, "reflinked", &copy);
}

/// Host-only (a virtio-blk machine): virtio_blk and ext4 only.
fn uki_hostonly(s: &Setup) {
    let f = virtio_ext4(&s.t);
    let host = s.t.join("host-only.efi");
    build(s, &["--host-root", f.root.to_str().unwrap(), "--cmdline", &cmdline("hostonly")], &host);
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&host))).unwrap();
    assert!(ls.contains("virtio_blk.ko") && !ls.contains("nvme.ko"), "{ls}");
    boots(s, "hostonly", &host);
}

/// A static /init of the test's own that reports the kernel's command line and the early
/// microcode file the kernel unpacked into the initramfs (its size: the blob's), and powers
/// off.
const UCODE_PROBE: &str = r#"
#include <stdio.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <unistd.h>
int main(void) {
    struct stat st;
    char line[4096];
    FILE *f;
    mkdir("/proc", 0555);
    mount("proc", "/proc", "proc", 0, NULL);
    f = fopen("/proc/cmdline", "r");
    if (f && fgets(line, sizeof line, f))
        printf("LEANRD-CMDLINE %s", line);
    const char *p = "/kernel/x86/microcode/GenuineIntel.bin";
    if (stat(p, &st) == 0)
        printf("LEANRD-UCODE %s %lld\n", p, (long long)st.st_size);
    else
        printf("LEANRD-UCODE none\n");
    fflush(stdout);
    sync();
    reboot(RB_POWER_OFF);
    return 0;
}
"#;

/// The early microcode as systemd 256 and later stubs take it: a `.ucode` section, which the
/// stub hands to the kernel before `.initrd`. Debian 13's stub (257, from the trixie root)
/// gets the microcode archive in `.ucode` and none in `.initrd`; Debian 12's (252, no
/// `.ucode`) keeps it first in `.initrd` (`leanrd ls` of that section alone). The 257 UKI
/// boots (the trixie root's 6.12 kernel) to an /init that finds the microcode file the kernel
/// unpacked, of the blob's size, where the kernel's early loader reads it: it came from
/// `.ucode`, since `.initrd` has none. (The 252 layout is an image's early segment in
/// `.initrd`, which the stub hands on as it is: not booted again, for CI's time.) The sysroot
/// is the trixie root (hard links) with a microcode blob of the test's own in
/// /usr/lib/firmware/intel-ucode.
///
/// Add-ons (`leanrd addon`, on trixie's add-on stub) on the 257 stub's ESP: one in
/// /loader/addons/ (for every UKI) and one in BOOTX64.EFI.extra.d/ (for this one) add their
/// words to the command line after the UKI's own, in that order; one made for another kernel
/// (`--uname`) is refused by the stub, and its word is not there.
fn uki_ucode(s: &Setup) {
    if !have("gcc") {
        skip::<()>("needs gcc (a static /init of the test's own)");
        return;
    }
    let Some(trixie) = debian_suite_root("trixie", "") else { return };
    let stub257 = trixie.join("usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    assert!(stub257.is_file(), "{}: the trixie root has no systemd-boot-efi", stub257.display());
    let stub_version = |p: &Path| leanrd_archive::uki::stub_version(&fs::read(p).unwrap());
    assert!(stub_version(&stub257) >= Some(256), "{}: {:?}", stub257.display(), stub_version(&stub257));
    assert!(stub_version(Path::new(STUB)) < Some(256), "{STUB}: {:?}", stub_version(Path::new(STUB)));
    let sysroot = s.t.join("ucode-sysroot");
    sh(&format!("cp -al {} {}", trixie.display(), sysroot.display()));
    let blob = noise(0x5e03, 70_000);
    let ucode_dir = sysroot.join("usr/lib/firmware/intel-ucode");
    fs::create_dir_all(&ucode_dir).unwrap();
    fs::write(ucode_dir.join("06-5e-03"), &blob).unwrap();
    let probe = s.t.join("ucode-probe");
    fs::write(s.t.join("ucode-probe.c"), UCODE_PROBE).unwrap();
    sh(&format!("gcc -static -O2 -o {p} {p}.c", p = probe.display()));
    let kernel = root_kernel(&trixie);
    let kver = kver_of(&kernel);
    let want = format!("LEANRD-UCODE /kernel/x86/microcode/GenuineIntel.bin {}", blob.len());
    for (name, stub, ucode) in [("ucode257", stub257.as_path(), true), ("ucode252", Path::new(STUB), false)] {
        let efi = s.t.join(format!("{name}.efi"));
        // With the stub that reads .ucode (257), a multi-profile UKI: the firmware starts
        // profile 0, which has the base's command line, not profile 1's.
        let profiles: &[&str] =
            if ucode { &["--profile", "ID=main", "--profile", "ID=other CMDLINE='leanrd.uki=other'"] } else { &[] };
        let o = leanrd()
            .args(["build", "--universal", "-k", &kver, "--uki", "--cmdline", &cmdline(name)])
            .args(profiles)
            .arg("--sysroot")
            .arg(&sysroot)
            .arg("--init")
            .arg(&probe)
            .arg("--stub")
            .arg(stub)
            .arg("-o")
            .arg(&efi)
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let bytes = fs::read(&efi).unwrap();
        let secs = leanrd_archive::uki::sections(&bytes);
        assert_eq!(secs.iter().any(|x| x.name == ".ucode"), ucode, "{name}: {secs:?}");
        // The whole initramfs (`leanrd ls` reads .ucode, then .initrd) has the microcode once;
        // .initrd alone has it only where there is no .ucode.
        let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&efi))).unwrap();
        let n = ls.lines().filter(|l| *l == "kernel/x86/microcode/GenuineIntel.bin").count();
        assert_eq!(n, 1, "{name}: leanrd ls:\n{ls}");
        let initrd = secs.iter().find(|x| x.name == ".initrd").unwrap();
        let alone = s.t.join(format!("{name}.initrd"));
        fs::write(&alone, &bytes[initrd.offset as usize..(initrd.offset + initrd.len) as usize]).unwrap();
        let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&alone))).unwrap();
        assert_eq!(ls.contains("kernel/x86/microcode/GenuineIntel.bin"), !ucode, "{name}: .initrd alone:\n{ls}");
        let inspect = String::from_utf8(ok(leanrd().arg("inspect").arg(&efi))).unwrap();
        assert_eq!(inspect.contains("its .ucode section"), ucode, "{name}: {inspect}");
        assert_eq!(inspect.contains("1: ID=other (its own .cmdline)"), ucode, "{name}: {inspect}");
        if !ucode {
            eprintln!("{name}: no .ucode section; the microcode is in .initrd");
            continue;
        }
        let e = esp(&s.t, name, &efi);
        let addon_stub = trixie.join("usr/lib/systemd/boot/efi/addonx64.efi.stub");
        let mut copies = Vec::new();
        for (file, words, uname, dir) in [
            ("global.addon.efi", "leanrd.addon=global", None, "::/loader/addons"),
            ("this.addon.efi", "leanrd.addon=this", Some(kver.as_str()), "::/EFI/BOOT/BOOTX64.EFI.extra.d"),
            ("other.addon.efi", "leanrd.addon=other", Some("6.0.0-other"), "::/EFI/BOOT/BOOTX64.EFI.extra.d"),
        ] {
            let out = s.t.join(file);
            let mut c = leanrd();
            c.args(["addon", "--cmdline", words, "-o"]).arg(&out).arg("--stub").arg(&addon_stub);
            if let Some(k) = uname {
                c.args(["--uname", k]);
            }
            ok(&mut c);
            copies.push(format!("mcopy -i {} {} {dir}/{file}", e.display(), out.display()));
        }
        sh(&format!(
            "mmd -i {e} ::/loader ::/loader/addons ::/EFI/BOOT/BOOTX64.EFI.extra.d && {}",
            copies.join(" && "),
            e = e.display()
        ));
        let vars = s.t.join(format!("{name}.vars"));
        fs::copy(OVMF_VARS, &vars).unwrap();
        let esp_drive = format!("file={},format=raw,if=virtio", e.display());
        let log = {
            let _slot = vm_slot();
            let o = firmware_command(&vars, &["-m", "1024", "-drive", &esp_drive], 300)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let kept = debian::console_path(&format!("uki-{name}"));
        let _ = fs::create_dir_all(kept.parent().unwrap()).and_then(|()| fs::write(&kept, &log));
        assert!(
            log.lines().any(|l| l.trim_end() == want),
            "{name}: the kernel did not unpack the microcode ({want}):\n{}",
            &log[log.floor_char_boundary(log.len().saturating_sub(6000))..]
        );
        let cmd = log.lines().find(|l| l.starts_with("LEANRD-CMDLINE ")).unwrap_or_default().trim_end();
        let own = format!("leanrd.uki={name}");
        let words: Vec<&str> = cmd.split_whitespace().filter(|w| w.starts_with("leanrd.")).collect();
        assert_eq!(
            words,
            [own.as_str(), "leanrd.addon=global", "leanrd.addon=this"],
            "{name}: the command line: {cmd}"
        );
        eprintln!("{name}: the booted /init printed: {want}; {cmd}");
    }
}

/// The sections systemd-stub 257 measures into PCR 11, by systemd-measure's options.
const MEASURED: &[&str] = &[
    ".linux", ".osrel", ".cmdline", ".initrd", ".ucode", ".splash", ".dtb", ".uname", ".sbat", ".pcrpkey", ".profile",
];

/// A multi-profile UKI's profile `n` as the stub starts it: each measured section of the base
/// (every section before the first `.profile`), or the profile's own of that name, with the
/// profile's `.profile`; written to files in `dir`, as systemd-measure's options. `bytes`: the
/// UKI.
fn profile_sections(bytes: &[u8], n: usize, dir: &Path) -> Vec<String> {
    let secs = leanrd_archive::uki::sections(bytes);
    let mut profile = None;
    let mut chosen: Vec<(String, &leanrd_archive::uki::Section)> = Vec::new();
    for sec in &secs {
        if sec.name == ".profile" {
            profile = Some(profile.map_or(0, |p| p + 1));
        }
        if !MEASURED.contains(&sec.name.as_str()) || profile.is_some_and(|p| p != n) {
            continue;
        }
        chosen.retain(|(name, _)| *name != sec.name);
        chosen.push((sec.name.clone(), sec));
    }
    fs::create_dir_all(dir).unwrap();
    chosen
        .into_iter()
        .map(|(name, sec)| {
            let mut data = bytes[sec.offset as usize..].to_vec();
            data.resize(sec.len as usize, 0);
            let f = dir.join(&name[1..]);
            fs::write(&f, data).unwrap();
            format!("--{}={}", &name[1..], f.display())
        })
        .collect()
}

/// PCR 11's boot phases in a multi-profile UKI with signed predictions (Debian 13's stub and
/// kernel): profile 1 (`rescue`, its own command line) is started from the UEFI shell with
/// `@1`; systemd-stub measures the base's sections with profile 1's in their place into PCR
/// 11, then /init extends it with `enter-initrd` and, just before the switch, `leave-initrd`.
/// The root got profile 1's command line, and reads PCR 11 (sha256) from a software TPM: it is
/// what Debian 13's systemd-measure predicts from profile 1's sections for the phases
/// `enter-initrd:leave-initrd`. Each profile's `.pcrsig` is what systemd-measure signs for its
/// own sections in the phase `enter-initrd`: a policy that holds in that profile's initramfs
/// and no longer once the root runs.
fn uki_phases(s: &Setup) {
    if !have("swtpm") {
        skip::<()>("needs swtpm (apt install swtpm)");
        return;
    }
    let Some(trixie) = debian_suite_root("trixie", "") else { return };
    let measure = |args: &[String]| -> serde_json::Value {
        let mut c = leanrd_gen::sysroot_command(&trixie, "/usr/lib/systemd/systemd-measure").unwrap();
        let o = c.args(args).output().unwrap();
        assert!(o.status.success(), "systemd-measure {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let kver = kver_of(&root_kernel(&trixie));
    let (key, public) = (s.t.join("pcr.key"), s.t.join("pcr.pub"));
    sh(&format!(
        "openssl genrsa -out {k} 2048 2>/dev/null && openssl rsa -in {k} -pubout -out {p} 2>/dev/null",
        k = key.display(),
        p = public.display()
    ));
    let efi = s.t.join("phases.efi");
    let rescue = format!("ID=rescue TITLE=Rescue CMDLINE='{} leanrd.debug'", cmdline("phases"));
    // Two device trees the stub may choose by the machine (.dtbauto): on this one (OVMF gives
    // no device tree, and there is no .hwids) it chooses neither and measures neither.
    let mut trees = Vec::new();
    for board in ["leanrd,x86-a", "leanrd,x86-b"] {
        let p = s.t.join(format!("{board}.dtb").replace(',', "-"));
        fs::write(&p, leanrd_testkit::device_tree(&[("compatible", format!("{board}\0").as_bytes())])).unwrap();
        trees.extend([PathBuf::from("--devicetree-auto"), p]);
    }
    let o = leanrd()
        .args(["build", "--universal", "-k", &kver, "--uki", "--cmdline", &cmdline("phases-base")])
        .args(["--profile", "ID=main TITLE=\"Main system\"", "--profile", &rescue])
        .args(&trees)
        .arg("--sysroot")
        .arg(&trixie)
        .arg("--pcr-private-key")
        .arg(&key)
        .arg("--pcr-public-key")
        .arg(&public)
        .arg("-o")
        .arg(&efi)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = fs::read(&efi).unwrap();
    // Each profile's .pcrsig: systemd-measure's signature of its own sections (RSA PKCS#1
    // v1.5 signs the same values the same way), for each .dtbauto the stub may choose and for
    // none: three signatures, among them that of the sections without a .dtbauto.
    let secs = leanrd_archive::uki::sections(&bytes);
    let sigs: Vec<serde_json::Value> = secs
        .iter()
        .filter(|x| x.name == ".pcrsig")
        .map(|x| serde_json::from_slice(&bytes[x.offset as usize..(x.offset + x.len) as usize]).unwrap())
        .collect();
    assert_eq!(sigs.len(), 2, "a .pcrsig per profile: {secs:?}");
    for (n, sig) in sigs.iter().enumerate() {
        let mut args = profile_sections(&bytes, n, &s.t.join(format!("phases-profile{n}")));
        let keys = [format!("--private-key={}", key.display()), format!("--public-key={}", public.display())];
        args.splice(
            0..0,
            ["sign".to_string(), "--bank=sha256".into(), "--phase=enter-initrd".into(), "--json=short".into()],
        );
        args.extend(keys);
        let none = measure(&args);
        let signed = sig["sha256"].as_array().unwrap_or_else(|| panic!("profile {n}'s .pcrsig: {sig}"));
        assert_eq!(signed.len(), 3, "profile {n}'s .pcrsig: a signature for each .dtbauto and none: {sig}");
        assert!(signed.contains(&none["sha256"][0]), "profile {n}'s .pcrsig lacks the no-.dtbauto one: {sig}");
    }
    let inspect = String::from_utf8(ok(leanrd().arg("inspect").arg(&efi))).unwrap();
    assert!(inspect.contains("1: ID=rescue TITLE=\"Rescue\" (its own .cmdline .pcrsig)"), "{inspect}");
    // Profile 1, from the UEFI shell (the firmware's last boot option: the ESP has no
    // \EFI\BOOT\BOOTX64.EFI), whose startup.nsh starts the UKI with `@1` as its first argument.
    let e = common::esp(&s.t, "phases", &efi, "UKI.EFI");
    let nsh = s.t.join("startup.nsh");
    fs::write(&nsh, "fs0:\r\n\\EFI\\BOOT\\UKI.EFI @1\r\n").unwrap();
    sh(&format!("mcopy -i {} {} ::/startup.nsh", e.display(), nsh.display()));
    let tpm = Swtpm::start(&s.t.join("phases.tpm"));
    let log = boot_with(&s.t, "phases", &e, &s.root, &tpm.args);
    drop(tpm);
    let kept = debian::console_path("uki-phases");
    let _ = fs::create_dir_all(kept.parent().unwrap()).and_then(|()| fs::write(&kept, &log));
    let tail = &log[log.floor_char_boundary(log.len().saturating_sub(6000))..];
    let line = log.lines().find(|l| l.contains(MARK)).unwrap_or_default();
    assert!(
        line.contains("leanrd.uki=phases ") && !line.contains("phases-base"),
        "not profile 1's command line:\n{tail}"
    );
    let got = log.lines().find_map(|l| l.split(&format!("{PCR11} ")).nth(1)).map(|v| v.trim().to_lowercase());
    let Some(got) = got.filter(|v| v.len() == 64) else { panic!("the root read no PCR 11:\n{tail}") };
    let mut args = profile_sections(&bytes, 1, &s.t.join("phases-profile1"));
    args.splice(0..0, ["calculate".to_string(), "--bank=sha256".into(), "--json=short".into()]);
    let predict = |phase: &str| -> String {
        let mut a = args.clone();
        a.push(format!("--phase={phase}"));
        measure(&a)["sha256"][0]["hash"].as_str().unwrap().to_lowercase()
    };
    let (both, entered, none) = (predict("enter-initrd:leave-initrd"), predict("enter-initrd"), predict(""));
    assert_eq!(
        got, both,
        "PCR 11 is not systemd-measure's enter-initrd:leave-initrd for profile 1 (enter-initrd alone: {entered}, \
         no phase: {none}):\n{tail}"
    );
    assert!(
        log.contains("PCR 11 extended with enter-initrd") && log.contains("PCR 11 extended with leave-initrd"),
        "{tail}"
    );
    eprintln!(
        "phases: profile 1 booted with its own command line; PCR 11 sha256 {got} = systemd-measure --phase=enter-initrd:leave-initrd \
         (no .dtbauto chosen, none measured)"
    );
    // The measurement log explains the two extends: one record each, in order, with the
    // digest the TPM extended (sha256 of the word).
    let records: Vec<serde_json::Value> = log
        .split(&format!("{MLOG_MARK}-BEGIN"))
        .nth(1)
        .and_then(|r| r.split(&format!("{MLOG_MARK}-END")).next())
        .unwrap_or_else(|| panic!("the root found no {MLOG}:\n{tail}"))
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{MLOG}: {e}: {l}")))
        .collect();
    let words: Vec<&str> = records.iter().filter_map(|r| r["content"]["string"].as_str()).collect();
    assert_eq!(words, ["enter-initrd", "leave-initrd"], "{records:?}");
    for (r, word) in records.iter().zip(words) {
        let o = Command::new("sh").arg("-c").arg(format!("printf %s {word} | sha256sum")).output().unwrap();
        let want = String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap_or_default().to_string();
        let sha256 = r["digests"].as_array().into_iter().flatten().find(|d| d["hashAlg"] == "sha256");
        assert_eq!(sha256.and_then(|d| d["digest"].as_str()), Some(want.as_str()), "{r}");
        assert_eq!((r["pcr"].as_u64(), r["content"]["eventType"].as_str()), (Some(11), Some("phase")), "{r}");
    }
    eprintln!("phases: {MLOG} holds enter-initrd and leave-initrd with their digests");
}

fn main() -> std::process::ExitCode {
    let trials = cases(
        vec![
            ("uki_zstd", uki_zstd),
            ("uki_phases", uki_phases),
            ("uki_signed", uki_signed),
            ("uki_reflinked", uki_reflinked),
            ("uki_hostonly", uki_hostonly),
            ("uki_ucode", uki_ucode),
        ],
        setup,
    );
    run_tests(trials, cores())
}
