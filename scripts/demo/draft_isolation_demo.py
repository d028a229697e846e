#!/usr/bin/env python3
"""Serve one real EAGLE server on sglang 0.5.16 as released, then on the
patched install, and show which fields of the scheduler's config differ.

Both servers are the users' command, ``python -m sglang.launch_server
--speculative-algorithm EAGLE ...``, with the same flags (tiny local models,
``--speculative-draft-load-format dummy``), on 127.0.0.1 at a free port, one
after the other, each stopped before the next starts. Each answers a greedy
``/generate`` and ``/server_info``, whose ``internal_states[0]`` is the config
the scheduler publishes (its top level is the HTTP process's own copy, which
the draft never reaches). On this CPU the servers run with the settings and
kernel stand-ins declared in test/backport/e2e/cpu_serving.py, and stock on a
CUDA machine; the models are written by test/backport/e2e/tiny_models.py.

    .venv/bin/python scripts/demo/draft_isolation_demo.py
    ... --pristine .build/pristine --json out.json

Exit status: 0 when the patched scheduler reports the config the server was
launched with, 1 when it does not or when the demo could not run.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "backport", "e2e"))

import cpu_serving  # noqa: E402  (from test/backport/e2e, put on sys.path above)
import tiny_models  # noqa: E402  (from test/backport/e2e, put on sys.path above)

PROMPT = [5, 17, 33, 90, 7, 64]
MAX_NEW_TOKENS = 12
LAUNCH_FLAGS = ("--speculative-draft-load-format", "dummy")
# Fields that differ between any two launches, or are not config.
VOLATILE = {"port", "last_gen_throughput", "memory_usage", "avg_spec_accept_length"}
SIDES = ("unpatched", "patched")
TITLES = {"unpatched": "unpatched 0.5.16", "patched": "patched"}


class DemoError(Exception):
    pass


def probe(pythonpath):
    """(sglang package dir, patched?) as a server with this PYTHONPATH sees it."""
    code = (
        "import json, os, sglang, sglang.srt.server_args as s; "
        "print(json.dumps([os.path.dirname(os.path.abspath(sglang.__file__)), "
        "hasattr(s, 'draft_server_args_copy')]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=cpu_serving.server_env(pythonpath),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DemoError(f"sglang does not import there ({last})")
    package, patched = json.loads(proc.stdout.strip().splitlines()[-1])
    return (
        os.path.relpath(package, ROOT) if package.startswith(ROOT) else package
    ), patched


def serve_once(side, models, pythonpath):
    """Start the EAGLE server, ask it, stop it; what it answered."""
    server = cpu_serving.ServerProcess(
        cpu_serving.speculative_argv(models, "EAGLE", *LAUNCH_FLAGS),
        pythonpath=pythonpath,
    )
    print(
        f"demo: starting the EAGLE server on {TITLES[side]} sglang ...", file=sys.stderr
    )
    server.start()
    try:
        ready_s = server.wait_ready()
        reply = server.generate(PROMPT, MAX_NEW_TOKENS)
        info = server.server_info()
    except (cpu_serving.ServerError, OSError) as e:
        server.keep_log = True
        first = str(e).splitlines()[0]
        raise DemoError(
            f"the {TITLES[side]} server failed: {first} (log: {server.log_path})"
        ) from None
    finally:
        server.stop()
    print(f"demo: ready after {ready_s:.0f} s, answered, stopped", file=sys.stderr)
    return {
        "ready_s": round(ready_s, 1),
        "output_ids": reply["output_ids"],
        "spec_verify_ct": reply["meta_info"].get("spec_verify_ct"),
        "launched_with": {k: v for k, v in info.items() if k != "internal_states"},
        "scheduler": info["internal_states"][0],
    }


def differing_fields(runs):
    u, p = runs["unpatched"]["scheduler"], runs["patched"]["scheduler"]
    return [
        k
        for k in sorted(set(u) | set(p))
        if not k.startswith("_") and k not in VOLATILE and u.get(k) != p.get(k)
    ]


def writes(run):
    """The scheduler config's recorded override() writes: [(source, fields)]."""
    return [tuple(w) for w in run["scheduler"].get("_runtime_mutations", [])]


def table(rows, header):
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*(str(c) for c in r)) for r in rows]
    return ["  " + line.rstrip() for line in out]


