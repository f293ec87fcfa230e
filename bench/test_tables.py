#!/usr/bin/env python3
"""Unit checks of bench/tables.py on results and README text made here (not the repository's):
the newest results file is the one rendered, an unknown commit is marked so, a table out of
date is a difference, and markers and results that do not match are problems.

Usage: python3 bench/test_tables.py (crates/testkit/tests/bench_tables.rs runs it)
"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tables  # noqa: E402


def proof_results(ms):
    return {"bench": "proof", "date": "", "commit": "", "command": "python3 bench/proof.py --runs 1",
            "host": {"cores": 2}, "kernel": "6.1.0-1-amd64", "runs": 1,
            "builds": {"host-only": {"build_ms": [ms], "proof_ms": [0.5], "checks": 4}}}


class Tables(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="leanrd-tables-")
        self.results = os.path.join(self.dir.name, "results")
        os.makedirs(self.results)
        self.saved = (tables.RESULTS, tables.README, tables.ROOT)
        tables.RESULTS, tables.README, tables.ROOT = self.results, os.path.join(self.dir.name, "README.md"), self.dir.name

    def tearDown(self):
        tables.RESULTS, tables.README, tables.ROOT = self.saved
        self.dir.cleanup()

    def put(self, name, data):
        date, commit = name[len("proof-"):len("proof-") + 10], name[len("proof-") + 11:-len(".json")]
        data = dict(data, date=date, commit=commit if commit != "unknown" else "")
        with open(os.path.join(self.results, name), "w") as f:
            json.dump(data, f)

    def readme(self, text):
        with open(tables.README, "w") as f:
            f.write(text)

    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = tables.main(list(args))
        return rc, out.getvalue(), err.getvalue()

    def test_the_newest_results_file_is_rendered(self):
        self.put("proof-2026-01-02-abc1234.json", proof_results(10.0))
        self.put("proof-2026-03-01-def5678.json", proof_results(20.0))
        self.put("proof-2025-12-31-0123456.json", proof_results(30.0))
        got = tables.render_proof()
        self.assertIn("2026-03-01, commit def5678", got)
        self.assertIn("| host-only | 20.0 ms |", got)

    def test_an_unknown_commit_is_marked(self):
        self.put("proof-2026-01-02-unknown.json", proof_results(10.0))
        self.assertIn("commit unknown", tables.render_proof())

    def test_check_fails_with_a_diff_until_the_tables_are_written(self):
        self.put("proof-2026-01-02-abc1234.json", proof_results(10.0))
        self.readme("# x\n\n<!-- bench:proof -->\nold table\n<!-- /bench:proof -->\n\ntext after\n")
        rc, out, _ = self.run_main("--check")
        self.assertEqual(rc, 1)
        self.assertIn("-old table", out)
        self.assertIn("+| host-only | 10.0 ms |", out)
        rc, _, _ = self.run_main()
        self.assertEqual(rc, 0)
        rc, out, err = self.run_main("--check")
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("boot: not generated (no raw results)", out)
        with open(tables.README) as f:
            text = f.read()
        self.assertTrue(text.startswith("# x\n\n<!-- bench:proof -->\n_`python3 bench/proof.py --runs 1`"))
        self.assertTrue(text.endswith("<!-- /bench:proof -->\n\ntext after\n"))

    def test_markers_without_results_and_results_without_markers_are_problems(self):
        self.put("proof-2026-01-02-abc1234.json", proof_results(10.0))
        self.readme("<!-- bench:boot -->\n<!-- /bench:boot -->\n")
        rc, _, err = self.run_main("--check")
        self.assertEqual(rc, 1)
        self.assertIn("boot: marked in README.md but there are no raw results", err)
        self.assertIn("proof: raw results in bench/results but README.md has no", err)

    def test_results_no_renderer_takes_are_a_problem(self):
        with open(os.path.join(self.results, "uki-2026-01-02-abc1234.json"), "w") as f:
            json.dump({"date": "2026-01-02"}, f)
        self.readme("")
        rc, _, err = self.run_main("--check")
        self.assertEqual(rc, 1)
        self.assertIn("uki: raw results in bench/results but tables.py cannot render them yet", err)


if __name__ == "__main__":
    unittest.main()
