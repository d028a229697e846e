"""The writes onto a ServerArgs in the real sglang 0.5.16 packages: on the
release the whole-package walk (whole_package_writes.py, this repository's
own) finds exactly the sites the previous ratchet found by a full parse, the
shipped ratchet finds the draft writes on the draft side, and the fix takes
the whole package's count from 75 to 70 and the draft side's writes onto the
target away.

The packages::

    .build/pristine/sglang         the release, untouched (PRISTINE)
    the sglang import finds        the patched install here; the release
                                   under PYTHONPATH=.build/pristine
    pristine_sites_by_the_previous_ratchet.txt
                                   the release's 75 sites as file:line kind
                                   function, by the previous ratchet

The regression test scans the sglang that ``import sglang`` finds, so it
passes on the patched install and must fail on the release.
"""

import os
import unittest

import pytest
from ratchet_harness import PRISTINE, load_ratchet, load_whole_package_walk

import sglang
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=20, suite="base-a-test-cpu")

wr = load_ratchet()
whole = load_whole_package_walk()
PREVIOUS = os.path.join(
    os.path.dirname(__file__), "pristine_sites_by_the_previous_ratchet.txt"
)
# The draft values that 0.5.16 writes onto the target's (shared) ServerArgs,
# by their override sources (the whole-package walk) and as the shipped
# ratchet's pin names them.
DRAFT_WRITES = (
    "'scheduler.draft_load_format'",
    "'spec_worker.match_target_context_length'",
    "'eagle_worker.hot_token_map'",
)
DRAFT_WRITE_KEYS = (
    ("Scheduler.maybe_init_draft_worker", "self.server_args.override(load_format)"),
    ("EAGLEWorkerV2.__init__", "server_args.override(context_length)"),
    (
        "EagleDraftWorker.init_token_map",
        "self.server_args.override(json_model_override_args)",
    ),
)


def previous_sites():
    """The release's sites as the previous ratchet found them, sorted."""
    with open(PREVIOUS, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    return sorted(line for line in lines if line[:1] != "#")


class TestRealPackages(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.release = whole.scan(PRISTINE).sites

    def test_on_the_release_it_finds_what_the_previous_full_parse_found(self):
        previous = previous_sites()
        found = [f"{s.file}:{s.line} {s.kind} {s.function}" for s in self.release]
        self.assertEqual(len(previous), 75)
        self.assertEqual(sorted(found), previous)

    def test_on_the_release_the_draft_side_holds_the_draft_writes(self):
        draft_side = wr.draft_side_sites(PRISTINE)
        keys = [s.key() for s in draft_side]
        self.assertEqual(len(draft_side), 22)
        for key in DRAFT_WRITE_KEYS:
            self.assertIn(key, keys)

    @pytest.mark.regression
    def test_the_fix_takes_the_count_from_75_to_70_and_drops_the_draft_writes(self):
        root = os.path.realpath(os.path.dirname(sglang.__file__))
        sites = whole.scan(root).sites
        leaks = [
            f"{s.file}:{s.line}: {s.code}" for s in sites
            if s.kind == "override" and any(w in s.write for w in DRAFT_WRITES)
        ]  # fmt: skip
        self.assertEqual(
            (len(self.release), len(sites)),
            (75, 70),
            f"{root}: the draft writes onto the shared instance:\n" + "\n".join(leaks),
        )
        self.assertEqual(leaks, [])


if __name__ == "__main__":
    unittest.main()
