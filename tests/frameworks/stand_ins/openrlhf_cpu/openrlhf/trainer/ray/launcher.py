"""FAKE openrlhf.trainer.ray.launcher (0.11.2): ``RayActorGroup`` with the calls the
trainers make (``async_run_method``, ``async_run_method_batch``,
``async_init_model_from_pretrained``, ``async_save_model``), each a real Ray call on one
CPU actor per group standing for its GPU workers; ``ReferenceModelActor`` and
``RewardModelActor`` as roles."""

from __future__ import annotations

import time

import ray


class ModelRole:
    """A model worker's answers; the timings stand for its GPU work."""

    FORWARD_S = 0.0

    def init_model_from_pretrained(self, *args, **kwargs):
        engines = [a for a in args if isinstance(a, list)] + \
            [kwargs.get("vllm_engines") or []]
        self.vllm_engines = next((e for e in engines if e), [])

    def forward(self, *args, **kwargs):
        time.sleep(self.FORWARD_S)
        return []

    def empty_cache(self):
        pass

    def append(self, experience=None, **_):
        pass

    def save_checkpoint(self, *args, **kwargs):
        pass

    def get_checkpoint_states(self):
        return {"episode": 0, "global_step": 0, "total_consumed_prompts": 0,
                "data_loader_state_dict": {}}

    def reload_states(self):
        pass

    def offload_states(self):
        pass


class ReferenceModelActor(ModelRole):
    pass


class RewardModelActor(ModelRole):
    pass


@ray.remote(num_cpus=0)
class _Worker:
    def __init__(self, role: type) -> None:
        self.role = role()

    def execute(self, method_name, *args, **kwargs):
        return getattr(self.role, method_name)(*args, **kwargs)


class RayActorGroup:
    def __init__(self, num_nodes, num_gpus_per_node, ray_actor_type, pg=None,
                 num_gpus_per_actor=1, duplicate_actors=1, resources=None,
                 num_resources_per_node=None):
        self.ray_actor_type = ray_actor_type
        self._actor_handlers = [_Worker.remote(ray_actor_type)]

    def async_init_model_from_pretrained(self, *args, **kwargs):
        return [a.execute.remote("init_model_from_pretrained", *args, **kwargs)
                for a in self._actor_handlers]

    def async_save_model(self):
        return [a.execute.remote("save_checkpoint") for a in self._actor_handlers]

    def async_run_method(self, method_name, *args, **kwargs):
        return [a.execute.remote(method_name, *args, **kwargs) for a in self._actor_handlers]

    def async_run_method_batch(self, method_name, **kwargs):
        return [a.execute.remote(method_name, **kwargs) for a in self._actor_handlers]
