"""Process groups for data loading when Megatron's ``parallel_state`` is not initialised.

:func:`build_pg_collection` builds a megatron-core ``ProcessGroupCollection`` over an already
initialised ``torch.distributed`` world, with the rank layout megatron-core uses (its
``RankGenerator``, order ``tp-cp-ep-dp-pp``). The datamodule reads only ``pg_collection.dp``:
the context-parallel ranks of one data-parallel replica share a DP rank and read identical
batches, while different DP ranks read disjoint shards.
"""

from __future__ import annotations

from typing import Any

ORDER = "tp-cp-ep-dp-pp"


def rank_groups(
    world_size: int, *, tp: int = 1, cp: int = 1, pp: int = 1
) -> dict[str, list[list[int]]]:
    """The rank groups of each parallelism (``tp``, ``cp``, ``dp``, ``pp``, ``dp-cp``, ``tp-cp``).

    Raises:
        ValueError: ``world_size`` is not a multiple of ``tp * cp * pp``.
    """
    from energon_plugins._quiet import import_quietly

    RankGenerator = import_quietly("megatron.core.parallel_state").RankGenerator

    model = tp * cp * pp
    if min(tp, cp, pp) < 1 or world_size % model:
        raise ValueError(
            f"world size {world_size} is not a multiple of tp*cp*pp = {tp}*{cp}*{pp} = {model}"
        )
    gen = RankGenerator(tp=tp, ep=1, dp=world_size // model, pp=pp, cp=cp, order=ORDER)
    return {token: gen.get_ranks(token) for token in ("tp", "cp", "dp", "pp", "dp-cp", "tp-cp")}


def build_pg_collection(*, tp: int = 1, cp: int = 1, pp: int = 1) -> Any:
    """A ``ProcessGroupCollection`` (``tp``, ``cp``, ``dp``, ``pp``, ``dp_cp``, ``tp_cp``).

    Every rank must call it (``torch.distributed.new_group`` is collective), after
    ``torch.distributed.init_process_group``. Data parallelism is what remains of the world
    size after ``tp * cp * pp``.
    """
    import torch.distributed as dist
    from energon_plugins._quiet import import_quietly

    groups_config = import_quietly("megatron.core.process_groups_config")
    ProcessGroupCollection = groups_config.ProcessGroupCollection

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("build_pg_collection needs torch.distributed to be initialised")
    rank = dist.get_rank()
    groups = rank_groups(dist.get_world_size(), tp=tp, cp=cp, pp=pp)
    collection = ProcessGroupCollection()
    for token, ranks_list in groups.items():
        mine = None
        for ranks in ranks_list:  # every rank creates every group, in the same order
            group = dist.new_group(ranks)
            if rank in ranks:
                mine = group
        setattr(collection, token.replace("-", "_"), mine)
    return collection


def group_size(pg_collection: Any, name: str) -> int:
    """The size of ``pg_collection.<name>`` (``group.size()``), 1 when there is no such group."""
    group = getattr(pg_collection, name, None) if pg_collection is not None else None
    if group is None:
        return 1
    size = getattr(group, "size", None)
    if callable(size):
        return int(size())
    import torch.distributed as dist

    return int(dist.get_world_size(group))
