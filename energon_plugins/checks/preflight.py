"""What ``validate`` opens once the config itself checks out: the components and the data.

:func:`~energon_plugins.config.validate.check_config` proves a config well-formed. A
well-formed config can still fail when the run starts: a tokenizer directory that does not
load or has no chat template, an image tag the tokenizer does not know, an ``image_tokens``
option the image processor disagrees with, a dataset the task encoder cannot read, a
``seq_length`` shorter than one image's tokens or than most samples. :func:`run_preflight`
opens what it can cheaply open (the tokenizer, the image processor, the packing strategy, the
task encoders, the dataset's metadata), says which image processor the encoder got and where
from, reads the first samples (bounded, :mod:`energon_plugins.checks.sample_read`) and reports
each problem as a :class:`ConfigIssue` naming the key, all at once; with ``deep=True`` it also
reads the first batches through the whole pipeline. Nothing starts a worker or touches an
accelerator.
"""

import contextlib
import dataclasses
import io
import re
from collections.abc import Callable, Iterator
from typing import Any

from energon_plugins.checks.sample_read import (
    SAMPLE_LIMIT,
    SEQ_LENGTH_SKIPS,
    TIME_LIMIT_S,
    read_samples,
    sample_findings,
    skips_unlogged,
)
from energon_plugins.config.model import DataModuleConfig
from energon_plugins.config.settings import ConfigIssue
from energon_plugins.errors import EnergonPluginsError

_KEYED = re.compile(r"^([a-z_]+(?:\.[A-Za-z_][\w]*)*):\s+(.*)$", re.S)


