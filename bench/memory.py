#!/usr/bin/env python3
"""Memory benchmark (issue 10, item 8): peak RSS of archiving many small files.

A tree of --files small files (200 directories) is made once; then `leanrd cpio --root`
(to a file and to stdout), GNU `cpio -o -H newc` and `bsdcpio -o --format newc` (both reading
a `find | sort` list made beforehand) run --runs times each under `/usr/bin/time -v`. Printed: the median peak
RSS of each, leanrd's bytes per entry (total, and above the RSS of archiving an empty tree),
and leanrd's ratio to GNU cpio. The target is <= 150 bytes per entry.

Usage: python3 bench/memory.py [--files 200000] [--runs 3] [--work DIR]
Raw results: bench/results/memory-DATE-COMMIT.json (every run's peak RSS).
"""

import argparse
import os
import re
import statistics
import subprocess
import tempfile

from common import ROOT, save, sh, tool_version


def peak_kb(cmd, cwd=None):
    r = subprocess.run(["/usr/bin/time", "-v", "sh", "-c", cmd], cwd=cwd, capture_output=True, text=True,
                       check=True)
    # The shell is the measured process's parent; -v reports the largest of the children.
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))


def make_tree(root, files):
    per_dir = max(1, files // 200)
    made = 0
    for d in range(200):
        sub = os.path.join(root, f"dir{d:03}", "sub")
        os.makedirs(sub)
        for f in range(per_dir):
            if made >= files:
                break
            with open(os.path.join(sub, f"file{f:05}.txt"), "w") as fh:
                fh.write("x" * (f % 50))
            made += 1
    return made + 400  # the directories are entries too


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    sh("cargo build --release -q -p leanrd", cwd=ROOT)
    leanrd = os.path.join(ROOT, "target/release/leanrd")
    with tempfile.TemporaryDirectory(dir=a.work) as work:
        tree, empty = os.path.join(work, "tree"), os.path.join(work, "empty")
        os.makedirs(empty)
        entries = make_tree(tree, a.files)
        out = os.path.join(work, "out.cpio")
        # The peers read a path list made beforehand, so that only the archiver is measured.
        listing = os.path.join(work, "list")
        sh(f"cd {tree} && find . | sort > {listing}")
        cmds = {
            "leanrd cpio --root -o FILE": f"{leanrd} cpio --root {tree} -o {out}",
            "leanrd cpio --root > stdout": f"{leanrd} cpio --root {tree} > /dev/null",
            "GNU cpio -o -H newc": f"exec cpio -o -H newc --quiet < {listing} > {out}",
            "bsdcpio -o --format newc": f"exec bsdcpio -o --format newc --quiet < {listing} > {out}",
        }
        base_runs = [peak_kb(f"{leanrd} cpio --root {empty} -o {out}") for _ in range(a.runs)]
        base = statistics.median(base_runs)
        rows, raw = {}, {}
        for name, cmd in cmds.items():
            raw[name] = [peak_kb(cmd, cwd=tree) for _ in range(a.runs)]
            rows[name] = statistics.median(raw[name])
        print(f"{entries} entries, median of {a.runs} runs; leanrd on an empty tree: {base} KB")
        print(f"{'command':32} {'peak RSS':>12} {'B/entry':>9} {'B/entry above empty':>20}")
        for name, kb in rows.items():
            per = kb * 1024 / entries
            above = (kb - base) * 1024 / entries if name.startswith("leanrd") else float("nan")
            print(f"{name:32} {kb:>9} KB {per:>9.1f} {above:>20.1f}")
        gnu = rows["GNU cpio -o -H newc"]
        print(f"leanrd (file) / GNU cpio: {rows['leanrd cpio --root -o FILE'] / gnu:.1f}x")
        save("memory", {"files": a.files, "entries": entries, "runs": a.runs, "empty_tree_peak_kb": base_runs,
                        "peak_kb": raw},
             {"GNU cpio": tool_version("cpio --version"), "bsdcpio": tool_version("bsdcpio --version")})


if __name__ == "__main__":
    main()
