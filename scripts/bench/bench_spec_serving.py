#!/usr/bin/env python3
"""Time to ready and decode tokens/s of one real EAGLE server, sglang 0.5.16 as
released against the patched install: "the patch costs nothing", measured.

What runs: the demo's server (``scripts/demo/draft_isolation_demo.py``: ``python
-m sglang.launch_server --speculative-algorithm EAGLE
--speculative-draft-load-format dummy``, the tiny local float32 models of
``test/backport/e2e/tiny_models.py``, the CPU settings of
``test/backport/e2e/cpu_serving.py``), launched by the same code
(``cpu_serving.ServerProcess``) with the same flags, RUNS times per side,
alternating: unpatched (``PYTHONPATH=`` a copy of ``.build/pristine`` with its
bytecode compiled, as the venv's sglang has it), patched (the venv's sglang),
unpatched, ... Each server is stopped before the next starts.

What is measured, per launch:

* time to ready: from starting the launcher process to the first ``/health``
  answering 200 (sglang answers 503 until its own warm-up request is done),
  polled every 0.2 s;
* decode tokens/s: one untimed warm-up request (8 tokens), then one greedy
  request (``temperature 0``, ``ignore_eos``) of the fixed 6-token prompt for
  exactly TOKENS new tokens (default 32); tokens/s = output tokens / the
  server's own ``meta_info["e2e_latency"]`` (the tokenizer manager's time
  from receiving the request to its last token: prefill of the 6-token prompt
  included, HTTP not). The client's wall time of the same request is shown
  beside it.

Every output must be the same token ids on every launch of both sides (greedy),
else the run fails.

On what: this machine's CPU (on the project's CI machine, 2 cores shared with
other work), the Triton kernels run by Triton's interpreter
(``TRITON_INTERPRET=1``), torch on CPU, sglang's few ``@torch.compile``
helpers run eagerly (``TORCHDYNAMO_DISABLE=1``): the settings of
``cpu_serving``. This is not a GPU figure: it shows whether the patch moves
start-up or decode time on the same machine, not what either costs on a GPU.
None of the patch's changed functions is on a decode path, so the ratio
patched/unpatched should be 1.0 within the spread.

    .venv/bin/python scripts/bench/bench_spec_serving.py [--runs 5] [--tokens 32]

Exit status: 0 when every launch served the same greedy output, 1 otherwise.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "demo"))

# Imported from scripts/demo (on sys.path above) and test/backport/e2e (which
# the demo puts on sys.path), hence after the code that puts them there.
import draft_isolation_demo as demo  # noqa: E402  (see above)
import tiny_models  # noqa: E402  (see above)

cpu_serving = demo.cpu_serving
SIDES = demo.SIDES  # ("unpatched", "patched")
TITLES = demo.TITLES


# The untimed request before the timed one (first-call costs).
WARMUP_TOKENS = 8


class BenchError(Exception):
    pass


def one_launch(side, models, pythonpath, tokens):
    server = cpu_serving.ServerProcess(
        cpu_serving.speculative_argv(models, "EAGLE", *demo.LAUNCH_FLAGS),
        pythonpath=pythonpath,
    )
    server.start()
    try:
        ready_s = server.wait_ready(poll=0.2)
        server.generate(demo.PROMPT, WARMUP_TOKENS)  # untimed
        started = time.monotonic()
        reply = server.generate(demo.PROMPT, tokens)
        client_s = time.monotonic() - started
    except (cpu_serving.ServerError, OSError) as e:
        server.keep_log = True
        raise BenchError(
            f"the {TITLES[side]} server failed: {str(e).splitlines()[0]} "
            f"(log: {server.log_path})"
        ) from None
    finally:
        server.stop()
    meta = reply["meta_info"]
    output = reply["output_ids"]
    if len(output) != tokens:
        raise BenchError(f"asked for {tokens} tokens, got {len(output)}")
    return {
        "side": side,
        "ready_s": ready_s,
        "e2e_latency_s": meta["e2e_latency"],
        "client_s": client_s,
        "tokens_per_s": len(output) / meta["e2e_latency"],
        "spec_verify_ct": meta.get("spec_verify_ct"),
        "output_ids": output,
    }


def spread(values):
    return min(values), statistics.median(values), max(values)


def render(runs, args, where, wall_s, load):
    lines = [
        "EAGLE server (the demo's: --speculative-algorithm EAGLE "
        + " ".join(demo.LAUNCH_FLAGS)
        + ", tiny float32 models),",
        f"{args.runs} launches per side, alternating; {args.tokens} new tokens of a "
        f"{len(demo.PROMPT)}-token prompt, greedy, ignore_eos.",
        f"On {platform.machine()} CPU, {os.cpu_count()} cores, Triton's interpreter "
        "(TRITON_INTERPRET=1), torch.compile off: not a GPU figure.",
        "decode tok/s = output tokens / meta_info.e2e_latency (server side, prefill "
        "included); ready = launch to /health 200.",
        "",
    ]
    header = ["run", "side", "ready s", "e2e_latency s", "client s", "tok/s", "verify"]
    rows = [
        [
            str(i // 2 + 1),
            TITLES[r["side"]],
            f"{r['ready_s']:.1f}",
            f"{r['e2e_latency_s']:.2f}",
            f"{r['client_s']:.2f}",
            f"{r['tokens_per_s']:.2f}",
            str(r["spec_verify_ct"]),
        ]
        for i, r in enumerate(runs)
    ]
    lines += demo.table(rows, header)
    lines += ["", "per side: min / median / max"]
    summary = {}
    rows = []
    for side in SIDES:
        mine = [r for r in runs if r["side"] == side]
        ready = spread([r["ready_s"] for r in mine])
        tps = spread([r["tokens_per_s"] for r in mine])
        summary[side] = {"ready_s": ready, "tokens_per_s": tps}
        rows.append(
            [
                TITLES[side],
                " / ".join(f"{v:.1f}" for v in ready),
                " / ".join(f"{v:.2f}" for v in tps),
            ]
        )
    lines += demo.table(rows, ["side", "time to ready, s", "decode tokens/s"])
    ratio_ready = summary["patched"]["ready_s"][1] / summary["unpatched"]["ready_s"][1]
    ratio_tps = (
        summary["patched"]["tokens_per_s"][1] / summary["unpatched"]["tokens_per_s"][1]
    )
    lines += [
        "",
        f"median ratio patched/unpatched: time to ready {ratio_ready:.3f}, "
        f"decode tokens/s {ratio_tps:.3f}",
        "same greedy output on every launch: yes",
        f"sglang: unpatched {where['unpatched'][0]}, patched {where['patched'][0]}",
        f"wall time of the benchmark: {wall_s:.0f} s; load average at start "
        f"{load[0]}, at end {load[1]}",
    ]
    return "\n".join(lines), {
        "summary": summary,
        "ratio_ready": ratio_ready,
        "ratio_tokens_per_s": ratio_tps,
    }


def compiled_copy(pristine, dest):
    """A copy of the release's package with its bytecode compiled. The venv's
    sglang comes with .pyc files (pip compiles them) and .build/pristine has
    none; where PYTHONDONTWRITEBYTECODE is set (it is on this project's
    machines) every unpatched process would compile sglang from source at
    each import, a few seconds of every start that the patch has nothing to
    do with."""
    shutil.copytree(os.path.join(pristine, "sglang"), os.path.join(dest, "sglang"))
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", dest],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=600,
    )
    return dest


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(args):
    started = time.monotonic()
    load_start = loadavg()
    pristine = os.path.abspath(args.pristine)
    if not os.path.isfile(os.path.join(pristine, "sglang", "srt", "server_args.py")):
        raise BenchError(f"no unpatched sglang package under {args.pristine}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-spec-serving-") as tmp:
        unpatched = compiled_copy(pristine, os.path.join(tmp, "pristine"))
        pythonpaths = {"unpatched": unpatched, "patched": None}
        where = {side: demo.probe(pythonpaths[side]) for side in SIDES}
        if where["unpatched"][1] or not where["patched"][1]:
            raise BenchError(
                f"want unpatched then patched sglang, found {where}; see the demo"
            )
        where["unpatched"] = (f"{args.pristine} (a compiled copy)", False)
        models = tiny_models.write_tiny_models(
            tmp, dtype=cpu_serving.MODEL_DTYPE, names=("target", "EAGLE")
        )
        for i in range(args.runs):
            for side in SIDES:
                r = one_launch(side, models, pythonpaths[side], args.tokens)
                print(
                    f"bench: run {i + 1}/{args.runs} {TITLES[side]}: ready "
                    f"{r['ready_s']:.1f} s, {r['tokens_per_s']:.2f} tok/s",
                    file=sys.stderr,
                    flush=True,
                )
                runs.append(r)
    outputs = {tuple(r["output_ids"]) for r in runs}
    if len(outputs) != 1:
        raise BenchError(f"the launches gave {len(outputs)} different greedy outputs")
    text, summary = render(
        runs, args, where, time.monotonic() - started, (load_start, loadavg())
    )
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "where": where, **summary}, f, indent=1)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=5, help="launches per side")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens")
    parser.add_argument(
        "--pristine",
        default=os.path.join(ROOT, ".build", "pristine"),
        help="dir holding the unpatched sglang package (default: %(default)s)",
    )
    parser.add_argument("--json", help="also write every launch's figures here")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.tokens < 2:
        parser.error("--runs must be >= 1 and --tokens >= 2")
    try:
        run(args)
    except (BenchError, demo.DemoError) as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted; the servers are stopped", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
