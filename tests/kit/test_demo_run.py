"""The demo run (what ``make demo`` prints), on a small generated dataset."""

import io

from rich.console import Console

from energon_plugins.demo.run import collapse_sample, run_demo


def test_run_demo_prints_and_returns_its_figures(tmp_path, capsys):
    out = io.StringIO()
    result = run_demo(
        tmp_path / "cache", samples=24, micro_batch_size=4, console=Console(file=out, width=120)
    )
    assert result["samples"] == 24 and result["batches"] == 6
    assert result["samples_per_s"] > 0
    assert result["batch_shapes"]["input_ids"] == [4, 320]
    assert result["batch_shapes"]["pixel_values"] == [4, 3, 224, 224]
    # what the training loop reads: the default megatron-bridge batch, not the encoder's fields
    assert "'megatron-bridge'" in result["batch_format"]
    assert result["loop_batch"]["tokens"] == "(4, 320) torch.int64"
    assert result["loop_batch"]["visual_inputs.pixel_values"] == "(4, 3, 224, 224) torch.float32"
    assert "num_images" not in result["loop_batch"]
    assert result["image_tokens"] == 256 and "<image x256>" in result["decoded_sample"]
    assert 0 < result["label_tokens"] < result["sequence_tokens"]
    text = out.getvalue()
    for words in ("samples/s", "<image x256>", "visual_inputs.pixel_values", "masked with"):
        assert words in text
    # a second run reuses the data on disk
    again = run_demo(tmp_path / "cache", samples=4, micro_batch_size=4)  # no console: silent
    assert again["dataset"] == result["dataset"]
    assert capsys.readouterr().out == ""


class _Chars:
    """A stand-in decoder: token i decodes to chr(i)."""

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_collapse_sample_groups_images_and_labels():
    ids = [ord("a"), 9, 9, 9, ord("b"), ord("c"), ord("d")]
    labels = [-100, -100, -100, -100, -100, ord("c"), ord("d")]
    pieces = collapse_sample(_Chars(), ids, labels, image_token_id=9, ignore_index=-100)
    assert pieces == [("a", False), ("<image x3>", False), ("b", False), ("cd", True)]
