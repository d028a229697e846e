"""Forks made from a released wheel's package, for the tests that need one.

A fork is a git repository with the package as ``python/sglang`` in one
commit, tagged with the release, as a maintainer's fork of that release is,
with upstream's linter configuration at the root. ``shared_fork`` makes one
per release, once, in ``.build/forks/``, with its line's series applied; every
test that needs a fork of that release clones it (``clone``), so the many
files of a release are copied and committed once per CI run, not once per
test file. The older releases' packages are unpacked by the set-up into
``.build/releases/vVERSION/sglang``.

The shared fork's branches::

    vRELEASE --- 0001 ... 0004 --- C             <- main
    (the wheel's     (git am -3)  \\               <- series (the fork with
     python/sglang)                \\                  nothing of its own)
                                    \\--- D        <- draft-write

C is a fork's own commit that extends the draft path as real forks do: one
that added speculative pipeline parallelism reads the pipeline rank off the
scheduler's parallel state, the pipeline group off the target worker and off
its model runner, in ``Scheduler.maybe_init_draft_worker``. D adds writes
onto a ``ServerArgs`` on the draft side, each in a form the shipped ratchet
must catch (``DRAFT_SIDE_WRITES``).
"""

import ast
import fcntl
import functools
import hashlib
import multiprocessing
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FORKS = os.path.join(REPO, ".build", "forks")
IDENTITY = ("-c", "user.name=Fork Maintainer", "-c", "user.email=fork@example.invalid")
SCHEDULER = "python/sglang/srt/managers/scheduler.py"
EAGLE_WORKER_V2 = "python/sglang/srt/speculative/eagle_worker_v2.py"

# Every release with a series, and the series' folder under patches/.
LINES = {
    "v0.5.16": "v0.5.16",
    "v0.5.15.post1": "v0.5.15.post1",
    "v0.5.15": "v0.5.15.post1",
    "v0.5.14": "v0.5.14",
    "v0.5.13.post1": "v0.5.13.post1",
    "v0.5.13": "v0.5.13.post1",
    "v0.5.12.post1": "v0.5.12.post1",
    "v0.5.12": "v0.5.12.post1",
    "v0.5.11": "v0.5.11",
    "v0.5.10.post1": "v0.5.10.post1",
    "v0.5.10": "v0.5.10.post1",
    "v0.5.9": "v0.5.9",
    "v0.5.8.post1": "v0.5.8.post1",
    "v0.5.8": "v0.5.8.post1",
    "v0.5.7": "v0.5.7",
    "v0.5.6.post2": "v0.5.6.post2",
    "v0.5.6.post1": "v0.5.6.post2",
    "v0.5.6": "v0.5.6.post2",
}


# The per-commit CPU suite of each release's runner, which its series' tests
# register to: base-a-test-cpu from v0.5.13, stage-a-test-cpu on v0.5.10 to
# v0.5.12.post1, and before that default, which ran in a GPU job (the CPU-only
# job ran no file that imports sglang.srt). docs/fork-ci-v0.5.6-v0.5.13.md.
def cpu_suite(release):
    """The CPU suite the fork's CI runs ``release``'s shipped tests in."""
    if version_key(release) >= (0, 5, 13):
        return "base-a-test-cpu"
    if version_key(release) >= (0, 5, 10):
        return "stage-a-test-cpu"
    return "default"


# What the job of that suite has that this venv lacks, as stand-ins on
# PYTHONPATH (test/backport/stubs/): up to v0.5.9 the GPU job's sgl_kernel
# (and, for v0.5.6 and v0.5.7 on this CPU without AMX, vllm's activation
# layers, which a CUDA machine never imports). From v0.5.10 the CPU job has no
# working sgl_kernel either: the shipped tests stub it themselves, with
# upstream's maybe_stub_sgl_kernel(), and get nothing from here.
STUBS = os.path.join(REPO, "test", "backport", "stubs")


def stand_ins(release):
    """The PYTHONPATH entries ``release``'s tests need before its package."""
    if cpu_suite(release) == "default":
        return [STUBS]
    return []


def version_key(release):
    """A release's numbers, to compare: v0.5.15.post1 is (0, 5, 15, 1)."""
    return tuple(int(number) for number in re.findall(r"\d+", release))


