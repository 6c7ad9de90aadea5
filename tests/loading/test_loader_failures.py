"""A sample that stops the loader is one message naming the sample, the stage and the reason
(issue 25), in Python and on every CLI verb, with and without worker processes.

Real Energon datasets (the demo generator), real loaders, real worker processes; the CLI runs
through click's runner (its error handling is the program's).
"""

import re

import pytest
from click.testing import CliRunner
from megatron.energon import Cooker, DefaultTaskEncoder, stateless
from megatron.energon.errors import FatalSampleError

import energon_plugins
from energon_plugins.cli import cli
from energon_plugins.errors import BatchFormatError, SampleFailedError


class FailingEncoder(DefaultTaskEncoder):
    """Energon's default encoder (with one-sample packs), failing in one stage.

    ``error`` ``"fatal"`` raises ``FatalSampleError`` (Energon stops at once); ``"value"`` a
    ``ValueError`` (Energon skips it, and stops after 100 failures in a row).
    """

    def __init__(self, stage: str, error: str = "fatal") -> None:
        super().__init__()
        self.stage = stage
        self.error = error

    def _fail(self, stage: str) -> None:
        if stage == self.stage:
            raise (FatalSampleError if self.error == "fatal" else ValueError)(f"boom in {stage}")

    @stateless
    def encode_sample(self, sample):
        self._fail("encode_sample")
        return sample

    def select_samples_to_pack(self, samples):
        self._fail("pack")
        return [[sample] for sample in samples]

    @stateless
    def pack_selected_samples(self, samples):
        return samples[0]

    def batch(self, samples):
        self._fail("batch")
        return super().batch(samples)

    def encode_batch(self, batch):
        self._fail("encode_batch")
        return batch


def datamodule(dataset, encoder, *, workers=0, **kwargs):
    return energon_plugins.EnergonMultiModalDataModule(
        str(dataset.path),
        None,
        task_encoder=encoder,
        validation_task_encoder=encoder,
        seq_length=64,
        micro_batch_size=2,
        num_workers=workers,
        shuffle_buffer_size=None,
        **kwargs,
    )


def chain(exc):
    """``exc`` and its causes / contexts, outermost first."""
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def check(error, stage, split_keys, words):
    """One line naming a key of the split, the stage and the reason; the chain kept."""
    text = str(error)
    assert "\n" not in text and "Traceback" not in text, text
    assert f"failed in stage {stage}: " in text and words in text, text
    assert error.stage == stage and words in error.reason
    assert error.key in split_keys and repr(error.key) in text, error.key
    assert error.__cause__ is not None, "the full chain stays for --debug"


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("stage", ["encode_sample", "pack", "batch", "encode_batch"])
def test_a_fatal_sample_error_names_key_stage_and_reason(vqa_dataset, stage, workers):
    dm = datamodule(
        vqa_dataset,
        FailingEncoder(stage),
        workers=workers,
        packing_buffer_size=4 if stage == "pack" else None,
    )
    with pytest.raises(SampleFailedError) as info:
        next(dm.train_dataloader())
    assert isinstance(info.value, FatalSampleError), "code catching Energon's error still works"
    check(info.value, stage, vqa_dataset.split_keys["train"], f"FatalSampleError: boom in {stage}")
    if workers == 0:  # the original exception itself, not only its text
        assert any(str(e) == f"boom in {stage}" for e in chain(info.value))
    else:
        assert "in DataLoader worker process" in str(info.value.__cause__)
    dm.close()


@stateless
def cook_nothing(sample):
    """A cooker that fails on every crude sample."""
    raise FatalSampleError(f"cannot cook {sample['__key__']}")


class FailingCooker(DefaultTaskEncoder):
    """Cooks the crude ``llava`` demo samples with :func:`cook_nothing`."""

    cookers = [Cooker(cook_nothing, has_subflavors={"format": "llava"})]


def test_a_failing_cooker_names_stage_cook(tmp_path):
    from energon_plugins.synthetic import write_dataset

    crude = write_dataset(tmp_path / "llava", kind="llava", num_samples=10, samples_per_shard=5)
    dm = datamodule(crude, FailingCooker())
    with pytest.raises(SampleFailedError) as info:
        next(dm.train_dataloader())
    check(info.value, "cook", crude.split_keys["train"], "FatalSampleError: cannot cook")


