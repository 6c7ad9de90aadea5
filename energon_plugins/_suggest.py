"""'Did you mean' suggestions for names and keys."""

from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest candidate, or ``""`` if none is close."""
    import difflib  # only on the error path: ``list`` never needs it

    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""