def _issue(path: str, exc: BaseException, config: DataModuleConfig) -> ConfigIssue:
    """An issue at ``path``, or at the key ``exc``'s message starts with when that is a key of
    the config (``sample_config.image_token: ...`` names itself)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    match = _KEYED.match(text)
    if match and match.group(1).split(".")[0] in type(config).model_fields:
        return ConfigIssue(match.group(1), match.group(2))
    if not isinstance(exc, EnergonPluginsError):
        text = f"{type(exc).__name__}: {text}"
    return ConfigIssue(path, text)


@dataclasses.dataclass
class PreflightReport:
    """What :func:`run_preflight` found.

    Attributes:
        issues: the errors, each naming its config key.
        warnings: what works but is probably not meant (answers cut at ``seq_length``,
            samples the encoder skips), each naming its key.
        notes: what was resolved and read, one line each (``image processor: hf from DIR
            (CLIPImageProcessor, 336x336)``, ``read 64 samples in 1.2 s ...``).
    """

    issues: list[ConfigIssue] = dataclasses.field(default_factory=list)
    warnings: list[ConfigIssue] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)


def preflight_issues(config: DataModuleConfig, *, deep: bool = False, samples: int = 4) -> list[ConfigIssue]:
    """The errors of :func:`run_preflight` (reading samples only with ``deep``)."""
    return run_preflight(config, read=deep, deep=deep, samples=samples).issues


def run_preflight(
    config: DataModuleConfig,
    *,
    read: bool = True,
    deep: bool = False,
    samples: int = 4,
    progress: Callable[[str], None] | None = None,
) -> PreflightReport:
    """Open ``config``'s components and data; report every problem, and what was resolved.

    Args:
        config: a config that passed :func:`~energon_plugins.config.validate.check_config`.
        read: also encode the first training samples one by one (at most
            :data:`~energon_plugins.checks.sample_read.SAMPLE_LIMIT` or
            :data:`~energon_plugins.checks.sample_read.TIME_LIMIT_S` seconds) and check them
            against ``seq_length``.
        deep: also read the first ``samples`` training batches through Energon's whole
            pipeline (decoding, cooking, the task encoder, batching, the batch format).
        samples: how many batches ``deep`` reads.
        progress: called with a short text before each step (for a status line).
    """
    step = progress or (lambda text: None)
    report = PreflightReport()
    step("importing transformers and loading the tokenizer...")
    from energon_plugins.host.api import create
    from energon_plugins.loading.build import (
        base_context,
        build_image_processor,
        datamodule_arguments,
        load_tokenizer,
    )

    remote = remote_code_tokenizer(config.tokenizer.path)
    if remote is not None:
        report.issues.append(ConfigIssue("tokenizer.path", remote))
        return report  # transformers would ask on the terminal whether to run it
    try:
        tokenizer = load_tokenizer(config.tokenizer.path)
    except EnergonPluginsError as exc:
        report.issues.append(_issue("tokenizer.path", exc, config))
        return report  # nothing else can be built without it
    step("importing torch and Energon, building the components and task encoders...")
    context = base_context(config, tokenizer=tokenizer)
    issues = report.issues
    image_processor = packing = None
    try:
        image_processor = build_image_processor(config, context)
    except Exception as exc:  # noqa: BLE001 - every failure is reported with its key
        issues.append(_issue("image_processor", exc, config))
    if config.packing is not None:
        try:
            packing = create(
                "packing_strategy",
                config.packing.name,
                config.packing.options,
                context.replace(image_processor=image_processor),
            )
        except Exception as exc:  # noqa: BLE001
            issues.append(_issue("packing", exc, config))
    if issues:
        return report

    from energon_plugins.loading.datamodule import EnergonMultiModalDataModule

    try:
        datamodule = EnergonMultiModalDataModule(
            tokenizer=tokenizer,
            image_processor=image_processor,
            packing=packing,
            **datamodule_arguments(config),
        )
    except Exception as exc:  # noqa: BLE001
        issues.append(_issue("path", exc, config))
        return report
    for key, split in (("task_encoder", "train"), ("validation_task_encoder", "val")):
        issues += _encoder_issues(datamodule, key, split, config)
    try:
        encoder = datamodule.task_encoder
    except Exception:  # noqa: BLE001 - it did not build: _encoder_issues reported why
        encoder = None
    if encoder is not None:
        report.notes.append(processor_note(config, datamodule))
    report.issues = list(dict.fromkeys(issues))  # the val encoder often repeats the train one's
    if report.issues or not (read or deep):
        return report
    report.issues += _field_map_issues(datamodule, config)
    if report.issues:
        return report  # every sample would fail: reading them only repeats it 64 times
    step(f"reading up to {SAMPLE_LIMIT} training samples (at most {TIME_LIMIT_S:g} s)...")
    _read(datamodule, config, report)
    if deep and not report.issues:
        step(f"reading {samples} training batch(es) through the whole pipeline...")
        report.issues += _sample_issues(datamodule, samples, config)
    return report


def remote_code_tokenizer(path: str) -> str | None:
    """Why the tokenizer directory ``path`` cannot load without running code it ships (its
    ``tokenizer_config.json`` maps ``AutoTokenizer`` through ``auto_map`` to a class transformers
    does not have), or ``None``. Checked before transformers loads it: transformers would ask on
    the terminal whether to run that code (15 s), and nothing here ever runs it."""
    import json
    from pathlib import Path

    try:
        data = json.loads((Path(path) / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no such file or not JSON: loading the tokenizer says so
    auto_map = data.get("auto_map") if isinstance(data, dict) else None
    ref = auto_map.get("AutoTokenizer") if isinstance(auto_map, dict) else auto_map
    refs = [r for r in (ref if isinstance(ref, (list, tuple)) else [ref]) if isinstance(r, str)]
    if not refs:
        return None
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    name = data.get("tokenizer_class")
    if isinstance(name, str) and tokenizer_class_from_name(name) is not None:
        return None  # transformers has the class: the shipped code is not needed
    return (
        f"the tokenizer in {path!r} is code shipped in the directory ({', '.join(refs)}, named by "
        "auto_map in its tokenizer_config.json), which is never run; use a tokenizer directory "
        "that transformers loads with its own classes"
    )


def _field_map_issues(datamodule: Any, config: DataModuleConfig) -> list[ConfigIssue]:
    """:func:`~energon_plugins.checks.field_map.field_map_problems` of the training split, at ``path``."""
    from energon_plugins.checks.field_map import field_map_problems
    from energon_plugins.config.dataset_check import is_remote

    if is_remote(datamodule.path):
        return []
    try:
        return [ConfigIssue("path", problem) for problem in field_map_problems(datamodule.path, "train")]
    except EnergonPluginsError as exc:
        return [_issue("path", exc, config)]


@contextlib.contextmanager
def energon_prints_held() -> Iterator[None]:
    """Hold what Energon ``print``s while samples are read in this process (a line per failed
    sample, ``Except ... in MapDataset...``): the failures are counted and reported instead."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def processor_note(config: DataModuleConfig, datamodule: Any) -> str:
    """``image processor: ORIGIN (CLASS, SIZE)``: the training encoder's image processor and
    where it came from (the config's selection, the model directory, the encoder's own)."""
    from energon_plugins.loading.build import names_image_processor
    from energon_plugins.loading.model_processor import (
        describe_image_processor,
        why_no_model_processor,
    )

    encoder = datamodule.task_encoder
    processor = getattr(encoder, "image_processor", None)
    if processor is None:
        return "image processor: none (the task encoder processes no images with one)"
    if processor is datamodule.image_processor:
        source = datamodule.image_processor_source
        why = ""
        if source and source != "given":
            origin = source
        else:
            origin = config.image_processor.name
            if not names_image_processor(config):
                why = f"; the default, as {why_no_model_processor(datamodule.tokenizer)}"
    else:
        origin, why = f"built by the task encoder {type(encoder).__name__}", ""
    return f"image processor: {origin} ({describe_image_processor(processor)}){why}"


