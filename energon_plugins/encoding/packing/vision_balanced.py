"""``vision-balanced``: packs that meet the token budget and carry about equal vision work.

Length-only packing (first-fit decreasing) fills every pack with tokens but ignores what the
vision encoder has to do: one pack may hold a 32-frame video and six high-resolution images,
the next only text. Under data parallelism every rank waits for the slowest vision encoder,
so a step costs its heaviest pack. This strategy sees a second cost per sample, the patches
of its images and videos, and plans a buffer in two passes:

1. first-fit decreasing by length (with its exact-fill refinement), so the number of packs
   (the token fill) is first-fit decreasing's;
2. a balancing pass: while the pack with the most vision work can give some of it away, move
   one of its samples to another pack, or swap it for a sample carrying less vision work,
   choosing the exchange that leaves the lower of the two packs' maxima, with both packs
   within the capacity. Each exchange lowers the sum of squared pack costs, so the pass
   ends; ``max_exchanges`` bounds it.

A pack still over ``vision_budget`` after balancing gives up samples (the smallest vision
cost that brings it under, else its largest) to the packs with room under both budgets, or to
new packs; a sample whose own cost exceeds the budget is alone in its pack. ``vision_budget:
auto`` is the buffer's mean vision cost per pack times ``budget_slack``.

Vision cost of a sample: the sum over its images and videos of ``vision_cost(patches)``:
``linear`` counts patches (the MLP and projection work of a ViT), ``quadratic`` adds
``patches**2 / attention_patches`` (self-attention within one image grows with its square;
at ``attention_patches`` patches both terms are equal). The patches of a sample come from
the task encoder's ``vision_patches(sample)`` (default :func:`vision_patches`, which reads
:data:`VISION_PATCH_SOURCES`); an encoder overrides that method for other layouts.

``select(lengths, capacity)`` without patches (the plain contract) sees no vision work and
returns first-fit decreasing's groups. Pure Python, no torch: O(n log n) for the first pass
plus O(k x n) for ``k`` exchanges (each scans the heaviest pack against every other sample).
"""

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from energon_plugins.encoding.packing.options import FirstFitDecreasingOptions
from energon_plugins.encoding.packing.strategies import FirstFitDecreasing, PackingPlan, _make

__all__ = [
    "VISION_PATCH_SOURCES",
    "VisionBalanced",
    "VisionBalancedOptions",
    "balance_vision",
    "make_vision_balanced",
    "vision_patches",
]


class VisionBalancedOptions(FirstFitDecreasingOptions):
    """Options of ``vision-balanced`` (plus first-fit decreasing's, used by its first pass)."""

    vision_budget: PositiveInt | Literal["auto"] = Field(
        default="auto",
        description=(
            "Most vision cost one pack may carry (a sample over it is alone in its pack), in "
            "the unit of vision_cost: patches for 'linear'. 'auto': the buffer's mean vision "
            "cost per pack times budget_slack. A fixed number keeps packs alike across "
            "data-parallel ranks whose buffers differ."
        ),
    )
    budget_slack: float = Field(
        default=1.05,
        ge=1.0,
        description="vision_budget 'auto': the budget is the mean vision cost per pack times this.",
    )
    vision_cost: Literal["linear", "quadratic"] = Field(
        default="linear",
        description=(
            "Cost of one image or video of p patches: 'linear' p; 'quadratic' p + p**2 / "
            "attention_patches (self-attention within an image grows with its square)."
        ),
    )
    attention_patches: int = Field(
        default=4096,
        ge=1,
        description="vision_cost 'quadratic': the patch count at which attention costs as much as the rest.",
    )
    extra_packs: int = Field(
        default=2,
        ge=0,
        description=(
            "The even spread of vision work may use up to this many packs more than "
            "first-fit decreasing needs (each costs token fill); when it needs more, "
            "first-fit decreasing's packs are balanced by exchanges alone."
        ),
    )
    max_exchanges: int = Field(
        default=10_000,
        ge=0,
        description=(
            "Most moves or swaps the balancing pass makes per buffer (each costs a scan of "
            "the buffer); 0 turns balancing off (the budget still holds)."
        ),
    )


def _grid_patches(grid: Any) -> list[int]:
    """Patches per row of a ``(N, 3)`` grid of ``(t, h, w)``: ``t * h * w`` each."""
    rows = grid.tolist() if hasattr(grid, "tolist") else list(grid)
    return [int(t) * int(h) * int(w) for t, h, w in rows]


def _counts(counts: Any) -> list[int]:
    """Per-item counts as integers (tokens per image or video)."""
    return [int(c) for c in (counts.tolist() if hasattr(counts, "tolist") else counts)]


