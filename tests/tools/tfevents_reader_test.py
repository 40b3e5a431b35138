"""An independent reader of the TensorBoard event files the front writes: its own CRC-32C (bit by bit,
no table shared with the C++ encoder) and its own protobuf decoding of Event / Summary / Value. It
starts the real `ajet-swarm` (from ${AJET_BINARY_DIR}/bin, with the echo engine), posts metrics through
POST /log_metrics, records a debug batch, and reads the event file back: every record's two CRCs,
the version event first, and every value at its step (as float32, what simple_value holds).
Run through ctest (tests/tools/CMakeLists.txt); without AJET_BINARY_DIR the server test is skipped.
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import sys
import time
import unittest
import urllib.request

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "clients", "python", "tests"))

from swarm_fixture import SwarmServer, config_yaml, eventually, tokenizer_fixture  # noqa: E402

TOKEN = "tfevents-admin"


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), reflected, bit by bit from the polynomial's definition."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path: str) -> list:
    """The TFRecords of a file; fails on a bad CRC or a torn record."""
    with open(path, "rb") as f:
        blob = f.read()
    records, pos = [], 0
    while pos < len(blob):
        if len(blob) - pos < 12:
            raise AssertionError(f"{path}: {len(blob) - pos} trailing bytes at {pos}, not a record header")
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if header_crc != masked(crc32c(header)):
            raise AssertionError(f"{path}: length CRC of the record at {pos} is wrong")
        data = blob[pos + 12:pos + 12 + length]
        if len(data) != length or pos + 16 + length > len(blob):
            raise AssertionError(f"{path}: the record at {pos} is cut short")
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if data_crc != masked(crc32c(data)):
            raise AssertionError(f"{path}: data CRC of the record at {pos} is wrong")
        records.append(data)
        pos += 16 + length
    return records


def varint(buf: bytes, pos: int):
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message: ints for varints, bytes otherwise."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise AssertionError(f"wire type {wire} in an event")
        out.append((number, wire, value))
    if pos != len(buf):
        raise AssertionError("a field runs past the end of its message")
    return out


def decode_event(data: bytes) -> dict:
    """tensorflow Event: wall_time=1 (double), step=2 (int64), file_version=3, summary=5."""
    event = {"step": 0, "scalars": []}
    for number, wire, value in fields(data):
        if number == 1:
            assert wire == 1
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2:
            assert wire == 0
            event["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3:
            assert wire == 2
            event["file_version"] = value.decode()
        elif number == 5:
            assert wire == 2
            for s_number, s_wire, v in fields(value):  # Summary.value = 1
                assert (s_number, s_wire) == (1, 2)
                tag, simple = None, None
                for v_number, v_wire, x in fields(v):  # Value.tag = 1, Value.simple_value = 2
                    if v_number == 1:
                        assert v_wire == 2
                        tag = x.decode()
                    elif v_number == 2:
                        assert v_wire == 5
                        simple = struct.unpack("<f", x)[0]
                event["scalars"].append((tag, simple))
        else:
            raise AssertionError(f"unexpected Event field {number}")
    return event


def as_float32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


class ReaderSelfTest(unittest.TestCase):
    def test_crc32c_check_value_and_mask(self):
        self.assertEqual(crc32c(b"123456789"), 0xE3069283)
        self.assertEqual(crc32c(bytes(32)), 0x8A9136AA)  # RFC 3720 B.4
        self.assertEqual(masked(0), 0xA282EAD8)


class EventFileFromARealFront(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tokenizer = tokenizer_fixture()
        cls.server = SwarmServer(admin_token=TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def request(self, method: str, path: str, body=None, token: str = TOKEN):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.server.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def event_file(self, experiment_dir: str) -> str:
        directory = os.path.join(experiment_dir, "tensorboard")
        files = os.listdir(directory)
        self.assertEqual(len(files), 1, files)
        return os.path.join(directory, files[0])

    def test_posted_metrics_and_a_recorded_batch_read_back_exactly(self):
        s = self.server
        s.post("/sync_train_config", {"yaml_as_string": config_yaml(self.tokenizer)}, token=TOKEN)
        s.post("/start_engine", {}, token=TOKEN)
        self.assertTrue(eventually(lambda: s.status() == "ENGINE.ROLLING"), s.output())
        experiment_dir = s.get("/get_server_experiment_dir")["server_experiment_dir"]
        t0 = time.time()

        posted = {
            0: {"val/greedy_success": 0.5, "val/pass_at_4@calc": 0.1, "custom/big": 123456.789},
            2: {"val/greedy_success": 0.75, "custom/negative": -2.5},
            7: {"val/greedy_success": 1.0},
        }
        for step, metrics in posted.items():
            answer = self.request("POST", "/log_metrics", {"step": step, "metrics": metrics})
            self.assertEqual(answer, {"success": True, "step": step, "written": len(metrics)})

        # A debug batch (train_batch_size 2 x num_repeat 2): the front records its rollout numbers.
        rewards = {"task-a": [1.0, 0.0], "task-b": [1.0, 1.0]}
        for task, task_rewards in rewards.items():
            for reward in task_rewards:
                claim = s.post("/claim_episode", {"client_uuid": "reader", "episode_type": "train",
                                                  "discard_episode_timeout": 60})
                self.assertTrue(claim["success"], claim)
                chat = {"model": "agentjet", "messages": [{"role": "user", "content": "answer " + task}]}
                self.request("POST", "/v1/chat/completions", chat, token=claim["openai_api_key"])
                s.post("/end_episode", {"client_uuid": "reader", "episode_uuid": claim["episode_uuid"],
                                        "task_id": task,
                                        "workflow_output": {"reward": reward, "metadata": {"task_id": task}}},
                       token=claim["openai_api_key"])  # the episode's key

        path = self.event_file(experiment_dir)
        self.assertRegex(os.path.basename(path), r"^events\.out\.tfevents\.\d+\." + re.escape(socket.gethostname()) + "$")

        def batch_written():
            events = [decode_event(r) for r in read_records(path)]
            return any(tag == "rollout/reward_mean" for e in events for tag, _ in e["scalars"])

        self.assertTrue(eventually(batch_written), s.output())
        t1 = time.time()
        events = [decode_event(r) for r in read_records(path)]

        first = events[0]
        self.assertEqual(first["file_version"], "brain.Event:2")
        self.assertEqual(first["scalars"], [])
        self.assertEqual(int(first["wall_time"]), int(os.path.basename(path).split(".")[3]))
        for e in events[1:]:
            self.assertNotIn("file_version", e)
            self.assertTrue(e["scalars"], e)
            self.assertGreaterEqual(e["wall_time"], t0 - 1)
            self.assertLessEqual(e["wall_time"], t1 + 1)

        # Every posted value, at its step, once, as float32; one event per post.
        seen = {}
        for e in events[1:]:
            for tag, value in e["scalars"]:
                seen.setdefault((e["step"], tag), []).append(value)
        for step, metrics in posted.items():
            matching = [e for e in events if e["step"] == step and dict(e["scalars"]) == {
                k: as_float32(v) for k, v in metrics.items()}]
            self.assertEqual(len(matching), 1, (step, metrics, events))
            for tag, value in metrics.items():
                self.assertEqual(seen[(step, tag)], [as_float32(value)], tag)

        # The batch: rewards 1, 0, 1, 1 at step 0 (the debug backbone numbers batches by id - 1).
        self.assertEqual(seen[(0, "rollout/reward_mean")], [0.75])
        self.assertEqual(seen[(0, "rollout/episodes")], [4.0])
        self.assertEqual(seen[(0, "rollout/tasks")], [2.0])
        self.assertEqual(seen[(0, "rollout/client/reader/episodes")], [4.0])

        # The reader is not lenient: one flipped bit of a value, or of a length, is a CRC failure.
        with open(path, "rb") as f:
            blob = bytearray(f.read())
        second = 16 + struct.unpack("<Q", blob[:8])[0]  # where the second record starts
        for where, what in ((second + 12 + 5, "data CRC"), (second + 1, "length CRC")):
            broken = bytearray(blob)
            broken[where] ^= 0x01
            copy = path + ".broken"
            with open(copy, "wb") as f:
                f.write(broken)
            with self.assertRaisesRegex(AssertionError, what):
                read_records(copy)
            os.remove(copy)

        # The store holds the same numbers at full precision.
        history = self.request("GET", "/metrics_history?name=val/pass_at_4@calc,rollout/reward_mean")
        self.assertEqual([p[:2] for p in history["series"]["val/pass_at_4@calc"]], [[0, 0.1]])
        self.assertEqual([p[:2] for p in history["series"]["rollout/reward_mean"]], [[0, 0.75]])


if __name__ == "__main__":
    unittest.main()