def _read(datamodule: Any, config: DataModuleConfig, report: PreflightReport) -> None:
    """:func:`~energon_plugins.checks.sample_read.read_samples`, its findings into ``report``."""
    from energon_plugins._quiet import quietly

    try:
        with quietly(), energon_prints_held():
            read = read_samples(datamodule)
    except Exception as exc:  # noqa: BLE001 - the sample's failure, named by the encoder
        text = " ".join(str(exc).split())
        key = "seq_length" if "> seq_length" in text else "path"
        report.issues.append(_issue(key, exc, config))
        return
    truncation = getattr(getattr(datamodule.task_encoder, "options", None), "truncation", None)
    errors, warnings, note = sample_findings(read, config.seq_length, truncation)
    report.issues += errors
    report.warnings += warnings
    report.notes.append(note)


def _encoder_issues(datamodule: Any, key: str, split: str, config: DataModuleConfig) -> list[ConfigIssue]:
    """Build the encoder of ``split``; check it against the dataset and ``seq_length``."""
    from energon_plugins.config.dataset_check import dataset_splits, is_checked
    from energon_plugins.config.dataset_fit import fit_problems

    try:
        encoder = datamodule.task_encoder if split == "train" else datamodule.validation_task_encoder
    except Exception as exc:  # noqa: BLE001
        return [_issue(key, exc, config)]
    # The validation encoder repeats the training encoder's options unless it has its own.
    own_options = split == "train" or config.validation_task_encoder is not None
    issues = image_token_issues(encoder, key) if own_options else []
    preflight = getattr(encoder, "preflight_problems", None)
    if callable(preflight):
        try:
            issues += [_issue(key, ValueError(problem), config) for problem in preflight()]
        except Exception as exc:  # noqa: BLE001
            issues.append(_issue(key, exc, config))
    if not is_checked(datamodule.path):
        return issues  # a URL Energon opens itself: nothing is read here
    try:
        if split == "val" and split not in dataset_splits(datamodule.path)[1]:
            return issues
    except EnergonPluginsError as exc:
        return [*issues, _issue("path", exc, config)]
    try:
        issues += [ConfigIssue("path", p) for p in fit_problems(encoder, datamodule.path, split)]
    except EnergonPluginsError as exc:
        issues.append(_issue("path", exc, config))
    return issues


#: The image (width, height) :func:`image_token_issues` sends through the image processor.
PROBE_IMAGE_SIZE = (224, 224)


