"""Process groups for data loading: reading a ``pg_collection``, agreeing on a number, and
building groups when Megatron's ``parallel_state`` is not initialised.

:func:`parallel_layout` reads a megatron-core ``ProcessGroupCollection`` the way Megatron-Bridge
does, through each group's ``rank()`` / ``size()`` (so a collection of mocks works as well as
real groups, and nothing needs an initialised default group). The datamodule takes its rank and
world size from the pure data-parallel group ``dp``: the context-parallel ranks of one
data-parallel replica share a DP rank and read identical batches, while different DP ranks read
disjoint shards. ``cp`` and ``tp`` give the sizes packing pads for.

:func:`max_over_group` agrees on one number across the ranks of a group (the validation pass
length). :func:`build_pg_collection` builds a collection over an already initialised
``torch.distributed`` world, with the rank layout megatron-core uses (its ``RankGenerator``,
order ``tp-cp-ep-dp-pp``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from energon_plugins.errors import ConfigError

ORDER = "tp-cp-ep-dp-pp"


@dataclasses.dataclass(frozen=True)
class ParallelLayout:
    """This rank's place for data loading.

    Attributes:
        dp_rank, dp_size: rank and size of the pure data-parallel group.
        dp_group: that group, when it is a real ``torch.distributed`` group (``None`` for the
            default group, or when the collection holds stand-ins such as mocks).
        cp_size, tp_size: context- and tensor-parallel sizes (1 when not given).
        distributed: whether ranks can talk (``torch.distributed`` is initialised).
    """

    dp_rank: int = 0
    dp_size: int = 1
    dp_group: Any = None
    cp_size: int = 1
    tp_size: int = 1
    distributed: bool = False


def _group_size(group: Any, label: str) -> tuple[int, int]:
    """``(rank, size)`` of ``group`` through its ``rank()`` / ``size()`` methods."""
    try:
        rank, size = int(group.rank()), int(group.size())
    except Exception as exc:
        raise ConfigError(
            f"pg_collection.{label}: expected a process group answering rank() and size(), got "
            f"{type(group).__name__} ({type(exc).__name__}: {exc})"
        ) from exc
    if size < 1 or not 0 <= rank < size:
        raise ConfigError(f"pg_collection.{label}: rank {rank} of size {size} is not valid")
    return rank, size


def parallel_layout(pg_collection: Any = None) -> ParallelLayout:
    """This rank's :class:`ParallelLayout` from ``pg_collection`` (its ``dp``, ``cp``, ``tp``).

    Without a collection (or without its ``dp`` group) the data-parallel world is
    ``torch.distributed``'s default group when it is initialised (as Energon's
    ``WorkerConfig.default_worker_config`` assumes), else a single rank.
    """
    distributed = _initialised()
    dp = getattr(pg_collection, "dp", None) if pg_collection is not None else None
    cp = getattr(pg_collection, "cp", None) if pg_collection is not None else None
    tp = getattr(pg_collection, "tp", None) if pg_collection is not None else None
    cp_size = _group_size(cp, "cp")[1] if cp is not None else 1
    tp_size = _group_size(tp, "tp")[1] if tp is not None else 1
    if dp is not None:
        rank, size = _group_size(dp, "dp")
        return ParallelLayout(
            dp_rank=rank,
            dp_size=size,
            dp_group=dp if _is_process_group(dp) else None,
            cp_size=cp_size,
            tp_size=tp_size,
            distributed=distributed,
        )
    if distributed:
        import torch.distributed as dist

        return ParallelLayout(
            dp_rank=dist.get_rank(),
            dp_size=dist.get_world_size(),
            cp_size=cp_size,
            tp_size=tp_size,
            distributed=True,
        )
    return ParallelLayout(cp_size=cp_size, tp_size=tp_size)


def _initialised() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return bool(dist.is_available() and dist.is_initialized())


def _is_process_group(group: Any) -> bool:
    import torch.distributed as dist

    return dist.is_available() and isinstance(group, dist.ProcessGroup)


def max_over_group(value: int, layout: ParallelLayout, what: str) -> int:
    """The largest ``value`` over the data-parallel ranks of ``layout`` (a collective: every
    rank of the group must call it).

    Raises:
        ConfigError: the group has more than one rank but ``torch.distributed`` is not
            initialised (a collection of stand-ins), so the ranks cannot agree on ``what``.
    """
    if layout.dp_size == 1:
        return int(value)
    if not layout.distributed:
        raise ConfigError(
            f"{what}: the data-parallel group has {layout.dp_size} ranks but torch.distributed is "
            "not initialised, so the ranks cannot agree on it; initialise torch.distributed "
            "(or pass a pg_collection whose dp group has size 1)"
        )
    import torch
    import torch.distributed as dist

    group = layout.dp_group
    device: str | torch.device = "cpu"
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    tensor = torch.tensor([int(value)], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return int(tensor.item())


def rank_groups(world_size: int, *, tp: int = 1, cp: int = 1, pp: int = 1) -> dict[str, list[list[int]]]:
    """The rank groups of each parallelism (``tp``, ``cp``, ``dp``, ``pp``, ``dp-cp``, ``tp-cp``).

    Raises:
        ValueError: ``world_size`` is not a multiple of ``tp * cp * pp``.
    """
    from energon_plugins._quiet import import_quietly

    RankGenerator = import_quietly("megatron.core.parallel_state").RankGenerator

    model = tp * cp * pp
    if min(tp, cp, pp) < 1 or world_size % model:
        raise ValueError(f"world size {world_size} is not a multiple of tp*cp*pp = {tp}*{cp}*{pp} = {model}")
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
