"""``import_quietly``: the quiet context for a first import, nothing for a module already there."""

import contextlib
import logging
import sys
import warnings

from energon_plugins import _quiet

NOISY = "noisy_module_for_quiet_test"


def test_a_first_import_is_quiet_and_a_repeated_one_skips_the_context(tmp_path, monkeypatch):
    (tmp_path / f"{NOISY}.py").write_text(
        "import logging, warnings\n"
        "warnings.warn('Transformer Engine and Apex are not installed.')\n"
        "logging.getLogger('torch.utils.cpp_extension').warning('no CUDA runtime is found')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entered = []
    real = _quiet.quietly

    @contextlib.contextmanager
    def counting():
        entered.append(True)
        with real():
            yield

    monkeypatch.setattr(_quiet, "quietly", counting)
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = _quiet.import_quietly(NOISY)
        assert not [w for w in caught if "Transformer Engine" in str(w.message)]
        assert entered == [True]
        assert logger.level == level  # restored after the import
        again = _quiet.import_quietly(NOISY)
        assert again is first
        assert entered == [True]  # already imported: no context, no logger level touched
    finally:
        sys.modules.pop(NOISY, None)