def _patch_rows(pixel_values: Any) -> list[int] | None:
    """A patch-based processor's ``(P, D)`` pixel values: one item of ``P`` patches."""
    shape = getattr(pixel_values, "shape", None)
    return [int(shape[0])] if shape is not None and len(shape) == 2 else None


VISION_PATCH_SOURCES: tuple[tuple[str, str, Callable[[Any], list[int] | None]], ...] = (
    ("image", "image_grid_thw", _grid_patches),
    ("image", "image_token_counts", _counts),
    ("image", "pixel_values", _patch_rows),
    ("video", "visual.video_grid_thw", _grid_patches),
    ("video", "video_token_counts", _counts),
)
"""Where :func:`vision_patches` reads a sample's patches: ``(modality, field, reader)``, the
first field present wins for each modality. A grid counts the patches the vision encoder
sees (``t * h * w``, before any spatial merge); token counts (after the merge) stand in for
them where there is no grid. ``visual.KEY`` is an entry of the sample's ``visual`` dict."""


def vision_patches(sample: Any) -> list[int]:
    """Patches of each image, then each video, of an encoded ``sample`` ([] for text only).

    Reads the first present field of each modality in :data:`VISION_PATCH_SOURCES`.
    """
    found: dict[str, list[int]] = {}
    for modality, field, reader in VISION_PATCH_SOURCES:
        if modality in found:
            continue
        if field.startswith("visual."):
            value = (getattr(sample, "visual", None) or {}).get(field.removeprefix("visual."))
        else:
            value = getattr(sample, field, None)
        if value is None:
            continue
        patches = reader(value)
        if patches is not None:
            found[modality] = patches
    return found.get("image", []) + found.get("video", [])


