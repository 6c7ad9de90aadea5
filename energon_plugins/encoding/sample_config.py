"""How samples are turned into tokens: image token, ignore index, conversation template."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from energon_plugins.strict_types import Integer

NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class ConversationTemplate(BaseModel):
    """The chat format: roles, system prompt, stop string, and an optional Jinja chat template.

    With ``chat_template=None`` the tokenizer's own chat template is used; a tokenizer without
    one is an error. ``chat_template="plain"`` chooses a plain ``"{role}: {content}\\n"``
    rendering with these role names on purpose (after the tokenizer's bos token).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    chat_template: str | None = None
    system_role: NonEmpty = "system"
    user_role: NonEmpty = "user"
    assistant_role: NonEmpty = "assistant"
    system_prompt: str | None = None
    stop_string: str | None = None

    @model_validator(mode="after")
    def _roles_distinct(self) -> "ConversationTemplate":
        roles = [self.system_role, self.user_role, self.assistant_role]
        if len(set(roles)) != len(roles):
            raise ValueError(f"system_role, user_role and assistant_role must differ, got {roles}")
        return self


class MultiModalSampleConfig(BaseModel):
    """Settings shared by every multimodal task encoder.

    Attributes:
        image_token: the text placeholder for one image (``<image>``); it is expanded to as
            many tokens as the image processor yields embeddings.
        video_token: the text placeholder for one video (``<video>``), in conversations that
            hold videos.
        image_token_id: its id; ``None`` looks it up in the tokenizer.
        ignore_index: the label value the loss ignores (``-100``).
        conversation_template: roles, system prompt, stop string and chat template.
        image_following_text: where a sample has no image tag, put the image after the text
            (``True``) or before it (``False``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    image_token: NonEmpty = "<image>"
    video_token: NonEmpty = "<video>"
    image_token_id: Integer | None = Field(default=None, ge=0)
    ignore_index: Integer = -100
    conversation_template: ConversationTemplate = ConversationTemplate()
    image_following_text: bool = True

    @model_validator(mode="after")
    def _no_collisions(self) -> "MultiModalSampleConfig":
        if self.image_token.strip() != self.image_token or not self.image_token.strip():
            raise ValueError(f"image_token must not be blank or padded, got {self.image_token!r}")
        if self.video_token.strip() != self.video_token:
            raise ValueError(f"video_token must not be padded, got {self.video_token!r}")
        if self.video_token == self.image_token:
            raise ValueError(f"video_token and image_token must differ, both are {self.image_token!r}")
        if self.image_token_id is not None and self.image_token_id == self.ignore_index:
            raise ValueError(f"image_token_id ({self.image_token_id}) collides with ignore_index")
        return self
