"""A draft ModelRunner's ``LoadConfig`` uses ``--speculative-draft-load-format``;
the target's keeps its own load format, also once the draft is built, when
EPLB and ``update_weights_from_disk`` reload the target's weights from the
published config.

The draft is built through the real ``Scheduler.maybe_init_draft_worker``: by
the real ``EAGLEWorkerV2``, and by a worker that builds its draft with
``build_draft_tp_worker`` as DFLASH and DSPARK do. The draft ``TpModelWorker``
only records the ``ServerArgs`` its ``ModelRunner`` would load with.
"""

import tempfile
import unittest
from types import SimpleNamespace
from unittest import mock

from transformers import LlamaConfig

from sglang.srt.distributed.parallel_state_wrapper import ParallelState
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.model_executor.model_runner_components.load_model_utils import (
    build_load_config,
)
from sglang.srt.runtime_context import get_context, get_server_args
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative import draft_worker_common, spec_registry
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")

PLUGIN = "DRAFT_LOAD_CONFIG_TEST"


def _write_model_config(path, architecture):
    LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=1024,
        architectures=[architecture],
    ).save_pretrained(path)
    return path


def _load_format(server_args):
    return build_load_config(
        server_args=server_args,
        tp_rank=0,
        remote_instance_weight_transporter_engine=None,
        remote_instance_weight_transporter_session_id="",
        draft_model_idx=None,
    ).load_format


class _DraftBuilt(Exception):
    pass


class TestDraftLoadConfig(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.target_path = _write_model_config(f"{cls._tmp.name}/t", "LlamaForCausalLM")
        cls.draft_path = _write_model_config(
            f"{cls._tmp.name}/d", "LlamaForCausalLMEagle"
        )

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def build_draft(self, spec_algorithm, tp_worker_site):
        """Returns (target, the config the draft TpModelWorker got, the
        config published once maybe_init_draft_worker returned)."""
        target = ServerArgs(
            model_path=self.target_path,
            device="cpu",
            skip_tokenizer_init=True,
            attention_backend="torch_native",
            speculative_algorithm="EAGLE",
            speculative_draft_model_path=self.draft_path,
            speculative_num_steps=2,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=3,
            speculative_draft_load_format="dummy",
        )
        scheduler = Scheduler.__new__(Scheduler)
        scheduler.server_args = target
        scheduler.spec_algorithm = spec_algorithm
        scheduler.ps = ParallelState.trivial()
        scheduler.nccl_port = 12345
        model_config = SimpleNamespace(context_len=4096, vocab_size=256)
        scheduler.tp_worker = SimpleNamespace(
            model_config=model_config,
            model_runner=SimpleNamespace(server_args=target, model_config=model_config),
        )
        built = []

        def record_draft_tp_worker(server_args=None, **kwargs):
            built.append(server_args)
            raise _DraftBuilt()

        ctx = get_context()
        saved = (ctx._server_args, ctx.flags.capture.enable_torch_compile)
        ctx.set_server_args(target)
        try:
            with mock.patch(tp_worker_site, side_effect=record_draft_tp_worker):
                with self.assertRaises(_DraftBuilt):
                    scheduler.maybe_init_draft_worker()
            published_after = get_server_args()
        finally:
            ctx._server_args, ctx.flags.capture.enable_torch_compile = saved
        self.assertEqual(len(built), 1)
        return target, built[0], published_after

    def assert_load_formats(self, target, draft, published_after):
        self.assertEqual(_load_format(draft), "dummy")
        self.assertEqual(_load_format(target), "auto")
        self.assertEqual(_load_format(published_after), "auto")

    def test_an_eagle_draft_loads_with_the_draft_load_format(self):
        self.assert_load_formats(
            *self.build_draft(
                SpeculativeAlgorithm.EAGLE,
                "sglang.srt.speculative.eagle_worker_v2.TpModelWorker",
            )
        )

    def test_a_build_draft_tp_worker_draft_loads_with_the_draft_load_format(self):
        class DFlashLikeWorker:
            def __init__(self, server_args, gpu_id, ps, nccl_port, target_worker):
                draft_worker_common.build_draft_tp_worker(
                    server_args=server_args,
                    gpu_id=gpu_id,
                    ps=ps,
                    nccl_port=nccl_port,
                    target_model_config=target_worker.model_runner.model_config,
                    algo_label="DFLASH",
                )

        SpeculativeAlgorithm.register(PLUGIN)(lambda server_args: DFlashLikeWorker)
        try:
            result = self.build_draft(
                SpeculativeAlgorithm.from_string(PLUGIN),
                "sglang.srt.speculative.draft_worker_common.TpModelWorker",
            )
        finally:
            # 0.5.16 has no public unregister.
            spec_registry._REGISTRY.pop(PLUGIN)
        self.assert_load_formats(*result)


if __name__ == "__main__":
    unittest.main()
