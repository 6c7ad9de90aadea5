"""A Megatron-Bridge run around our datamodule, built from Bridge's own pieces.

- :class:`EnergonPluginsDataset`: Bridge's dataset slot (its ``DatasetProvider`` contract),
  filled from an energon-plugins config file, as ``docs/loops/megatron-bridge.md`` shows users.
- :func:`bridge_config`: a real ``ConfigContainer`` (validated by Bridge), with that slot.
- :func:`data_iterators`: Bridge's data setup, as ``training/setup.py`` runs it:
  ``get_dataset_provider`` -> ``_bind_dataset_provider_context`` -> ``setup_data_iterators``.
- :class:`TinyVLM`: the smallest model that ``vlm_step.forward_step`` and ``evaluate`` drive (a
  real ``MegatronModule`` with a ``TransformerConfig``): embeddings plus the mean colour of the
  batch's images, a linear head, and per-token losses the way megatron-core's GPT returns them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from megatron.bridge.data.base import DatasetBuildContext, DatasetProvider
from megatron.bridge.data.loaders import setup_data_iterators
from megatron.bridge.data.utils import get_dataset_provider
from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training.config import (
    CheckpointConfig,
    ConfigContainer,
    LoggerConfig,
    OptimizerConfig,
    SchedulerConfig,
    TrainingConfig,
    ValidationConfig,
)
from megatron.bridge.training.setup import _bind_dataset_provider_context
from megatron.bridge.training.state import GlobalState
from megatron.bridge.training.tokenizers.config import TokenizerConfig
from megatron.core.enums import ModelType
from megatron.core.transformer.module import MegatronModule

from energon_plugins import EnergonMultiModalDataModule

SEQ = 128
MICRO_BATCH = 2
VOCAB = 2048  # the demo tokenizer has at most 2,000 ids


@dataclass(kw_only=True)
class EnergonPluginsDataset(DatasetProvider):
    """Bridge's dataset slot, filled from an energon-plugins config file."""

    config_file: str
    dataloader_type: str = "external"  # Bridge passes our loaders through as they are

    def build_datasets(self, context: DatasetBuildContext):
        """Our training loader and validation iterator, on Bridge's process groups."""
        datamodule = EnergonMultiModalDataModule.from_config(
            self.config_file, pg_collection=context.pg_collection
        )
        return datamodule.train_dataloader(), iter(datamodule.val_dataloader()), None


def bridge_config(config_file, *, eval_iters: int, train_iters: int = 20) -> ConfigContainer:
    """A validated ``ConfigContainer``: a tiny GPT config, our dataset slot, DP 1."""
    model = GPTModelProvider(
        num_layers=1, hidden_size=32, num_attention_heads=2, seq_length=SEQ, vocab_size=VOCAB
    )
    config = ConfigContainer(
        train=TrainingConfig(
            micro_batch_size=MICRO_BATCH, global_batch_size=MICRO_BATCH, train_iters=train_iters
        ),
        validation=ValidationConfig(eval_iters=eval_iters, eval_interval=train_iters),
        model=model,
        optimizer=OptimizerConfig(lr=1e-3),
        scheduler=SchedulerConfig(),
        dataset=EnergonPluginsDataset(config_file=str(config_file), num_workers=0),
        logger=LoggerConfig(),
        tokenizer=TokenizerConfig(),
        checkpoint=CheckpointConfig(),
    )
    config.validate()
    return config


def global_state(config: ConfigContainer) -> GlobalState:
    """Bridge's ``GlobalState`` holding ``config``."""
    state = GlobalState()
    state.cfg = config
    return state


def data_iterators(state: GlobalState, pg_collection) -> tuple[Any, Any, Any]:
    """Train, validation and test iterators, through Bridge's data setup."""
    provider = _bind_dataset_provider_context(
        get_dataset_provider(state.cfg.dataset), tokenizer=None, pg_collection=pg_collection
    )
    return setup_data_iterators(
        cfg=state.cfg,
        train_state=state.train_state,
        model_length=1,
        train_valid_test_datasets_provider=provider,
        dp_group=pg_collection.dp,
    )


class RecordingIterator:
    """Hands on another iterator's batches and keeps them (``batches``)."""

    def __init__(self, iterator) -> None:
        self.iterator = iterator
        self.batches: list[Any] = []

    def __next__(self) -> Any:
        batch = next(self.iterator)
        self.batches.append(batch)
        return batch

    def __iter__(self) -> RecordingIterator:
        return self


class TinyVLM(MegatronModule):
    """A one-stage language model with an image input, small enough for a CPU test.

    ``calls`` keeps the keyword arguments of every ``forward`` (what Bridge's ``forward_step``
    passed). The result is the per-token cross-entropy, shape ``(B, L)``, which Bridge's
    ``masked_next_token_loss`` multiplies by ``loss_mask``.
    """

    def __init__(self, config, pg_collection, *, seed: int = 0) -> None:
        super().__init__(config)
        self.model_type = ModelType.encoder_or_decoder
        self.pg_collection = pg_collection
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embedding = torch.nn.Embedding(config.vocab_size, config.hidden_size)
            self.image_projection = torch.nn.Linear(3, config.hidden_size)
            self.output_layer = torch.nn.Linear(config.hidden_size, config.vocab_size)
        self.calls: list[dict[str, Any]] = []
        if torch.cuda.is_available():
            self.cuda()

    def set_input_tensor(self, input_tensor) -> None:
        """Pipeline parallelism's hook: there is one stage, so nothing comes in."""

    def forward(
        self,
        input_ids,
        position_ids,
        attention_mask,
        labels,
        loss_mask=None,
        pixel_values=None,
        packed_seq_params=None,
    ):
        """Per-token losses of next-token prediction; -100 labels give 0."""
        self.calls.append(
            dict(
                input_ids=input_ids,
                position_ids=position_ids,
                attention_mask=attention_mask,
                labels=labels,
                loss_mask=loss_mask,
                pixel_values=pixel_values,
                packed_seq_params=packed_seq_params,
            )
        )
        hidden = self.embedding(input_ids)
        if pixel_values is not None:
            colour = pixel_values.float().mean(dim=(-2, -1)).mean(dim=0)
            hidden = hidden + self.image_projection(colour)
        logits = self.output_layer(hidden)
        return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")
