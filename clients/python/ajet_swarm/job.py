"""AgentJetJob: a training config builder with upstream AgentJet's interface
(`ajet.copilot.job.AgentJetJob`), standard library only.

    job = AgentJetJob(experiment_name="math_gsm8k_grpo", algorithm="grpo", n_gpu=8, model="/models/Qwen2.5-3B",
                      batch_size=32, num_repeat=4)
    job.config.ajet.rollout.temperature = 0.7        # any key of the tree, by attribute or by [key]
    swarm_worker.auto_sync_train_config_and_start_engine(job)

The tree starts from upstream's swarm default config (the `ajet:` section of its
`ajet_swarm_default.yaml`, embedded below) or from `base_yaml_config` (a YAML file merged over that
default, so a partial file works); the keyword arguments then override their keys, exactly as
upstream maps them, and the final values are mirrored as attributes (`job.num_repeat`, ...).
`job.config.to_dict()` is what `sync_train_config` sends; the server accepts upstream's whole tree
and warns about the keys it does not use (docs/config.md). Settings of this project's engine go
under `job.config.ajet.engine` (e.g. `job.config.ajet.engine = {"threads": 8}`).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, Optional, Union

from . import config_yaml
from .records import AttrDict, unwrap

logger = logging.getLogger("ajet_swarm")

# The ajet: section of upstream's ajet/default_config/ajet_swarm_default.yaml (merged with
# ajet_default.yaml, as Hydra resolves it); the same tree as tests/config/data/upstream_swarm_job.yaml.
UPSTREAM_SWARM_DEFAULT_YAML = """\
ajet:
  project_name: ajet_default_project
  experiment_name: read_yaml_name
  experiment_dir: auto
  backbone: verl
  model:
    path: Qwen/Qwen2.5-7B-Instruct
  data:
    max_prompt_length: 3000
    max_response_length: 15000
    train_batch_size: 32
  rollout:
    user_workflow: null
    force_disable_toolcalls: false
    max_env_worker: 128
    gamma: 1.0
    compute_madness_checklist: []
    agent_madness_termination: true
    agent_madness_reward: 0.0
    max_response_length_in_one_turn: 4096
    max_model_len: 18000
    multi_turn: {max_sample_per_task: 30, max_steps: 30, expected_steps: 1}
    tensor_model_parallel_size: 1
    n_vllm_engine: 1
    max_num_seqs: 64
    name: vllm
    gpu_memory_utilization: 0.85
    num_repeat: 4
    temperature: 0.9
    top_p: 1.0
    top_k: -1
    val_kwargs: {temperature: 0.0, top_k: -1, top_p: 1.0, do_sample: false}
  task_reader:
    type: random_dummy
    jsonl_dataset_file:
      training: {file_path: /path/to/training/data.jsonl}
      validation: {file_path: /path/to/validation/data.jsonl}
    env_service: {env_type: appworld, env_url: "http://127.0.0.1:8080", env_action_preference: code,
                  training_split: train, validation_split: dev}
    huggingface_dat_repo: {dataset_path: gsm8k, training_split: train, validation_split: validation}
    data_generation:
      document_reader: {document_path: [a.pdf], languages: [eng], chunk_size: 5120, split_by: sentence}
      task_num: 10
  task_judge:
    judge_type: customized_protocol
    judge_protocol: null
    alien_llm_model: qwen3-235b-a22b-instruct-2507
    alien_llm_response_length: 512
    rubrics_auto_grader: {model_name: qwen-max, grader_mode: pointwise, min_score: 0, max_score: 1}
  context_tracker:
    timeline_merging_policy: {timeline_compare_level: text, ignore_tools: true}
    fix_retokenization_drift: true
    log_tool_format_check: false
    log_tool_format_error_detail: false
    detect_timeline_snap: false
    alien_llm_model: qwen3-235b-a22b-instruct-2507
    alien_llm_response_length: 512
  debug: {debug_max_parallel: 4, debug_first_n_tasks: 2, debug_vllm_port: 18000}
  trainer_common:
    val_before_train: false
    val_pass_n: 4
    val_only: false
    val_max_num_task_each_validation: null
    val_max_num_task_clip_method: fix_seed_random_n
    val_print_to_markdown_file_path: null
    train_print_to_markdown_file_path: null
    save_freq: 20
    test_freq: 20
    total_training_steps: null
    total_epochs: 50
    nnodes: 1
    n_gpus_per_node: 8
    logger: tensorboard
    algorithm: {adv_estimator: grpo, use_kl_in_reward: false}
    mini_batch_num: 1
    fsdp_config: {param_offload: true, optimizer_offload: true}
    optim:
      optimizer: AdamW
      optimizer_impl: torch.optim
      lr: 1.0e-06
      lr_warmup_steps_ratio: 0.0
      total_training_steps: -1
      weight_decay: 0.01
      lr_warmup_steps: -1
      betas: [0.9, 0.999]
      min_lr_ratio: 0.0
      num_cycles: 0.5
      lr_scheduler_type: constant
      zero_indexed_step: true
      grad_clip: 20.0
    use_kl_loss: true
    kl_loss_coef: 0.002
    kl_loss_type: low_var_kl
    ppo_epochs: 1
    loss_extra_scale_ratio: 1.0
    ulysses_sequence_parallel_size: 1
    checkpoint_base_dir: ./saved_checkpoints
    save_trajectory_as_json_file: false
  lora: {lora_rank: 0, lora_alpha: 16, target_modules: all-linear, load_format: auto, layered_summon: false}
  enable_interchange_server: true
  enable_swarm_mode: true
  interchange_server:
    interchange_method: ipc
    interchange_server_port: 10086
    num_fastapi_process: 2
    max_fastapi_threads: 512
    max_inference_tracker_threads: 64
    already_started: false
  swarm_mode_sample_collection_method: rollout_until_finish_enough_tasks
  swarm_mode_sample_collection_max_cached_episodes: 9999
  task_runner: {wrapper_type: asyncio-with-gc, wrapper_multiprocessing_timeout: 3600}
  execute_test: false
  execute_testing_lambda: ""
