//! The Debian package, with real dpkg and apt: `tools/make-deb` (cargo-deb) makes the .deb; in
//! a Debian root with initramfs-tools (tools/debian-root), `dpkg -i` installs it, then apt
//! installs a kernel from the archive (Debian 12: `linux-image-amd64`; Debian 13, whose root has
//! its kernel already: that kernel package reinstalled): the kernel package's hooks
//! (initramfs-tools' update-initramfs, diverted to leanrd's) write /boot/initrd.img-KVER with
//! leanrd, and the root boots with it and that kernel under QEMU to multi-user. `apt-get remove
//! leanrd` gives update-initramfs back: initramfs-tools (0.142 on 12, 0.148 on 13) makes the next
//! image.
//!
//! The root has no machine of its own (a chroot): its configuration asks for a universal image.
//! Needs root, mmdebstrap, cargo-deb, the Debian mirror (the kernel package; the downloads are
//! kept in /var/cache/leanrd-tests/apt-archives), qemu, mkfs.ext4 and sfdisk.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::debian::*;
use common::*;

#[test]
fn the_debian_package_takes_over_and_gives_back() {
    takes_over_and_gives_back("bookworm");
}

#[test]
fn the_debian_package_takes_over_and_gives_back_on_debian13() {
    takes_over_and_gives_back("trixie");
}

/// The package, made once for both suites (tools/make-deb).
fn package() -> String {
    static DEB: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DEB.get_or_init(|| {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let o = Command::new(ws.join("tools/make-deb")).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "tools/make-deb: {out}");
        out.lines().rev().find(|l| l.trim_end().ends_with(".deb")).expect("the .deb's path").trim().to_string()
    })
    .clone()
}

fn takes_over_and_gives_back(suite: &str) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let has_deb = Command::new(&cargo).args(["deb", "--version"]).output().is_ok_and(|o| o.status.success());
    if !is_root() || !has_deb || !have("mkfs.ext4") || !have("chroot") {
        skip::<()>("needs root, cargo-deb (cargo install cargo-deb), mkfs.ext4");
        return;
    }
    let Some(host_kernel) = kernel() else { return };
    let Some(init) = init_binary() else { return };
    let t = TempDir::new(&format!("deb-{suite}"));
    let deb = package();

    // The root: Debian with initramfs-tools, no leanrd of its own.
    let tree = match suite {
        "trixie" => prepare_trixie(&t, &init, "initramfs-tools"),
        _ => prepare(&t, &kver_of(&host_kernel), &init, "initramfs-tools"),
    };
    let Some(tree) = tree else { return };
    // Debian 13's root has its kernel: apt reinstalls that package, hooks and all.
    let install = match suite {
        "trixie" => {
            let k = kver_of(&root_kernel(&tree));
            format!("install -y --reinstall --no-install-recommends linux-image-{k}")
        }
        _ => "install -y --no-install-recommends linux-image-amd64".to_string(),
    };
    sh(&format!("rm -rf {t}/usr/bin/leanrd {t}/usr/lib/leanrd", t = tree.display()));
    fs::copy("/etc/resolv.conf", tree.join("etc/resolv.conf")).unwrap();
    fs::copy(&deb, tree.join("tmp/leanrd.deb")).unwrap();
    let cache = leanrd_testkit::scenario::test_cache().join(if suite == "bookworm" {
        "apt-archives".to_string()
    } else {
        format!("apt-archives-{suite}")
    });
    fs::create_dir_all(cache.join("partial")).unwrap();
    let apt = "apt-get -q -o APT::Sandbox::User=root";

    install_deb(&tree, Some(&cache), "/tmp/leanrd.deb");
    let (done, log) = in_chroot(&tree, Some(&cache), &format!("{apt} update && {apt} {install}"));
    assert!(done, "apt-get {install}: {log}");
    let kvers: Vec<String> = fs::read_dir(tree.join("boot"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("vmlinuz-").map(str::to_string))
        .collect();
    let [kver] = kvers.as_slice() else { panic!("one kernel installed: {kvers:?}\n{log}") };
    // Debian 12's initramfs-tools hook calls update-initramfs (leanrd's); Debian 13's asks it
    // `--version` first and steps aside for leanrd's own kernel hook. Either way leanrd builds,
    // and no caller is refused an option.
    assert!(
        log.contains(&format!("Generating /boot/initrd.img-{kver} with leanrd"))
            || log.contains("/etc/kernel/postinst.d/zz-leanrd:"),
        "{log}"
    );
    assert!(log.contains(&format!("/boot/initrd.img-{kver} in ")), "no leanrd build summary:\n{log}");
    assert!(!log.contains("Illegal option") && !log.contains("one of -c, -d or -u is needed"), "{log}");
    let img = tree.join(format!("boot/initrd.img-{kver}"));
    assert_eq!(made_by(&img), "leanrd", "{log}");
    eprintln!("{}", log.lines().filter(|l| l.contains("leanrd")).collect::<Vec<_>>().join("\n"));

    // It boots the root with that kernel.
    let (kernel, image) = (t.join(format!("vmlinuz-{kver}")), t.join("leanrd-deb.img"));
    fs::copy(tree.join(format!("boot/vmlinuz-{kver}")), &kernel).unwrap();
    fs::copy(&img, &image).unwrap();
    let f = Fs { kind: "ext4", uuid: uuid(if suite == "trixie" { 51 } else { 50 }), subvol: false };
    let disks =
        make(&t, "deb-root", true, Bus::VirtioBlk, &f, &tree, Some(&format!("UUID={} / ext4 defaults 0 1\n", f.uuid)));
    let boot = Boot::new(
        &format!("{suite}: the package's image, the package's kernel"),
        &image,
        &format!("root=UUID={}", f.uuid),
        qemu_args(&[&disks[0]], true),
    );
    let failed = run(&kernel, &[boot]);
    assert!(failed.is_empty(), "{failed:?}");

    // Removed: update-initramfs is initramfs-tools' again, and it makes the next image.
    let (done, log) =
        in_chroot(&tree, Some(&cache), &format!("{apt} remove -y leanrd && update-initramfs -u -k {kver}"));
    assert!(done, "apt-get remove leanrd; update-initramfs: {log}");
    let back = fs::read_to_string(tree.join("usr/sbin/update-initramfs")).unwrap();
    assert!(!back.contains("leanrd") && back.contains("initramfs"), "update-initramfs was not given back");
    assert_eq!(made_by(&img), "initramfs-tools", "{log}");
}
