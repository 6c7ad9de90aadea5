"""Plugin outputs that break their kind's contract stop the loader at the first batch (issue 27).

A task encoder whose ``encode_sample`` returns the wrong thing, an image processor without a
usable ``pixel_values``, a packing strategy whose selection repeats, leaves the buffer, empties
or overfills a group, and a batch format that returns ``None``, ``42`` or non-tensors: each is a
real plugin of an installed distribution (dist-info and entry points, on ``sys.path``), run by
the real datamodule over a real Energon dataset. Each must raise a ``PluginOutputError`` on the
first batch, naming the plugin and its distribution, without skipping a sample first (a plugin
bug is not a bad sample), also from worker processes, and the CLI prints it without a
traceback.
"""

import gc
from pathlib import Path

import pytest
import yaml

import energon_plugins
from energon_plugins import PluginOutputError, SampleFailedError
from energon_plugins.cli.runner import run_cli
from tests._dists import write_distribution
from tests._refusals import assert_refusal, unchanged

DIST = "energon-plugin-broken-outputs"

HOOKS = """
from energon_plugins import hookimpl

ENCODER_FLAWS = ("none", "dict", "short-labels", "short-mask", "float-ids", "list-labels",
                 "2d-ids", "too-long", "empty", "seq-lengths")
PROCESSOR_FLAWS = ("none", "no-pixels", "list", "numpy", "nan", "inf", "grid-shape", "grid-rows")
PACKING_FLAWS = ("duplicate", "out-of-range", "negative", "empty-group", "over-capacity", "none",
                 "float-index", "generator")
FORMAT_FLAWS = ("none", "42", "list", "str", "tuple", "tensor", "labels-list", "tokens-numpy",
                "loss-mask-none", "declared-missing", "declared-int")


def _make(kind, flaw):
    def factory(options, context):
        from broken_outputs import impl

        return getattr(impl, kind)(flaw, context)
    return factory


@hookimpl
def register_task_encoders(register):
    for flaw in ENCODER_FLAWS:
        register(f"te-{flaw}", _make("encoder", flaw), description=f"encode_sample: {flaw}")


@hookimpl
def register_image_processors(register):
    register("tiny", _make("processor", ""), description="a correct 28 px processor")
    for flaw in PROCESSOR_FLAWS:
        register(f"ip-{flaw}", _make("processor", flaw), description=f"output: {flaw}")


@hookimpl
def register_packing_strategies(register):
    for flaw in PACKING_FLAWS:
        register(f"pk-{flaw}", _make("strategy", flaw), description=f"select: {flaw}")


@hookimpl
def register_batch_formats(register):
    for flaw in FORMAT_FLAWS:
        register(f"bf-{flaw}", _make("batch_format", flaw), description=f"returns: {flaw}")
"""

