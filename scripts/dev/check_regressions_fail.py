"""Require every regression test to have failed on the unpatched sglang.

Reads the JUnit XML of `pytest -m regression` run against sglang 0.5.16 as
released. A regression test that passes (or is skipped) there pins nothing:
it would pass without the fix too.
"""

import sys
import xml.etree.ElementTree as ET


def main(path: str) -> int:
    try:
        cases = list(ET.parse(path).getroot().iter("testcase"))
    except (OSError, ET.ParseError) as e:
        print(f"regression proof: cannot read {path} ({e}); did pytest run?")
        return 1
    if not cases:
        print("regression proof: no regression test ran on the unpatched sglang")
        return 1
    broken = [
        c.get("name")
        for c in cases
        if any(
            "collection failure" in (e.get("message") or "") for e in c.findall("error")
        )
    ]
    if broken:
        print(
            "regression proof: pytest could not collect these on the unpatched "
            "sglang 0.5.16 (a module-level import of a patched-only name?), so "
            "the regression tests in them never ran:"
        )
        for name in broken:
            print(f"  {name}")
        return 1
    not_failing = [
        f"{c.get('classname')}.{c.get('name')}"
        for c in cases
        if c.find("failure") is None and c.find("error") is None
    ]
    if not_failing:
        print(
            f"regression proof: {len(not_failing)} of {len(cases)} regression tests "
            "did not fail on the unpatched sglang 0.5.16 (they cannot catch the bug):"
        )
        for name in not_failing:
            print(f"  {name}")
        return 1
    print(
        f"regression proof: all {len(cases)} regression tests fail on the "
        "unpatched sglang 0.5.16, as they must"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
