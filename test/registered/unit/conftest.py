"""Registers the ``regression`` marker of the draft ServerArgs isolation tests.

A test carrying it pins the fix: it fails on sglang 0.5.16 as released. The
backport's own CI runs ``pytest -m regression`` against the unpatched package
and requires every such test to fail. Registered here, not in a pytest config,
so that the tests run under ``--strict-markers`` in a fork too.
"""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "regression: pins the draft ServerArgs fix; fails on unpatched sglang 0.5.16",
    )