def test_energon_giving_up_after_failures_in_a_row_says_so(vqa_dataset):
    dm = datamodule(vqa_dataset, FailingEncoder("encode_batch", "value"))
    with pytest.raises(SampleFailedError) as info:
        next(dm.train_dataloader())
    check(info.value, "encode_batch", vqa_dataset.split_keys["train"], "ValueError: boom in encode_batch")
    assert "Energon stopped after 100 failures in a row" in str(info.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_validation_pass_names_the_failing_sample_too(vqa_dataset, workers):
    dm = datamodule(vqa_dataset, FailingEncoder("encode_sample"), num_val_workers=workers)
    with pytest.raises(SampleFailedError) as info:
        list(dm.val_dataloader().one_pass())
    check(
        info.value, "encode_sample", vqa_dataset.split_keys["val"], "FatalSampleError: boom in encode_sample"
    )
    dm.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_batch_format_names_the_batch(vqa_dataset, tokenizer, clip_processor, workers):
    def broken(batch):
        raise KeyError("nope")

    dm = energon_plugins.EnergonMultiModalDataModule(
        str(vqa_dataset.path),
        tokenizer,
        clip_processor,
        seq_length=400,
        micro_batch_size=2,
        num_workers=workers,
        batch_format=broken,
    )
    with pytest.raises(BatchFormatError) as info:
        next(dm.train_dataloader())
    assert isinstance(info.value, SampleFailedError)
    check(
        info.value,
        "batch format",
        vqa_dataset.split_keys["train"],
        "broken failed on a batch of task encoder MultimodalTaskEncoder",
    )
    assert "KeyError: 'nope'" in str(info.value)
    dm.close()


# ------------------------------------------------------------------ the command line
def test_the_cli_names_key_and_stage_for_energons_own_loader_too(vqa_dataset, capsys):
    """An Energon loader built outside the datamodule (as ``validate --deep`` builds one)
    raises Energon's own error; the CLI still prints the one line."""
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    from energon_plugins.cli.main import report_error

    dataset = get_val_dataset(
        str(vqa_dataset.path),
        split_part="val",
        batch_size=2,
        task_encoder=FailingEncoder("encode_batch"),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
    )
    with pytest.raises(FatalSampleError) as info:
        next(iter(get_loader(dataset)))
    assert not isinstance(info.value, SampleFailedError), "Energon's own error reaches the CLI"
    report_error(info.value)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[1] == "(run with --debug for the traceback)"
    assert re.match(
        r"Error: batch of samples 'vqa-\d+', 'vqa-\d+' failed in stage encode_batch: "
        r"FatalSampleError: boom in encode_batch$",
        lines[0],
    ), lines[0]


@pytest.fixture(scope="module")
def failing_config(tmp_path_factory):
    """A config on the demo data whose every sample is too long and dropped."""
    from energon_plugins.cli.demo_cmd import prepare_demo_data

    root = tmp_path_factory.mktemp("failing")
    paths = prepare_demo_data(str(root / "demo"))
    config = root / "drop.yaml"
    config.write_text(
        f"path: {paths['path']}\ntokenizer:\n  path: {paths['tokenizer']}\n"
        "seq_length: 16\nnum_workers: 0\ntask_encoder:\n  name: multimodal\n",
        encoding="utf-8",
    )
    return config


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("verb", ["bench", "preview"])
def test_cli_prints_one_message_for_a_failing_sample(failing_config, verb, workers):
    args = [
        verb,
        str(failing_config),
        "--set",
        "task_encoder.options.truncation=drop",
        "--set",
        f"num_workers={workers}",
    ]
    result = CliRunner().invoke(cli, args)
    output = result.output
    assert result.exit_code == 1, output
    assert "Traceback" not in output and "Original" not in output, output
    assert len(output.strip().splitlines()) <= 4, output
    error = next(line for line in output.splitlines() if line.startswith("Error: "))
    assert re.match(r"Error: sample '(vqa|captioning)-\d+' failed in stage encode_sample: ", error), error
    assert "too_long" in error and "seq_length 16" in error

    debug = CliRunner().invoke(cli, ["--debug", *args])
    assert isinstance(debug.exception, SampleFailedError)
    assert debug.exception.__cause__ is not None
