#!/usr/bin/env python3
"""Show, per speculative algorithm, what building the draft worker does to
the target's ServerArgs on unpatched sglang 0.5.16 and on the patched install,
side by side.

For each algorithm the real draft worker class is driven through the real
``Scheduler.maybe_init_draft_worker`` on CPU with only the draft's
TpModelWorker stubbed (test/registered/unit/spec/draft_isolation_harness.py).
The harness runs twice, in two subprocesses: once with
PYTHONPATH=<pristine> (the untouched 0.5.16 package) and once against the
venv's patched install. Output is plain fixed-width text for a review.

    .venv/bin/python scripts/demo/draft_isolation_demo.py
    ... --pristine .build/pristine --algorithms EAGLE DFLASH --json out.json

``--runner real`` asks the harness to use the real construction path
(test/registered/unit/spec/real_construction_support.py run_case) for the
algorithms it covers (EAGLE, EAGLE3, STANDALONE); the others keep the stub.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(
    ROOT, "test", "registered", "unit", "spec", "draft_isolation_harness.py"
)
ALGORITHMS = (
    "EAGLE",
    "EAGLE3",
    "STANDALONE",
    "MULTI_LAYER_EAGLE",
    "FROZEN_KV_MTP",
    "DFLASH",
    "DSPARK",
    "PLUGIN",
)
COLUMNS = (
    "field",
    "target before",
    "target after (unpatched)",
    "target after (patched)",
    "draft got (unpatched)",
    "draft got (patched)",
)
MAX_CELL = 28


def _default_python():
    venv_python = os.path.join(ROOT, ".venv", "bin", "python")
    return venv_python if os.path.exists(venv_python) else sys.executable


def _start(python, pythonpath, args, out_path, log):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.Popen(
        [python, HARNESS, "--out", out_path, *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )


def run_both(python, pristine, harness_args):
    """Run the harness unpatched and patched (concurrently); return both
    payloads."""
    tmp = tempfile.mkdtemp(prefix="draft_isolation_demo_")
    sides = {"unpatched": pristine, "patched": None}
    procs = {}
    for side, pythonpath in sides.items():
        out = os.path.join(tmp, f"{side}.json")
        log = open(os.path.join(tmp, f"{side}.log"), "w+")
        procs[side] = (_start(python, pythonpath, harness_args, out, log), out, log)
    payloads = {}
    for side, (proc, out, log) in procs.items():
        rc = proc.wait()
        log.seek(0)
        tail = log.read()[-4000:]
        log.close()
        if rc != 0 or not os.path.exists(out):
            sys.exit(f"the {side} harness run failed (rc={rc}):\n{tail}")
        with open(out) as f:
            payloads[side] = json.load(f)
    return payloads


def _cell(value):
    text = "None" if value is None else str(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 3] + "..."


def _draft_fields(result):
    draft = result.get("draft")
    return (draft or {}).get("fields") or {}


def verdict(result):
    """('LEAK' | 'isolated' | 'WRONG DRAFT' | 'ERROR', reasons)."""
    if result.get("error") or not result.get("draft"):
        first = (result.get("error") or "draft never built").strip().splitlines()
        return "ERROR", [first[-1] if first else "error"]
    draft = result["draft"]
    leaks = []
    if result["target_changed_fields"]:
        leaks.append(
            "target " + ", ".join(result["target_changed_fields"]) + " rewritten"
        )
    if draft["is_target"]:
        leaks.append("draft built on the target instance")
    if draft["published_during_is_target"]:
        leaks.append("target published while the draft was built")
    if not result["published_after_is_target"]:
        leaks.append("target not published afterwards")
    if leaks:
        return "LEAK", leaks
    wrong = []
    expected_load_format = (
        result["draft_load_format"] or result["target_before"]["load_format"]
    )
    if draft["fields"]["context_length"] != result["target_context_len"]:
        wrong.append(f"draft context_length {draft['fields']['context_length']}")
    if draft["fields"]["load_format"] != expected_load_format:
        wrong.append(f"draft load_format {draft['fields']['load_format']}")
    if draft.get("published_during_is_draft") is False:  # None: not observed
        wrong.append("draft's config not published while it was built")
    if wrong:
        return "WRONG DRAFT", wrong
    return "isolated", []


def _describe_handed(result):
    draft = result.get("draft")
    if not draft:
        return "(not built)"
    return "the target instance" if draft["is_target"] else "its own copy"


def _describe_published_during(result):
    draft = result.get("draft")
    if not draft:
        return ""
    if draft.get("published_during_is_draft") is None:
        return "n/a (not observed)"
    if draft["published_during_is_draft"] and not draft["is_target"]:
        return "the draft's copy"
    if draft["published_during_is_target"]:
        return "the target"
    return "other" if draft["published_during"] else "(empty slot)"


def render_algorithm(name, unpatched, patched):
    fields = list(unpatched.get("target_before") or {})
    for f in patched.get("target_before") or {}:
        if f not in fields:
            fields.append(f)

    def before(f):
        a = (unpatched.get("target_before") or {}).get(f)
        b = (patched.get("target_before") or {}).get(f)
        return _cell(a) if a == b else f"{_cell(a)} / {_cell(b)}"

    rows = [
        [
            f,
            before(f),
            _cell((unpatched.get("target_after") or {}).get(f)),
            _cell((patched.get("target_after") or {}).get(f)),
            _cell(_draft_fields(unpatched).get(f)),
            _cell(_draft_fields(patched).get(f)),
        ]
        for f in fields
    ]
    rows.append(
        [
            "draft is handed",
            "",
            "",
            "",
            _describe_handed(unpatched),
            _describe_handed(patched),
        ]
    )
    rows.append(
        [
            "published during build",
            "",
            "",
            "",
            _describe_published_during(unpatched),
            _describe_published_during(patched),
        ]
    )
    rows.append(
        [
            "published afterwards",
            "the target",
            "the target" if unpatched.get("published_after_is_target") else "OTHER",
            "the target" if patched.get("published_after_is_target") else "OTHER",
            "",
            "",
        ]
    )
    if patched.get("plugin") or unpatched.get("plugin"):

        def same_copy(result):
            plugin = result.get("plugin") or {}
            if not plugin.get("factory_args_is_worker_args"):
                return "different objects"
            if plugin.get("factory_args_is_target"):
                return "both the target"
            return "the same copy"

        rows.append(
            [
                "factory and worker get",
                "",
                "",
                "",
                same_copy(unpatched),
                same_copy(patched),
            ]
        )

    widths = [
        max(len(COLUMNS[i]), *(len(r[i]) for r in rows)) for i in range(len(COLUMNS))
    ]

    def line(cells):
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    worker = patched.get("worker_class") or unpatched.get("worker_class") or "?"
    site = (patched.get("draft") or unpatched.get("draft") or {}).get(
        "site"
    ) or patched.get("expected_stub_site")
    where = f"draft TpModelWorker stubbed at {site}" if site else "nothing stubbed"
    out = [
        f"{name}  ({worker}; {where})",
        f"  config: {patched.get('how_built') or unpatched.get('how_built')}; "
        f"target context_len {unpatched.get('target_context_len')}",
        line(COLUMNS),
        "-+-".join("-" * w for w in widths),
    ]
    out += [line(r) for r in rows]
    verdicts = {
        side: verdict(result)
        for side, result in (("unpatched", unpatched), ("patched", patched))
    }
    out.append(
        f"=> {name}: "
        + " | ".join(f"{side} {status}" for side, (status, _) in verdicts.items())
    )
    for side, (_, reasons) in verdicts.items():
        if reasons:
            out.append(f"   {side}: {'; '.join(reasons)}")
    return "\n".join(out)


def render(payloads, draft_load_format):
    unpatched, patched = payloads["unpatched"], payloads["patched"]
    by_name = {
        side: {r["algorithm"]: r for r in payloads[side]["results"]}
        for side in payloads
    }
    lines = [
        "Draft ServerArgs isolation: target fields before/after building the "
        "draft, and what the draft got",
        f"  unpatched: {unpatched['sglang_file']}",
        f"  patched:   {patched['sglang_file']}"
        + ("" if patched["patched"] else "   (WARNING: no draft_server_args_copy)"),
        f"  --speculative-draft-load-format: {draft_load_format}",
        "",
    ]
    names = list(by_name["unpatched"])
    for name in names:
        lines.append(
            render_algorithm(
                name, by_name["unpatched"][name], by_name["patched"].get(name, {})
            )
        )
        lines.append("")
    lines.append("Summary")
    width = max(len(n) for n in names)
    for name in names:
        u, _ = verdict(by_name["unpatched"][name])
        p, _ = verdict(by_name["patched"].get(name, {"error": "missing"}))
        lines.append(f"  {name.ljust(width)}  unpatched: {u.ljust(11)} patched: {p}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--pristine",
        default=os.path.join(ROOT, ".build", "pristine"),
        help="dir holding the unpatched sglang package (default: %(default)s)",
    )
    parser.add_argument(
        "--python",
        default=_default_python(),
        help="interpreter with the patched sglang (default: %(default)s)",
    )
    parser.add_argument("--algorithms", nargs="*", default=list(ALGORITHMS))
    parser.add_argument(
        "--draft-load-format",
        default="dummy",
        help="--speculative-draft-load-format ('none' for unset)",
    )
    parser.add_argument(
        "--runner",
        choices=("stub", "real"),
        default="stub",
        help="real: real construction for EAGLE/EAGLE3/STANDALONE where "
        "available (real_construction_support.run_case)",
    )
    parser.add_argument("--json", help="also write both raw results here")
    args = parser.parse_args(argv)

    if not os.path.exists(os.path.join(args.pristine, "sglang", "srt")):
        sys.exit(f"no sglang package under --pristine {args.pristine}")
    harness_args = [
        "--algorithms",
        *args.algorithms,
        "--draft-load-format",
        args.draft_load_format,
        "--runner",
        args.runner,
    ]
    payloads = run_both(args.python, os.path.abspath(args.pristine), harness_args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(payloads, f, indent=1)
    print(render(payloads, args.draft_load_format))
    statuses = [
        verdict(r)[0] for r in payloads["patched"]["results"]
    ]  # exit 1 if the patched side is not isolated everywhere
    return 0 if all(s == "isolated" for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
