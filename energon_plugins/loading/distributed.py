"""Process groups for data loading: reading a ``pg_collection``, agreeing on a number, and
building groups when Megatron's ``parallel_state`` is not initialised.

:func:`parallel_layout` reads a megatron-core ``ProcessGroupCollection`` the way Megatron-Bridge
does, through each group's ``rank()`` / ``size()`` (so a collection of mocks works as well as
real groups, and nothing needs an initialised default group). The datamodule takes its rank and
world size from the pure data-parallel group ``dp``: the context-parallel ranks of one
data-parallel replica share a DP rank and read identical batches, while different DP ranks read
disjoint shards. ``cp`` and ``tp`` give the sizes packing pads for.

:class:`DataGroup` agrees on one number across the ranks of a data-parallel group (the
validation pass length), over a gloo group of its own with its own short timeout
(``ENERGON_PLUGINS_DATA_TIMEOUT``, :data:`DEFAULT_DATA_TIMEOUT` seconds), never over the
training group: a rank that is stopped, hung or dead makes the others raise
:class:`RankTimeoutError` naming it within that timeout, instead of blocking for the training
group's (30 minutes by default). Every rank sends its number to every other rank and waits for
each peer's until one deadline, so each rank knows exactly which peers did not answer (gloo's
collectives and ``monitored_barrier`` say only that one timed out, or name it on rank 0 alone).
The group is gloo on CPU whatever the training backend is (NCCL included), created once per
set of ranks (``new_group(..., backend="gloo", use_local_synchronization=True)``: only the
members take part) when the validation loader is built. Every rank builds it at the same
point of the program (as Megatron-Bridge does): such a group advances torch's group counter on
its members only, and ranks whose counters differ name later world-wide groups differently.

:func:`build_pg_collection` builds a collection over an already initialised
``torch.distributed`` world, with the rank layout megatron-core uses (its ``RankGenerator``,
order ``tp-cp-ep-dp-pp``).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from energon_plugins.errors import ConfigError, RankTimeoutError

ORDER = "tp-cp-ep-dp-pp"

DATA_TIMEOUT_VARIABLE = "ENERGON_PLUGINS_DATA_TIMEOUT"
"""Environment variable: seconds a data-side collective waits for every data-parallel rank."""

DEFAULT_DATA_TIMEOUT = 120.0
"""Seconds a data-side collective waits for the other data-parallel ranks, unless
``ENERGON_PLUGINS_DATA_TIMEOUT`` says otherwise: long enough for ranks that reach the
agreement at different times (each counts its own part of a packed validation pass first),
short beside the training group's 30 minutes."""

AGREEMENT_TAG = 0x454E
"""The point-to-point tag of the data side's messages (on its own group)."""


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


