"""The real TransferQueue (transferqueue 0.1.11, on CPU) driven as verl 0.9.1's V1 trainer
drives it, for the simulated run.

verl's order (``trainer/main_ppo.py``, ``trainer/ppo/v1/trainer_base.py``,
``trainer/ppo/v1/agent_loop_tq.py``): the TaskRunner calls ``tq.init(config.transfer_queue)``
once; the trainer puts each batch's prompts as tags (``kv_batch_put`` on partition
``train``, ``val`` for validation); rollout workers call ``tq.init()`` and put prompts and
responses for their keys; the trainer lists the partition, reads fields with
``kv_batch_get`` and clears the keys when the step is done. verl reads by key, which
TransferQueue counts per partition but not per task, so the trainer ranks here also read
their batch through ``get_meta(task_name=...)``, TransferQueue's own consumer API: that is
what its per-task consumption progress counts.
"""

from __future__ import annotations

from typing import Any

TASKS = ("actor_compute_log_prob", "actor_update")


def config(storage_units: int = 2, capacity: int = 100_000) -> Any:
    """verl's ``transfer_queue`` config (``trainer/config/transfer_queue/*.yaml``) with
    metrics on, as a run monitored by RL-Insight sets it."""
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "enable": True,
        "metrics": {"enabled": True, "port": 0},
        # a task asking for more than is ready gets an empty batch instead of waiting
        "controller": {"polling_mode": True},
        "backend": {"storage_backend": "SimpleStorage",
                    "SimpleStorage": {"total_storage_size": capacity,
                                      "num_data_storage_units": storage_units}}})


def start(conf: Any) -> str | None:
    """``tq.init`` as the TaskRunner calls it; the controller's metrics endpoint."""
    import transfer_queue as tq

    tq.init(conf)
    return tq.get_metrics_endpoint()


def submit(partition: str, keys: list[str], step: int) -> None:
    """The trainer registers a batch's prompts before dispatching them."""
    import transfer_queue as tq

    tq.kv_batch_put(keys=keys, partition_id=partition,
                    tags=[{"is_prompt": True, "status": "pending", "global_steps": step}
                          for _ in keys])


def put_responses(partition: str, keys: list[str], step: int, lengths: list[int]) -> None:
    """A rollout worker writes what it generated for its keys (``async_kv_batch_put``
    in verl; the synchronous call here)."""
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict

    tq.init()  # joins the running controller, as a worker does
    longest = max(lengths, default=1)
    responses = torch.zeros((len(keys), longest), dtype=torch.int64)
    for i, n in enumerate(lengths):
        responses[i, :n] = torch.arange(1, n + 1)
    fields = TensorDict({"prompts": torch.ones((len(keys), 16), dtype=torch.int64),
                         "responses": responses}, batch_size=len(keys))
    tq.kv_batch_put(keys=keys, partition_id=partition, fields=fields,
                    tags=[{"status": "success", "response_len": n, "global_steps": step}
                          for n in lengths])


def consume(partition: str, keys: list[str]) -> int:
    """The trainer lists and reads the finished batch by key, then each trainer task
    reads it by task; returns how many samples were ready."""
    import transfer_queue as tq

    listed = tq.kv_list(partition).get(partition, {})
    ready = [k for k in keys if listed.get(k, {}).get("status") == "success"] or keys
    tq.kv_batch_get(keys=ready, partition_id=partition, select_fields=["responses"])
    client = tq.get_client()
    for task in TASKS:
        meta = client.get_meta(data_fields=["responses"], batch_size=len(ready),
                               partition_id=partition, mode="fetch", task_name=task)
        if meta.size:
            client.get_data(meta)
    return len(ready)


def clear(partition: str, keys: list[str]) -> None:
    import transfer_queue as tq

    if keys:
        tq.kv_clear(keys=keys, partition_id=partition)


def close() -> None:
    import transfer_queue as tq

    tq.close()
