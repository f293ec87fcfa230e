#!/usr/bin/env python3
"""Real-root benchmark (issues 12, 27): a Debian root with systemd (tools/debian-root), QEMU
TCG, ext4 on a GPT partition of a virtio-blk disk; Debian 12 (bookworm, the host's kernel,
modules not compressed) or Debian 13 (--suite trixie: its own 6.12 kernel, .ko.xz modules).
Variants:

  leanrd universal         `leanrd build --universal --sysroot ROOT`, on the host
  leanrd universal keep    the same with `--module-compression keep` (trixie: .ko.xz kept)
  leanrd host-only         `leanrd build` inside the VM, on its own devices
  leanrd host-only keep    the same with `--module-compression keep` (trixie)
  initramfs-tools most     `mkinitramfs` (MODULES=most, Debian's default) in a chroot of the root
  initramfs-tools dep      `mkinitramfs` with MODULES=dep inside the VM
  dracut generic           `dracut --no-hostonly` in a chroot of the root
  dracut host-only         `dracut --hostonly` inside the VM

Measured, in one run: build seconds (median of --runs builds; universal variants natively on
the host, host-only variants inside the VM under TCG: compare each group among itself), image
bytes, and per boot (median of --runs boots): kernel start → multi-user.target (systemd-
analyze's total) and the initramfs phase ("Run /init" → the root's systemd starting, from the
kernel's timestamps on the console). Every boot must reach `is-system-running` = running.

The initramfs-tools and dracut roots are the same root with the peer installed (they conflict
with each other); leanrd's images boot the initramfs-tools root.

Boots go through the harness (common.boot: crates/testkit's QEMU command line and VM slots).

Usage (root, Debian 12 host): python3 bench/debian.py [--runs 3] [--kver KVER] [--suite trixie]
Raw results: bench/results/debian-DATE-COMMIT.json (the suite, every build time and every
boot's figures); bench/tables.py makes the README's table from them.
"""

import concurrent.futures
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from common import boot, boot_setup, chroot_build, debian_tree, harness, ratio, report, save, sh, tool_version

UUID = "11111111-2222-3333-4444-0000000000be"
DISK_MIB = 3072
PART_OFFSET = 1 << 20

HOOK = r"""#!/bin/sh
# bench/debian.py: with leanrd.bench=build, time the host-only builds of every generator in
# this root, RUNS times each; the images go to /boot.
grep -qw leanrd.bench=build /proc/cmdline || exit 0
k=$(uname -r)
t() {
  name=$1; shift
  s=$(date +%s.%N); "$@" >/root/$name.log 2>&1; rc=$?; e=$(date +%s.%N)
  echo "LEANRD-BENCH $name rc=$rc $(awk "BEGIN{print $e - $s}")"
  [ $rc = 0 ] || tail -n 5 /root/$name.log
}
for i in $(seq RUNS); do
  t leanrd-host-only leanrd build --force -o /boot/leanrd-host-only.img
  if [ -n "$(find /usr/lib/modules/$k -name '*.ko.xz' -print -quit)" ]; then
    t leanrd-host-only-keep leanrd build --force --module-compression keep -o /boot/leanrd-host-only-keep.img
  fi
  if command -v mkinitramfs >/dev/null; then
    sed -i 's/^MODULES=.*/MODULES=dep/' /etc/initramfs-tools/initramfs.conf
    t initramfs-tools-dep mkinitramfs -o /boot/initramfs-tools-dep.img $k
  fi
  if command -v dracut >/dev/null; then
    t dracut-host-only dracut --hostonly --force /boot/dracut-host-only.img $k
  fi
done
sync
"""


def prepare(work, flavour, kver, leanrd, init, runs, suite):
    """The root with `flavour` installed and the kernel's modules, made a test system as the
    boot tests make theirs (the harness's finish-tree: an identity, a module option, the report
    unit, leanrd and its /init), with the bench's fstab and build hook; returns the tree."""
    tree = debian_tree(work, flavour, kver, suite)
    harness("finish-tree", tree, "--leanrd", leanrd, "--init", init)
    files = {
        "etc/fstab": f"UUID={UUID} / ext4 errors=remount-ro 0 1\n",
        "usr/local/sbin/leanrd-test-hook": HOOK.replace("RUNS", str(runs)),
    }
    for name, text in files.items():
        os.makedirs(os.path.dirname(f"{tree}/{name}"), exist_ok=True)
        with open(f"{tree}/{name}", "w") as f:
            f.write(text)
    os.chmod(f"{tree}/usr/local/sbin/leanrd-test-hook", 0o755)
    return tree