"""

# YAML key -> AgentJetJob keyword (upstream's table, then keywords of newer upstream jobs).
OVERRIDES = {
    "ajet.experiment_dir": "experiment_dir",
    "ajet.project_name": "project_name",
    "ajet.experiment_name": "experiment_name",
    "ajet.trainer_common.logger": "logging",
    "ajet.model.path": "model",
    "ajet.trainer_common.n_gpus_per_node": "n_gpu",
    "ajet.trainer_common.algorithm.adv_estimator": "algorithm",
    "ajet.rollout.num_repeat": "num_repeat",
    "ajet.data.train_batch_size": "batch_size",
    "ajet.enable_swarm_mode": "swarm_mode",
    "ajet.swarm_mode_sample_collection_method": "swarm_mode_sample_collection_method",
    "ajet.rollout.max_env_worker": "max_env_worker",
    "ajet.backbone": "backbone",
    "ajet.data.max_prompt_length": "max_prompt_length",
    "ajet.data.max_response_length": "max_response_length",
    "ajet.rollout.max_response_length_in_one_turn": "max_response_length_in_one_turn",
    "ajet.rollout.max_model_len": "max_model_len",
    "ajet.trainer_common.mini_batch_num": "mini_batch_num",
    "ajet.lora.lora_rank": "lora_rank",
    "ajet.lora.lora_alpha": "lora_alpha",
    "ajet.lora.target_modules": "lora_target_modules",
    "ajet.lora.load_format": "lora_load_format",
    "ajet.rollout.gpu_memory_utilization": "gpu_memory_utilization",
    "ajet.trainer_common.optim.lr": "lr",
    # newer upstream keywords
    "ajet.trainer_common.nnodes": "nnodes",
    "ajet.rollout.tensor_model_parallel_size": "tensor_model_parallel_size",
    "ajet.trainer_common.ulysses_sequence_parallel_size": "ulysses_sequence_parallel_size",
    "ajet.trainer_common.ppo_max_token_len_per_gpu": "ppo_max_token_len_per_gpu",
    "ajet.rollout.compute_madness_checklist": "compute_madness_checklist",
    "ajet.trainer_common.val_print_to_markdown_file_path": "val_print_to_markdown_file_path",
    "ajet.rollout.max_num_seqs": "max_num_seqs",
    "ajet.trainer_common.use_kl_loss": "use_kl_loss",
    "ajet.trainer_common.algorithm.use_kl_in_reward": "use_kl_in_reward",
    "ajet.trainer_common.kl_loss_type": "kl_penalty_type",
    "ajet.trainer_common.total_training_steps": "total_training_steps",
}


def default_tree() -> Dict[str, Any]:
    """A fresh copy of upstream's swarm default tree ({"ajet": {...}})."""
    return config_yaml.from_yaml(UPSTREAM_SWARM_DEFAULT_YAML)


