#!/usr/bin/env python3
"""The boot proof's cost (issue 18): `leanrd build` host-only (this machine) and --universal,
--runs times each with --force; the proof's own time as the build reports it ("boot proof: N
checks, X ms") against the whole build's wall time. Medians.

Usage: python3 bench/proof.py [--runs 3] [--kver KVER]
Raw results: bench/results/proof-DATE-COMMIT.json (every build's figures).
"""

import re
import statistics
import subprocess
import tempfile
import time

from common import boot_setup, save


def main():
    a, kver, _kernel, leanrd, init = boot_setup()
    with tempfile.TemporaryDirectory(prefix="leanrd-bench-proof-") as work:
        print(f"kernel {kver}, {a.runs} runs, medians")
        print(f"{'build':<12}{'build ms':>10}{'proof ms':>10}{'share':>8}{'checks':>8}")
        raw = {}
        for name, extra in (("host-only", []), ("universal", ["--universal"])):
            walls, proofs, checks = [], [], 0
            for _ in range(a.runs):
                cmd = [leanrd, "build", "-k", kver, "--init", init, "-o", f"{work}/{name}.img", "--force", *extra]
                s = time.perf_counter()
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stderr
                walls.append((time.perf_counter() - s) * 1e3)
                m = re.search(r"boot proof: (\d+) checks, ([\d.]+) ms", out)
                if not m:
                    raise SystemExit(f"no proof line in:\n{out}")
                checks, proofs = int(m.group(1)), proofs + [float(m.group(2))]
            w, p = statistics.median(walls), statistics.median(proofs)
            print(f"{name:<12}{w:>10.1f}{p:>10.2f}{p / w * 100:>7.1f}%{checks:>8}")
            raw[name] = {"build_ms": walls, "proof_ms": proofs, "checks": checks}
        save("proof", {"kernel": kver, "runs": a.runs, "builds": raw})


if __name__ == "__main__":
    main()
