//! What systemd-stub hands over reaches the booted system (issue 55): one Debian 13 boot under
//! OVMF (QEMU TCG) of a universal UKI leanrd builds from the trixie root, with that root's stub
//! (systemd 257), on an ESP that holds
//! - \EFI\BOOT\BOOTX64.EFI.extra.d\leanrd.esp.cred (this UKI's: /.extra/credentials) and
//!   \loader\credentials\leanrd.global.cred (every UKI's: /.extra/global_credentials), both
//!   made by the root's `systemd-creds encrypt --with-key=null` (no TPM, no Secure Boot: systemd
//!   accepts the null key then);
//! - \EFI\BOOT\BOOTX64.EFI.extra.d\leanrd.sysext.raw (/.extra/sysext), which /init names and does
//!   not hand on (systemd merges the stub's extensions into its initrd alone);
//!
//! and `systemd.set_credential=leanrd.cmdline:...` on the UKI's command line. A unit of the
//! root with `ImportCredential=leanrd.*` prints all three credentials; `systemd-creds --system
//! list` lists them in /run/credentials/@encrypted and @system; the modes (0700, 0400) and the
//! mounts (@system its own file system, both read-only) are checked.
//!
//! Needs root, qemu, ovmf, mtools, dosfstools, mkfs.ext4 and the trixie root
//! (tools/debian-root trixie). `cargo test --release -p leanrd --test boot_stub`.

mod common;

use std::fs;
use std::path::Path;

use common::debian::*;
use common::*;

const ESP_VALUE: &str = "from-the-esp";
const GLOBAL_VALUE: &str = "from-loader-credentials";
const CMDLINE_VALUE: &str = "from-the-command-line";

/// The root's unit: what ImportCredential= gives it, what systemd-creds lists, the directories'
/// modes and mounts, on the serial console (before the report, which powers off).
const UNIT: &str = "[Unit]
Description=leanrd credentials check
Before=leanrd-report.service

[Service]
Type=oneshot
ImportCredential=leanrd.*
ExecStart=/usr/local/sbin/leanrd-creds

[Install]
WantedBy=multi-user.target
";

const SCRIPT: &str = r#"#!/bin/sh
exec >/dev/ttyS0 2>&1
for c in leanrd.esp leanrd.global leanrd.cmdline; do
  if [ -r "$CREDENTIALS_DIRECTORY/$c" ]; then echo "LEANRD-CRED $c=$(cat "$CREDENTIALS_DIRECTORY/$c")"
  else echo "LEANRD-CRED-MISSING $c"; fi
done
systemd-creds --system list --no-pager --no-legend | sed 's/^/LEANRD-CREDS-LIST /'
for p in /run/credentials/@encrypted /run/credentials/@encrypted/leanrd.esp /run/credentials/@system \
         /run/credentials/@system/leanrd.cmdline; do
  echo "LEANRD-CRED-MODE $p $(stat -c '%a %U' "$p")"
done
while read -r src mp fs opts _; do
  case $mp in /run/credentials/@system|/run/credentials/@encrypted) echo "LEANRD-CRED-MOUNT $mp $fs $opts" ;; esac
done </proc/self/mounts
"#;

