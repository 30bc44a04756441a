"""ztrain's TensorBoard event files, read by the tensorboard package and its server.

    python test_tensorboard.py BIN_DIR SOURCE_DIR

A tiny GPT-2 trains 6 steps with validation and a multiple-choice task evaluated every 3
steps (run.tensorboard = true), then:
  - the package's record reader reads every record of run.dir/tb's file: its length and data
    CRC-32C checks pass (and a copy with one byte changed fails them: the check is live);
  - EventAccumulator reads run.dir/tb: the same scalar tags, steps and values as
    metrics.jsonl (each value rounded to float32; tags as docs/metrics.md names them, the
    mapping tests/cli/read_tfevents.py states), and each tag's wall times increase with its
    steps;
  - the real `tensorboard --logdir RUN_DIR --port 0 --host 127.0.0.1` serves the same scalars
    over its HTTP API (/data/plugin/scalars/scalars?run=tb&tag=...); then it is stopped.
Exit 0: all equal; 1: a difference, named; 77: skipped (a package missing, unless
ZT_REQUIRE_INTEROP=1).
"""
import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from interop_common import Failures, prepare_lines, read_metrics, require, run

tensorboard, = require("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow  # noqa: E402

FAIL = Failures()


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_scalars(src_dir, run_dir):
    """{tag: [(step, value as float32)]} from metrics.jsonl, by the tag mapping of read_tfevents.py."""
    spec = importlib.util.spec_from_file_location("read_tfevents", os.path.join(src_dir, "tests", "cli",
                                                                               "read_tfevents.py"))
    reader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reader)
    want, step = {}, 0
    for rec in read_metrics(run_dir):
        step = rec.get("step", step)
        for tag, value in reader.expected_scalars(rec):
            want.setdefault(tag, []).append((step, f32(value)))
    return want


def train(bin_dir, src_dir, work):
    """A 6-step run with validation and a choice task every 3 steps; its run directory."""
    prepare_lines(bin_dir, work, "the event files")
    run_dir = os.path.join(work, "run")
    rc, out = run([os.path.join(bin_dir, "ztrain"), "--config", os.path.join(src_dir, "inputs", "tiny.ini"),
                   "--data.train=" + os.path.join(work, "data", "train_*.bin"),
                   "--data.val=" + os.path.join(work, "data", "val_*.bin"), "--run.dir=" + run_dir,
                   "--run.tensorboard=true", "--train.threads=1", "--train.max_steps=6", "--train.eval_every=3",
                   "--train.sample_tokens=0", "--eval.tasks=" + os.path.join(src_dir, "inputs", "tasks",
                                                                             "tiny_choice.jsonl"),
                   "--eval.every=3", "--eval.limit=8"])
    if rc != 0:
        sys.exit(f"FAILED: ztrain exited {rc}: {out[-400:]}")
    return run_dir


def record_count(path):
    """The records of PATH as the package's reader reads them; DataLossError on a bad CRC."""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    n = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return n
        n += 1


def check_crcs(path, work):
    try:
        n = record_count(path)
    except errors.DataLossError as e:
        FAIL.check(False, f"{path}: tensorboard's reader: {e.message}")
        return 0
    bad = os.path.join(work, "damaged.tfevents")
    shutil.copy(path, bad)
    with open(bad, "r+b") as f:  # one byte inside a record in the middle of the file
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x01]))
    try:
        record_count(bad)
        FAIL.check(False, f"{bad}: one byte changed, and tensorboard's reader found no CRC difference")
    except errors.DataLossError:
        pass
    return n


def compare(what, got, want):
    """GOT and WANT: {tag: [(step, value)]}; every difference is a failure."""
    FAIL.check(sorted(got) == sorted(want), f"{what}: tags {sorted(got)}, metrics.jsonl's {sorted(want)}")
    for tag in sorted(set(got) & set(want)):
        FAIL.check(got[tag] == want[tag], f"{what}: {tag}: {got[tag][:8]}..., metrics.jsonl's {want[tag][:8]}...")


def accumulated(tb_dir):
    """{tag: [(step, value)]} and {tag: [wall_time]} as EventAccumulator reads TB_DIR."""
    acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})
    acc.Reload()
    values, walls = {}, {}
    for tag in acc.Tags()["scalars"]:
        events = acc.Scalars(tag)
        values[tag] = [(e.step, e.value) for e in events]
        walls[tag] = [e.wall_time for e in events]
    return values, walls


def start_server(logdir, work):
    """A tensorboard server on loopback, port chosen by the system; (process, base URL)."""
    exe = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    log = open(os.path.join(work, "tensorboard.log"), "w+")
    proc = subprocess.Popen([exe, "--logdir", logdir, "--port", "0", "--host", "127.0.0.1"], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        log.seek(0)
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", log.read())
        if m:
            return proc, f"http://127.0.0.1:{m.group(1)}"
        time.sleep(0.5)
    log.seek(0)
    stop_server(proc)
    sys.exit(f"FAILED: tensorboard printed no address (exit {proc.poll()}): {log.read()[-600:]}")


def stop_server(proc):
    """Stops the server and what it started (its session: the data server)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def get_json(url):
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
    with direct.open(url, timeout=30) as r:
        return json.loads(r.read().decode())


def served(base, want):
    """{tag: [(step, value)]} over HTTP, polled until every tag has its events (the server loads in the background)."""
    deadline, got = time.time() + 90, {}
    while time.time() < deadline:
        tags = get_json(base + "/data/plugin/scalars/tags").get("tb", {})
        got = {}
        for tag in tags:
            q = urllib.parse.urlencode({"run": "tb", "tag": tag})
            got[tag] = [(step, value) for _, step, value in get_json(base + "/data/plugin/scalars/scalars?" + q)]
        if sorted(got) == sorted(want) and all(len(got[t]) == len(want[t]) for t in want):
            break
        time.sleep(1)
    return got


def main(bin_dir, src_dir):
    with tempfile.TemporaryDirectory(prefix="zt-interop-") as work:
        run_dir = train(bin_dir, src_dir, work)
        files = glob.glob(os.path.join(run_dir, "tb", "events.out.tfevents.*"))
        if not FAIL.check(len(files) == 1, f"{run_dir}/tb holds {files}, expected one event file"):
            return FAIL.report("")
        records = check_crcs(files[0], work)
        want = expected_scalars(src_dir, run_dir)
        got, walls = accumulated(os.path.join(run_dir, "tb"))
        compare("EventAccumulator", got, want)
        for tag, w in walls.items():
            FAIL.check(all(a < b for a, b in zip(w, w[1:])), f"{tag}: wall times do not increase: {w}")
        proc, base = start_server(run_dir, work)
        try:
            compare("tensorboard's HTTP API", served(base, want), want)
        finally:
            stop_server(proc)
    n = sum(len(v) for v in want.values())
    return FAIL.report(f"{records} records, CRCs good; {n} scalars in {len(want)} tags equal metrics.jsonl's, read "
                       f"by EventAccumulator and served by tensorboard {tensorboard.__version__} over HTTP")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
