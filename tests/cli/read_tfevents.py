#!/usr/bin/env python3
"""An independent reader of TensorBoard event files (Python standard library only), for the
tests: checks both CRC-32C of every record, decodes each Event, and compares the scalars
with metrics.jsonl.

  read_tfevents.py check RUN_DIR    every tb/ file against RUN_DIR/metrics.jsonl; exit 0 when
                                    every value equals (as float32) its record's, 1 otherwise
  read_tfevents.py dump FILE        one line per event: step, kind, tags and values

A cut or corrupted last record (a killed run) is dropped with a note, as TensorBoard's reader
does; damage before the last record is an error.
"""
import glob
import json
import os
import struct
import sys

POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected; computed bit by bit, not by table


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ POLY if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The payloads of PATH's records, and a note when its last record is cut or damaged."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(data):
        head = data[pos:pos + 12]
        if len(head) < 12:
            return out, "a cut last record (%d header bytes)" % len(head)
        (length,) = struct.unpack("<Q", head[:8])
        (len_crc,) = struct.unpack("<I", head[8:12])
        if len_crc != masked(head[:8]):
            raise ValueError("%s: record %d: length CRC differs" % (path, len(out)))
        body = data[pos + 12:pos + 12 + length + 4]
        if len(body) < length + 4:
            return out, "a cut last record (%d of %d bytes)" % (len(body), length + 4)
        payload = body[:length]
        (crc,) = struct.unpack("<I", body[length:])
        if crc != masked(payload):
            if pos + 12 + length + 4 == len(data):
                return out, "a damaged last record (payload CRC differs)"
            raise ValueError("%s: record %d: payload CRC differs" % (path, len(out)))
        out.append(payload)
        pos += 12 + length + 4
    return out, None


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i, out = 0, []
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        elif wire == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wire)
        out.append((num, wire, v))
    return out


def event(payload):
    """{'wall_time', 'step', 'file_version', 'session_start', 'scalars': [(tag, value)]}."""
    e = {"step": 0, "scalars": [], "file_version": None, "session_start": False, "wall_time": None}
    for num, _, v in fields(payload):
        if num == 1:
            e["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2:
            e["step"] = v
        elif num == 3:
            e["file_version"] = v.decode()
        elif num == 5:
            for snum, _, value in fields(v):
                if snum != 1:
                    continue
                tag, simple = None, None
                for vnum, _, x in fields(value):
                    if vnum == 1:
                        tag = x.decode()
                    elif vnum == 2:
                        simple = struct.unpack("<f", x)[0]
                e["scalars"].append((tag, simple))
        elif num == 6:
            e["session_start"] = any(n == 1 and x == 1 for n, _, x in fields(v))
    return e


def flatten(prefix, v, out):
    if isinstance(v, dict):
        for k, x in v.items():
            flatten(prefix + "/" + k, x, out)
    elif isinstance(v, bool):
        out.append((prefix, 1.0 if v else 0.0))
    elif isinstance(v, (int, float)):
        out.append((prefix, v))


def expected_scalars(rec):
    """The tags the README promises for a metrics.jsonl record."""
    if "event" in rec:
        group = rec["event"] + ("/" + rec["task"] if "task" in rec else "")
    elif "val_loss" in rec:
        group = "val"
    else:
        group = "train"
    out = []
    for k, v in rec.items():
        if k in ("step", "event", "task"):
            continue
        flatten(group + "/" + ("loss" if group == "val" and k == "val_loss" else k), v, out)
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(run_dir):
    files = sorted(glob.glob(os.path.join(run_dir, "tb", "events.out.tfevents.*")))
    if not files:
        print("FAIL: no event file in %s/tb" % run_dir)
        return 1
    got = []
    for i, path in enumerate(files):
        payloads, note = records(path)
        if note:
            print("note: %s: %s, dropped" % (os.path.basename(path), note))
        events = [event(p) for p in payloads]
        if not events or events[0]["file_version"] != "brain.Event:2":
            print("FAIL: %s does not start with file_version brain.Event:2" % path)
            return 1
        starts = [e["step"] for e in events if e["session_start"]]
        if i > 0 and len(starts) != 1:
            print("FAIL: %s (a resumed run's) has %d session starts, expected 1" % (path, len(starts)))
            return 1
        got += [(e["step"], t, v) for e in events for t, v in e["scalars"]]
        print("ok: %s: %d records, CRCs good%s" % (os.path.basename(path), len(payloads),
                                                    ", session start at step %d" % starts[0] if starts else ""))
    want, step = [], 0
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        rec = json.loads(line)
        step = rec.get("step", step)
        want += [(step, t, f32(v)) for t, v in expected_scalars(rec)]
    if len(got) != len(want):
        print("FAIL: %d scalars in the event files, %d in metrics.jsonl" % (len(got), len(want)))
        return 1
    for g, w in zip(got, want):
        if g != w:
            print("FAIL: event files have %s where metrics.jsonl has %s" % (g, w))
            return 1
    tags = sorted({t for _, t, _ in got})
    print("ok: %d scalars (%d tags, e.g. %s) equal metrics.jsonl's" % (len(got), len(tags), ", ".join(tags[:4])))
    return 0


def dump(path):
    payloads, note = records(path)
    for p in payloads:
        e = event(p)
        kind = "file_version" if e["file_version"] else "session_start" if e["session_start"] else "scalars"
        print(e["step"], kind, " ".join("%s=%g" % tv for tv in e["scalars"]))
    if note:
        print("note:", note)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "dump"):
        print(__doc__)
        sys.exit(2)
    try:
        sys.exit(check(sys.argv[2]) if sys.argv[1] == "check" else dump(sys.argv[2]))
    except ValueError as err:
        print("FAIL:", err)
        sys.exit(1)