def image_token_issues(encoder: Any, key: str) -> list[ConfigIssue]:
    """A fixed ``image_tokens`` option that disagrees with the image processor's output.

    For encoders with the ``image_tokens`` and ``patch_size`` options (the built-in
    ``multimodal``, ``llava``): a fixed-size processor's output of
    ``(H / patch) * (W / patch)`` embeddings per image must equal ``image_tokens``, or the
    model gets a different number of image embeddings than image tokens. Processors whose
    output size varies (patch grids) are not checked.
    """
    from energon_plugins.loading.model_processor import describe_image_processor

    options = getattr(encoder, "options", None)
    fixed = getattr(options, "image_tokens", None)
    patch = getattr(options, "patch_size", None)
    processor = getattr(encoder, "image_processor", None)
    if not isinstance(fixed, int) or not isinstance(patch, int) or processor is None:
        return []
    width, height = PROBE_IMAGE_SIZE
    size_for = getattr(processor, "output_size_for", None)
    size = size_for(height, width) if callable(size_for) else None
    if size is None:
        import torch

        out = processor(images=[torch.full((3, height, width), 128, dtype=torch.uint8)], return_tensors="pt")
        get = out.get if hasattr(out, "get") else (lambda name: None)
        pixels = get("pixel_values")
        if get("image_grid_thw") is not None or pixels is None or pixels.dim() != 4:
            return []  # no fixed output size to compare with
        size = (int(pixels.shape[-2]), int(pixels.shape[-1]))
    derived = (size[0] // patch) * (size[1] // patch)
    if derived == fixed:
        return []
    return [
        ConfigIssue(
            f"{key}.options.image_tokens",
            f"{fixed} image tokens per image, but the image_processor "
            f"({describe_image_processor(processor)}) makes {size[0]}x{size[1]} pixels, which with "
            f"{key}.options.patch_size {patch} are {derived} image embeddings; set image_tokens "
            f"to {derived} (or leave it out: it is derived from the image processor), or change "
            "patch_size or image_processor",
        )
    ]


def _sample_issues(datamodule: Any, count: int, config: DataModuleConfig) -> list[ConfigIssue]:
    """Encode the first ``count`` training samples in this process; report what fails."""
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    from energon_plugins._quiet import quietly
    from energon_plugins.loading.errors_policy import SkipTracker
    from energon_plugins.loading.formatting import BatchFormatDataset, build_batch_format

    encoder = datamodule.task_encoder
    before = dict(getattr(encoder, "error_counts", dict)())
    tracker = SkipTracker(getattr(encoder, "on_error", "skip"))
    try:
        with quietly(), energon_prints_held(), skips_unlogged():
            dataset = get_val_dataset(
                datamodule.path,
                split_part="train",
                batch_size=1,
                task_encoder=encoder,
                worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0, global_error_handler=tracker),
            )
            if datamodule.batch_format is not None:
                fmt, label = build_batch_format(datamodule.batch_format, datamodule.build_context())
                assert fmt is not None  # a format is selected
                dataset = BatchFormatDataset(dataset, fmt, label=label, encoder=encoder)
            loader = get_loader(dataset)
            loader.pin_memory = False
            read = 0
            for _ in loader:
                read += 1
                if read >= count:
                    break
    except Exception as exc:  # noqa: BLE001 - the sample's failure, named by the encoder
        return [_issue("path", exc, config)]
    after = dict(getattr(encoder, "error_counts", dict)())
    skipped = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
    for reason, count in tracker.counts.items():
        skipped[reason] = skipped.get(reason, 0) + count
    issues = []
    for key, reasons in (
        ("seq_length", {k: v for k, v in skipped.items() if k in SEQ_LENGTH_SKIPS}),
        ("path", {k: v for k, v in skipped.items() if k not in SEQ_LENGTH_SKIPS}),
    ):
        if reasons:
            listed = ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items()))
            issues.append(
                ConfigIssue(
                    key,
                    f"reading the first {read} training batch(es), the task encoder skipped "
                    f"{sum(reasons.values())} sample(s) ({listed}); see `energon-plugins preview` "
                    "for the samples and their lengths",
                )
            )
    if issues:
        return issues
    if read == 0:
        return [ConfigIssue("path", "the training split yielded no sample")]
    return []
