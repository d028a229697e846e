"""Every speculative algorithm's real draft worker, driven through the real
``Scheduler.maybe_init_draft_worker``, builds its draft from its own copy of
``ServerArgs`` and leaves the target's instance (the published process-wide
config) alone.

Only the draft ``TpModelWorker`` is stubbed (see draft_isolation_harness): it
records what it was handed and what was published, then stops construction.

Per algorithm there are two classes. ``Test<Algo>DraftIsolation`` holds the
regression tests (marked ``regression``: each fails on unpatched sglang
0.5.16, where the scheduler and the spec workers write draft values onto the
target's instance and nothing publishes the draft's config).
``Test<Algo>DraftConfig`` holds what already held on 0.5.16 and must keep
holding: the draft's context length and load format, the target published
again afterwards.
"""

import unittest

import draft_isolation_harness as harness
import pytest

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=40, suite="base-a-test-cpu")

_RESULTS = {}


def _run(algorithm, draft_load_format):
    # One construction per (algorithm, load format) per process; the
    # harness restores the published slot and unregisters the plugin itself.
    key = (algorithm, draft_load_format)
    if key not in _RESULTS:
        _RESULTS[key] = harness.run_algorithm(algorithm, draft_load_format)
    return _RESULTS[key]


class _DraftCase:
    ALGORITHM = None
    DRAFT_LOAD_FORMAT = harness.DRAFT_LOAD_FORMAT

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.result = _run(cls.ALGORITHM, cls.DRAFT_LOAD_FORMAT)

    def draft(self):
        """What the draft TpModelWorker recorded; fails if it was never
        reached (construction broke before it)."""
        result = self.result
        self.assertIsNone(
            result["error"],
            f"{self.ALGORITHM}: building the draft failed before its "
            f"TpModelWorker:\n{result['error']}",
        )
        self.assertIsNotNone(result["draft"])
        return result["draft"]

    def expected_draft_load_format(self):
        return self.DRAFT_LOAD_FORMAT or self.result["target_before"]["load_format"]


# ---- regression checks (fail on unpatched 0.5.16) ---------------------------


class _TargetLeftAlone:
    def test_the_target_instance_is_left_alone(self):
        self.draft()
        result = self.result
        changed = result["target_changed_fields"]
        if changed:
            self.fail(
                f"{self.ALGORITHM}: building the draft changed the target's "
                "ServerArgs: "
                + ", ".join(
                    f"{name}: {result['target_before'][name]!r} -> "
                    f"{result['target_after'][name]!r}"
                    for name in changed
                )
            )


class _DraftPublishedWhileBuilt:
    def test_the_draft_config_is_published_while_the_draft_tp_worker_is_built(
        self,
    ):
        draft = self.draft()
        self.assertFalse(
            draft["published_during_is_target"],
            f"{self.ALGORITHM}: the target's config was the published one "
            "while the draft TpModelWorker was built",
        )
        if draft["site"] == harness.DFLASH_OWN_SITE:
            # DFLASH before v0.5.16: on v0.5.14 it builds its TpModelWorker
            # from a copy of the config it was handed, which that worker's
            # ModelRunner publishes itself; until then the handed one is.
            self.assertEqual(draft["published_during"], draft["fields"])
            return
        self.assertTrue(
            draft["published_during_is_draft"],
            f"{self.ALGORITHM}: the published config during the draft's "
            f"construction ({draft['published_during']}) is not the one the "
            f"draft TpModelWorker was handed ({draft['fields']})",
        )


class _DraftHandedItsOwnCopy:
    def test_the_draft_tp_worker_is_handed_its_own_copy(self):
        self.assertFalse(
            self.draft()["is_target"],
            f"{self.ALGORITHM}: the draft TpModelWorker was handed the "
            "target's ServerArgs instance",
        )


class _DraftContextLength:
    def test_the_draft_gets_the_target_context_length(self):
        self.assertEqual(
            self.draft()["fields"]["context_length"],
            harness.TARGET_CONTEXT_LEN,
        )


class _PluginHandoff:
    def test_the_factory_and_the_worker_get_the_same_copy(self):
        self.draft()
        plugin = self.result["plugin"]
        self.assertTrue(plugin["factory_called"] and plugin["worker_called"])
        self.assertTrue(
            plugin["factory_args_is_worker_args"],
            "the plugin factory and the plugin worker got different ServerArgs",
        )
        self.assertFalse(
            plugin["factory_args_is_target"],
            "the plugin factory and worker got the target's instance",
        )
        self.assertTrue(plugin["published_in_factory_is_factory_args"])
        self.assertTrue(plugin["published_in_worker_is_worker_args"])


# ---- checks that held on 0.5.16 already and must keep holding ---------------


class _TargetPublishedAfterwards:
    def test_the_target_config_is_published_again_afterwards(self):
        self.draft()
        self.assertTrue(
            self.result["published_after_is_target"],
            f"{self.ALGORITHM}: after the draft was built the published "
            f"config is {self.result['published_after']}, not the target",
        )
        self.assertEqual(
            self.result["capture_flag_after"], self.result["capture_flag_before"]
        )


class _DraftLoadFormat:
    def test_the_draft_gets_the_expected_load_format(self):
        self.assertEqual(
            self.draft()["fields"]["load_format"], self.expected_draft_load_format()
        )


_CONFIG_CHECKS = (
    _TargetPublishedAfterwards,
    _DraftContextLength,
    _DraftLoadFormat,
)


# ---- EAGLE ------------------------------------------------------------------


