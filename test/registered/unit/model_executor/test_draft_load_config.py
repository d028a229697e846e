"""A draft ModelRunner loads with the draft's ``LoadConfig``; the target keeps its own.

Regression: the scheduler wrote ``--speculative-draft-load-format`` onto the
``ServerArgs`` the target worker and ``get_server_args()`` share, so once the
draft was built, EPLB reloaded the target's weights with the draft's load
format. The draft ``TpModelWorker`` stand-in records the ``ServerArgs`` its
``ModelRunner`` would build its ``LoadConfig`` from, and stops there.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

from sglang.srt.distributed.parallel_state_wrapper import ParallelState
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.model_executor.model_runner_components.load_model_utils import (
    build_load_config,
)
from sglang.srt.runtime_context import get_context, get_server_args
from sglang.srt.speculative import draft_worker_common
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=11, suite="base-a-test-cpu")


def _load_format(server_args):
    return build_load_config(
        server_args=server_args,
        tp_rank=0,
        remote_instance_weight_transporter_engine=None,
        remote_instance_weight_transporter_session_id="",
        draft_model_idx=None,
    ).load_format


class _DraftBuilt(Exception):
    """Raised by the draft TpModelWorker stand-in once it has its config."""


class TestDraftLoadConfig(CustomTestCase):
    def setUp(self):
        override = get_context().override_server_args(
            speculative_algorithm="EAGLE",
            speculative_num_steps=2,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=3,
            speculative_draft_load_format="dummy",
        )
        self.target = override.install()
        self.addCleanup(override.restore)
        self.model_config = SimpleNamespace(context_len=4096, vocab_size=256)

    def assert_load_formats_after(self, build_draft, tp_worker_site):
        built = []

        def record_draft_tp_worker(server_args=None, **kwargs):
            built.append(server_args)
            raise _DraftBuilt()

        with mock.patch(tp_worker_site, side_effect=record_draft_tp_worker):
            with self.assertRaises(_DraftBuilt):
                build_draft()

        self.assertEqual(len(built), 1)
        self.assertEqual(_load_format(built[0]), "dummy")
        self.assertEqual(built[0].context_length, 4096)
        self.assertEqual(_load_format(self.target), "auto")
        self.assertIsNone(self.target.context_length)
        self.assertEqual(_load_format(get_server_args()), "auto")

    def test_an_eagle_draft_loads_with_the_draft_load_format(self):
        scheduler = Scheduler.__new__(Scheduler)
        scheduler.server_args = self.target
        scheduler.spec_algorithm = SpeculativeAlgorithm.EAGLE
        scheduler.ps = ParallelState.trivial()
        scheduler.nccl_port = 12345
        # A mock, so a scheduler that reads more of its target worker still runs.
        scheduler.tp_worker = mock.Mock(name="target_worker")
        scheduler.tp_worker.model_config = self.model_config
        scheduler.tp_worker.model_runner.model_config = self.model_config
        scheduler.tp_worker.model_runner.server_args = self.target

        self.assert_load_formats_after(
            scheduler.maybe_init_draft_worker,
            "sglang.srt.speculative.eagle_worker_v2.TpModelWorker",
        )

    def test_a_build_draft_tp_worker_draft_loads_with_the_draft_load_format(self):
        # As DFLASH and DSPARK build theirs, here handed the target's config.
        self.assert_load_formats_after(
            lambda: draft_worker_common.build_draft_tp_worker(
                server_args=self.target,
                gpu_id=0,
                ps=ParallelState.trivial(),
                nccl_port=12345,
                target_model_config=self.model_config,
                algo_label="DFLASH",
            ),
            "sglang.srt.speculative.draft_worker_common.TpModelWorker",
        )


if __name__ == "__main__":
    unittest.main()
