"""Options of ``csv-vqa`` (pydantic only)."""

from pydantic import BaseModel, ConfigDict, Field


class CsvVqaOptions(BaseModel):
    """Options of the ``csv-vqa`` source format."""

    model_config = ConfigDict(extra="forbid")

    image_folder: str | None = Field(
        default=None, description="The folder image paths are relative to; default: the CSV's folder."
    )
    image_column: str = Field(default="image", description="The column holding the image path.")
    question_column: str = Field(default="question", description="The column holding the question.")
    answer_column: str = Field(default="answer", description="The column holding the answer.")
    delimiter: str = Field(default=",", min_length=1, max_length=1, description="The field separator.")
