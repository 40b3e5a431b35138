"""Task readers (upstream `ajet.task_reader.RouterTaskReader` and the config classes of
`ajet.default_config.ajet_default`), standard library only.

    dataset = RouterTaskReader(
        reader_type="jsonl_dataset_file",
        reader_config=AjetTaskReader(jsonl_dataset_file=JsonlDatasetFile(
            training=JsonlTrainingFp(file_path="train.jsonl"))))
    for task in dataset.generate_training_tasks(): ...

or from a job: `RouterTaskReader.from_job(job)` (its `ajet.task_reader` block), or upstream's
`RouterTaskReader(reader_type=job.config.ajet.task_reader.type, reader_config=job.config.ajet.task_reader)`.

Types: `jsonl_dataset_file` (one JSON object per line; `main_query`, `task_id`, `init_messages`,
`env_type`, `metadata` as upstream reads them: a line without `metadata` keeps the whole line as the
metadata, one without `task_id` (or with null) gets `task_<n>`, n its position among the tasks) and `random_dummy` (1000 tasks "0".."999",
upstream's dummy set). `huggingface_dat_repo`, `env_service`, `data_generation` and `tracing` need
upstream's third-party packages and are refused with an ImportError saying how to convert the data to
JSONL instead.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional

from .types import Task


@dataclass
class HuggingfaceDatRepo:
    dataset_path: str = "gsm8k"
    dataset_name: Optional[str] = None
    training_split: str = "train"
    validation_split: str = "validation"
    http_proxy_address: str = ""


@dataclass
class JsonlTrainingFp:
    file_path: str = ""


@dataclass
class JsonlDatasetFile:
    training: JsonlTrainingFp = field(default_factory=JsonlTrainingFp)
    validation: JsonlTrainingFp = field(default_factory=JsonlTrainingFp)


@dataclass
class AjetTaskReader:
    type: str = "huggingface_dat_repo"
    huggingface_dat_repo: HuggingfaceDatRepo = field(default_factory=HuggingfaceDatRepo)
    jsonl_dataset_file: JsonlDatasetFile = field(default_factory=JsonlDatasetFile)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """`obj.name` or `obj[name]` (dataclass configs, AttrDict job configs and plain dicts alike)."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


class JsonlTaskReader:
    def __init__(self, reader_config: Any):
        self.reader_config = reader_config

    @staticmethod
    def read_file(file_path: str) -> List[Task]:
        tasks: List[Task] = []
        try:
            with open(file_path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        data = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"Invalid JSON in file {file_path}, line {lineno}: {e}") from None
                    if not isinstance(data, dict):
                        raise ValueError(f"{file_path}, line {lineno}: a task must be a JSON object")
                    tasks.append(Task(
                        main_query=data.get("main_query", "[not defined]"),
                        init_messages=data.get("init_messages", []),
                        # null is no id too (not the group "None" of every such line)
                        task_id=str(data["task_id"]) if data.get("task_id") is not None else f"task_{len(tasks)}",
                        env_type=data.get("env_type", "no_env"),
                        metadata=data.get("metadata", data),
                    ))
        except FileNotFoundError:
            raise ValueError(f"JSONL file not found: {file_path}") from None
        if not tasks:
            raise ValueError(f"No task found in file: {file_path}")
        return tasks

    def _path(self, split: str) -> str:
        jsonl = _get(self.reader_config, "jsonl_dataset_file", self.reader_config)
        path = _get(_get(jsonl, split), "file_path", "")
        if not path:
            raise ValueError(f"jsonl_dataset_file.{split}.file_path is not set")
        return path

    def get_training_tasks(self) -> List[Task]:
        return self.read_file(self._path("training"))

    def get_validation_tasks(self) -> List[Task]:
        return self.read_file(self._path("validation"))


class RandomDummyTaskReader:
    """Upstream's dummy dataset: 1000 tasks "[dummy task @ N]" with task_id "N", in a fixed order."""

    def __init__(self, reader_config: Any = None):
        self.reader_config = reader_config

    @staticmethod
    def _tasks() -> List[Task]:
        order = list(range(1000))
        random.Random(42).shuffle(order)
        return [Task(main_query=f"[dummy task @ {i}]", init_messages=[], task_id=str(i), env_type="no_env",
                     metadata={"random_number": i}) for i in order]

    def get_training_tasks(self) -> List[Task]:
        return self._tasks()

    def get_validation_tasks(self) -> List[Task]:
        return self._tasks()


_NEEDS_PACKAGES = {
    "huggingface_dat_repo": "the 'datasets' package",
    "env_service": "an AgentJet environment service client",
    "data_generation": "upstream's document reader and an LLM",
    "tracing": "upstream's tracing connector",
}


class RouterTaskReader:
    """Picks the reader for `reader_type` (upstream's class). `get_training_tasks()` /
    `get_validation_tasks()` return shuffled lists (upstream shuffles too; pass `seed` for a fixed
    order); `generate_training_tasks()` / `generate_validation_tasks()` iterate over them."""

    def __init__(self, reader_type: Optional[str] = None, reader_config: Any = None, seed: Optional[int] = None):
        if reader_type is None:
            reader_type = _get(reader_config, "type")
        self.reader_type = reader_type
        self._rng = random.Random(seed)
        if reader_type == "jsonl_dataset_file":
            self.task_reader: Any = JsonlTaskReader(reader_config)
        elif reader_type == "random_dummy":
            self.task_reader = RandomDummyTaskReader(reader_config)
        elif reader_type in _NEEDS_PACKAGES:
            raise ImportError(
                f"task reader '{reader_type}' needs {_NEEDS_PACKAGES[reader_type]}, which ajet_swarm (standard library "
                "only) does not bring: write the tasks as JSONL (one {\"main_query\", \"task_id\", \"metadata\"} object "
                "per line) and use reader_type='jsonl_dataset_file', or build Task objects yourself")
        else:
            raise ValueError(f"Unsupported task reader type: {reader_type!r} (this package reads "
                             "'jsonl_dataset_file' and 'random_dummy')")

    @classmethod
    def from_job(cls, job: Any, seed: Optional[int] = None) -> "RouterTaskReader":
        """The reader an AgentJetJob's `ajet.task_reader` block describes."""
        config = getattr(job, "config", job)
        task_reader = _get(_get(config, "ajet"), "task_reader")
        if task_reader is None:
            raise ValueError("the job has no ajet.task_reader block")
        return cls(_get(task_reader, "type"), task_reader, seed=seed)

    def get_training_tasks(self) -> List[Task]:
        tasks = list(self.task_reader.get_training_tasks())
        self._rng.shuffle(tasks)
        return tasks

    def get_validation_tasks(self) -> List[Task]:
        tasks = list(self.task_reader.get_validation_tasks())
        self._rng.shuffle(tasks)
        return tasks

    def generate_training_tasks(self) -> Iterator[Task]:
        yield from self.get_training_tasks()

    def generate_validation_tasks(self) -> Iterator[Task]:
        yield from self.get_validation_tasks()
