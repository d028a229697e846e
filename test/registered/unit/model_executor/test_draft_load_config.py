"""A draft ModelRunner's ``LoadConfig`` uses ``--speculative-draft-load-format``
and the target's context length; the target's keeps its own load format, also
once the draft is built, when EPLB reloads the target's weights from the
published config. The draft ``TpModelWorker`` records the ``ServerArgs`` its
``ModelRunner`` would load with.
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
    pass


class TestDraftLoadConfig(CustomTestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        for name, arch in (("t", "LlamaForCausalLM"), ("d", "LlamaForCausalLMEagle")):
            LlamaConfig(
                vocab_size=256,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=1,
                num_attention_heads=4,
                architectures=[arch],
            ).save_pretrained(f"{tmp.name}/{name}")
        self.target = ServerArgs(
            model_path=f"{tmp.name}/t",
            device="cpu",
            skip_tokenizer_init=True,
            attention_backend="torch_native",
            speculative_algorithm="EAGLE",
            speculative_draft_model_path=f"{tmp.name}/d",
            speculative_num_steps=2,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=3,
            speculative_draft_load_format="dummy",
        )
        self.model_config = SimpleNamespace(context_len=4096, vocab_size=256)
        ctx = get_context()
        saved = (ctx._server_args, ctx.flags.capture.enable_torch_compile)
        self.addCleanup(setattr, ctx, "_server_args", saved[0])
        self.addCleanup(setattr, ctx.flags.capture, "enable_torch_compile", saved[1])
        ctx.set_server_args(self.target)

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
        scheduler.tp_worker = SimpleNamespace(
            model_config=self.model_config,
            model_runner=SimpleNamespace(
                server_args=self.target, model_config=self.model_config
            ),
        )

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
