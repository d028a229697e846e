"""pytest configuration of this repository; it is not shipped to forks.

It registers the ``regression`` marker: a test carrying it pins the fix and
fails on sglang 0.5.16 as released, and ``scripts/dev/test.sh`` requires every
one of them to fail there. The tests under ``test/backport/`` use the marker
directly. The tests shipped to forks (``test/registered/unit/``) are plain
upstream-style files that a fork runs without this file, so they carry no
marker of their own: their regression tests are the classes named in
``SHIPPED_REGRESSION_TESTS``, which get the marker here.
"""

import pytest

# Node ids (relative to the repository root) of classes or tests.
SHIPPED_REGRESSION_TESTS = (
    "test/registered/unit/spec/test_draft_server_args.py::TestSchedulerDraftHandoff",
    "test/registered/unit/spec/test_draft_server_args.py"
    "::TestEagleDraftLeavesTheTargetAlone",
    "test/registered/unit/test_server_args_write_sites_ratchet.py"
    "::TestServerArgsWriteSitesRatchet",
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "regression: pins the draft ServerArgs fix; fails on unpatched sglang 0.5.16",
    )


def pytest_collection_modifyitems(config, items):
    found = set()
    collected_files = set()
    for item in items:
        collected_files.add(item.nodeid.split("::")[0])
        for name in SHIPPED_REGRESSION_TESTS:
            if item.nodeid == name or item.nodeid.startswith(name + "::"):
                item.add_marker(pytest.mark.regression)
                found.add(name)
    stale = [
        name
        for name in SHIPPED_REGRESSION_TESTS
        if name.split("::")[0] in collected_files and name not in found
    ]
    if stale:
        raise pytest.UsageError(
            "test/conftest.py names regression tests that do not exist: "
            + ", ".join(stale)
        )