def disk(work, tree, name):
    """ext4 of `tree` on a GPT partition from 1 MiB, made without mounting."""
    img = os.path.join(work, f"{name}.disk")
    size = (DISK_MIB << 20) - 2 * PART_OFFSET
    sh(f"truncate -s {DISK_MIB}M {img}")
    subprocess.run(["sfdisk", "-q", img], check=True, text=True,
                   input=f"label: gpt\nstart=2048, size={size // 512}, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4\n")
    sh(f"mkfs.ext4 -q -F -U {UUID} -E offset={PART_OFFSET} -d {tree} {img} {size // 1024}k")
    return img


def take(work, img, names, prefix):
    """Files from the disk's /boot (after a boot wrote them), copied as PREFIX-NAME."""
    mnt = os.path.join(work, "take.mnt")
    os.makedirs(mnt, exist_ok=True)
    loop = subprocess.run(["losetup", "-f", "--show", "-r", "-o", str(PART_OFFSET), img], check=True,
                          capture_output=True, text=True).stdout.strip()
    try:
        sh(f"mount -o ro {loop} {mnt}")
        out = {}
        for n in names:
            p = f"{mnt}/boot/{n}"
            if os.path.exists(p):
                out[n] = os.path.join(work, f"{prefix}-{n}")
                shutil.copy(p, out[n])
        return out
    finally:
        subprocess.run(["umount", mnt])
        subprocess.run(["losetup", "-d", loop])


def boot_root(kernel, initrd, img, append, snapshot=True, secs=420):
    """Boot the root disk (virtio-blk, root=UUID) through the harness; its JSON."""
    return boot(kernel, initrd, f"root=UUID={UUID} {append}".strip(), disks=[img], snapshot=snapshot, memory=1024,
                timeout=secs)


def systemd_seconds(text):
    """A time span as systemd prints it ("950ms", "12.345s", "1min 5.234s") in seconds; None
    when it is not one."""
    units = {"min": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"([0-9.]+)(min|ms|us|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        return None
    return sum(float(n) * units[u] for n, u in parts)


def measure(log):
    """(running?, kernel → multi-user s, initramfs phase s) from a boot's console."""
    running = "LEANRD-STATE running" in log
    total = re.search(r"LEANRD-ANALYZE Startup finished in .* = ([0-9a-z. ]+?)\s*$", log, re.M)
    total = systemd_seconds(total.group(1)) if total else None
    run_init = re.search(r"\[\s*([0-9.]+)\] Run /init as init process", log)
    # The root's systemd: the last one to start (dracut's initramfs runs a systemd too).
    starts = re.findall(r"\[\s*([0-9.]+)\] systemd\[1\]: systemd \d+\S* running in system mode", log)
    phase = float(starts[-1]) - float(run_init.group(1)) if run_init and starts else None
    return running, total, phase


def med(xs):
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.2f}" if xs else "–"


