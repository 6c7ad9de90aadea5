"""Options of the built-in batch formats (import-light: pydantic only)."""

from pydantic import BaseModel, ConfigDict, Field

#: The image token index of megatron-core's ``LLaVAModel`` when none is passed
#: (``DEFAULT_IMAGE_TOKEN_INDEX``).
LLAVA_DEFAULT_IMAGE_TOKEN_INDEX = -200


class MegatronLMOptions(BaseModel):
    """Options of the ``megatron-lm`` format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image_token_id: int | None = Field(
        default=None,
        description=(
            "The token written once per image, which LLaVAModel expands into the image's "
            "embeddings: the model's image_token_index. examples/multimodal builds LLaVAModel "
            "with the tokenizer's id of '<image>', which is what the built-in encoders emit with "
            "the default sample config, so null (keep the id the task encoder emitted) fits it; "
            f"a LLaVAModel built with its default image_token_index needs "
            f"{LLAVA_DEFAULT_IMAGE_TOKEN_INDEX}."
        ),
    )
    source_image_token_id: int | None = Field(
        default=None,
        description=(
            "The image token the task encoder repeated once per image embedding, whose runs "
            "are collapsed; null: the sample config's image_token_id, else the tokenizer's id "
            "of sample_config.image_token."
        ),
    )
