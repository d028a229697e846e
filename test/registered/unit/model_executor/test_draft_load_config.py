"""The draft ModelRunner's LoadConfig uses --speculative-draft-load-format;
the target's keeps its own load format, also once the draft was built (EPLB
and update_weights_from_disk reload the target's weights with it)."""

import os
import sys
import unittest

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "spec"))

from draft_isolation_harness import (  # noqa: E402
    _DraftBuilt,
    build_target_server_args,
    make_scheduler,
    published_target,
    stubbed_draft_tp_worker,
)

from sglang.srt.model_executor.model_runner_components.load_model_utils import (  # noqa: E402
    build_load_config,
)
from sglang.srt.runtime_context import get_server_args  # noqa: E402
from sglang.test.ci.ci_register import register_cpu_ci  # noqa: E402
from sglang.test.test_utils import CustomTestCase  # noqa: E402

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")


def _load_config(server_args):
    return build_load_config(
        server_args=server_args,
        tp_rank=0,
        remote_instance_weight_transporter_engine=None,
        remote_instance_weight_transporter_session_id="",
        draft_model_idx=None,
    )


@pytest.mark.regression
class TestDraftLoadConfig(CustomTestCase):
    def _build_draft(self, algorithm):
        """Run the scheduler's draft construction up to the draft
        TpModelWorker; returns (target, the draft's ServerArgs, the config
        published after construction)."""
        target = build_target_server_args(algorithm, "dummy")
        scheduler = make_scheduler(target)
        with published_target(target), stubbed_draft_tp_worker() as records:
            with self.assertRaises(_DraftBuilt):
                scheduler.maybe_init_draft_worker()
            published_after = get_server_args()
        self.assertEqual(len(records), 1)
        return target, records[0].server_args, published_after

    def _assert_load_formats(self, algorithm):
        target, draft, published_after = self._build_draft(algorithm)

        self.assertEqual(_load_config(draft).load_format, "dummy")
        self.assertEqual(_load_config(target).load_format, "auto")
        # What a weight reload reads after the draft is built.
        self.assertEqual(_load_config(published_after).load_format, "auto")

    def test_an_eagle_draft_loads_with_the_draft_load_format(self):
        self._assert_load_formats("EAGLE")

    def test_a_dflash_draft_loads_with_the_draft_load_format(self):
        # build_draft_tp_worker makes its own copy: it must keep the format.
        self._assert_load_formats("DFLASH")


if __name__ == "__main__":
    unittest.main()