IMPL = """
import torch

from energon_plugins import BatchFormat, MultiModalBatch, MultimodalOptions, MultimodalTaskEncoder


class Encoder(MultimodalTaskEncoder):
    flaw = ""

    def encode_sample(self, sample):
        s = super().encode_sample(sample)
        flaw = self.flaw
        if flaw == "none":
            return None
        if flaw == "dict":
            return {"input_ids": s.input_ids, "labels": s.labels}
        if flaw == "short-labels":
            s.labels = s.labels[:-1]
        elif flaw == "short-mask":
            s.loss_mask = s.loss_mask[:-2]
        elif flaw == "float-ids":
            s.input_ids = s.input_ids.float()
        elif flaw == "list-labels":
            s.labels = s.labels.tolist()
        elif flaw == "2d-ids":
            s.input_ids = s.input_ids[None]
        elif flaw == "too-long":
            extra = self.seq_length + 5 - s.length
            s.input_ids = torch.cat([s.input_ids, s.input_ids[-1:].repeat(extra)])
            s.labels = torch.cat([s.labels, s.labels[-1:].repeat(extra)])
            s.loss_mask = torch.cat([s.loss_mask, s.loss_mask[-1:].repeat(extra)])
        elif flaw == "empty":
            s.input_ids, s.labels, s.loss_mask = s.input_ids[:0], s.labels[:0], s.loss_mask[:0]
        elif flaw == "seq-lengths":
            s.seq_lengths = [1, 2]
        return s


def encoder(flaw, context):
    built = Encoder(context, MultimodalOptions(image_tokens=4))
    built.flaw = flaw
    return built


class Processor:
    def __init__(self, flaw):
        self.flaw = flaw

    def __call__(self, images, return_tensors="pt", **kwargs):
        count, flaw = len(images), self.flaw
        pixels = torch.full((count, 3, 28, 28), 0.5)
        if flaw == "none":
            return None
        if flaw == "no-pixels":
            return {"images": pixels}
        if flaw == "list":
            return {"pixel_values": pixels.tolist()}
        if flaw == "numpy":
            return {"pixel_values": pixels.numpy()}
        if flaw == "nan":
            pixels[0, 0, 0, 0] = float("nan")
        if flaw == "inf":
            pixels[-1, -1, -1, -1] = float("inf")
        out = {"pixel_values": pixels}
        if flaw == "grid-shape":
            out["image_grid_thw"] = torch.ones((count, 2), dtype=torch.long)
        if flaw == "grid-rows":
            out["image_grid_thw"] = torch.tensor([[1, 2, 2]] * count)
        return out


def processor(flaw, context):
    return Processor(flaw)


class Strategy:
    name = "broken"

    def __init__(self, flaw):
        self.flaw = flaw

    def select(self, lengths, capacity):
        groups = [[i] for i in range(len(lengths))]
        flaw = self.flaw
        if flaw == "duplicate":
            return groups + groups[:1]
        if flaw == "out-of-range":
            return groups[1:] + [[len(lengths)]]
        if flaw == "negative":
            return [[-1]] + groups[1:]
        if flaw == "empty-group":
            return groups + [[]]
        if flaw == "over-capacity":
            return [list(range(len(lengths)))]
        if flaw == "none":
            return None
        if flaw == "float-index":
            return [[float(i)] for i in range(len(lengths))]
        if flaw == "generator":
            return (g for g in groups)
        return groups


def strategy(flaw, context):
    return Strategy(flaw)


class Format(BatchFormat):
    name = "broken"

    def __init__(self, context, flaw):
        super().__init__(context)
        self.flaw = flaw
        if flaw.startswith("declared"):
            self.tensor_keys = ("input_ids", "labels", "num_loss_tokens")

    def format(self, batch):
        flaw = self.flaw
        ids, labels = batch.input_ids, batch.labels
        returns = {"none": None, "42": 42, "list": [ids, labels], "str": "batch", "tuple": (ids, labels),
                   "tensor": ids}
        if flaw in returns:
            return returns[flaw]
        if flaw == "labels-list":
            return {"input_ids": ids, "labels": labels.tolist()}
        if flaw == "tokens-numpy":
            return {"tokens": ids.numpy(), "labels": labels}
        if flaw == "loss-mask-none":
            return {"input_ids": ids, "labels": labels, "loss_mask": None}
        if flaw == "declared-int":
            return {"input_ids": ids, "labels": labels, "num_loss_tokens": 3}
        return {"input_ids": ids, "labels": labels}


def batch_format(flaw, context):
    return Format(context, flaw)
"""

