"""The plugin author's kit (energon_plugins.testing): fixtures, and checks that catch violations.

Broken plugins live in real distributions (dist-info + entry points, written by
``tests/_dists.py``) put on ``sys.path``, so they go through the same entry-point loading as
an installed plugin; each must fail its check with the rule it breaks named, and the built-ins
and the distributions in ``plugins/`` must pass.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import energon_plugins
from energon_plugins import hookimpl
from energon_plugins.testing import (
    ConformanceError,
    check_batch_format,
    check_image_processor,
    check_options,
    check_packing_strategy,
    check_registration,
    check_source_format,
    check_task_encoder,
)
from energon_plugins.testing.packing import _check_groups
from tests._dists import write_distribution

HEAVY = ("torch", "transformers", "megatron")

BROKEN_HOOKS = """
from pydantic import BaseModel, ConfigDict

from energon_plugins import hookimpl

M = "broken_plugins.impl"
E = "broken_plugins.encoders"


class RequiredOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int


@hookimpl
def register_packing_strategies(register):
    register("one-each", f"{M}:one_each", description="every sample alone (correct)")
    register("drops-one", f"{M}:drops_one", description="leaves the last sample out")
    register("overfills", f"{M}:overfills", description="everything in one pack")
    register("duplicates", f"{M}:duplicates", description="places sample 0 twice")
    register("random-order", f"{M}:random_order", description="shuffles its packs")
    register("needs-size", f"{M}:one_each", options=RequiredOptions, description="required option")
    register("undescribed", f"{M}:one_each")


@hookimpl
def register_image_processors(register):
    register("tiny", f"{M}:tiny", description="a correct 32 px processor")
    register("no-pixels", f"{M}:no_pixels", description="returns 'images', not pixel_values")
    register("double-rescale", f"{M}:double_rescale", description="rescales float input twice")
    register("noisy", f"{M}:noisy", description="adds random noise")


@hookimpl
def register_batch_formats(register):
    register("aligned-as-next", f"{M}:aligned_as_next", description="forgets the shift")
    register("mutates-input", f"{M}:mutates_input", description="writes into the batch")
    register("swallows-others", f"{M}:swallows_others", description="formats any object")
    register("key-error", f"{M}:key_error", description="fails with a KeyError")


@hookimpl
def register_task_encoders(register):
    register("not-stateless", f"{E}:not_stateless", description="encode_sample lacks @stateless")
    register("batch-not-stateless", f"{E}:batch_not_stateless", description="batch lacks it")
    register("bad-labels", f"{E}:bad_labels", description="labels disagree with the loss mask")
    register("keeps-count", f"{E}:keeps_count", description="encode_sample keeps a counter")
    register("pack-not-stateless", f"{E}:pack_not_stateless", description="packs statefully")


S = "broken_plugins.sources"


@hookimpl
def register_source_formats(register):
    register("vqa-lines", f"{S}:correct", description="JSON Lines image/question/answer (correct)")
    register("raises-on-bad", f"{S}:raises_on_bad", description="a KeyError on a bad record")
    register("wrong-type", f"{S}:wrong_type", description="load returns a dict")
"""

BROKEN_SOURCES = """
import json
import pathlib

from energon_plugins import RecordError, SourceRecord
from energon_plugins.convert.formats import read_image_file


