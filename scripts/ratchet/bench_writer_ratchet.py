#!/usr/bin/env python3
"""Benchmark the writer ratchet against a plain regex scan of the same files.

Both run in this one process, alternating, over the same file list (the .py
files the ratchet scans):

  ratchet  a full check, as ``writer_ratchet.py [--root ROOT]`` runs it:
           walk, read, pre-filter, parse, compare with the baseline
  regex    walk, read the same files the same way (bytes), and count
           upstream's pattern ``server_args\\.override\\(|\\bargs\\.override\\(|
           \\bsa\\.override\\(`` in each

The first round (first reads, first regex compiles) is reported apart;
the figures are medians over the following rounds. Standard library only.

    python scripts/ratchet/bench_writer_ratchet.py [--root PATH] [--rounds N]
"""

import argparse
import contextlib
import importlib.util
import io
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_ratchet():
    path = os.path.join(HERE, "writer_ratchet.py")
    spec = importlib.util.spec_from_file_location("writer_ratchet", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", help="sglang package (default: the installed one)")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds (9)")
    parser.add_argument(
        "--cli-rounds",
        type=int,
        default=3,
        help="end-to-end runs of the command in a fresh interpreter (3; 0 = skip)",
    )
    args = parser.parse_args()
    wr = _load_ratchet()
    try:
        root = wr.resolve_root(args.root)
    except wr.BadInput as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    ratchet_argv = ["--root", root]

    def ratchet_run() -> int:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            return wr.main(ratchet_argv)

    pattern = wr.UPSTREAM_REGEX

    def regex_run() -> int:
        count = 0
        for rel in wr.python_files(root):
            count += len(pattern.findall(wr.read_bytes(os.path.join(root, rel))))
        return count

    files = wr.python_files(root)
    total_bytes = sum(os.path.getsize(os.path.join(root, rel)) for rel in files)
    all_files = 0
    py_all = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        all_files += len(filenames)
        py_all += sum(1 for f in filenames if f.endswith(".py"))

    t0 = time.perf_counter()
    status = ratchet_run()
    cold_ratchet = time.perf_counter() - t0
    t0 = time.perf_counter()
    regex_count = regex_run()
    cold_regex = time.perf_counter() - t0

    ratchet_times, regex_times = [], []
    for i in range(args.rounds):
        order = (
            (("ratchet", ratchet_run), ("regex", regex_run))
            if i % 2 == 0
            else (("regex", regex_run), ("ratchet", ratchet_run))
        )
        for name, fn in order:
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            (ratchet_times if name == "ratchet" else regex_times).append(dt)

    sites, _ = wr.collect_sites(root)
    med_ratchet = statistics.median(ratchet_times)
    med_regex = statistics.median(regex_times)
    print(f"root: {root}")
    print(
        f"machine: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"tree: {all_files} files outside __pycache__, {py_all} .py; "
        f"scanned {len(files)} .py ({total_bytes / 1e6:.1f} MB), "
        f"excluding {', '.join(d + '/' for d in wr.EXCLUDED_DIRS)}"
    )
    print(
        f"ratchet: {len(sites)} writer sites, check exit status {status}; "
        f"regex: {regex_count} matches in the same files"
    )
    print(f"first round: ratchet {cold_ratchet:.3f} s, regex {cold_regex:.3f} s")
    print(
        f"median of {args.rounds}: ratchet {med_ratchet:.3f} s "
        f"(min {min(ratchet_times):.3f}), regex {med_regex:.3f} s "
        f"(min {min(regex_times):.3f}), ratio {med_ratchet / med_regex:.2f}x"
    )
    if args.cli_rounds > 0:
        cmd = [sys.executable, os.path.join(HERE, "writer_ratchet.py"), *ratchet_argv]
        cli = []
        for _ in range(args.cli_rounds):
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cli.append(time.perf_counter() - t0)
        print(
            f"command end to end (fresh interpreter, median of {args.cli_rounds}): "
            f"{statistics.median(cli):.3f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