# The Scheduler method that builds the draft worker: __init__ on v0.5.6.x,
# init_model_worker on v0.5.7, maybe_init_draft_worker from v0.5.8.
def draft_builder(release):
    """The Scheduler method of ``release`` that builds the draft worker."""
    if version_key(release) < (0, 5, 7):
        return "__init__"
    if version_key(release) < (0, 5, 8):
        return "init_model_worker"
    return "maybe_init_draft_worker"


# Upstream's .isort.cfg at the root of the tree, and a codespell configuration
# with no ignored words (stricter than the fork's .codespellrc). Black has no
# configuration there.
FORK_CONFIG = {
    ".isort.cfg": "[settings]\nprofile=black\nknown_first_party=sglang\n",
    ".codespellrc": "[codespell]\n",
}

# Where the extension goes in the method that builds the draft, on every
# release: after the draft worker's kwargs, before the draft load format is
# handled (on self.server_args, or on v0.5.6.x on __init__'s server_args).
BEFORE_LOAD_FORMAT = re.compile(
    r"(?<=        \)\n\n)(?=        if (?:self\.)?server_args\."
    r"speculative_draft_load_format is not None:\n)"
)
EXTENSION = """\
        # Speculative decoding with pipeline parallelism: the draft runs on
        # the last stage, beside the target's last layers.
        self.draft_pp_rank = {pp_rank}
        self.draft_pp_group = self.tp_worker.pp_group
        self.draft_on_last_stage = self.tp_worker.model_runner.pp_group.is_last_rank

"""


def draft_side_writes(release):
    """D's writes on ``release``: (file, the class and function whose body they
    open, or None for the end of the file, the lines, and the line of each
    write among them)."""
    return (
        (
            EAGLE_WORKER_V2,
            ("EAGLEWorkerV2", "__init__"),
            ["server_args.context_length = 1"],
            [0],
        ),
        (
            SCHEDULER,
            ("Scheduler", draft_builder(release)),
            [
                "setattr(",
                "    self.server_args,",
                '    "speculative_num_steps",',
                "    1,",
                ")",
            ],
            [0],
        ),
        (
            EAGLE_WORKER_V2,
            None,
            [
                "",
                "",
                "def fork_draft_defaults(server_args):",
                '    """The fork\'s defaults for the draft."""',
                "    cfg = server_args",
                "    cfg.speculative_num_draft_tokens = 2",
            ],
            [5],
        ),
    )


def git(cwd, *args):
    """Run git in ``cwd`` and return its output; fail with git's words if it fails."""
    proc = subprocess.run(
        ["git", *IDENTITY, *args], cwd=cwd, capture_output=True, text=True
    )
    if proc.returncode:
        raise AssertionError(f"git {' '.join(args)}: {proc.stdout}{proc.stderr}")
    return proc.stdout


def series_patches(folder):
    """The patch files of the series in ``folder``, in the order they apply."""
    return sorted(
        os.path.join(folder, name)
        for name in os.listdir(folder)
        if name.endswith(".patch")
    )


def line_patches(release):
    """The patch files of ``release``'s series."""
    return series_patches(os.path.join(REPO, "patches", LINES[release]))


def wheel_package(release):
    """The released wheel's ``sglang`` package, as the set-up unpacked it."""
    if release == "v0.5.16":
        package = os.path.join(REPO, ".build", "pristine", "sglang")
    else:
        package = os.path.join(REPO, ".build", "releases", release, "sglang")
    if not os.path.isdir(package):
        raise AssertionError(f"no {package}; run scripts/dev/setup.sh first")
    return package