# (kind, plugin name, words of the message after the plugin's label)
ROWS = [
    ("task_encoder", "te-none", "encode_sample returned NoneType, not an EncodedSample"),
    ("task_encoder", "te-dict", "encode_sample returned dict, not an EncodedSample"),
    ("task_encoder", "te-short-labels", "cannot be batched: labels ("),
    ("task_encoder", "te-short-mask", "cannot be batched: loss_mask ("),
    ("task_encoder", "te-float-ids", "input_ids must be a 1-D integer tensor"),
    ("task_encoder", "te-list-labels", "labels is list, expected a (L,) tensor"),
    ("task_encoder", "te-2d-ids", "input_ids must be a 1-D integer tensor, got (1,"),
    ("task_encoder", "te-too-long", "133 tokens, more than seq_length 128"),
    ("task_encoder", "te-empty", "no tokens"),
    ("task_encoder", "te-seq-lengths", "seq_lengths [1, 2] sum to 3"),
    ("image_processor", "ip-none", "the result has no 'pixel_values' (a NoneType)"),
    ("image_processor", "ip-no-pixels", "the result has no 'pixel_values' (keys: ['images'])"),
    ("image_processor", "ip-list", "pixel_values is list, not a tensor"),
    ("image_processor", "ip-numpy", "pixel_values is ndarray, not a tensor"),
    ("image_processor", "ip-nan", "NaN or infinite"),
    ("image_processor", "ip-inf", "NaN or infinite"),
    ("image_processor", "ip-grid-shape", "image_grid_thw has shape (1, 2) for 1 images"),
    ("image_processor", "ip-grid-rows", "image_grid_thw describes 4 patches"),
    ("packing_strategy", "pk-duplicate", "index 0 is placed more than once"),
    ("packing_strategy", "pk-out-of-range", "holds index 8, outside the buffer"),
    ("packing_strategy", "pk-negative", "holds index -1, outside the buffer"),
    ("packing_strategy", "pk-empty-group", "group 8 is empty"),
    ("packing_strategy", "pk-over-capacity", "> capacity 128"),
    ("packing_strategy", "pk-none", "select returned NoneType, not a list of lists"),
    ("packing_strategy", "pk-float-index", "holds 0.0, not an integer index"),
    ("packing_strategy", "pk-generator", "select returned generator"),
    ("batch_format", "bf-none", "returned NoneType; expected a mapping of tensors"),
    ("batch_format", "bf-42", "returned int; expected a mapping of tensors"),
    ("batch_format", "bf-list", "returned list; expected a mapping of tensors"),
    ("batch_format", "bf-str", "returned str; expected a mapping of tensors"),
    ("batch_format", "bf-tuple", "returned tuple; expected a mapping of tensors"),
    ("batch_format", "bf-tensor", "returned Tensor; expected a mapping of tensors"),
    ("batch_format", "bf-labels-list", "returned 'labels' as list; training loops read it as a tensor"),
    ("batch_format", "bf-tokens-numpy", "returned 'tokens' as ndarray"),
    ("batch_format", "bf-loss-mask-none", "returned 'loss_mask' as NoneType"),
    (
        "batch_format",
        "bf-declared-missing",
        "declares 'num_loss_tokens' a tensor, but its output has no such key",
    ),
    ("batch_format", "bf-declared-int", "declares 'num_loss_tokens' a tensor, but its output has int"),
]

STAGE = {
    "task_encoder": "encode_sample",
    "image_processor": "encode_sample",
    "packing_strategy": "pack",
    "batch_format": "batch format",
}


@pytest.fixture(autouse=True)
def frozen_heap():
    """Freeze this process's heap before each test (speed only): Energon's training loader
    collects garbage as its iteration starts, a pass over every object of the test process
    (1-2 s) unless they are frozen; the iteration's end unfreezes them."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A site folder holding energon-plugin-broken-outputs (written once for the module)."""
    root = tmp_path_factory.mktemp("broken-outputs-site")
    write_distribution(
        root,
        DIST,
        modules={"broken_outputs.hooks": HOOKS, "broken_outputs.impl": IMPL},
        entry_points={"broken-outputs": "broken_outputs.hooks"},
    )
    return root


@pytest.fixture
def broken(site, monkeypatch, isolated_registry):
    """The broken distribution on ``sys.path``, loaded into this test's registry."""
    monkeypatch.syspath_prepend(str(site))
    for var in ("ENERGON_PLUGINS_LOAD", "ENERGON_PLUGINS_DISABLE"):
        monkeypatch.delenv(var, raising=False)
    return isolated_registry()


def datamodule(dataset, tokenizer, processor, kind, name, *, workers=0):
    """The datamodule with the broken plugin ``name`` of ``kind`` in its place."""
    args = dict(
        seq_length=128,
        micro_batch_size=2,
        num_workers=workers,
        shuffle_buffer_size=None,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 4}},
    )
    if kind == "task_encoder":
        args["task_encoder"] = name
    elif kind == "image_processor":
        processor = energon_plugins.create("image_processor", name)
    elif kind == "packing_strategy":
        args.update(packing=name, packing_buffer_size=8)
    else:
        args["batch_format"] = name
    return energon_plugins.EnergonMultiModalDataModule(str(dataset.path), tokenizer, processor, **args)


def assert_names_the_plugin(error, kind, name, words):
    """The typed error, naming the plugin and its distribution and what is wrong, in one line."""
    text = str(error)
    assert isinstance(error, PluginOutputError) and isinstance(error, SampleFailedError), type(error)
    assert f"{kind} '{name}' ({DIST})" in text, text
    assert words in text, text
    assert error.stage == STAGE[kind], error.stage
    assert "\n" not in text and "Traceback" not in text and len(text) < 1000, text


