"""What the interop tests share: importing the packages they judge with (a missing one skips
the test, exit 77, or fails it under ZT_REQUIRE_INTEROP=1, naming the package), a list of
failures, and running ztrain's executables."""
import importlib
import json
import os
import subprocess
import sys


def missing(msg):
    """Exits 77 (skipped), or 1 under ZT_REQUIRE_INTEROP=1, saying what is missing."""
    if os.environ.get("ZT_REQUIRE_INTEROP") == "1":
        print("interop: FAILED: " + msg)
        sys.exit(1)
    print("interop: SKIPPED: " + msg)
    sys.exit(77)


def require(*names):
    """The modules NAMES, imported; exits 77 (or 1 under ZT_REQUIRE_INTEROP=1) when one is missing."""
    try:
        return [importlib.import_module(n) for n in names]
    except ImportError as e:
        missing(f"the Python package '{e.name}' is missing (tests/interop/requirements.txt)")


def shared_data_path(src_dir):
    """Where the shared data folder is: ZT_SHARED_DATA, else ../shared/data beside the checkout."""
    return os.environ.get("ZT_SHARED_DATA", os.path.join(src_dir, "..", "shared", "data"))


def shared_data(src_dir):
    """The shared data folder (shared_data_path); exits 77 (or 1 under ZT_REQUIRE_INTEROP=1)
    when it holds no tokenizers/."""
    shared = shared_data_path(src_dir)
    if not os.path.isdir(os.path.join(shared, "tokenizers")):
        missing(f"{shared}/tokenizers not found (ZT_SHARED_DATA names the shared data folder)")
    return shared


class Failures:
    """The differences a test found, each said in a sentence; printed at the end."""

    def __init__(self):
        self.items = []

    def check(self, ok, what):
        if not ok:
            self.items.append(what)
        return ok

    def report(self, success):
        """Prints each failure (or SUCCESS), returns the exit status."""
        for what in self.items:
            print("FAILED: " + what)
        if not self.items:
            print(success)
        return 1 if self.items else 0


def run(cmd, **kw):
    """Runs CMD with Open MPI allowed as root; its exit status and output (stdout and stderr)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=300, **kw)
    return p.returncode, p.stdout


def read_metrics(run_dir):
    """metrics.jsonl's records, in order."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def prepare_lines(bin_dir, work, what):
    """200 one-line documents ("a line of text number I for WHAT"), prepared by zt-prepare into
    WORK/data (train and val shards); exits FAILED if it fails."""
    with open(os.path.join(work, "text.txt"), "w") as f:
        for i in range(200):
            f.write(f"a line of text number {i} for {what}\n%\n")
    rc, out = run([os.path.join(bin_dir, "zt-prepare"), "--input", os.path.join(work, "text.txt"), "--output",
                   os.path.join(work, "data"), "--doc-separator", "%"])
    if rc != 0:
        sys.exit(f"FAILED: zt-prepare exited {rc}: {out[-400:]}")