def deep_merge(base: Dict[str, Any], over: Dict[str, Any]) -> Dict[str, Any]:
    """`over` merged into a copy of `base`: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _get_path(tree: Any, path: str) -> Any:
    node = tree
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _set_path(tree: Any, path: str, value: Any) -> None:
    keys = path.split(".")
    node = tree
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value


class AgentJetJob:
    """Upstream's config builder. Every keyword is optional: None keeps the base tree's value."""

    def __init__(
        self,
        base_yaml_config: Optional[str] = None,
        experiment_dir: Optional[str] = None,
        project_name: Optional[str] = None,
        experiment_name: Optional[str] = None,
        logging: Optional[str] = None,
        n_gpu: Optional[int] = None,
        model: Optional[str] = None,
        algorithm: Optional[str] = None,
        num_repeat: Optional[int] = None,
        batch_size: Optional[int] = None,
        swarm_mode: Optional[bool] = None,
        swarm_mode_sample_collection_method: Optional[str] = None,
        max_env_worker: Optional[int] = None,
        backbone: Optional[str] = None,
        max_prompt_length: Optional[int] = None,
        max_response_length: Optional[int] = None,
        max_response_length_in_one_turn: Optional[int] = None,
        max_model_len: Optional[int] = None,
        mini_batch_num: Optional[int] = None,
        lora_rank: Optional[int] = None,
        lora_alpha: Optional[int] = None,
        lora_target_modules: Optional[str] = None,
        lora_load_format: Optional[str] = None,
        gpu_memory_utilization: Optional[float] = None,
        lr: Optional[float] = None,
        *,
        base_yaml: Optional[str] = None,
        ensure_new_experiment: bool = False,
        nnodes: Optional[int] = None,
        tensor_model_parallel_size: Optional[int] = None,
        ulysses_sequence_parallel_size: Optional[int] = None,
        ppo_max_token_len_per_gpu: Optional[int] = None,
        compute_madness_checklist: Optional[list] = None,
        val_print_to_markdown_file_path: Optional[str] = None,
        max_num_seqs: Optional[int] = None,
        use_kl_loss: Optional[bool] = None,
        use_kl_in_reward: Optional[bool] = None,
        kl_penalty_type: Optional[str] = None,
        total_training_steps: Optional[int] = None,
    ) -> None:
        if base_yaml is not None:
            if base_yaml_config is not None and base_yaml_config != base_yaml:
                raise ValueError("AgentJetJob: give base_yaml_config or base_yaml, not both")
            base_yaml_config = base_yaml
        if base_yaml_config is not None and not os.path.exists(base_yaml_config):
            raise ValueError(f"Configuration yaml is absent! {base_yaml_config}")

        length_params = [max_prompt_length, max_response_length, max_model_len, max_response_length_in_one_turn]
        if not (all(p is None for p in length_params) or all(p is not None for p in length_params)):
            raise ValueError("(`max_prompt_length`, `max_response_length`, `max_model_len`, "
                             "`max_response_length_in_one_turn`) must all be None or all be non-None")
        if lora_rank is not None and lora_rank > 0:
            if lora_load_format != "safetensors":
                raise ValueError(f"When lora_rank > 0, lora_load_format must be 'safetensors', got '{lora_load_format}'")
            if lr is None:
                raise ValueError("lr should be provided for lora training")
            if lr <= 1e-5:
                raise ValueError(f"lr should usually be greater than 1e-5 for lora training, got {lr}")

        self.base_yaml_config = base_yaml_config
        self.ensure_new_experiment = ensure_new_experiment
        self.config_as_dict: Dict[str, Any] = self.build_job_from_yaml(base_yaml_config)
        self.config = AttrDict(self.config_as_dict)

        given = dict(locals())
        for path, attr in OVERRIDES.items():
            value = given[attr]
            if value is None:
                value = _get_path(self.config, path)
            else:
                _set_path(self.config, path, value)
            setattr(self, attr, unwrap(value) if isinstance(value, (dict, list)) else value)

        if None not in (self.max_prompt_length, self.max_response_length, self.max_model_len):
            if self.max_prompt_length + self.max_response_length > self.max_model_len:
                raise ValueError(f"illegal token length: max_prompt_length ({self.max_prompt_length}) + "
                                 f"max_response_length ({self.max_response_length}) > max_model_len "
                                 f"({self.max_model_len})")
        if None not in (self.max_response_length_in_one_turn, self.max_response_length):
            if self.max_response_length_in_one_turn > self.max_response_length:
                raise ValueError(f"max_response_length_in_one_turn ({self.max_response_length_in_one_turn}) > "
                                 f"max_response_length ({self.max_response_length})")
        if self.backbone == "trinity":
            raise NotImplementedError("Trinity backbone is not yet supported in AgentJetJob.")

    # ------------------------------------------------------------------ YAML

    def build_job_from_yaml(self, yaml_path: Optional[str]) -> Dict[str, Any]:
        """The config tree of `yaml_path` merged over upstream's swarm default (just the default when
        None); sets and returns `config_as_dict`, as upstream. Only the `ajet` section is kept (what
        upstream's Config holds; `hydra:` / `defaults:` are Hydra's and are not resolved here)."""
        tree = default_tree()
        if yaml_path is not None:
            loaded = config_yaml.load_yaml_file(yaml_path)
            if loaded is None:
                loaded = {}
            if not isinstance(loaded, dict):
                raise ValueError(f"{yaml_path}: a config file must be a mapping")
            if not isinstance(loaded.get("ajet", {}), dict):
                raise ValueError(f"{yaml_path}: `ajet` must be a mapping")
            tree = deep_merge(tree, {"ajet": loaded.get("ajet") or {}})
            logger.info("Built AgentJet job config: %s", yaml_path)
        self.config_as_dict = tree
        return tree

    @classmethod
    def from_yaml(cls, yaml_path: str, **overrides: Any) -> "AgentJetJob":
        """A job whose tree is `yaml_path` (e.g. what dump_job_as_yaml wrote), then `overrides`."""
        return cls(base_yaml_config=yaml_path, **overrides)

    def dump_job_as_yaml(self, yaml_path: str) -> str:
        """Writes `config.to_dict()` as YAML (read back by build_job_from_yaml / from_yaml)."""
        if os.path.dirname(yaml_path):
            os.makedirs(os.path.dirname(yaml_path), exist_ok=True)
        with open(yaml_path, "w", encoding="utf-8") as f:
            f.write(self.to_yaml())
        logger.info("Saved training config to %s", yaml_path)
        return yaml_path

    def to_dict(self) -> Dict[str, Any]:
        return self.config.to_dict()

    def to_yaml(self) -> str:
        """What sync_train_config sends."""
        return config_yaml.to_yaml(self.config.to_dict())

    # ------------------------------------------------------------------ upstream helpers

    def set_workflow(self, workflow: Union[str, Callable[..., Any]], ensure_reward_in_workflow: bool = False) -> "AgentJetJob":
        """Records the workflow as upstream does (`module->Name`); the swarm server does not run it."""
        if isinstance(workflow, str):
            path = workflow
        else:
            path = f"{workflow.__module__}->{getattr(workflow, '__qualname__', getattr(workflow, '__name__', ''))}"
        self.config.ajet.rollout.user_workflow = path
        return self

    def set_data(self, type: str, dataset_path: str, training_split: str = "train",
                 validation_split: str = "test") -> "AgentJetJob":
        """Configures `ajet.task_reader` (upstream: hf / huggingface / huggingface_dat_repo and
        random_dummy / dummy; here also jsonl / jsonl_dataset_file, `dataset_path` being the training
        file and `validation_split` the validation file when it names one)."""
        reader = self.config.ajet.setdefault("task_reader", {})
        if type in {"hf", "huggingface", "huggingface_dat_repo"}:
            reader.type = "huggingface_dat_repo"
            repo = reader.setdefault("huggingface_dat_repo", {})
            repo.dataset_path = dataset_path
            repo.training_split = training_split
            repo.validation_split = validation_split
        elif type in {"random_dummy", "dummy"}:
            reader.type = "random_dummy"
        elif type in {"jsonl", "jsonl_dataset_file"}:
            reader.type = "jsonl_dataset_file"
            validation = validation_split if validation_split.endswith(".jsonl") else dataset_path
            reader.jsonl_dataset_file = {"training": {"file_path": dataset_path},
                                         "validation": {"file_path": validation}}
        else:
            raise NotImplementedError(f"Please edit yaml to directly set up task reader of type {type}.")
        return self

    def __repr__(self) -> str:
        return (f"AgentJetJob(experiment_name={self.experiment_name!r}, model={self.model!r}, "
                f"backbone={self.backbone!r}, batch_size={self.batch_size}, num_repeat={self.num_repeat}, "
                f"swarm_mode_sample_collection_method={self.swarm_mode_sample_collection_method!r})")
