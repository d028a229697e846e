"""draft_server_args_copy: the ServerArgs a speculative draft worker is built from.

It is a deep copy of the resolved target config with the draft's own values
(the target's context length, --speculative-draft-load-format) on top; the
target's instance is never written.
"""

import logging
import unittest
from types import SimpleNamespace

from draft_isolation_harness import (
    TARGET_CONTEXT_LEN,
    build_target_server_args,
    changed_fields,
    public_fields,
    published_target,
)

import sglang.srt.server_args as server_args_module
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

_TARGET_MODEL_CONFIG = SimpleNamespace(context_len=TARGET_CONTEXT_LEN)


def draft_server_args_copy(server_args, target_model_config):
    # Looked up at call time: this module is collected on unpatched sglang too.
    return server_args_module.draft_server_args_copy(server_args, target_model_config)


class TestDraftServerArgsCopy(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.with_draft_format = build_target_server_args("EAGLE", "dummy")
        cls.without_draft_format = build_target_server_args("EAGLE", None)

    def test_the_draft_context_length_is_the_targets(self):
        target = self.with_draft_format
        self.assertIsNone(target.context_length)

        draft = draft_server_args_copy(target, _TARGET_MODEL_CONFIG)

        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)

    def test_the_target_instance_is_left_alone(self):
        target = self.with_draft_format
        before = public_fields(target)

        draft = draft_server_args_copy(target, _TARGET_MODEL_CONFIG)

        self.assertIsNot(draft, target)
        self.assertEqual(changed_fields(before, public_fields(target)), [])

    def test_the_draft_load_format_applies_only_when_configured(self):
        with_format = draft_server_args_copy(
            self.with_draft_format, _TARGET_MODEL_CONFIG
        )
        without_format = draft_server_args_copy(
            self.without_draft_format, _TARGET_MODEL_CONFIG
        )

        self.assertEqual(with_format.load_format, "dummy")
        self.assertEqual(without_format.load_format, "auto")

    def test_only_the_draft_fields_differ_from_the_target(self):
        target = self.with_draft_format

        draft = draft_server_args_copy(target, _TARGET_MODEL_CONFIG)

        self.assertEqual(
            changed_fields(public_fields(target), public_fields(draft)),
            ["context_length", "load_format"],
        )

    def test_the_copy_shares_no_mutable_state_with_the_target(self):
        target = build_target_server_args("EAGLE", "dummy")
        draft = draft_server_args_copy(target, _TARGET_MODEL_CONFIG)

        shared = [
            name
            for name, value in vars(target).items()
            if not isinstance(value, (str, int, float, type(None)))
            and getattr(draft, name) is value
        ]
        self.assertEqual(shared, [])
        draft.override("test.draft_only", cuda_graph_bs_decode=[1, 2])
        self.assertIsNone(target.cuda_graph_bs_decode)
        self.assertNotIn(
            "test.draft_only", [source for source, _ in target._resolved_overrides]
        )

    def test_load_time_overrides_made_before_the_copy_reach_it(self):
        from sglang.srt.arg_groups.overrides import declare_load_time_override

        target = build_target_server_args("EAGLE", "dummy")
        with published_target(target):
            # As the target's ModelRunner and model code do while it loads.
            declare_load_time_override(
                "test.target_load", {"kv_cache_dtype": "fp8_e5m2"}
            )

        draft = draft_server_args_copy(target, _TARGET_MODEL_CONFIG)

        self.assertEqual(draft.kv_cache_dtype, "fp8_e5m2")

    def test_the_copys_draft_fields_win_over_earlier_overrides(self):
        target = build_target_server_args("EAGLE", "dummy")
        target.override("test.earlier", context_length=2048, load_format="auto")

        draft = draft_server_args_copy(target, _TARGET_MODEL_CONFIG)

        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(draft.load_format, "dummy")
        self.assertEqual(target.context_length, 2048)
        self.assertEqual(target.load_format, "auto")

    def test_the_draft_load_format_is_logged_once(self):
        target = self.with_draft_format
        logger = logging.getLogger("sglang.srt.server_args")

        with self.assertLogs(logger, level="INFO") as logs:
            draft = draft_server_args_copy(target, _TARGET_MODEL_CONFIG)
            # dflash/dspark derive their inner copy from the scheduler's.
            draft_server_args_copy(draft, _TARGET_MODEL_CONFIG)
            logger.info("end of test")

        draft_lines = [line for line in logs.output if "load_format" in line]
        self.assertEqual(
            draft_lines,
            ["INFO:sglang.srt.server_args:Using draft model load_format: 'dummy'"],
        )

    def test_a_bare_write_on_the_copy_still_raises_under_strict_mutation(self):
        draft = draft_server_args_copy(self.with_draft_format, _TARGET_MODEL_CONFIG)

        with self.assertRaisesRegex(AttributeError, "assigned after resolution"):
            draft.load_format = "auto"


if __name__ == "__main__":
    unittest.main()