def render(runs, where):
    u, p = runs["unpatched"], runs["patched"]
    lines = [
        "One real EAGLE server, launched twice with the same flags:",
        "  python -m sglang.launch_server --speculative-algorithm EAGLE "
        + " ".join(LAUNCH_FLAGS),
        "  (tiny local models; first on sglang 0.5.16 as released, then patched)",
        "",
    ]
    same = u["output_ids"] == p["output_ids"]
    lines += table(
        [
            ["sglang imported from", where["unpatched"][0], where["patched"][0]],
            ["ready after", f"{u['ready_s']:.0f} s", f"{p['ready_s']:.0f} s"],
            [
                f"greedy /generate, {MAX_NEW_TOKENS} tokens",
                u["output_ids"],
                "the same" if same else p["output_ids"],
            ],
            ["speculative verify steps", u["spec_verify_ct"], p["spec_verify_ct"]],
        ],
        ["", TITLES["unpatched"], TITLES["patched"]],
    )
    lines += [
        "",
        "The scheduler's published config (/server_info internal_states[0]),",
        "the fields that differ between the two:",
    ]
    fields = differing_fields(runs)
    if fields:
        lines += table(
            [
                [
                    f,
                    repr(u["launched_with"].get(f)),
                    repr(u["scheduler"].get(f)),
                    repr(p["scheduler"].get(f)),
                ]
                for f in fields
            ],
            ["field", "launched with", TITLES["unpatched"], TITLES["patched"]],
        )
    else:
        lines.append("  (none)")
    only = {
        side: [w for w in writes(runs[side]) if w not in writes(runs[other])]
        for side, other in (("unpatched", "patched"), ("patched", "unpatched"))
    }
    for side in SIDES:
        if only[side]:
            lines += ["", f"Writes recorded on it by {TITLES[side]} only (override()):"]
            lines += [
                "  "
                + source
                + ": "
                + ", ".join(f"{k}={v!r}" for k, v in values.items())
                for source, values in only[side]
            ]
    lines += [
        "",
        '("launched with" is the HTTP process\'s own copy, /server_info top level;',
        "it reads the same on both.)",
    ]
    return "\n".join(lines)


def patched_keeps_its_config(runs):
    p = runs["patched"]
    return all(
        p["scheduler"].get(f) == p["launched_with"].get(f)
        for f in ("load_format", "context_length")
    )


def run(args):
    pristine = os.path.abspath(args.pristine)
    if not os.path.isfile(os.path.join(pristine, "sglang", "srt", "server_args.py")):
        raise DemoError(
            f"no unpatched sglang package under {args.pristine}; run "
            "`bash scripts/dev/setup.sh` or pass --pristine DIR"
        )
    try:
        import torch  # noqa: F401  (only whether it imports)
        import transformers  # noqa: F401  (only whether it imports)
    except ImportError:
        raise DemoError(
            "torch and transformers are not importable; run the demo with the "
            "project's venv: .venv/bin/python scripts/demo/draft_isolation_demo.py"
        ) from None
    pythonpaths = {"unpatched": pristine, "patched": None}
    where = {}
    for side in SIDES:
        try:
            where[side] = probe(pythonpaths[side])
        except DemoError as e:
            raise DemoError(f"the {TITLES[side]} side: {e}") from None
    if where["unpatched"][1]:
        raise DemoError(f"{where['unpatched'][0]} is patched; pass --pristine DIR")
    if not where["patched"][1]:
        raise DemoError(
            f"{where['patched'][0]} is not patched; run "
            "`bash scripts/dev/patches.sh apply` (or unset PYTHONPATH)"
        )
    with tempfile.TemporaryDirectory(prefix="draft-isolation-demo-") as tmp:
        models = tiny_models.write_tiny_models(
            tmp, dtype=cpu_serving.MODEL_DTYPE, names=("target", "EAGLE")
        )
        runs = {side: serve_once(side, models, pythonpaths[side]) for side in SIDES}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"where": where, "runs": runs}, f, indent=1)
    print(render(runs, where))
    return runs


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
    parser.add_argument("--json", help="also write what both servers answered here")
    args = parser.parse_args(argv)
    try:
        runs = run(args)
    except DemoError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("demo: interrupted; the servers are stopped", file=sys.stderr)
        return 1
    if not patched_keeps_its_config(runs):
        print(
            "demo: the patched scheduler does not report the launched config",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