@pytest.mark.bad_input
@pytest.mark.parametrize(("kind", "name", "words"), ROWS, ids=[row[1] for row in ROWS])
def test_a_broken_plugin_output_stops_the_first_batch(
    broken, vqa_dataset, tokenizer, small_clip_processor, kind, name, words
):
    dm = datamodule(vqa_dataset, tokenizer, small_clip_processor, kind, name)
    loader = dm.train_dataloader()
    with unchanged(Path(vqa_dataset.path)), pytest.raises(PluginOutputError) as info:
        next(loader)  # the very first batch
    assert_names_the_plugin(info.value, kind, name, words)
    assert info.value.key in vqa_dataset.split_keys["train"]
    # not a bad sample: nothing was skipped or counted before the loader stopped
    assert dm.task_encoder.error_counts() == {}
    assert loader.skip_counts() == {}
    dm.close()


WORKER_ROWS = [row for row in ROWS if row[1] in {"te-short-labels", "ip-nan", "pk-duplicate", "bf-42"}]


@pytest.mark.slow
@pytest.mark.bad_input
@pytest.mark.parametrize(("kind", "name", "words"), WORKER_ROWS, ids=[row[1] for row in WORKER_ROWS])
def test_the_error_crosses_the_worker_boundary_with_the_plugin_named(
    broken, vqa_dataset, tokenizer, small_clip_processor, kind, name, words
):
    dm = datamodule(vqa_dataset, tokenizer, small_clip_processor, kind, name, workers=2)
    with pytest.raises(PluginOutputError) as info:
        next(dm.train_dataloader())
    assert_names_the_plugin(info.value, kind, name, words)
    assert "in DataLoader worker process" in str(info.value.__cause__), "raised in a worker"
    dm.close()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """The demo tokenizer saved for ``tokenizer: {path: ...}`` configs."""
    from energon_plugins.synthetic import save_demo_tokenizer

    return save_demo_tokenizer(tmp_path_factory.mktemp("tokenizer"))


CLI_ROWS = [
    ("preview", "task_encoder", "te-short-labels", {"task_encoder": {"name": "te-short-labels"}}),
    ("preview", "batch_format", "bf-42", {"batch_format": {"name": "bf-42"}}),
    ("bench", "image_processor", "ip-nan", {"image_processor": {"name": "ip-nan"}}),
    (
        "bench",
        "packing_strategy",
        "pk-duplicate",
        {"packing": {"name": "pk-duplicate"}, "packing_buffer_size": 8},
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("verb", "kind", "name", "setting"), CLI_ROWS, ids=[f"{r[0]}-{r[2]}" for r in CLI_ROWS]
)
def test_the_cli_prints_the_broken_plugin_without_a_traceback(
    broken, vqa_dataset, tokenizer_dir, tmp_path, verb, kind, name, setting
):
    config = {
        "path": str(vqa_dataset.path),
        "tokenizer": {"path": str(tokenizer_dir)},
        "seq_length": 128,
        "micro_batch_size": 2,
        "num_workers": 0,
        "image_processor": {"name": "tiny"},
        "task_encoder": {"name": "multimodal", "options": {"image_tokens": 4}},
        **setting,
    }
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(config))
    args = [verb, str(path)] + (["-n", "2"] if verb == "preview" else ["--batches", "2"])
    with unchanged(Path(vqa_dataset.path), Path(tokenizer_dir), path):
        result = run_cli(args)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: "), result.output
    assert_refusal(result.output, f"{kind} '{name}' ({DIST})")


def test_the_authors_kit_names_the_rule_the_loader_checks(broken):
    """The kit and the loader share one predicate: what the loader refuses, the kit refuses."""
    from energon_plugins.testing import ConformanceError, check_packing_strategy

    with pytest.raises(
        ConformanceError, match=r"packing_strategy 'pk-duplicate' .*violates \[packing-unique\]"
    ):
        check_packing_strategy("pk-duplicate", cases=20)
    with pytest.raises(ConformanceError, match=r"violates \[select-output\]: group \d+ is empty"):
        check_packing_strategy("pk-empty-group", cases=20)