def release_fork(top, package, release, files=None):
    """Make a fork of ``package`` at ``top``, tagged ``release``; ``files``
    ({path: text}) are committed with it (the fork's own configuration)."""
    shutil.copytree(
        package,
        os.path.join(top, "python", "sglang"),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for path, text in (files or {}).items():
        with open(os.path.join(top, path), "w", encoding="utf-8") as fh:
            fh.write(text)
    git(top, "init", "-q", "-b", "main")
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", f"sglang {release}")
    git(top, "tag", release)


def extend_the_draft_path(fork, release):
    """Commit the fork's own change to the method that builds the draft."""
    path = os.path.join(fork, SCHEDULER)
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    if len(BEFORE_LOAD_FORMAT.findall(source)) != 1:
        raise AssertionError(f"{SCHEDULER}: no one place for the extension")
    pp_rank = "self.ps.pp_rank" if "self.ps = " in source else "self.pp_rank"
    extension = EXTENSION.format(pp_rank=pp_rank)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(BEFORE_LOAD_FORMAT.sub(extension, source))
    git(fork, "commit", "-q", "-am", "fork: the draft on the last pipeline stage")


def first_line_of(source, where):
    """The index in ``source``'s lines of the first statement of the function
    ``where`` (class, function), and its indentation."""
    class_name, function_name = where
    tree = ast.parse(source)
    owner = next(
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == class_name
    )
    function = next(
        node for node in owner.body if getattr(node, "name", "") == function_name
    )
    first = function.body[0]
    return first.lineno - 1, " " * first.col_offset


def add_the_draft_side_writes(fork, release):
    """Commit ``draft_side_writes(release)``, each file's top to bottom; return
    the "path:line:" of each write, as the ratchet names it."""
    sites = []
    for rel, where, lines, writes in draft_side_writes(release):
        path = os.path.join(fork, rel)
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        old = source.splitlines(keepends=True)
        if where is None:
            at, indent = len(old), ""
        else:
            at, indent = first_line_of(source, where)
        new = [(indent + line).rstrip() + "\n" for line in lines]
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(old[:at] + new + old[at:])
        sites.extend(f"{rel}:{at + write + 1}:" for write in writes)
    git(fork, "commit", "-q", "-am", "spec: the draft writes onto the target")
    return sites


def series_stamp(release):
    """What a shared fork is made from: the series and this module."""
    digest = hashlib.sha256(release.encode())
    for path in [__file__, *line_patches(release)]:
        with open(path, "rb") as fh:
            digest.update(fh.read())
    return digest.hexdigest()


def shared_fork(release):
    """The fork of ``release`` with its line's series (the branches above),
    made once in ``.build/forks/RELEASE`` and remade when the series or this
    module changes. Clone it; never change it."""
    top = os.path.join(FORKS, release)
    stamp = series_stamp(release)
    os.makedirs(FORKS, exist_ok=True)
    # One test process makes it; the others wait here for it.
    with open(top + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = os.path.join(top, ".git", "backport-stamp")
        if os.path.isfile(done):
            with open(done, encoding="utf-8") as fh:
                if fh.read() == stamp:
                    return top
        shutil.rmtree(top, ignore_errors=True)
        release_fork(top, wheel_package(release), release, FORK_CONFIG)
        git(top, "am", "-3", *line_patches(release))
        git(top, "branch", "series")
        extend_the_draft_path(top, release)
        git(top, "switch", "-q", "-c", "draft-write")
        sites = add_the_draft_side_writes(top, release)
        git(top, "switch", "-q", "main")
        with open(os.path.join(top, ".git", "draft-write-sites"), "w") as fh:
            fh.write("\n".join(sites))
        with open(done, "w", encoding="utf-8") as fh:
            fh.write(stamp)
    return top


def clone(release, branch, dest, depth=None):
    """A clone of ``release``'s shared fork at ``branch`` (a branch or tag) in
    ``dest``: with ``depth``, a shallow one as actions/checkout@v4 makes it;
    else one that borrows the shared fork's objects."""
    fork = shared_fork(release)
    if depth:
        source = ["--depth", str(depth), f"file://{fork}"]
    else:
        source = ["--shared", fork]
    git(REPO, "clone", "-q", "-b", branch, *source, dest)
    return dest


def draft_side_write_sites(release):
    """The "path:line:" of each of D's writes in ``release``'s shared fork."""
    with open(os.path.join(shared_fork(release), ".git", "draft-write-sites")) as fh:
        return fh.read().split("\n")


# The CPU test job of the fork's pr-test.yml runs ``cd test && python3
# run_suite.py --hw cpu --suite SUITE`` (``cpu_suite``). The wheel has no
# test/run_suite.py; these are its steps with the fork's own sglang.test.ci:
# every file under test/registered/ collected with the sanity check, and the
# suite's files run each as its own ``python3 FILE`` process
# (run_unittest_files, which takes the registry's entries from v0.5.7 and,
# on v0.5.6.x, the TestFile entries run_suite.py made of them). With
# "--one-interpreter" the selected files run in this interpreter instead,
# which has imported sglang once; with a path after the suite, that file
# alone runs.
RUN_SUITE = """
import glob, os, sys
from sglang.test.ci import ci_utils
from sglang.test.ci.ci_register import HWBackend, collect_tests

suite, how, only = sys.argv[1], sys.argv[2], sys.argv[3:]
files = [
    f
    for f in glob.glob(os.path.abspath("registered/**/*.py"), recursive=True)
    if not f.endswith(("/conftest.py", "/__init__.py"))
]
tests = [
    t
    for t in collect_tests(files, sanity_check=True)
    if t.backend == HWBackend.CPU
    and getattr(t, "effective_suite", t.suite) == suite
    and not t.nightly
    and t.disabled is None
]
print("selected:", " ".join(sorted(os.path.relpath(t.filename) for t in tests)))
if only:
    tests = [t for t in tests if os.path.relpath(t.filename) in only]
if how == "--one-interpreter":
    import pytest

    paths = [t.filename for t in tests]
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *paths]))
if not hasattr(ci_utils, "CIRegistry"):
    tests = [ci_utils.TestFile(t.filename, t.est_time) for t in tests]
sys.exit(ci_utils.run_unittest_files(tests, timeout_per_file=1200))
"""


def release_env(release, package_root):
    """This process's environment for running ``release``'s sglang from
    ``package_root`` (a fork's python/ or an unpacked release), with the
    stand-ins its CI job's packages need here, and no git variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["PYTHONPATH"] = os.pathsep.join([*stand_ins(release), package_root])
    return env


# Importing a release's sglang takes about 11 s a process here, and 8 s of
# that is the packages sglang imports (``python -X importtime``), which are
# this venv's whichever release it is. So the runs that import a release's
# sglang (the CPU job's, the regression run at the release) are processes
# forked from multiprocessing's fork server, which imports the heaviest of
# those packages once per test process and no sglang; each run imports its
# release's sglang from its own tree, as python3 there does, in about 3 s.
# None of these packages imports sglang, sgl_kernel or vllm (the stand-ins).
SGLANG_DEPENDENCIES = [
    "torch",
    "transformers",
    "triton",
    "datasets",
    "xgrammar",
    "compressed_tensors",
    "scipy",
    "openai",
    "fastapi",
    "pandas",
]
FORK_SERVER = multiprocessing.get_context("forkserver")
FORK_SERVER.set_forkserver_preload(SGLANG_DEPENDENCIES)


@functools.cache
def plain_sys_path():
    """``sys.path`` of this venv's python3 after its first entry, with no
    PYTHONPATH: the standard library and the venv's site-packages."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; print(*sys.path[1:], sep='\\n')"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.splitlines()


def _start_as_python3(argv, cwd, env, path, output):
    """In the forked process: start as ``python3 ARGV`` does in ``cwd`` with
    ``env``, ``path`` after PYTHONPATH, writing to ``output``; then run."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(output, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    option, target, *args = argv
    # The whole of sys.path, as python3 makes it: the test process's (which
    # the fork server passed on) has pytest's test folders. python3 -c puts
    # "" first, python3 -m the current folder.
    first = "" if option == "-c" else cwd
    sys.path[:] = [first, *env["PYTHONPATH"].split(os.pathsep), *path]
    if option == "-c":
        sys.argv = ["-c", *args]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)


def python3(argv, cwd, env, timeout):
    """Run ``python3 ARGV`` (``-c CODE ARG...`` or ``-m MODULE ARG...``) in
    ``cwd`` with ``env``, forked from the fork server; return its output
    (stdout and stderr as it wrote them) and exit status."""
    with tempfile.NamedTemporaryFile("r", prefix="python3-", suffix=".log") as out:
        process = FORK_SERVER.Process(
            target=_start_as_python3,
            args=(argv, cwd, env, plain_sys_path(), out.name),
        )
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise AssertionError(
                f"python3 {argv[0]} ran over {timeout} s:\n{out.read()[-4000:]}"
            )
        return out.read(), process.exitcode


def run_suite(clone, release, how, *only):
    """Run the CPU job's steps for ``release``'s suite in ``clone/test`` as the
    job does (python3 is the venv's, the clone's python/ its installed sglang),
    ``how`` being "--each-file" (the runner's way) or "--one-interpreter";
    ``only``: the files (under test/) to run of those selected. Returns the
    output and exit status."""
    env = release_env(release, os.path.join(clone, "python"))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return python3(
        ["-c", RUN_SUITE, cpu_suite(release), how, *only],
        cwd=os.path.join(clone, "test"),
        env=env,
        timeout=1800,
    )
