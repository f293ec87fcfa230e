#!/usr/bin/env python3
"""What the drm feature's GPU firmware costs a host-only image (issue 54): for a few GPUs, the
bytes of the firmware leanrd keeps (its selection, crates/gen/src/gpu.rs, through the example
crates/gen/examples/gpu_firmware.rs) against the driver's whole modinfo list, from Debian 13's
kernel (the cached root of `tools/debian-root trixie`) and Debian 13's firmware packages
(firmware-amd-graphics, firmware-intel-graphics, firmware-misc-nonfree from non-free-firmware,
downloaded with `apt-get download` from the machine's own Debian mirror into a scratch
directory). Nothing is booted: what a device loads is the table's, the sizes are the files'.

Usage: python3 bench/gpu_firmware.py
Raw results: bench/results/gpu_firmware-DATE-COMMIT.json (every kept file with its size).
"""

import glob
import os
import re
import subprocess
import tempfile

from common import ROOT, TARGET, save, suite_root

# (name, driver, vendor:device, IP discovery blocks as sysfs shows them)
GPUS = [
    ("Navi 21 (RX 6800/6900)", "amdgpu", "1002:73bf", []),
    # Navi 31 (RX 7900 XTX): its IP versions (amdgpu_discovery.c's table for GC 11.0.0).
    ("Navi 31 (RX 7900 XTX, RDNA3)", "amdgpu", "1002:744c",
     ["GC=11.0.0", "MP0=13.0.0", "MP1=13.0.0", "SDMA0=6.0.0", "UVD=4.0.0", "DMU=3.2.0"]),
    ("Tiger Lake (Iris Xe)", "i915", "8086:9a49", []),
    ("Alder Lake-P (Iris Xe)", "i915", "8086:46a6", []),
    ("Alder Lake-S (UHD 770)", "i915", "8086:4680", []),
]
PACKAGES = ["firmware-amd-graphics", "firmware-intel-graphics", "firmware-misc-nonfree"]


def mirror():
    """The machine's Debian mirror (its apt sources' first .../debian URI)."""
    files = glob.glob("/etc/apt/sources.list") + glob.glob("/etc/apt/sources.list.d/*")
    for f in files:
        with open(f) as fh:
            for uri in re.findall(r"(?:^deb\s+(?:\[[^]]*\]\s+)?|^URIs:\s*)(\S+)", fh.read(), re.M):
                if uri.rstrip("/").endswith("/debian"):
                    return uri
    raise SystemExit("no Debian mirror in /etc/apt/sources.list*")


def firmware_tree(work):
    """Debian 13's GPU firmware packages unpacked under work/fw; their versions."""
    apt = os.path.join(work, "apt")
    for d in ["lists/partial", "cache/archives/partial", "etc"]:
        os.makedirs(os.path.join(apt, d), exist_ok=True)
    with open(f"{apt}/etc/sources.list", "w") as f:
        f.write(f"deb [trusted=yes] {mirror()} trixie main non-free-firmware\n")
    open(f"{apt}/etc/status", "w").close()
    opts = [f"-oDir::Etc::SourceList={apt}/etc/sources.list", "-oDir::Etc::SourceParts=/dev/null",
            f"-oDir::State::Lists={apt}/lists", f"-oDir::Cache={apt}/cache",
            f"-oDir::State::status={apt}/etc/status", "-oDebug::NoLocking=1", "-oAcquire::Languages=none",
            "-oAPT::Sandbox::User=root"]
    subprocess.run(["apt-get", *opts, "-qq", "update"], check=True)
    debs = os.path.join(work, "debs")
    os.makedirs(debs)
    subprocess.run(["apt-get", *opts, "-qq", "download", *PACKAGES], check=True, cwd=debs)
    versions = {}
    for deb in sorted(glob.glob(f"{debs}/*.deb")):
        subprocess.run(["dpkg-deb", "-x", deb, f"{work}/fw"], check=True)
        name, version = os.path.basename(deb).split("_")[:2]
        versions[name] = version
    return f"{work}/fw/usr/lib/firmware", versions


def real(fwdir, name):
    """The file firmware `name` is, as the image would take it (plain, .zst or .xz; a symlink
    to its target); None when the packages lack it."""
    for ext in ["", ".zst", ".xz"]:
        p = os.path.join(fwdir, name + ext)
        if os.path.exists(p):
            return os.path.realpath(p)
    return None


def total(files):
    """The bytes of these files (each file once: the packages' symlinks share their target's)."""
    return sum(os.path.getsize(f) for f in set(files) if f)


def main():
    example = os.path.join(TARGET, "release/examples/gpu_firmware")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "leanrd-gen", "--example", "gpu_firmware"],
                   check=True, cwd=ROOT)
    root = suite_root("trixie")
    kver = os.path.basename(sorted(glob.glob(f"{root}/lib/modules/*"))[-1])
    with tempfile.TemporaryDirectory(prefix="leanrd-bench-gpufw-") as work:
        fwdir, versions = firmware_tree(work)
        lists, results = {}, []
        for name, driver, pci, ip in GPUS:
            if driver not in lists:
                ko = glob.glob(f"{root}/lib/modules/{kver}/kernel/drivers/gpu/drm/**/{driver}.ko*", recursive=True)[0]
                out = subprocess.run(["/sbin/modinfo", "-F", "firmware", ko], check=True, capture_output=True,
                                     text=True).stdout
                lists[driver] = list(dict.fromkeys(out.split()))
            whole = lists[driver]
            r = subprocess.run([example, fwdir, driver, pci, *ip], input="\n".join(whole), capture_output=True,
                               text=True)
            if r.returncode not in (0, 2):
                raise SystemExit(r.stderr)
            kept = r.stdout.split()
            files = {f: real(fwdir, f) for f in whole}
            res = {"gpu": name, "driver": driver, "pci": pci, "ip": ip, "known": r.returncode == 0,
                   "list_files": len(whole), "list_present": sum(p is not None for p in files.values()),
                   "list_bytes": total(files.values()),
                   "kept_files": len(kept), "kept_present": sum(files[f] is not None for f in kept),
                   "kept_bytes": total(files[f] for f in kept),
                   "kept": {f: files[f] and os.path.getsize(files[f]) for f in kept}}
            results.append(res)
    print(f"kernel {kver}; {', '.join(f'{k} {v}' for k, v in versions.items())}")
    print(f"{'GPU':<30}{'driver':<8}{'kept files':>11}{'kept MB':>9}{'list files':>11}{'list MB':>9}")
    for r in results:
        print(f"{r['gpu']:<30}{r['driver']:<8}{r['kept_present']:>11}{r['kept_bytes'] / 1e6:>9.2f}"
              f"{r['list_present']:>11}{r['list_bytes'] / 1e6:>9.2f}")
    save("gpu_firmware", {"kernel": kver, "results": results}, peers=versions)


main()
