#!/usr/bin/env python3
"""One real ``sglang.launch_server --speculative-algorithm EAGLE
--speculative-draft-load-format dummy`` per older release, as released and
patched: the first shows the leak, the second does not.

For each release on the command line (default: the oldest release of each
series from v0.5.6 to v0.5.13), a config-only EAGLE server
(``cpu_serving.older_release_server``: tiny local models, this CPU's settings
and stand-ins, no warm-up request) is started from the release's package
(``.build/releases/vX``) and, beside it, from a fork of that package with the
release's series applied by ``git am -3`` (``release_forks.release_fork``: the
package as ``python/sglang`` in one commit tagged ``vX``). Each server's
``/server_info`` gives what it was launched with (the HTTP process's copy of
the config, the top level) and what its scheduler published
(``internal_states[0]``). As released, the scheduler reports the draft's
``load_format`` ('dummy') and the context length handed to the draft; patched,
what the server was launched with ('auto', None).

Prints a table per release: load_format, context_length and every other
config field one scheduler reports differently from its launch and the other
does not (or differently again), with the seconds each server took to be
ready; the fields both schedulers set alike (the target's own settings, such
as its attention backends) are named below it. Exit status 1 if a release
shows no leak as released, any leak patched, has no series, or a server
fails to start (its log's tail is printed). ``--side released`` serves each
release as released only (no series needed).

    .venv/bin/python scripts/dev/serve_older_releases.py [vX ...] [--side released]

Not part of ``.ci/run`` (sixteen servers of three processes each); it needs
the set-up (``scripts/dev/setup.sh``).
"""

import argparse
import concurrent.futures
import os
import shutil
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [
    os.path.join(REPO, "test", "backport", "e2e"),
    os.path.join(REPO, "test", "backport", "series"),
]

import cpu_serving as serving  # noqa: E402  # isort: skip
import release_forks  # noqa: E402  # isort: skip
import tiny_models  # noqa: E402  # isort: skip

# The oldest release of each series from v0.5.6 to v0.5.13.post1; the series
# of each release is release_forks.LINES's.
RELEASES = (
    "v0.5.6",
    "v0.5.7",
    "v0.5.8",
    "v0.5.9",
    "v0.5.10",
    "v0.5.11",
    "v0.5.12",
    "v0.5.13",
)

# Always in the table; then every field a scheduler reports differently.
FIELDS = ("load_format", "context_length")
SIDES = ("released", "patched")
# Server-side readiness bound: on a busy 2-core machine a start took 100-130 s.
READY_TIMEOUT = 600


class Failure(Exception):
    pass


def series_folder(release):
    folder = release_forks.LINES.get(release)
    if folder is None:
        raise Failure(f"{release}: no series is known for it")
    path = os.path.join(REPO, "patches", folder)
    if not os.path.isdir(path) or not release_forks.series_patches(path):
        raise Failure(f"{release}: its series, patches/{folder}/, is not there yet")
    return path


def patched_fork(release, top):
    """A fork of the release's package at ``top`` with its series applied by
    ``git am -3``; returns its ``python/``."""
    patches = release_forks.series_patches(series_folder(release))
    package = release_forks.wheel_package(release)
    release_forks.release_fork(top, package, release)
    try:
        release_forks.git(top, "am", "-3", *patches)
    except AssertionError as e:  # release_forks.git's failure, with git's words
        raise Failure(f"{release}: git am -3 of its series failed: {e}") from e
    return os.path.join(top, "python")


def package_roots(release, work, sides):
    """{side: the folder holding the sglang that side's server imports}, and
    the problems (a series not there: the release is served as released)."""
    roots, problems = {}, []
    try:
        package = release_forks.wheel_package(release)
    except AssertionError as e:  # not unpacked: "run scripts/dev/setup.sh first"
        raise Failure(str(e)) from e
    if "released" in sides:
        roots["released"] = os.path.dirname(package)
    if "patched" in sides:
        try:
            roots["patched"] = patched_fork(release, os.path.join(work, release))
        except Failure as e:
            problems.append(str(e))
    return roots, problems


def serve(release, roots, argv):
    """Start one server per side at once; {side: (info, seconds to ready)}."""
    servers = {
        side: serving.older_release_server(argv, root, release, keep_log=True)
        for side, root in roots.items()
    }
    results = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
            waits = {}
            for side, server in servers.items():
                server.start()
                waits[side] = pool.submit(ready_after, server, time.monotonic())
            for side, server in servers.items():
                try:
                    ready = waits[side].result()
                except serving.ServerError as e:
                    raise Failure(f"{release} {side}: {e}") from e
                check_imports(release, side, server, roots[side])
                results[side] = (serving.older_release_server_info(server), ready)
    finally:
        for server in servers.values():
            server.stop()
            shutil.rmtree(server.tmpdir, ignore_errors=True)
    return results


