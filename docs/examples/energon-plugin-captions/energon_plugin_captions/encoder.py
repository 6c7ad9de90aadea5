"""The ``captions`` task encoder (imports torch and Energon: only loaded when built)."""

import torch
from megatron.energon import CaptioningSample

from energon_plugin_captions.options import CaptionOptions
from energon_plugins import BuildContext, EncodedSample, PluginTaskEncoder


class CaptionEncoder(PluginTaskEncoder[CaptioningSample]):
    """``[image tokens] prompt caption<eos>``; labels only on the caption and the eos."""

    def __init__(self, options: CaptionOptions, context: BuildContext) -> None:
        super().__init__(context, on_error=options.on_error)
        self.options = options
        token_id = self.sample_config.image_token_id
        if token_id is None:  # look the image token up in the tokenizer
            token_id = self.tokenizer.convert_tokens_to_ids(self.sample_config.image_token)
        self.image_token_id = token_id

    def encode_sample(self, sample: CaptioningSample) -> EncodedSample:
        """Tokenize one sample. A pure function of the sample: the base marks it stateless."""
        pixels = self.image_processor(images=[sample.image], return_tensors="pt")["pixel_values"]
        image = [self.image_token_id] * self.options.image_tokens
        prompt = self.tokenizer(self.options.prompt, add_special_tokens=False)["input_ids"]
        caption = self.tokenizer(sample.caption, add_special_tokens=False)["input_ids"]
        if self.tokenizer.eos_token_id is not None:
            caption = caption + [self.tokenizer.eos_token_id]
        ids = (image + prompt + caption)[: self.seq_length]
        input_ids = torch.tensor(ids, dtype=torch.long)
        labels = input_ids.clone()
        labels[: min(len(image) + len(prompt), len(ids))] = self.ignore_index
        return EncodedSample.derive_from(
            sample,
            input_ids=input_ids,
            labels=labels,
            loss_mask=(labels != self.ignore_index).float(),
            pixel_values=pixels,
            num_images=1,
            seq_lengths=[len(ids)],
            truncated=len(ids) < len(image) + len(prompt) + len(caption),
        )


def build_caption_encoder(options: CaptionOptions, context: BuildContext) -> CaptionEncoder:
    """Factory: ``factory(options, context) -> task encoder``."""
    return CaptionEncoder(options, context)