#[test]
fn the_stubs_credentials_reach_the_booted_system() {
    let Some((kernel, init, kver, t)) = setup_trixie("stub", &["mkfs.vfat", "mcopy", "mkfs.ext4"]) else { return };
    if !Path::new(OVMF_CODE).exists() {
        skip::<()>(&format!("needs {OVMF_CODE}"));
        return;
    }
    let Some(tree) = prepare_trixie(&t, &init, "") else { return };
    fs::write(tree.join("usr/local/sbin/leanrd-creds"), SCRIPT).unwrap();
    sh(&format!("chmod 755 {}", tree.join("usr/local/sbin/leanrd-creds").display()));
    fs::write(tree.join("etc/systemd/system/leanrd-creds.service"), UNIT).unwrap();
    std::os::unix::fs::symlink(
        "/etc/systemd/system/leanrd-creds.service",
        tree.join("etc/systemd/system/multi-user.target.wants/leanrd-creds.service"),
    )
    .unwrap();
    // The credentials, encrypted by Debian 13's own systemd-creds with the null key.
    let cred = |name: &str, value: &str| {
        let out = t.join(format!("{name}.cred"));
        sh(&format!(
            "printf %s {value} | chroot {} systemd-creds encrypt --with-key=null --name={name} - - > {} 2>/dev/null",
            tree.display(),
            out.display()
        ));
        out
    };
    let (esp_cred, global_cred) = (cred("leanrd.esp", ESP_VALUE), cred("leanrd.global", GLOBAL_VALUE));
    let f = Fs { kind: "ext4", uuid: uuid(57), subvol: false };
    let disks =
        make(&t, "stub-root", true, Bus::VirtioBlk, &f, &tree, Some(&format!("UUID={} / ext4 defaults 0 1\n", f.uuid)));
    let efi = t.join("stub.efi");
    let cmdline = format!(
        "console=ttyS0 panic=-1 {TEST_APPEND} root=UUID={} ro systemd.set_credential=leanrd.cmdline:{CMDLINE_VALUE}",
        f.uuid
    );
    let o = leanrd()
        .args(["build", "--universal", "-k", &kver, "--uki", "--cmdline", &cmdline, "--sysroot"])
        .arg(&tree)
        .arg("--init")
        .arg(&init)
        .arg("-o")
        .arg(&efi)
        .output()
        .unwrap();
    assert!(o.status.success(), "leanrd build --uki: {}", String::from_utf8_lossy(&o.stderr));
    let esp = common::esp(&t, "stub", &efi, "BOOTX64.EFI");
    let sysext = t.join("leanrd.sysext.raw");
    fs::write(&sysext, b"not an image: /init only names it").unwrap();
    sh(&format!(
        "mmd -i {e} ::/loader ::/loader/credentials ::/EFI/BOOT/BOOTX64.EFI.extra.d && \
         mcopy -i {e} {} ::/EFI/BOOT/BOOTX64.EFI.extra.d/leanrd.esp.cred && \
         mcopy -i {e} {} ::/loader/credentials/leanrd.global.cred && \
         mcopy -i {e} {} ::/EFI/BOOT/BOOTX64.EFI.extra.d/leanrd.sysext.raw",
        esp_cred.display(),
        global_cred.display(),
        sysext.display(),
        e = esp.display()
    ));
    let mut qemu = vec!["-drive".to_string(), format!("file={},format=raw,if=virtio", esp.display())];
    qemu.extend(qemu_args(&[&disks[0]], true));
    let mut boot = Boot::new("stub: credentials from the ESP and the command line", &efi, "", qemu)
        .expect(&format!("LEANRD-CRED leanrd.esp={ESP_VALUE}"))
        .expect(&format!("LEANRD-CRED leanrd.global={GLOBAL_VALUE}"))
        .expect(&format!("LEANRD-CRED leanrd.cmdline={CMDLINE_VALUE}"))
        .expect("LEANRD-CRED-MODE /run/credentials/@encrypted 700 root")
        .expect("LEANRD-CRED-MODE /run/credentials/@encrypted/leanrd.esp 400 root")
        .expect("LEANRD-CRED-MODE /run/credentials/@system 700 root")
        .expect("LEANRD-CRED-MODE /run/credentials/@system/leanrd.cmdline 400 root")
        .expect("ESP credentials handed on in /run/credentials/@encrypted: leanrd.esp, leanrd.global")
        .expect("/.extra/sysext: leanrd.sysext.raw not handed on")
        .reject("LEANRD-CRED-MISSING")
        .stop("LEANRD-CRED-MISSING");
    boot.start = Start::Uefi(t.join("stub.vars"));
    let started = std::time::Instant::now();
    let (failed, outcomes) = run_keep(&kernel, &[boot]);
    let log = &outcomes[0].log;
    let lines: Vec<&str> = log.lines().filter(|l| l.starts_with("LEANRD-CRED")).map(str::trim_end).collect();
    eprintln!("{}\nthe boot: {:.0} s", lines.join("\n"), started.elapsed().as_secs_f64());
    assert!(failed.is_empty(), "{failed:?}");
    // systemd-creds lists each where systemd's initrd would have put it.
    let listed = |path: &str| lines.iter().any(|l| l.starts_with("LEANRD-CREDS-LIST ") && l.ends_with(path));
    for p in [
        "/run/credentials/@encrypted/leanrd.esp",
        "/run/credentials/@encrypted/leanrd.global",
        "/run/credentials/@system/leanrd.cmdline",
    ] {
        assert!(listed(p), "systemd-creds --system list lacks {p}:\n{}", lines.join("\n"));
    }
    // Both read-only, without devices, setuid or executables; @system a file system of its own.
    for (dir, fstype) in [("/run/credentials/@encrypted", None), ("/run/credentials/@system", Some("tmpfs"))] {
        let m = lines.iter().find(|l| l.starts_with(&format!("LEANRD-CRED-MOUNT {dir} ")));
        let m = m.unwrap_or_else(|| panic!("{dir} is no mount:\n{}", lines.join("\n")));
        let opts: Vec<&str> = m.split_whitespace().nth(3).unwrap_or_default().split(',').collect();
        for o in ["ro", "nosuid", "nodev", "noexec"] {
            assert!(opts.contains(&o), "{dir}: {o} not in {m}");
        }
        if let Some(fs) = fstype {
            assert_eq!(m.split_whitespace().nth(2), Some(fs), "{m}");
        }
    }
}
