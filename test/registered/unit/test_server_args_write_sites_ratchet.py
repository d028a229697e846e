"""No new place writes onto a ServerArgs (scripts/ratchet/writer_ratchet.py).

Run from a checkout, the ratchet scans its python/sglang and compares it with
scripts/ratchet/baseline.txt if there is one, else with the tree at the commit
that added the ratchet; it prints each new writer site as file:line.
"""

import os
import subprocess
import sys
import unittest

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=13, suite="base-a-test-cpu")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
RATCHET = os.path.join(ROOT, "scripts", "ratchet", "writer_ratchet.py")


class TestServerArgsWriteSitesRatchet(CustomTestCase):
    def test_no_change_adds_a_site_that_writes_onto_a_server_args(self):
        proc = subprocess.run(
            [sys.executable, RATCHET],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("writer ratchet: OK", proc.stdout)


if __name__ == "__main__":
    unittest.main()