class Reader:
    def __init__(self, mode):
        self.mode = mode

    def scan(self, source):
        with open(source, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                yield f"{source.name}:{number}", (line, str(source.parent))

    def load(self, payload):
        line, folder = payload
        row = json.loads(line)
        if self.mode != "raises" and "answer" not in row:
            raise RecordError("malformed", "no 'answer'")
        turns = [{"role": "user", "content": "<image>\\n" + row["question"]},
                 {"role": "assistant", "content": row["answer"]}]
        image = read_image_file(pathlib.Path(folder), row["image"], "image")
        if self.mode == "wrong-type":
            return {"turns": turns, "images": [image]}
        return SourceRecord(turns=turns, images=[image])


def correct(options, context):
    return Reader("correct")


def raises_on_bad(options, context):
    return Reader("raises")


def wrong_type(options, context):
    return Reader("wrong-type")
"""

BROKEN_IMPL = """
import random

import numpy as np


class Strategy:
    def __init__(self, fn):
        self.fn = fn

    def select(self, lengths, capacity):
        return self.fn(list(lengths), capacity)


def _alone(lengths, capacity):
    return [[i] for i in range(len(lengths))]


def one_each(options, context):
    return Strategy(_alone)


def drops_one(options, context):
    return Strategy(lambda l, c: _alone(l, c)[:-1] if len(l) > 1 else _alone(l, c))


def overfills(options, context):
    return Strategy(lambda l, c: [list(range(len(l)))] if l else [])


def duplicates(options, context):
    return Strategy(lambda l, c: _alone(l, c) + [[0]] if l else [])


def random_order(options, context):
    def select(l, c):
        groups = _alone(l, c)
        random.shuffle(groups)
        return groups
    return Strategy(select)


class Tiny:
    double = False
    noise = False
    key = "pixel_values"

    def __call__(self, images, return_tensors="pt", **kwargs):
        import torch
        import torch.nn.functional as F

        out = []
        for img in images:
            if torch.is_tensor(img):
                t = img.float()
                if self.double or not img.dtype.is_floating_point:
                    t = t / 255
            else:
                t = torch.from_numpy(np.asarray(img.convert("RGB")).copy()).permute(2, 0, 1)
                t = t.float() / 255
            t = F.interpolate(t[None], size=(32, 32), mode="bilinear", antialias=True)[0]
            out.append((t - 0.5) / 0.5)
        pixels = torch.stack(out)
        if self.noise:
            pixels = pixels + torch.rand_like(pixels) * 0.01
        return {self.key: pixels}


def tiny(options, context):
    return Tiny()


def no_pixels(options, context):
    proc = Tiny()
    proc.key = "images"
    return proc


def double_rescale(options, context):
    proc = Tiny()
    proc.double = True
    return proc


def noisy(options, context):
    proc = Tiny()
    proc.noise = True
    return proc


class Format:
    # a batch format with one flaw: `flaw`

    def __init__(self, context, flaw):
        from energon_plugins.encoding.batch_formats.bridge import MegatronBridgeFormat

        self.bridge = MegatronBridgeFormat(context)
        self.flaw = flaw

    def __call__(self, batch):
        from energon_plugins import MultiModalBatch

        if self.flaw == "swallows":
            return {"labels": getattr(batch, "labels", None)}
        if not isinstance(batch, MultiModalBatch):
            return batch
        if self.flaw == "key-error":
            return {}["input_ids"]
        if self.flaw == "mutates":
            batch.loss_mask.mul_(2)
        out = self.bridge(batch)
        if self.flaw == "aligned":
            out["labels"] = batch.labels
        return out


def aligned_as_next(options, context):
    return Format(context, "aligned")


def mutates_input(options, context):
    return Format(context, "mutates")


def swallows_others(options, context):
    return Format(context, "swallows")


def key_error(options, context):
    return Format(context, "key-error")
"""

BROKEN_ENCODERS = """
from megatron.energon import DefaultTaskEncoder, stateless

from energon_plugins.encoding.task_encoders.multimodal import (
    MultimodalTaskEncoder,
    build_multimodal_task_encoder,
)


class NotStateless(DefaultTaskEncoder):
    def __init__(self, context):
        super().__init__()
        self.inner = build_multimodal_task_encoder(None, context)
        self.ignore_index = self.inner.ignore_index

    def encode_sample(self, sample):
        return self.inner.encode_sample(sample)

    @stateless
    def batch(self, samples):
        return self.inner.batch(samples)


class BatchNotStateless(MultimodalTaskEncoder):
    def batch(self, samples):
        return super().batch(samples)


class BadLabels(MultimodalTaskEncoder):
    def encode_sample(self, sample):
        encoded = super().encode_sample(sample)
        encoded.labels = encoded.input_ids.clone()
        return encoded


class KeepsCount(MultimodalTaskEncoder):
    def __init__(self, context, options=None):
        super().__init__(context, options)
        self.count = 0

    def encode_sample(self, sample):
        encoded = super().encode_sample(sample)
        self.count += 1
        encoded.pixel_values = encoded.pixel_values + self.count
        return encoded


class PackNotStateless(MultimodalTaskEncoder):
    def pack_selected_samples(self, samples):
        return super().pack_selected_samples(samples)


def pack_not_stateless(options, context):
    return PackNotStateless(context)


def not_stateless(options, context):
    return NotStateless(context)


def batch_not_stateless(options, context):
    return BatchNotStateless(context)


def bad_labels(options, context):
    return BadLabels(context)


def keeps_count(options, context):
    return KeepsCount(context)
"""

HEAVY_HOOKS = """
import torch  # a hook module must not import torch: listing plugins would pay for it

from energon_plugins import hookimpl


def _alone(lengths, capacity):
    return [[i] for i in range(len(lengths))]


class Strategy:
    def select(self, lengths, capacity):
        return _alone(lengths, capacity)


def make(options, context):
    return Strategy()


@hookimpl
def register_packing_strategies(register):
    register("heavy-one-each", "heavy_plugin.hooks:make", description="imports torch at the top")
"""


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    """A site folder holding energon-plugin-broken and energon-plugin-heavy."""
    site = tmp_path_factory.mktemp("kit-site")
    write_distribution(
        site,
        "energon-plugin-broken",
        modules={
            "broken_plugins.hooks": BROKEN_HOOKS,
            "broken_plugins.impl": BROKEN_IMPL,
            "broken_plugins.encoders": BROKEN_ENCODERS,
            "broken_plugins.sources": BROKEN_SOURCES,
        },
        entry_points={"broken": "broken_plugins.hooks"},
    )
    write_distribution(
        site,
        "energon-plugin-heavy",
        modules={"heavy_plugin.hooks": HEAVY_HOOKS},
        entry_points={"heavy": "heavy_plugin.hooks"},
    )
    return site


@pytest.fixture
def broken(broken_site, monkeypatch, isolated_registry):
    """The broken distributions on sys.path, loaded into this test's registry."""
    monkeypatch.syspath_prepend(str(broken_site))
    for var in ("ENERGON_PLUGINS_LOAD", "ENERGON_PLUGINS_DISABLE"):
        monkeypatch.delenv(var, raising=False)
    return isolated_registry()


def violates(rule):
    """``pytest.raises`` for a ConformanceError naming ``rule``."""
    return pytest.raises(ConformanceError, match=rf"violates \[{rule}\]")


# ------------------------------------------------------------------ the pytest plugin
def test_the_pytest11_entry_point_loads_nothing_heavy():
    code = textwrap.dedent(
        """
        import importlib.metadata, json, sys
        eps = [e for e in importlib.metadata.entry_points(group="pytest11")
               if e.value.startswith("energon_plugins")]
        assert [e.value for e in eps] == ["energon_plugins.testing.pytest_plugin"], eps
        eps[0].load()
        import energon_plugins.testing
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in %r)))
        """
        % (HEAVY,)
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=os.path.dirname(sys.executable)
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_fixtures_reach_a_project_without_conftest(tmp_path):
    (tmp_path / "test_author.py").write_text(
        textwrap.dedent(
            """
        import pathlib

        def test_fixtures(energon_dataset, isolated_registry, build_context):
            info = energon_dataset("captioning", num_samples=20)
            assert (pathlib.Path(info.path) / ".nv-meta" / "index.sqlite").exists()
            assert sum(map(len, info.split_keys.values())) == 20 and info.kind == "captioning"
            assert "multimodal" in isolated_registry.names("task_encoder")
            ctx = build_context(seq_length=64, split="val")
            assert (ctx.seq_length, ctx.split, ctx.micro_batch_size) == (64, "val", 2)
            assert ctx.tokenizer.convert_tokens_to_ids("<image>") is not None
        """
        )
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout


def test_energon_dataset_writes_real_distinct_datasets(energon_dataset):
    from megatron.energon import VQASample

    first = energon_dataset(num_samples=20)
    second = energon_dataset("vqa", num_samples=20, seed=5)
    assert first.path != second.path
    assert (first.path / ".nv-meta" / "dataset.yaml").exists()
    assert set(first.split_keys["train"]) | set(first.split_keys["val"]) == set(first.samples)
    # read back through Energon's own loader
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    ds = get_val_dataset(
        str(first.path), batch_size=None, worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0)
    )
    samples = list(get_loader(ds))
    assert all(isinstance(s, VQASample) for s in samples)
    assert sorted(s.__key__ for s in samples) == sorted(first.split_keys["val"])
    assert samples[0].image.dtype.is_floating_point


def test_isolated_registry_adds_modules_for_this_test_only(isolated_registry):
    class LocalHooks:
        @hookimpl
        def register_packing_strategies(self, register):
            register("kit-local", lambda options, context: object(), description="local")

    assert energon_plugins.get_registry() is isolated_registry.registry
    registry = isolated_registry(LocalHooks())
    assert energon_plugins.get_registry() is registry is isolated_registry.registry
    assert "kit-local" in isolated_registry.names("packing_strategy")
    assert "first-fit-decreasing" in registry.names("packing_strategy")
    bare = isolated_registry(LocalHooks(), entry_points=False)
    assert bare.names("packing_strategy") == ["kit-local"]


def test_the_registry_is_restored_after_the_test():
    assert "kit-local" not in energon_plugins.get_registry().names("packing_strategy")


def test_build_context_defaults_and_overrides(build_context):
    ctx = build_context()
    assert ctx.seq_length == 512 and ctx.micro_batch_size == 2 and ctx.split == "train"
    assert callable(ctx.image_processor)
    assert ctx.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    llava = build_context(tokenizer_family="llava", image_processor=None, seq_length=64)
    assert llava.image_processor is None and llava.seq_length == 64
    assert llava.tokenizer.chat_template != ctx.tokenizer.chat_template
    with pytest.raises(TypeError, match="seq_lenght"):
        build_context(seq_lenght=3)


# ------------------------------------------------------------------ built-ins pass
@pytest.mark.parametrize("name", ["none", "first-fit-decreasing", "best-fit-decreasing", "greedy-knapsack"])
def test_builtin_packing_strategies_pass(name):
    strategy = check_packing_strategy(name)
    assert hasattr(strategy, "select")


def test_packing_check_accepts_every_overlong_policy():
    for policy in ("truncate", "drop", "error"):
        check_packing_strategy("ffd", options={"overlong": policy}, cases=40)


def test_builtin_image_processor_passes():
    proc = check_image_processor("hf")
    assert callable(proc)


def test_builtin_task_encoder_passes():
    from megatron.energon import TaskEncoder

    assert isinstance(check_task_encoder("multimodal"), TaskEncoder)


def test_builtin_task_encoder_passes_on_captioning(build_context):
    check_task_encoder(
        "multimodal", dataset_kind="captioning", context=build_context(micro_batch_size=3, seq_length=400)
    )


def test_builtin_task_encoder_passes_with_packing(build_context):
    strategy = energon_plugins.create("packing_strategy", "first-fit-decreasing")
    encoder = check_task_encoder(
        "multimodal",
        context=build_context(packing=strategy, packing_buffer_size=6, seq_length=1024),
    )
    assert encoder.packing is strategy


@pytest.mark.slow
def test_builtin_task_encoder_resumes_exactly_with_workers():
    check_task_encoder("multimodal", num_workers=2)


# ------------------------------------------------------------------ violations are caught
@pytest.mark.parametrize(
    "name, rule, words",
    [
        ("drops-one", "packing-complete", "in no group"),
        ("overfills", "packing-capacity", "> capacity"),
        ("duplicates", "packing-unique", "more than once"),
        ("random-order", "packing-deterministic", "second"),
    ],
)
def test_broken_packing_strategies_fail(broken, name, rule, words):
    with violates(rule) as info:
        check_packing_strategy(name)
    text = str(info.value)
    assert f"packing_strategy {name!r} (energon-plugin-broken)" in text and words in text


def test_a_correct_third_party_strategy_passes(broken):
    check_packing_strategy("one-each")


def test_required_option_without_default_fails(broken):
    with violates("options-defaults") as info:
        check_packing_strategy("needs-size")
    assert "size" in str(info.value)


def test_missing_description_fails(broken):
    with violates("description"):
        check_registration("packing_strategy", "undescribed")


def test_heavy_hook_module_fails_import_light(broken):
    with violates("import-light") as info:
        check_packing_strategy("heavy-one-each")
    assert "torch" in str(info.value) and "heavy_plugin.hooks" in str(info.value)


def test_a_plugin_outside_any_distribution_fails(isolated_registry):
    class LocalHooks:
        @hookimpl
        def register_packing_strategies(self, register):
            register(
                "kit-loose",
                "energon_plugins.encoding.packing.strategies:make_none",
                description="no distribution",
            )

    isolated_registry(LocalHooks())
    with violates("distribution") as info:
        check_packing_strategy("kit-loose")
    assert "entry-points.energon_plugins" in str(info.value)


def test_an_unknown_name_fails_registered(isolated_registry):
    with violates("registered") as info:
        check_packing_strategy("first-fit-decreasin")
    assert "first-fit-decreasing" in str(info.value)  # the registry's suggestion is kept


def test_options_rules_on_a_builtin():
    validated = check_options("image_processor", "hf", {"class_name": "SiglipImageProcessor"})
    assert validated.class_name == "SiglipImageProcessor"
    with violates("options-given") as info:
        check_options("image_processor", "hf", {"clas_name": "x"}, subprocess_check=False)
    assert "class_name" in str(info.value)  # did-you-mean from the registry


@pytest.mark.parametrize(
    "name, rule",
    [("no-pixels", "pixel-values"), ("double-rescale", "float-input"), ("noisy", "deterministic")],
)
def test_broken_image_processors_fail(broken, name, rule):
    with violates(rule) as info:
        check_image_processor(name)
    assert f"image_processor {name!r} (energon-plugin-broken)" in str(info.value)


def test_a_correct_third_party_image_processor_passes(broken):
    check_image_processor("tiny")


@pytest.mark.parametrize(
    ("name", "labels", "options"),
    [
        ("megatron-bridge", "next-token", None),
        ("hf", "aligned", None),
        ("megatron-lm", None, {"source_image_token_id": 3}),
    ],
)
def test_builtin_batch_formats_pass(name, labels, options):
    check_batch_format(name, labels=labels, options=options)


@pytest.mark.parametrize(
    ("name", "rule", "words"),
    [
        ("aligned-as-next", "format-labels", "target"),
        ("mutates-input", "format-input-unchanged", "loss_mask"),
        ("swallows-others", "format-passthrough", "dict"),
        ("key-error", "format-raises", "KeyError"),
    ],
)
def test_broken_batch_formats_fail(broken, name, rule, words):
    with violates(rule) as info:
        check_batch_format(name, labels="next-token")
    assert words in str(info.value) and "energon-plugin-broken" in str(info.value)


@pytest.fixture
def vqa_lines(tmp_path):
    """``vqa.jsonl``: three good image/question/answer lines and one without an answer."""
    from PIL import Image

    lines = []
    for i in range(3):
        Image.new("RGB", (20 + i, 12), (70 * i, 40, 90)).save(tmp_path / f"p{i}.png")
        lines.append({"image": f"p{i}.png", "question": f"Colour {i}?", "answer": f"Dark {i}."})
    lines.insert(1, {"image": "p0.png", "question": "No answer here?"})
    path = tmp_path / "vqa.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_correct_source_format_passes(broken, vqa_lines):
    result = check_source_format("vqa-lines", vqa_lines, rejects=1)
    assert result.written == {"train": 3} and result.rejected == {"malformed": 1}
    with violates("source-rejects"):  # the count the caller expects is checked too
        check_source_format("vqa-lines", vqa_lines, rejects=0)


def test_builtin_source_formats_pass(tmp_path):
    from tests._convert_sources import write_sharegpt_source

    source = write_sharegpt_source(tmp_path / "src")
    check_source_format("sharegpt", source.path, options=source.options, rejects=len(source.bad))


@pytest.mark.parametrize(
    ("name", "rule", "words"),
    [
        ("raises-on-bad", "source-rejects", "KeyError"),
        ("wrong-type", "source-record", "dict"),
    ],
)
def test_broken_source_formats_fail(broken, vqa_lines, name, rule, words):
    with violates(rule) as info:
        check_source_format(name, vqa_lines)
    assert words in str(info.value) and "energon-plugin-broken" in str(info.value)
    assert "vqa.jsonl:" in str(info.value)  # the record is named


def test_encode_sample_without_stateless_fails(broken):
    with violates("stateless") as info:
        check_task_encoder("not-stateless")
    assert "encode_sample" in str(info.value) and "batch" not in info.value.detail.split(" lack")[0]


def test_batch_override_without_stateless_fails(broken):
    with violates("stateless") as info:
        check_task_encoder("batch-not-stateless")
    assert info.value.detail.startswith("batch lack")


def test_pack_selected_samples_without_stateless_fails(broken):
    with violates("stateless") as info:
        check_task_encoder("pack-not-stateless")
    assert info.value.detail.startswith("pack_selected_samples lack")


def test_labels_that_disagree_with_the_loss_mask_fail(broken):
    with violates("labels-loss-mask"):
        check_task_encoder("bad-labels")


def test_an_encoder_keeping_state_fails_exact_resume(broken):
    with violates("resume-exact") as info:
        check_task_encoder("keeps-count")
    assert "pixel_values" in str(info.value)


# ------------------------------------------------------------------ the distributions in plugins/
def _installed(module):
    return importlib.util.find_spec(module) is not None


needs_fast_image = pytest.mark.skipif(
    not _installed("energon_plugin_fast_image"), reason="energon-plugin-fast-image is not installed"
)
needs_llava = pytest.mark.skipif(
    not _installed("energon_plugin_llava"), reason="energon-plugin-llava is not installed"
)
needs_qwen = pytest.mark.skipif(
    not _installed("energon_plugin_qwen_vl"), reason="energon-plugin-qwen-vl is not installed"
)


@needs_fast_image
@pytest.mark.parametrize("name", ["fast-clip", "fast-siglip"])
def test_fast_image_processors_conform(name):
    check_image_processor(name)


@needs_llava
def test_llava_conforms(build_context):
    check_image_processor("llava-clip")
    check_task_encoder(
        "llava",
        dataset_kind="llava",
        context=build_context(tokenizer_family="llava", image_processor=None, seq_length=1024),
    )


@needs_qwen
def test_qwen2_vl_conforms(build_context):
    proc = check_image_processor("qwen2-vl")
    check_task_encoder(
        "qwen2-vl",
        dataset_kind="chatml",
        context=build_context(tokenizer_family="qwen2", image_processor=proc, seq_length=1024),
    )


# ------------------------------------------------------------------ the invariant checker itself
@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 64), max_size=40), st.integers(1, 64), st.data())
def test_the_invariant_checker_accepts_good_plans_and_flags_each_break(lengths, capacity, data):
    from energon_plugins.encoding.packing.strategies import FirstFitDecreasing

    groups = FirstFitDecreasing().select(lengths, capacity)
    assert _check_groups(groups, lengths, capacity) is None
    fitting = [g for g in groups if any(lengths[i] <= capacity for i in g)]
    if fitting:
        dropped = data.draw(st.sampled_from(fitting))
        rule, _ = _check_groups([g for g in groups if g is not dropped], lengths, capacity)
        assert rule == "packing-complete"
        assert _check_groups(groups + [[dropped[0]]], lengths, capacity)[0] == "packing-unique"
    if len(groups) >= 2 and sum(lengths[i] for g in groups[:2] for i in g) > capacity:
        merged = [groups[0] + groups[1]] + groups[2:]
        assert _check_groups(merged, lengths, capacity)[0] == "packing-capacity"
