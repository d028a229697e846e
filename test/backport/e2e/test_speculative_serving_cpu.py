"""End to end: a real ``sglang.launch_server --speculative-algorithm EAGLE``
(and STANDALONE) serves on this CPU, and the target keeps its own config.

Each speculative class starts one real server in a subprocess (``cpu_serving.py``
runs ``sglang.launch_server`` with the CPU settings and kernel stand-ins it
declares; on a CUDA machine, with none of them) on 127.0.0.1 at a free port,
with tiny local models and ``--speculative-draft-load-format dummy``, waits for
``/health`` with a bound, and stops the server's whole process group in
``tearDownClass``, also when ``setUpClass`` fails. Every request has a timeout.
One target-only server, started once per module, gives the reference output.

The ``regression`` tests read the scheduler's published config through
``/server_info`` (``internal_states[0]``; its top-level fields are the HTTP
process's own copy). On sglang 0.5.16 as released the draft's values are
written onto the target's ``ServerArgs``, and the scheduler reports
``load_format='dummy'`` and the context length handed to the draft; the
patched scheduler reports what the server was launched with. The server
imports the same sglang as this process (PYTHONPATH is inherited by the server
and its spawn children, and each of them reports its sglang), so
``PYTHONPATH=.build/pristine`` runs them unpatched.

Not regression tests:
* greedy ``/generate`` equals the target-only output (and verify steps ran);
* ``/update_weights_from_disk`` with other weights changes the output, and with
  the target's own path brings it back. When the request names no load format
  the HTTP process's copy supplies it (``auto`` on both), so 0.5.16 reloads the
  target's real weights too: this pins that the patched server still does.
  sglang reloads the draft from the same path, so the STANDALONE draft (the
  target's architecture) becomes the target, and its drafts are then accepted.
"""

import functools
import os
import shutil
import tempfile
import unittest

import cpu_serving as serving
import pytest
import tiny_models

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=180, suite="base-a-test-cpu")

PROMPT = [5, 17, 33, 90, 7, 64]
MAX_NEW_TOKENS = 12

_models_dir = None


@functools.lru_cache(maxsize=None)
def _models():
    global _models_dir
    _models_dir = tempfile.mkdtemp(prefix="sgl-e2e-models-")
    return tiny_models.write_tiny_models(
        _models_dir,
        dtype=serving.MODEL_DTYPE,
        names=("target", "target_other_weights", "EAGLE", "STANDALONE"),
    )


@functools.lru_cache(maxsize=None)
def _target_only_output():
    """Greedy output of the target served alone (one server per module)."""
    with serving.ServerProcess(serving.speculative_argv(_models(), None)) as server:
        return server.generate(PROMPT, MAX_NEW_TOKENS)["output_ids"]


def tearDownModule():
    if _models_dir is not None:
        shutil.rmtree(_models_dir, ignore_errors=True)


class TestTargetOnlyServer(CustomTestCase):
    """The reference: the target alone serves greedy output (sanity)."""

    def test_the_target_alone_serves_the_requested_number_of_tokens(self):
        output = _target_only_output()
        self.assertEqual(len(output), MAX_NEW_TOKENS)
        self.assertTrue(all(0 <= t < 256 for t in output), output)


class _SpeculativeServer:
    """One real speculative server per class; ALGORITHM is set by each class."""

    ALGORITHM = None
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = serving.ServerProcess(
            serving.speculative_argv(
                _models(),
                cls.ALGORITHM,
                "--speculative-draft-load-format",
                "dummy",
            )
        )
        cls.server.start()
        cls.server.wait_ready()
        cls.info = cls.server.server_info()

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()

    def scheduler_config(self):
        return self.info["internal_states"][0]

    # -- regression: the scheduler publishes the target's own config -------- #

    @pytest.mark.regression
    def test_the_scheduler_reports_the_targets_own_load_format(self):
        # Launched with --speculative-draft-load-format dummy only: the target's
        # load_format is the default, as the HTTP process's copy shows.
        self.assertEqual(self.info["load_format"], "auto")
        self.assertEqual(self.info["speculative_draft_load_format"], "dummy")
        self.assertEqual(
            self.scheduler_config()["load_format"],
            "auto",
            "the scheduler's published config has the draft's load_format "
            f"(written by: {self.writes_of('load_format')})",
        )

    @pytest.mark.regression
    def test_the_scheduler_reports_the_targets_own_context_length(self):
        # No --context-length given: the target's stays unset (None), and the
        # target's model config resolves its own (the log's context_len=512).
        self.assertIsNone(self.info["context_length"])
        self.assertIsNone(
            self.scheduler_config()["context_length"],
            "the scheduler's published config has the context length handed to "
            f"the draft (written by: {self.writes_of('context_length')})",
        )

    def writes_of(self, field):
        """Sources of the recorded override() writes of ``field``."""
        return [
            source
            for source, fields in self.scheduler_config().get("_runtime_mutations", [])
            if field in fields
        ]

    # -- serving ------------------------------------------------------------ #

    def test_every_server_process_runs_this_tests_sglang_and_stand_ins(self):
        import sglang

        expected = {
            "sglang": os.path.dirname(os.path.abspath(sglang.__file__)),
            # "none" on a CUDA machine: there the server runs stock.
            "stand-ins": (
                "vllm._custom_ops,torch.cuda.synchronize,speculative-kernels"
                if serving.plain_cpu()
                else "none"
            ),
        }
        reported = self.server.reported_processes()
        # The launcher and its spawn children (scheduler, detokenizer).
        self.assertGreaterEqual(len(reported), 3, self.server.log_tail())
        for pid, process in reported.items():
            self.assertEqual(process, expected, f"process {pid}")

    def test_greedy_output_is_the_target_only_servers_output(self):
        reply = self.server.generate(PROMPT, MAX_NEW_TOKENS)
        self.assertGreaterEqual(
            reply["meta_info"].get("spec_verify_ct", 0),
            1,
            f"no speculative verify step ran: {reply['meta_info']}",
        )
        self.assertEqual(reply["output_ids"], _target_only_output())

    def test_reloading_the_targets_weights_from_disk_restores_its_output(self):
        models = _models()
        before = self.server.generate(PROMPT, MAX_NEW_TOKENS)["output_ids"]
        try:
            # Other weights first, so that only a real load from the target's
            # files can bring its output back.
            self.server.update_weights_from_disk(models["target_other_weights"])
            other = self.server.generate(PROMPT, MAX_NEW_TOKENS)["output_ids"]
            self.assertNotEqual(other, before, "the other weights changed nothing")
        finally:
            reply = self.server.update_weights_from_disk(models["target"])
        self.assertTrue(reply["success"], reply)
        after = self.server.generate(PROMPT, MAX_NEW_TOKENS)
        self.assertEqual(after["output_ids"], before)
        self.assertEqual(self.server.server_info()["model_path"], models["target"])
        self.after_reload(after)

    def after_reload(self, reply):
        pass


class TestEagleServer(_SpeculativeServer, CustomTestCase):
    ALGORITHM = "EAGLE"


class TestStandaloneServer(_SpeculativeServer, CustomTestCase):
    # The STANDALONE draft has the target's architecture, so the reload (which
    # sglang also applies to the draft, from the same path) turns the dummy
    # draft into the target: from then on its drafts are accepted.
    ALGORITHM = "STANDALONE"

    def after_reload(self, reply):
        self.assertGreater(
            reply["meta_info"].get("spec_accept_length", 0),
            2,
            "a draft with the target's weights is rarely accepted: "
            f"{reply['meta_info']}",
        )


if __name__ == "__main__":
    unittest.main()