def ready_after(server, started):
    """Seconds from ``started`` (the server's start) until it is ready."""
    server.wait_ready(timeout=READY_TIMEOUT)
    return time.monotonic() - started


def check_imports(release, side, server, root):
    """Every process of the server imported the sglang under ``root``."""
    expected = {os.path.join(os.path.abspath(root), "sglang")}
    imported = {p["sglang"] for p in server.reported_processes().values()}
    if imported != expected:
        raise Failure(
            f"{release} {side}: the server imported sglang from "
            f"{sorted(imported)}, not {sorted(expected)}; log tail:\n"
            f"{server.log_tail()}"
        )


def scheduler(info):
    return info["internal_states"][0]


def table(results):
    """The printed lines of one release's servers, and the problems.

    A field "moved" on a side where its scheduler reports something other than
    what that server was launched with (the HTTP process's copy). The rows:
    FIELDS, then every other field that moved on one side and not on the
    other, or to other values: a side leaks each row's field that moved there.
    Fields that moved alike on every side (the scheduler's own settings for
    the target) are named after the table."""
    launched = {side: info for side, (info, _) in results.items()}
    published = {side: scheduler(info) for side, (info, _) in results.items()}
    # The config fields: those of the HTTP process's copy the scheduler has.
    config = [
        f
        for f in launched[next(iter(results))]
        if f != "internal_states" and all(f in published[side] for side in results)
    ]
    moved = {
        side: {f for f in config if published[side].get(f) != launched[side].get(f)}
        for side in results
    }
    # Moved on every side, to the same value: the scheduler's own doing.
    alike = set.intersection(*moved.values())
    alike = {f for f in alike if len({repr(published[s].get(f)) for s in results}) == 1}
    alike -= set(FIELDS)
    fields = list(FIELDS) + sorted(set.union(*moved.values()) - alike - set(FIELDS))
    leaked = {side: [f for f in fields if f in moved[side]] for side in results}
    first = next(iter(results))
    header = ["field", "launched with"]
    header += ["as released" if side == "released" else side for side in results]
    rows = [header]
    for field in fields:
        row = [field, repr(launched[first].get(field))]
        row += [repr(published[side].get(field)) for side in results]
        rows.append(row)
    rows.append(["ready in", ""] + [f"{ready:.0f} s" for _, ready in results.values()])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  "
        + "  ".join(
            cell.ljust(width) for cell, width in zip(row, widths, strict=True)
        ).rstrip()
        for row in rows
    ]
    if alike:
        lines.append(
            "  set by the scheduler on "
            + ("both sides" if len(results) > 1 else "this side")
            + " (not in the table): "
            + ", ".join(sorted(alike))
        )
    problems = []
    if "released" in results and not leaked["released"]:
        problems.append("as released, the scheduler reports what was launched: no leak")
    if leaked.get("patched"):
        problems.append(f"patched, the scheduler leaks {', '.join(leaked['patched'])}")
    return lines, problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="*", default=list(RELEASES))
    parser.add_argument(
        "--side",
        choices=("both", *SIDES),
        default="both",
        help="serve only the release as released, or only patched",
    )
    args = parser.parse_args()
    sides = SIDES if args.side == "both" else (args.side,)

    work = tempfile.mkdtemp(prefix="serve-older-releases-")
    failures = []
    started = time.monotonic()
    try:
        models = tiny_models.write_tiny_models(
            os.path.join(work, "models"),
            dtype=serving.MODEL_DTYPE,
            names=("target", "EAGLE"),
        )
        argv = serving.speculative_argv(
            models, "EAGLE", "--speculative-draft-load-format", "dummy"
        )
        for release in args.releases:
            began = time.monotonic()
            try:
                roots, problems = package_roots(release, work, sides)
                results = serve(release, roots, argv) if roots else {}
            except Failure as e:
                print(f"{release}: FAILED\n{e}\n", flush=True)
                failures.append(release)
                continue
            lines = []
            if results:
                lines, found = table(results)
                problems += found
            series = release_forks.LINES.get(release)
            if "patched" in roots:
                count = len(release_forks.series_patches(series_folder(release)))
                series = f"patched with patches/{series}/, {count} commits"
            else:
                series = f"its series: patches/{series}/"
            print(
                f"{release} ({series}): {time.monotonic() - began:.0f} s",
                *lines,
                *(f"  PROBLEM: {problem}" for problem in problems),
                "",
                sep="\n",
                flush=True,
            )
            if problems:
                failures.append(release)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{len(args.releases) - len(failures)} of {len(args.releases)} releases "
        f"as expected in {time.monotonic() - started:.0f} s"
        + (f"; failed: {' '.join(failures)}" if failures else "")
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