class VisionBalanced(FirstFitDecreasing):
    """``vision-balanced``: first-fit decreasing, then packs balanced by vision cost.

    The task encoder passes each sample's patches (``uses_vision_patches``) to
    :meth:`plan`; see the module docstring for the algorithm.
    """

    name = "vision-balanced"
    options_class = VisionBalancedOptions
    options: VisionBalancedOptions
    uses_vision_patches: ClassVar[bool] = True

    def cost(self, patches: Sequence[int]) -> int:
        """The vision cost of one sample whose images and videos have ``patches`` patches."""
        if self.options.vision_cost == "linear":
            return sum(patches)
        scale = self.options.attention_patches
        return sum(p + p * p // scale for p in patches)

    def plan(
        self, lengths: Sequence[int], capacity: int, vision_patches: Sequence[Sequence[int]] | None = None
    ) -> PackingPlan:
        """Pack one buffer under the token and vision budgets (no patches: no vision work).

        Raises:
            ValueError: as :meth:`PackingStrategy.plan`; or ``vision_patches`` does not have
                one entry per sample of non-negative integers.
        """
        if vision_patches is None:
            costs = [0] * len(lengths)
        else:
            if len(vision_patches) != len(lengths):
                raise ValueError(
                    f"{self.name}: vision_patches has {len(vision_patches)} entries for "
                    f"{len(lengths)} samples"
                )
            costs = []
            for index, patches in enumerate(vision_patches):
                values = list(patches)
                if any(not isinstance(p, int) or isinstance(p, bool) or p < 0 for p in values):
                    raise ValueError(
                        f"{self.name}: patches of sample {index} must be non-negative integers, got {values!r}"
                    )
                costs.append(self.cost(values))
        return self._plan_with(lengths, capacity, functools.partial(self._pack_balanced, costs))

    def _pack_balanced(
        self, costs: list[int], lengths: list[int], items: list[int], capacity: int
    ) -> list[list[int]]:
        bins = self._pack(lengths, items, capacity)
        total = sum(costs[i] for i in items)
        if not total:
            return bins
        for count in range(len(bins), len(bins) + self.options.extra_packs + 1):
            spread = spread_vision(count, lengths, costs, items, capacity)
            if spread is not None:
                bins = spread
                break
        option = self.options.vision_budget
        if option == "auto":
            budget = max(1, math.ceil(total / len(bins) * self.options.budget_slack))
        else:
            budget = option
        balance_vision(bins, lengths, costs, capacity, self.options.max_exchanges)
        return _enforce_budget(bins, lengths, costs, capacity, budget)


def spread_vision(
    count: int, lengths: Sequence[int], costs: Sequence[int], items: Sequence[int], capacity: int
) -> list[list[int]] | None:
    """``items`` in ``count`` packs with even vision cost, or None if they do not fit.

    Samples without vision cost go first, longest first, each into the pack with the most
    room (spreading text over all packs); then the others, largest vision cost first (longest
    first among equals), each into the pack with the least vision cost that has room (the
    longest-processing-time rule of multiprocessor scheduling, under the token capacity).
    """
    tokens = [0] * count
    vision = [0] * count
    bins: list[list[int]] = [[] for _ in range(count)]
    text = sorted((i for i in items if not costs[i]), key=lambda i: (-lengths[i], i))
    heavy = sorted((i for i in items if costs[i]), key=lambda i: (-costs[i], -lengths[i], i))
    for index in text:
        pack = min(range(count), key=lambda p: (tokens[p], p))
        if tokens[pack] + lengths[index] > capacity:
            return None
        bins[pack].append(index)
        tokens[pack] += lengths[index]
    for index in heavy:
        length = lengths[index]
        pack = -1
        for candidate in range(count):
            if tokens[candidate] + length <= capacity and (pack < 0 or vision[candidate] < vision[pack]):
                pack = candidate
        if pack < 0:
            return None
        bins[pack].append(index)
        tokens[pack] += length
        vision[pack] += costs[index]
    return [group for group in bins if group]


def balance_vision(
    bins: list[list[int]], lengths: Sequence[int], costs: Sequence[int], capacity: int, max_exchanges: int
) -> int:
    """Even out the vision cost of ``bins`` in place by moves and swaps; return how many.

    Each step takes the pack with the most vision cost (the lowest-numbered among equals) and
    the exchange with another pack (move one of its samples, or swap it for one of lower
    cost) that keeps both packs within ``capacity`` tokens and minimises the larger of the two
    new costs (so it stays below the old maximum). It stops when no exchange lowers the
    maximum, or after ``max_exchanges``.
    """
    tokens = [sum(lengths[i] for i in b) for b in bins]
    vision = [sum(costs[i] for i in b) for b in bins]
    done = 0
    while done < max_exchanges:
        heavy = max(range(len(bins)), key=lambda p: (vision[p], -p))
        top = vision[heavy]
        room_heavy = capacity - tokens[heavy]
        best: tuple[int, int, int, int | None] | None = None  # (score, pack, given, taken)
        for pack, load in enumerate(vision):
            if pack == heavy or load >= top:
                continue
            gap = top - load
            room = capacity - tokens[pack]
            for given in bins[heavy]:
                cost_given = costs[given]
                if not cost_given:
                    continue
                length_given = lengths[given]
                if cost_given < gap and length_given <= room:
                    score = max(top - cost_given, load + cost_given)
                    if best is None or score < best[0]:
                        best = (score, pack, given, None)
                for taken in bins[pack]:
                    delta = cost_given - costs[taken]
                    if delta <= 0 or delta >= gap:
                        continue
                    shift = length_given - lengths[taken]
                    if shift <= room and -shift <= room_heavy:
                        score = max(top - delta, load + delta)
                        if best is None or score < best[0]:
                            best = (score, pack, given, taken)
        if best is None:
            break
        _, receiver, give, take = best
        bins[heavy].remove(give)
        bins[receiver].append(give)
        moved_tokens, moved_vision = lengths[give], costs[give]
        if take is not None:
            bins[receiver].remove(take)
            bins[heavy].append(take)
            moved_tokens -= lengths[take]
            moved_vision -= costs[take]
        tokens[heavy] -= moved_tokens
        tokens[receiver] += moved_tokens
        vision[heavy] -= moved_vision
        vision[receiver] += moved_vision
        done += 1
    return done


def _enforce_budget(
    bins: list[list[int]], lengths: Sequence[int], costs: Sequence[int], capacity: int, budget: int
) -> list[list[int]]:
    """``bins`` with every pack of several samples within ``budget`` (new packs if needed)."""
    evicted: list[int] = []
    for group in bins:
        load = sum(costs[i] for i in group)
        while load > budget and len(group) > 1:
            excess = load - budget
            enough = [i for i in group if costs[i] >= excess]
            out = (
                min(enough, key=lambda i: (costs[i], i))
                if enough
                else max(group, key=lambda i: (costs[i], -i))
            )
            group.remove(out)
            evicted.append(out)
            load -= costs[out]
    if not evicted:
        return bins
    tokens = [sum(lengths[i] for i in b) for b in bins]
    vision = [sum(costs[i] for i in b) for b in bins]
    for index in sorted(evicted, key=lambda i: (-costs[i], -lengths[i], i)):
        for pack, group in enumerate(bins):
            if tokens[pack] + lengths[index] <= capacity and vision[pack] + costs[index] <= budget:
                break
        else:
            pack = len(bins)
            bins.append([])
            tokens.append(0)
            vision.append(0)
        bins[pack].append(index)
        tokens[pack] += lengths[index]
        vision[pack] += costs[index]
    return [group for group in bins if group]


def make_vision_balanced(options: VisionBalancedOptions | None, context: Any = None) -> VisionBalanced:
    """Factory of ``vision-balanced``."""
    return _make(VisionBalanced, options)