def data_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Seconds a data-side collective waits: ``ENERGON_PLUGINS_DATA_TIMEOUT``, else
    :data:`DEFAULT_DATA_TIMEOUT`.

    Raises:
        ConfigError: the variable is set to something other than a positive number of seconds.
    """
    environ = os.environ if environ is None else environ
    text = environ.get(DATA_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_DATA_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise ConfigError(
            f"environment variable {DATA_TIMEOUT_VARIABLE}: expected a number of seconds > 0 "
            f"(such as 120), got {text!r}"
        )
    return seconds


_DATA_GROUPS: dict[tuple[int, ...], tuple[Any, Any]] = {}
"""Gloo groups already created, by member ranks: ``(default group it belongs to, group)``."""


class DataGroup:
    """The data side's own channel over one data-parallel group (see the module docstring).

    Built on every rank of the group together, where it creates (or reuses) the group's gloo
    group, so that a rank stopped later is named by the others. With a single data-parallel
    rank, or without ``torch.distributed`` (a collection of stand-ins), it creates nothing.

    Args:
        layout: this rank's :class:`ParallelLayout`.
        timeout: seconds to wait for the other ranks (``None``: :func:`data_timeout`).

    Raises:
        RankTimeoutError: the group's ranks did not all join it within the timeout.
        ConfigError: ``ENERGON_PLUGINS_DATA_TIMEOUT`` is not a positive number.
    """

    def __init__(self, layout: ParallelLayout, timeout: float | None = None) -> None:
        self.layout = layout
        self.timeout = DEFAULT_DATA_TIMEOUT if timeout is None else float(timeout)
        #: global ranks of the data-parallel group, in data-parallel rank order
        self.ranks: list[int] = []
        self._group: Any = None
        if layout.dp_size > 1 and layout.distributed:
            self.timeout = data_timeout() if timeout is None else float(timeout)
            self.ranks = _member_ranks(layout)
            self._group = _gloo_group(self.ranks, self.timeout)

    def max_of(self, value: int, what: str) -> int:
        """The largest ``value`` over the data-parallel ranks (every rank must call it).

        Raises:
            RankTimeoutError: ranks did not answer within the timeout (the message names them).
            ConfigError: the group has more than one rank but ``torch.distributed`` is not
                initialised (a collection of stand-ins), so the ranks cannot agree on ``what``.
        """
        return max(self.gather(value, what))

    def gather(self, value: int, what: str) -> list[int]:
        """Every data-parallel rank's ``value``, in data-parallel rank order (a collective).

        Raises:
            RankTimeoutError, ConfigError: as :meth:`max_of`.
        """
        if self.layout.dp_size == 1:
            return [int(value)]
        if not self.layout.distributed:
            raise ConfigError(
                f"{what}: the data-parallel group has {self.layout.dp_size} ranks but "
                "torch.distributed is not initialised, so the ranks cannot agree on it; "
                "initialise torch.distributed (or pass a pg_collection whose dp group has size 1)"
            )
        import torch
        import torch.distributed as dist

        me = dist.get_rank()
        peers = [rank for rank in self.ranks if rank != me]
        mine = torch.tensor([int(value)], dtype=torch.int64)
        received = {peer: torch.zeros(1, dtype=torch.int64) for peer in peers}
        silent: dict[int, str] = {}  # peer -> gloo's reason: timed out, or connection closed
        pending: dict[int, list[Any]] = {}
        for peer in peers:
            try:  # a dead peer fails here at once
                pending[peer] = [
                    dist.irecv(received[peer], peer, group=self._group, tag=AGREEMENT_TAG),
                    dist.isend(mine, peer, group=self._group, tag=AGREEMENT_TAG),
                ]
            except RuntimeError as exc:
                silent[peer] = str(exc)
        deadline = time.monotonic() + self.timeout
        for peer, works in pending.items():
            for work in works:
                try:
                    work.wait(_remaining(deadline))
                except RuntimeError as exc:
                    silent[peer] = str(exc)
                    break
        if silent:
            _forget_group(self._group)  # unread messages stay in it: a retry starts afresh
            raise self._timeout_error(what, silent)
        return [int(value) if rank == me else int(received[rank].item()) for rank in self.ranks]

    def _timeout_error(self, what: str, silent: dict[int, str]) -> RankTimeoutError:
        named = ", ".join(_describe_rank(rank, self.ranks) for rank in sorted(silent))
        plural = "s" if len(silent) > 1 else ""
        reason = _gloo_reason(silent[min(silent)])
        return RankTimeoutError(
            f"{what}: rank{plural} {named} did not answer (gloo: {reason}; the data side "
            f"waits {self.timeout:g} s, {DATA_TIMEOUT_VARIABLE}). A rank that is stopped "
            "(SIGSTOP, a debugger), hung or dead looks like this; one that is only slow (still "
            f"counting a long validation pass, say) needs a larger {DATA_TIMEOUT_VARIABLE}",
            ranks=sorted(silent),
            timeout=self.timeout,
            what=what,
        )


def _describe_rank(rank: int, members: Sequence[int]) -> str:
    """``3 (data-parallel rank 1 of 2)``: a global rank and its place in the group."""
    return f"{rank} (data-parallel rank {list(members).index(rank)} of {len(members)})"


def _gloo_reason(text: str) -> str:
    """The first sentence of a gloo error's last line, without its ``[source.cc:78]`` prefix."""
    lines = text.strip().splitlines()
    line = re.sub(r"^\[[^\]]*\]\s*", "", lines[-1] if lines else "")
    return re.split(r"\.(?:\s|$)", line)[0][:160]


def _remaining(deadline: float) -> datetime.timedelta:
    """The time left until ``deadline``, at least a millisecond (a zero timeout means none)."""
    return datetime.timedelta(milliseconds=max(1, int((deadline - time.monotonic()) * 1000)))


def _member_ranks(layout: ParallelLayout) -> list[int]:
    """The global ranks of the layout's data-parallel group (the whole world for the default)."""
    import torch.distributed as dist

    if layout.dp_group is not None:
        return list(dist.get_process_group_ranks(layout.dp_group))
    return list(range(dist.get_world_size()))


def _gloo_group(ranks: list[int], timeout: float) -> Any:
    """The gloo group over ``ranks``: created by its members only, once per default group.

    Raises:
        RankTimeoutError: the members did not all join within ``timeout`` seconds.
    """
    import torch.distributed as dist

    world = dist.group.WORLD
    key = tuple(sorted(ranks))
    cached = _DATA_GROUPS.get(key)
    if cached is not None and cached[0] is world:
        return cached[1]
    try:
        group = dist.new_group(
            list(key),
            timeout=datetime.timedelta(seconds=timeout),
            backend="gloo",
            use_local_synchronization=True,
            group_desc="energon_plugins_data",
        )
    except RuntimeError as exc:
        others = [rank for rank in ranks if rank != dist.get_rank()]
        reason = _gloo_reason(str(exc)) or type(exc).__name__
        raise RankTimeoutError(
            f"the data side's gloo group over ranks {ranks}: not every rank joined it within "
            f"{timeout:g} s ({DATA_TIMEOUT_VARIABLE}; gloo: {reason}); one of ranks "
            f"{', '.join(map(str, others))} is stopped, hung, dead, or has not built its "
            "validation loader (every data-parallel rank builds it, together)",
            ranks=others,
            timeout=timeout,
            what="the data side's process group",
        ) from exc
    _DATA_GROUPS[key] = (world, group)
    return group


def _forget_group(group: Any) -> None:
    """Drop ``group`` from the cache of data-side groups."""
    for key, (_, cached) in list(_DATA_GROUPS.items()):
        if cached is group:
            del _DATA_GROUPS[key]


def max_over_group(value: int, layout: ParallelLayout, what: str) -> int:
    """The largest ``value`` over the data-parallel ranks of ``layout`` (a collective: every
    rank of the group must call it), through :class:`DataGroup`.

    Raises:
        RankTimeoutError, ConfigError: as :meth:`DataGroup.max_of`.
    """
    return DataGroup(layout).max_of(value, what)


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
