"""The installed sglang against the committed writer-ratchet baseline.

scripts/ratchet/baseline.json records the ServerArgs writer sites of the
patched sglang 0.5.16; this test fails when a change adds one (or removes one
without lowering the baseline: run ``python scripts/ratchet/writer_ratchet.py
--update``).
"""

import subprocess
import sys
import unittest

from test_writer_ratchet import REPO, SCRIPT, wr

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=30, suite="stage-a-test-cpu")

class TestWriterRatchetBaseline(CustomTestCase):
    def test_the_installed_sglang_matches_the_committed_baseline(self):
        proc = subprocess.run(
            [sys.executable, SCRIPT], capture_output=True, text=True, cwd=REPO
        )
        out = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 0, out)
        self.assertIn("writer ratchet: OK", out)

    def test_the_fast_path_finds_what_parsing_every_file_finds(self):
        root = wr.resolve_root(None)
        fast, nfiles = wr.collect_sites(root, prefilter=True)
        full, _ = wr.collect_sites(root, prefilter=False)
        self.assertGreater(nfiles, 1000)
        self.assertEqual(fast, full)


if __name__ == "__main__":
    unittest.main()
