"""What ``validate`` opens once the config itself checks out: the components and the data.

:func:`~energon_plugins.config.validate.check_config` proves a config well-formed. A
well-formed config can still fail when the run starts: a tokenizer directory that does not
load, an image tag the tokenizer does not know, a dataset the task encoder cannot read, a
``seq_length`` shorter than one image's tokens. :func:`preflight_issues` opens what it can
cheaply open (the tokenizer, the image processor, the packing strategy, the task encoders, the
dataset's metadata) and reports each problem as a :class:`ConfigIssue` naming the key, all at
once; with ``deep=True`` it also reads the first samples of the training split through the
real pipeline. Nothing starts a worker or touches an accelerator.
"""

import re
from typing import Any

from energon_plugins.config.model import DataModuleConfig
from energon_plugins.errors import EnergonPluginsError
from energon_plugins.loading.settings import ConfigIssue

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


def preflight_issues(
    config: DataModuleConfig, *, deep: bool = False, samples: int = 4
) -> list[ConfigIssue]:
    """Open ``config``'s components and data; one issue per problem found.

    Args:
        config: a config that passed :func:`~energon_plugins.config.validate.check_config`.
        deep: also encode the first ``samples`` training samples through Energon's pipeline
            (decoding, cooking, the task encoder, batching, the batch format).
        samples: how many samples ``deep`` reads.
    """
    from energon_plugins.config.build import base_context, datamodule_arguments, load_tokenizer
    from energon_plugins.host.api import create

    try:
        tokenizer = load_tokenizer(config.tokenizer.path)
    except EnergonPluginsError as exc:
        return [_issue("tokenizer.path", exc, config)]  # nothing else can be built without it
    context = base_context(config, tokenizer=tokenizer)
    issues: list[ConfigIssue] = []
    image_processor = packing = None
    try:
        image_processor = create(
            "image_processor", config.image_processor.name, config.image_processor.options,
            context,
        )
    except Exception as exc:  # noqa: BLE001 - every failure is reported with its key
        issues.append(_issue("image_processor", exc, config))
    if config.packing is not None:
        try:
            packing = create(
                "packing_strategy", config.packing.name, config.packing.options,
                context.replace(image_processor=image_processor),
            )
        except Exception as exc:  # noqa: BLE001
            issues.append(_issue("packing", exc, config))
    if issues:
        return issues

    from energon_plugins.loading.datamodule import EnergonMultiModalDataModule

    try:
        datamodule = EnergonMultiModalDataModule(
            tokenizer=tokenizer, image_processor=image_processor, packing=packing,
            **datamodule_arguments(config),
        )
    except Exception as exc:  # noqa: BLE001
        return [_issue("path", exc, config)]
    for key, split in (("task_encoder", "train"), ("validation_task_encoder", "val")):
        issues += _encoder_issues(datamodule, key, split, config)
    if not issues and deep:
        issues += _sample_issues(datamodule, samples, config)
    return list(dict.fromkeys(issues))  # the val encoder often repeats the train encoder's


def _encoder_issues(datamodule: Any, key: str, split: str, config: DataModuleConfig) -> list[ConfigIssue]:
    """Build the encoder of ``split``; check it against the dataset and ``seq_length``."""
    from energon_plugins.loading.dataset_check import dataset_splits, is_remote
    from energon_plugins.loading.dataset_fit import fit_problems

    try:
        encoder = datamodule.task_encoder if split == "train" else datamodule.validation_task_encoder
    except Exception as exc:  # noqa: BLE001
        return [_issue(key, exc, config)]
    issues = []
    preflight = getattr(encoder, "preflight_problems", None)
    if callable(preflight):
        try:
            issues += [_issue(key, ValueError(problem), config) for problem in preflight()]
        except Exception as exc:  # noqa: BLE001
            issues.append(_issue(key, exc, config))
    if is_remote(datamodule.path):
        return issues
    if split == "val" and split not in dataset_splits(datamodule.path)[1]:
        return issues
    try:
        issues += [ConfigIssue("path", p) for p in fit_problems(encoder, datamodule.path, split)]
    except EnergonPluginsError as exc:
        issues.append(_issue("path", exc, config))
    return issues


def _sample_issues(datamodule: Any, count: int, config: DataModuleConfig) -> list[ConfigIssue]:
    """Encode the first ``count`` training samples in this process; report what fails."""
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    from energon_plugins._quiet import quietly
    from energon_plugins.loading.formatting import BatchFormatDataset, build_batch_format

    encoder = datamodule.task_encoder
    before = dict(getattr(encoder, "error_counts", dict)())
    try:
        with quietly():
            dataset = get_val_dataset(
                datamodule.path, split_part="train", batch_size=1, task_encoder=encoder,
                worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            )
            if datamodule.batch_format is not None:
                fmt, label = build_batch_format(datamodule.batch_format, datamodule.build_context())
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
    if skipped:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(skipped.items()))
        return [ConfigIssue(
            "path",
            f"reading the first {read} training batch(es), the task encoder skipped "
            f"{sum(skipped.values())} sample(s) ({reasons}); see `energon-plugins preview` "
            "for the samples and their lengths",
        )]
    if read == 0:
        return [ConfigIssue("path", "the training split yielded no sample")]
    return []