def main():
    a, kver, kernel, leanrd, init = boot_setup(suite_option=True)
    work = tempfile.mkdtemp(prefix="leanrd-bench-debian-", dir="/var/tmp")
    try:
        trees = {f: prepare(work, f, kver, leanrd, init, a.runs, a.suite) for f in ("initramfs-tools", "dracut")}
        peers = {f: tool_version(f"dpkg-query --admindir {t}/var/lib/dpkg -W -f '${{Version}}' {f}")
                 for f, t in trees.items()}
        images, builds = {}, {}
        compressed = a.suite == "trixie"

        # Universal variants, natively on the host.
        for name, extra in (("leanrd universal", ""), ("leanrd universal keep", "--module-compression keep")):
            if extra and not compressed:
                continue
            out = os.path.join(work, name.replace(" ", "-") + ".img")
            builds[name] = []
            for _ in range(a.runs):
                s = time.perf_counter()
                sh(f"{leanrd} build -k {kver} --universal --force --sysroot {trees['initramfs-tools']} "
                   f"--init {init} -o {out} {extra}", stderr=subprocess.DEVNULL)
                builds[name].append(time.perf_counter() - s)
            images[name] = out
        for name, flavour, cmd, target in (
            ("initramfs-tools most", "initramfs-tools", f"mkinitramfs -o /tmp/peer.img {kver}", "/tmp/peer.img"),
            ("dracut generic", "dracut", f"dracut --no-hostonly --force /tmp/peer.img {kver}", "/tmp/peer.img"),
        ):
            tree = trees[flavour]
            builds[name] = [chroot_build(tree, cmd) for _ in range(a.runs)]
            images[name] = os.path.join(work, name.replace(" ", "-") + ".img")
            shutil.move(tree + target, images[name])

        disks = {f: disk(work, t, f) for f, t in trees.items()}
        for t in trees.values():
            shutil.rmtree(t)

        # Host-only variants: built inside the VM by each root's generators (leanrd's from the
        # initramfs-tools root).
        in_vm = {"leanrd-host-only": "leanrd host-only", "leanrd-host-only-keep": "leanrd host-only keep",
                 "initramfs-tools-dep": "initramfs-tools dep", "dracut-host-only": "dracut host-only"}

        def build_in_vm(flavour):
            return flavour, boot_root(kernel, images["leanrd universal"], disks[flavour], "leanrd.bench=build",
                                      snapshot=False, secs=1200)["console"]
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            for flavour, log in ex.map(build_in_vm, disks):
                # Each root's own generator; leanrd's from the initramfs-tools root.
                mine = {"initramfs-tools": ("leanrd-host-only", "initramfs-tools-dep")
                        + (("leanrd-host-only-keep",) if compressed else ()),
                        "dracut": ("dracut-host-only",)}
                keep = list(mine[flavour])
                for m in re.finditer(r"LEANRD-BENCH (\S+) rc=(\d+) ([0-9.]+)", log):
                    if m.group(1) not in keep:
                        continue
                    if m.group(2) != "0":
                        print(f"({in_vm[m.group(1)]}: a build failed in the VM)")
                        continue
                    builds.setdefault(in_vm[m.group(1)], []).append(float(m.group(3)))
                got = take(work, disks[flavour], [f"{k}.img" for k in keep], flavour)
                for k in keep:
                    if f"{k}.img" in got:
                        images[in_vm[k]] = got[f"{k}.img"]
                    else:
                        print(f"({in_vm[k]}: no image built in the VM)\n```\n{log[-3000:]}\n```")

        def root_of(name):
            return disks["dracut" if name.startswith("dracut") else "initramfs-tools"]
        jobs = [(name, i) for i in range(a.runs) for name in images]
        # Two at a time: the harness's VM slots hold it to the machine's cores in any case.
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            runs = list(ex.map(lambda j: (j[0], boot_root(kernel, images[j[0]], root_of(j[0]), "")), jobs))
        print(f"## Debian {a.suite} root (systemd), {time.strftime('%Y-%m-%d')}, kernel {kver}, QEMU TCG -m 1024, "
              f"virtio-blk ext4 GPT, two VMs at a time; medians of {a.runs}\n")
        raw, res = report(images, builds, runs, measure, med)
        print()
        pairs = [("leanrd host-only", "initramfs-tools dep"), ("leanrd universal", "initramfs-tools most"),
                 ("leanrd host-only", "dracut host-only"), ("leanrd universal", "dracut generic")]
        if compressed:
            pairs += [("leanrd host-only", "leanrd host-only keep"), ("leanrd universal", "leanrd universal keep"),
                      ("leanrd host-only keep", "initramfs-tools dep")]
        for lean, peer in pairs:
            print(f"- {lean} / {peer}: initramfs phase {ratio(res, lean, peer, 1)}, "
                  f"whole boot {ratio(res, lean, peer, 0)}")
        save("debian", {"suite": a.suite, "kernel": kver, "runs": a.runs, "variants": raw}, peers, tag=a.suite)
        print("\nBuild seconds of host-only variants are inside the VM (TCG); universal ones on the host.")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
