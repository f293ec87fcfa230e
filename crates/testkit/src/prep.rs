//! Prep VMs: the host kernel has no device-mapper, so LUKS, LVM and md disks are made inside
//! QEMU by a throw-away initramfs holding busybox, the tools asked for (with their libraries),
//! the modules asked for and a script.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use leanrd_gen::Kernel;
use leanrd_gen::Resolver;
use leanrd_gen::plan::{Item, Plan};

/// The lvm configuration for a system without udev.
pub const LVM_NO_UDEV: &str =
    "devices { obtain_device_list_from_udev = 0 } activation { udev_sync = 0 udev_rules = 0 }";

/// The modules a prep VM needs to make md, LVM and LUKS (aes-xts) disks on virtio.
pub const STACK_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "md_mod",
    "raid1",
    "dm_mod",
    "dm_crypt",
    "xts",
    "aes_generic",
    "sha256_generic",
    "cbc",
    "ecb",
];

/// A prep image whose /init mounts the API file systems, loads `modules`, waits for the
/// virtio disk `last_disk` (e.g. "vdd"), runs `body` (the tools' paths are in shell variables
/// named after them, `-` as `_`: `$cryptsetup`, `$lvm`, `$mke2fs`; `$C` is [`LVM_NO_UDEV`])
/// and powers off. `tree`, when given, is under /roottree. None (skipped) when a tool is
/// missing.
pub fn image(
    t: &Path,
    kver: &str,
    tools: &[&str],
    modules: &[&str],
    last_disk: &str,
    body: &str,
    tree: Option<&Path>,
) -> Option<PathBuf> {
    image_in(Path::new("/"), t, kver, tools, modules, last_disk, body, tree)
}

/// [`image`] with the tools and the kernel's modules from `sysroot` (a Debian root's, run on
/// its own kernel), and the host's static busybox.
#[allow(clippy::too_many_arguments)]
pub fn image_in(
    sysroot: &Path,
    t: &Path,
    kver: &str,
    tools: &[&str],
    modules: &[&str],
    last_disk: &str,
    body: &str,
    tree: Option<&Path>,
) -> Option<PathBuf> {
    let mut plan = Plan::new(sysroot);
    let mut paths = HashMap::new();
    let host = sysroot == Path::new("/");
    if !host {
        if !Path::new("/bin/busybox").is_file() {
            return crate::skip("the prep VM needs the host's busybox (busybox-static)");
        }
        plan.put("/bin/busybox", Item::File { src: "/bin/busybox".into(), mode: 0o755 });
        paths.insert("busybox".to_string(), "/bin/busybox".to_string());
    }
    {
        let mut r = Resolver::new(&mut plan);
        for b in std::iter::once(&"busybox").filter(|_| host).chain(tools) {
            let Some(p) = r.which(b) else {
                return crate::skip(&format!("the prep VM needs {b}"));
            };
            r.add_binary(&p).unwrap();
            paths.insert(b.replace('-', "_"), p);
        }
        // By its /bin path too, so that /bin (a symlink on merged-/usr systems) is there.
        if host {
            r.add_binary("/bin/busybox").unwrap();
        }
        r.add_library_if_present("libgcc_s.so.1").unwrap();
        if tools.contains(&"systemd-cryptenroll") {
            // What systemd's TPM2 support loads with dlopen.
            for l in ["libtss2-esys.so.0", "libtss2-rc.so.0", "libtss2-mu.so.0", "libtss2-tcti-device.so.0"] {
                r.add_library_if_present(l).unwrap();
            }
        }
    }
    let kernel = Kernel::load(sysroot, kver).unwrap();
    let (set, _) = kernel.resolve(modules.iter().copied());
    let tmp = t.join("prep-tmp");
    fs::create_dir_all(&tmp).unwrap();
    kernel.add_to_plan(&mut plan, &set, &tmp, None, &Default::default(), 2, &Default::default()).unwrap();
    let vars: String =
        tools.iter().map(|b| format!("{}={}\n", b.replace('-', "_"), paths[&b.replace('-', "_")])).collect();
    let script = format!(
        "#!/bin/busybox sh\n/bin/busybox mkdir -p /sbin /proc /sys /dev /run /tmp\n/bin/busybox --install -s /bin\n\
         /bin/busybox ln -sf /bin/busybox /sbin/modprobe\n\
         mount -t devtmpfs dev /dev; mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t tmpfs run /run\n\
         echo /sbin/modprobe > /proc/sys/kernel/modprobe\n\
         for m in {mods}; do modprobe $m; done\n\
         for i in $(seq 1 20); do [ -b /dev/{last_disk} ] && break; sleep 1; done\n\
         C='{LVM_NO_UDEV}'\n{vars}{body}\npoweroff -f\n",
        mods = modules.join(" "),
    );
    plan.put("/init", Item::Inline { data: script.into_bytes(), mode: 0o755 });
    plan.add_console();
    if let Some(tree) = tree {
        let mut stack = vec![tree.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                let rel = format!("/roottree/{}", p.strip_prefix(tree).unwrap().display());
                let md = fs::symlink_metadata(&p).unwrap();
                if md.is_dir() {
                    plan.put(&rel, Item::Dir { mode: 0o755 });
                    stack.push(p);
                } else if md.file_type().is_symlink() {
                    plan.put(&rel, Item::Symlink { target: fs::read_link(&p).unwrap().display().to_string() });
                } else {
                    plan.put(&rel, Item::File { src: p.clone(), mode: 0o755 });
                }
            }
        }
    }
    let norm = leanrd_archive::Normalize { mtime: Some(0), owner: Some((0, 0)), first_ino: 1, ..Default::default() };
    let layout = leanrd_archive::Layout::plan(plan.entries(&norm).unwrap(), Default::default()).unwrap();
    let img = t.join("prep.img");
    let f = fs::File::create(&img).unwrap();
    leanrd_archive::write::write_positional(&layout, &f).unwrap();
    Some(img)
}
