"""A normal run prints only what the user asked for: no third-party warnings or progress bars.

The script below is what a user writes: build a datamodule with packing and a loader worker,
read training and validation batches. It runs in a fresh interpreter (warnings and logging are
process-wide state), and its stderr must stay empty. ``import_quietly`` hides the noise of a
first import and costs nothing for a module already imported.
"""

import contextlib
import logging
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from energon_plugins import _quiet

SCRIPT = textwrap.dedent(
    """
    import sys
    import transformers
    import energon_plugins
    from energon_plugins.synthetic import build_demo_tokenizer

    dm = energon_plugins.EnergonMultiModalDataModule(
        sys.argv[1], build_demo_tokenizer(), transformers.CLIPImageProcessor(),
        seq_length=512, micro_batch_size=2, num_workers=1, shuffle_buffer_size=8,
        packing_buffer_size=8,
        packing=energon_plugins.create("packing_strategy", "first-fit-decreasing"),
    )
    loader = dm.train_dataloader()
    for _ in range(3):
        next(loader)
    for _ in dm.val_dataloader().one_pass():
        pass
    print("done")
    """
)


@pytest.mark.slow
def test_a_packed_run_with_a_worker_prints_nothing_but_its_own_output(vqa_dataset, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(vqa_dataset.path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "done\n"
    assert proc.stderr == "", proc.stderr[-3000:]


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
