#!/usr/bin/env python3
"""NFS-root benchmark (issue 29): the Debian 12 root (tools/debian-root, with initramfs-tools)
exported over NFS by nfs-ganesha in a network namespace made for each boot, DHCP from dnsmasq
there (the harness's netlab: `leanrd-harness boot --nfs-export`), QEMU TCG with one virtio
NIC, the host's kernel. Variants, each booting the same exported tree one after another:

  leanrd universal         `leanrd build --universal --include nfs --sysroot ROOT`, on the host;
                           `root=nfs:SERVER:PATH rw ip=dhcp` (NFSv4.2)
  leanrd host-only         the image the root builds for itself with `leanrd build` (no
                           options) while booted over NFS; nothing on the command line
  initramfs-tools nfs      `mkinitramfs` with BOOT=nfs (MODULES=netboot) in a chroot of the
                           root; `root=/dev/nfs nfsroot=SERVER:PATH ip=dhcp rw` (klibc's
                           nfsmount: NFSv3)
  dracut nfs               `dracut --no-hostonly -a "network-legacy nfs"` in a chroot of the dracut root with
                           dracut-network and nfs-common; `root=nfs:SERVER:PATH rw ip=dhcp`
                           (its own root tree, exported the same way)

Measured, in one run: build seconds (median of --runs; the host-only build is inside the VM
under TCG), image bytes, and per boot (median of --runs): kernel start → multi-user.target
and the initramfs phase ("Run /init" → the root's systemd starting). Every boot must reach
`is-system-running` = running.

Usage (root, Debian 12 host): python3 bench/nfs.py [--runs 3]
Raw results: bench/results/nfs-DATE-COMMIT.json.
"""

import os
import re
import shutil
import tempfile
import time

from common import boot_setup, chroot_build, chroot_install, timed_builds, debian_tree, harness, ratio, report, save, tool_version
from debian import measure, med

SERVER = "10.77.0.1"


def nfs_boot(kernel, initrd, append, export, secs=420):
    """One boot with its root exported over NFS (a lab of its own); the harness's JSON."""
    import json
    out = harness("boot", "--kernel", kernel, "--initrd", initrd, "--append", append,
                  "--nfs-export", export, "--timeout", str(secs))
    return json.loads(out)


def main():
    a, kver, kernel, leanrd, init = boot_setup()
    work = tempfile.mkdtemp(prefix="leanrd-bench-nfs-", dir="/var/tmp")
    try:
        tree = debian_tree(work, "initramfs-tools", kver)
        harness("finish-tree", tree, "--leanrd", leanrd, "--init", init)
        dtree = debian_tree(work, "dracut", kver)
        harness("finish-tree", dtree, "--leanrd", leanrd, "--init", init)
        for t in (tree, dtree):
            with open(f"{t}/etc/fstab", "w") as f:
                f.write("")
        # dracut's NFS support is in dracut-network, its mount.nfs in nfs-common; its network-legacy
        # module wants dhclient and pgrep.
        chroot_install(dtree, ["dracut-network", "nfs-common", "isc-dhcp-client", "procps"])
        peers = {"initramfs-tools": tool_version(f"dpkg-query --admindir {tree}/var/lib/dpkg -W -f '${{Version}}' "
                                                 "initramfs-tools"),
                 "dracut": tool_version(f"dpkg-query --admindir {dtree}/var/lib/dpkg -W -f '${{Version}}' dracut"),
                 "nfs-ganesha": tool_version("dpkg-query -W -f '${Version}' nfs-ganesha")}
        images, builds, roots, appends = {}, {}, {}, {}

        name = "leanrd universal"
        out = os.path.join(work, "leanrd-universal.img")
        builds[name] = timed_builds(
            f"{leanrd} build -k {kver} --universal --include nfs --force --sysroot {tree} --init {init} -o {out}",
            a.runs)
        images[name], roots[name] = out, tree
        appends[name] = f"root=nfs:{SERVER}:{tree} rw ip=dhcp"

        name = "initramfs-tools nfs"
        with open(f"{tree}/etc/initramfs-tools/conf.d/leanrd-bench-nfs", "w") as f:
            f.write("BOOT=nfs\nMODULES=netboot\n")
        builds[name] = [chroot_build(tree, f"mkinitramfs -o /tmp/peer.img {kver}") for _ in range(a.runs)]
        os.remove(f"{tree}/etc/initramfs-tools/conf.d/leanrd-bench-nfs")
        images[name], roots[name] = os.path.join(work, "initramfs-tools-nfs.img"), tree
        shutil.move(f"{tree}/tmp/peer.img", images[name])
        appends[name] = f"root=/dev/nfs nfsroot={SERVER}:{tree} ip=dhcp rw"

        name = "dracut nfs"
        builds[name] = [chroot_build(dtree, f"dracut --no-hostonly -a 'network-legacy nfs' --force /tmp/peer.img {kver}")
                        for _ in range(a.runs)]
        images[name], roots[name] = os.path.join(work, "dracut-nfs.img"), dtree
        shutil.move(f"{dtree}/tmp/peer.img", images[name])
        appends[name] = f"root=nfs:{SERVER}:{dtree} rw ip=dhcp rd.neednet=1"

        # The root builds its own image while booted over NFS (the first leanrd boot).
        first = nfs_boot(kernel, images["leanrd universal"], appends["leanrd universal"] + " leanrd.test=selfbuild",
                         tree)
        m = re.search(r"LEANRD-BUILD leanrd: \S+ in ([0-9.]+) s", first["console"])
        own = f"{tree}/boot/initrd.img-{kver}"
        if "LEANRD-SELFBUILD ok" in first["console"] and os.path.exists(own):
            name = "leanrd host-only"
            images[name], roots[name], appends[name] = os.path.join(work, "leanrd-host-only.img"), tree, ""
            shutil.copy(own, images[name])
            builds[name] = [float(m.group(1))] if m else []
        else:
            print(f"(leanrd host-only: the root's own build failed)\n```\n{first['console'][-3000:]}\n```")

        # One boot at a time: the variants share the exported trees.
        runs = []
        for i in range(a.runs):
            for name in images:
                runs.append((name, nfs_boot(kernel, images[name], appends[name], roots[name])))

        print(f"## Debian 12 root over NFS, {time.strftime('%Y-%m-%d')}, kernel {kver}, QEMU TCG -m 1024, one virtio "
              f"NIC, nfs-ganesha {peers['nfs-ganesha']} and dnsmasq in a network namespace; medians of {a.runs}\n")
        raw, res = report(images, builds, runs, measure, med)
        for name in raw:
            raw[name]["append"] = appends[name]
        print()
        for lean in ("leanrd universal", "leanrd host-only"):
            for peer in ("initramfs-tools nfs", "dracut nfs"):
                print(f"- {lean} / {peer}: initramfs phase {ratio(res, lean, peer, 1)}, "
                      f"whole boot {ratio(res, lean, peer, 0)}")
        save("nfs", {"kernel": kver, "runs": a.runs, "variants": raw}, peers)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