class TestEagleDraftIsolation(
    _DraftCase,
    _TargetLeftAlone,
    _DraftPublishedWhileBuilt,
    _DraftHandedItsOwnCopy,
    CustomTestCase,
):
    pytestmark = pytest.mark.regression
    ALGORITHM = "EAGLE"


class TestEagleDraftConfig(_DraftCase, *_CONFIG_CHECKS, CustomTestCase):
    ALGORITHM = "EAGLE"


class TestEagleWithoutDraftLoadFormatDraftIsolation(
    _DraftCase,
    _TargetLeftAlone,
    _DraftPublishedWhileBuilt,
    _DraftHandedItsOwnCopy,
    CustomTestCase,
):
    pytestmark = pytest.mark.regression
    ALGORITHM = "EAGLE"
    DRAFT_LOAD_FORMAT = None


class TestEagleWithoutDraftLoadFormatDraftConfig(
    _DraftCase, _TargetPublishedAfterwards, _DraftContextLength, CustomTestCase
):
    ALGORITHM = "EAGLE"
    DRAFT_LOAD_FORMAT = None

    def test_the_draft_load_format_is_left_alone_without_a_draft_load_format(self):
        self.assertEqual(self.result["target_before"]["load_format"], "auto")
        self.assertEqual(self.draft()["fields"]["load_format"], "auto")


# ---- EAGLE3 -----------------------------------------------------------------


class TestEagle3DraftIsolation(
    _DraftCase,
    _TargetLeftAlone,
    _DraftPublishedWhileBuilt,
    _DraftHandedItsOwnCopy,
    CustomTestCase,
):
    pytestmark = pytest.mark.regression
    ALGORITHM = "EAGLE3"


class TestEagle3DraftConfig(_DraftCase, *_CONFIG_CHECKS, CustomTestCase):
    ALGORITHM = "EAGLE3"


# ---- STANDALONE -------------------------------------------------------------


class TestStandaloneDraftIsolation(
    _DraftCase,
    _TargetLeftAlone,
    _DraftPublishedWhileBuilt,
    _DraftHandedItsOwnCopy,
    CustomTestCase,
):
    pytestmark = pytest.mark.regression
    ALGORITHM = "STANDALONE"


class TestStandaloneDraftConfig(_DraftCase, *_CONFIG_CHECKS, CustomTestCase):
    ALGORITHM = "STANDALONE"


# ---- multi-layer EAGLE ------------------------------------------------------


class TestMultiLayerEagleDraftIsolation(
    _DraftCase,
    _TargetLeftAlone,
    _DraftPublishedWhileBuilt,
    _DraftHandedItsOwnCopy,
    CustomTestCase,
):
    pytestmark = pytest.mark.regression
    ALGORITHM = "MULTI_LAYER_EAGLE"


class TestMultiLayerEagleDraftConfig(_DraftCase, *_CONFIG_CHECKS, CustomTestCase):
    ALGORITHM = "MULTI_LAYER_EAGLE"


# ---- FROZEN_KV_MTP ----------------------------------------------------------


class TestFrozenKVMTPDraftIsolation(
    _DraftCase,
    _TargetLeftAlone,
    _DraftPublishedWhileBuilt,
    _DraftHandedItsOwnCopy,
    CustomTestCase,
):
    pytestmark = pytest.mark.regression
    ALGORITHM = "FROZEN_KV_MTP"


class TestFrozenKVMTPDraftConfig(_DraftCase, *_CONFIG_CHECKS, CustomTestCase):
    ALGORITHM = "FROZEN_KV_MTP"


# ---- DFLASH / DSPARK (build_draft_tp_worker already deep-copied on 0.5.16) --


class TestDFlashDraftIsolation(
    _DraftCase, _TargetLeftAlone, _DraftPublishedWhileBuilt, CustomTestCase
):
    pytestmark = pytest.mark.regression
    ALGORITHM = "DFLASH"


class TestDFlashDraftConfig(
    _DraftCase, _DraftHandedItsOwnCopy, *_CONFIG_CHECKS, CustomTestCase
):
    ALGORITHM = "DFLASH"


_NO_DSPARK = "this release has no DSPARK (it came in v0.5.16)"


@unittest.skipUnless(harness.has_algorithm("DSPARK"), _NO_DSPARK)
class TestDSparkDraftIsolation(
    _DraftCase, _TargetLeftAlone, _DraftPublishedWhileBuilt, CustomTestCase
):
    pytestmark = pytest.mark.regression
    ALGORITHM = "DSPARK"


@unittest.skipUnless(harness.has_algorithm("DSPARK"), _NO_DSPARK)
class TestDSparkDraftConfig(
    _DraftCase, _DraftHandedItsOwnCopy, *_CONFIG_CHECKS, CustomTestCase
):
    ALGORITHM = "DSPARK"


# ---- a registered plugin algorithm ------------------------------------------


class TestPluginDraftIsolation(
    _DraftCase,
    _TargetLeftAlone,
    _DraftPublishedWhileBuilt,
    _DraftHandedItsOwnCopy,
    _DraftContextLength,
    _PluginHandoff,
    CustomTestCase,
):
    # On 0.5.16 the plugin worker got the target itself, whose context_length
    # nobody had set, so the context-length check is a regression here.
    pytestmark = pytest.mark.regression
    ALGORITHM = "PLUGIN"


class TestPluginDraftConfig(
    _DraftCase, _TargetPublishedAfterwards, _DraftLoadFormat, CustomTestCase
):
    ALGORITHM = "PLUGIN"

    def test_the_plugin_is_unregistered_afterwards(self):
        from sglang.srt.speculative.spec_registry import get_spec

        self.assertIsNone(get_spec(harness.PLUGIN_ALGORITHM))


if __name__ == "__main__":
    unittest.main()
