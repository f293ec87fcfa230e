"""Helpers shared by the benchmark scripts."""

import os
import shutil
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UUID = "11111111-2222-3333-4444-555555555555"
MARK = "LEANRD-ROOT-OK"


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, **kw)


def version_key(release):
    """Sort key of a kernel release as versions sort (6.9 before 6.10), not as text."""
    import re
    return [(int(n), t) for n, t in re.findall(r"(\d+)(\D*)", release)]


def suite_root(suite, flavour=""):
    """The cached Debian root of tools/debian-root (made when missing)."""
    return subprocess.run([os.path.join(ROOT, "tools/debian-root"), suite] + ([flavour] if flavour else []),
                          check=True, capture_output=True, text=True).stdout.strip()


def boot_setup(suite_option=False):
    """The options every boot benchmark takes (--runs, --kver, and --suite when asked), the
    kernel to boot, and freshly built leanrd and /init: (args, kver, kernel, leanrd, init).
    Debian 12 boots the host's kernel; Debian 13 (--suite trixie) its root's own."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kver", default=None)
    if suite_option:
        ap.add_argument("--suite", choices=["bookworm", "trixie"], default="bookworm")
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    if getattr(a, "suite", "bookworm") == "trixie":
        boot = os.path.join(suite_root("trixie"), "boot")
        kernels = sorted((k[len("vmlinuz-"):] for k in os.listdir(boot) if k.startswith("vmlinuz-")), key=version_key)
        kver = a.kver or kernels[-1]
        return a, kver, f"{boot}/vmlinuz-{kver}", leanrd, init
    kver = a.kver or sorted(os.listdir("/lib/modules"), key=version_key)[-1]
    return a, kver, f"/boot/vmlinuz-{kver}", leanrd, init


def build_leanrd():
    """Build leanrd and the static /init; return their paths."""
    sh("cargo build --release -q -p leanrd", cwd=ROOT)
    sh("cargo build -q --profile init -p leanrd-init --features standalone "
       "--target x86_64-unknown-linux-gnu", cwd=ROOT)
    return (os.path.join(ROOT, "target/release/leanrd"),
            os.path.join(ROOT, "target/x86_64-unknown-linux-gnu/init/leanrd-init"))


def root_disk(work, partitioned=True):
    """An ext4 root (UUID above) whose /sbin/init prints MARK and /proc/uptime, then powers
    off; on an MBR partition of a virtio-sized disk image when `partitioned`."""
    tree = os.path.join(work, "rootfs")
    for d in ("sbin", "bin", "dev", "proc", "sys", "run"):
        os.makedirs(os.path.join(tree, d))
    shutil.copy("/bin/busybox", os.path.join(tree, "bin/busybox"))
    os.symlink("busybox", os.path.join(tree, "bin/sh"))
    with open(os.path.join(tree, "sbin/init"), "w") as f:
        f.write(f"#!/bin/sh\n/bin/busybox echo {MARK} $(/bin/busybox cat /proc/uptime)\n/bin/busybox poweroff -f\n")
    os.chmod(os.path.join(tree, "sbin/init"), 0o755)
    # An OS tree as systemd's switch-root wants one (dracut's initrd refuses a root without).
    os.makedirs(os.path.join(tree, "etc"))
    with open(os.path.join(tree, "etc/os-release"), "w") as f:
        f.write("ID=leanrd-bench\nNAME=\"leanrd bench root\"\n")
    fsimg, img = os.path.join(work, "root.fs"), os.path.join(work, "disk.img")
    sh(f"truncate -s 64M {fsimg} && mkfs.ext4 -q -d {tree} -U {UUID} {fsimg}")
    if not partitioned:
        return fsimg
    sh(f"truncate -s 66M {img} && echo 'label: dos\nstart=2048, type=83' | sfdisk -q {img}")
    sh(f"dd if={fsimg} of={img} bs=512 seek=2048 conv=notrunc status=none")
    return img


def qemu(kernel, initrd, img, append=""):
    """Boot under TCG with `img` on virtio-blk; return the console output."""
    cmd = ["timeout", "--signal=KILL", "120", "qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-nographic",
           "-no-reboot", "-monitor", "none", "-kernel", kernel, "-initrd", initrd,
           "-drive", f"file={img},if=virtio,format=raw",
           "-append", f"console=ttyS0 panic=-1 root=UUID={UUID} {append}"]
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace").stdout


def tirfs(work):
    """mktirfs from the tiny-initramfs .debs (it conflicts with initramfs-tools, so it is
    unpacked, not installed), with its paths pointed at the unpacked copy."""
    d = os.path.join(work, "tirfs")
    os.makedirs(d)
    sh(f"cd {d} && apt-get download -q tiny-initramfs tiny-initramfs-core >/dev/null 2>&1 && "
       f"for f in *.deb; do dpkg-deb -x $f root; done")
    script = os.path.join(d, "root/usr/sbin/mktirfs")
    with open(script) as f:
        s = f.read()
    s = s.replace("/usr/lib/x86_64-linux-gnu/tiny-initramfs", os.path.join(d, "root/usr/lib/x86_64-linux-gnu/tiny-initramfs"))
    s = s.replace("/usr/share/tiny-initramfs", os.path.join(d, "root/usr/share/tiny-initramfs"))
    with open(script, "w") as f:
        f.write(s)
    os.chmod(script, 0o755)
    return script


def chroot_build(tree, cmd, quiet=False):
    """Run a generator in a chroot of the root (with /proc, /sys, /dev); seconds taken. `quiet`
    silences its stderr too."""
    mounts = []
    try:
        for d in ("proc", "sys", "dev"):
            sh(f"mount --bind /{d} {tree}/{d}")
            mounts.append(f"{tree}/{d}")
        s = time.perf_counter()
        sh(f"chroot {tree} {cmd}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None)
        return time.perf_counter() - s
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", m])


def debian_tree(work, flavour, kver, suite="bookworm"):
    """A copy of the cached Debian root (`tools/debian-root SUITE FLAVOUR`: "" for the test
    root, or a peer generator installed) under `work`; a bookworm one gets the host kernel's
    modules and configuration (the peers read it to know which compressions it unpacks), a
    trixie one has its own; returns its path."""
    base = suite_root(suite, flavour)
    tree = os.path.join(work, f"{flavour or 'leanrd'}-tree")
    sh(f"cp -a {base} {tree}")
    if suite == "trixie":
        return tree
    os.makedirs(f"{tree}/usr/lib/modules", exist_ok=True)
    sh(f"cp -a /lib/modules/{kver} {tree}/usr/lib/modules/")
    shutil.copy(f"/boot/config-{kver}", f"{tree}/boot/")
    return tree
