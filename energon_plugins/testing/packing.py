"""``check_packing_strategy``: the packing contract, as invariants over random buffers.

``select(lengths, capacity)`` is called on many seeded random buffers (few and many samples,
short and long ones, lengths equal to the capacity, capacity 1, an empty buffer) and every
answer must keep these rules (each named in the
:class:`~energon_plugins.testing.ConformanceError` it raises):

- the registration and options rules of :func:`~energon_plugins.testing.check_registration`
  and :func:`~energon_plugins.testing.check_options`; ``builds``;
- ``select-output``: a list of non-empty lists of integer indices into the buffer;
- ``packing-unique``: each index at most once;
- ``packing-capacity``: every group of several samples sums to at most the capacity;
- ``packing-complete``: every sample that fits the capacity is placed;
- ``packing-overlong``: a sample longer than the capacity is either alone in its group or
  left out (or the strategy raises ``ValueError`` for it, if its options say so);
- ``packing-deterministic``: the same buffer gives the same groups, twice and from a second
  instance; the ``lengths`` passed in are not changed;
- ``packing-plan``: a strategy that also has ``plan(lengths, capacity)`` (as the built-ins do)
  returns the same groups in ``plan(...).groups``.

The selection rules are the loader's own
(:func:`~energon_plugins.encoding.packing.rules.selection_problem`, checked on every packing
buffer); no torch is needed; the cases are deterministic (seeded), so a failure reproduces.
"""

import random
from collections.abc import Mapping, Sequence
from typing import Any

from energon_plugins.testing._common import check_options, check_registration, fail

#: How many random buffers each check draws.
DEFAULT_CASES = 200


def random_cases(count: int = DEFAULT_CASES, seed: int = 0) -> list[tuple[list[int], int]]:
    """Seeded ``(lengths, capacity)`` buffers where every length fits the capacity, edge cases first."""
    rng = random.Random(seed)
    cases: list[tuple[list[int], int]] = [
        ([], 16),
        ([1], 1),
        ([5], 5),
        ([4, 4, 4, 4], 8),
        ([8, 8, 8], 8),
        ([1] * 17, 4),
        ([3, 5, 2, 7, 1, 8, 6, 4], 10),
    ]
    while len(cases) < count:
        capacity = rng.choice([1, 2, 7, 16, 64, 100, 512, 4096])
        size = rng.choice([1, 2, 3, 5, 8, 16, 33, 64, 200])
        shape = rng.random()
        if shape < 0.3:
            lengths = [rng.randint(1, capacity) for _ in range(size)]
        elif shape < 0.6:
            lengths = [rng.randint(1, max(1, capacity // 4)) for _ in range(size)]
        elif shape < 0.8:
            lengths = [rng.choice([1, capacity, max(1, capacity // 2)]) for _ in range(size)]
        else:
            lengths = [max(1, min(capacity, int(rng.expovariate(4 / capacity)) + 1)) for _ in range(size)]
        cases.append((lengths, capacity))
    return cases


def overlong_cases(seed: int = 1) -> list[tuple[list[int], int]]:
    """Buffers with some samples longer than the capacity."""
    rng = random.Random(seed)
    cases = [([20], 10), ([3, 11, 4, 25, 2], 10)]
    for _ in range(20):
        capacity = rng.choice([8, 64, 512])
        cases.append(([rng.randint(1, 2 * capacity) for _ in range(rng.randint(1, 40))], capacity))
    return cases


def check_packing_strategy(
    name: str,
    *,
    options: Mapping[str, Any] | Any = None,
    context: Any = None,
    cases: int = DEFAULT_CASES,
    seed: int = 0,
) -> Any:
    """Check that the packing strategy ``name`` keeps the contract; return the built strategy.

    Args:
        name: the registered name (or ``distribution:name``).
        options: the plugin's options to check with (``None``: defaults).
        context: the :class:`~energon_plugins.BuildContext` handed to the factory.
        cases: how many random buffers to try.
        seed: the seed of the random buffers.

    Raises:
        ConformanceError: naming the plugin, the rule it breaks and the smallest failing
            buffer found (see the module docstring).
    """
    from energon_plugins.host.context import BuildContext
    from energon_plugins.host.manager import get_registry

    spec = check_registration("packing_strategy", name)
    label = spec.label
    validated = check_options("packing_strategy", name, options)

    def build() -> Any:
        try:
            return get_registry().create(
                spec.kind, spec.qualified_name, validated, context if context is not None else BuildContext()
            )
        except Exception as exc:  # noqa: BLE001 - reported under the rule
            fail(label, "builds", f"building failed: {type(exc).__name__}: {exc}")

    strategy, twin = build(), build()
    if not callable(getattr(strategy, "select", None)):
        fail(label, "select-output", f"{type(strategy).__qualname__} has no select(lengths, capacity)")

    failures: list[tuple[int, str, str]] = []
    buffers = [(case, False) for case in random_cases(cases, seed)]
    buffers += [(case, True) for case in overlong_cases(seed + 1)]
    for (lengths, capacity), overlong in buffers:
        problem = _check_case(strategy, twin, lengths, capacity, overlong=overlong)
        if problem is not None:
            rule, detail = problem
            failures.append((len(lengths), rule, f"{detail} (lengths={lengths}, capacity={capacity})"))
    if failures:
        size, rule, detail = min(failures, key=lambda f: f[0])
        fail(label, rule, f"{detail}; {len(failures)} failing buffer(s) in all")
    return strategy


def _check_case(
    strategy: Any, twin: Any, lengths: list[int], capacity: int, *, overlong: bool
) -> tuple[str, str] | None:
    """Return ``(rule, detail)`` for the first broken rule on this buffer, or None."""
    original = list(lengths)
    try:
        groups = strategy.select(lengths, capacity)
    except ValueError:
        if overlong:
            return None  # e.g. overlong="error": refusing an overlong sample is allowed
        return "packing-complete", "select raised ValueError on a buffer where every sample fits"
    except Exception as exc:  # noqa: BLE001
        return "select-output", f"select raised {type(exc).__name__}: {exc}"
    if list(lengths) != original:
        return "packing-deterministic", "select changed the lengths list it was given"
    problem = _check_groups(groups, lengths, capacity)
    if problem is not None:
        return problem
    again = strategy.select(list(lengths), capacity)
    if _as_lists(again) != _as_lists(groups):
        return (
            "packing-deterministic",
            f"a second call gave {_as_lists(again)} instead of {_as_lists(groups)}",
        )
    other = twin.select(list(lengths), capacity)
    if _as_lists(other) != _as_lists(groups):
        return (
            "packing-deterministic",
            f"a second instance gave {_as_lists(other)} instead of {_as_lists(groups)}",
        )
    plan = getattr(strategy, "plan", None)
    if callable(plan):
        try:
            planned = _as_lists(plan(list(lengths), capacity).groups)
        except Exception as exc:  # noqa: BLE001
            return "packing-plan", f"plan() raised {type(exc).__name__}: {exc}"
        if planned != _as_lists(groups):
            return "packing-plan", f"plan().groups {planned} differ from select() {_as_lists(groups)}"
    return None


def _as_lists(groups: Any) -> list[list[int]]:
    return [list(g) for g in groups]


def _check_groups(groups: Any, lengths: Sequence[int], capacity: int) -> tuple[str, str] | None:
    """The selection rules (``select-output``, ``packing-unique``, ``packing-capacity``,
    ``packing-complete``): the predicate the loader checks every buffer with."""
    from energon_plugins.encoding.packing.rules import selection_problem

    return selection_problem(groups, lengths, capacity, complete=True)
