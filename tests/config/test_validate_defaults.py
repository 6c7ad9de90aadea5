"""Defaults that tell the truth (issue 25): the model directory's image processor, the
chat-template error, and ``validate``'s default sample read against ``seq_length``.

Everything is real: Energon datasets written by the demo generator, tokenizers saved to disk,
a model directory holding a 336 px CLIP ``preprocessor_config.json`` written by transformers'
own ``save_pretrained``, the CLI through click's runner and, for the status line, a real
process on a pseudo-terminal.
"""

import json
import os
import pathlib
import pty
import select
import subprocess
import sys
import time

import pytest
import torch
import yaml
from click.testing import CliRunner
from megatron.energon import VQASample

import energon_plugins
from energon_plugins import build_datamodule
from energon_plugins.cli import cli
from energon_plugins.errors import ConfigError

SCRIPT = pathlib.Path(sys.executable).with_name("energon-plugins")


@pytest.fixture(scope="module")
def site(tmp_path_factory, vqa_dataset, tokenizer):
    """``model/`` (tokenizer + 336 px CLIP processor), ``tokenizer/`` (the tokenizer alone),
    ``no-template/`` (the tokenizer without its chat template), ``remote/`` (a processor
    config that names code in the directory)."""
    import transformers

    root = tmp_path_factory.mktemp("validate-defaults")
    tokenizer.save_pretrained(root / "model")
    transformers.CLIPImageProcessor(
        size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}
    ).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "tokenizer")
    plain = root / "no-template"
    tokenizer.save_pretrained(plain)
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    settings = json.loads((plain / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(settings))
    tokenizer.save_pretrained(root / "remote")
    processor = json.loads((root / "model" / "preprocessor_config.json").read_text())
    processor["auto_map"] = {"AutoImageProcessor": "processing_custom.CustomImageProcessor"}
    (root / "remote" / "preprocessor_config.json").write_text(json.dumps(processor))
    (root / "dataset").symlink_to(vqa_dataset.path)
    return root


def write_config(site: pathlib.Path, name: str, **values) -> pathlib.Path:
    """A config in ``site`` on the VQA dataset (train split: 45 samples, ~275 tokens at 224 px)."""
    config = {"path": "dataset", "tokenizer": {"path": "model"}, "seq_length": 1024, "num_workers": 0}
    config.update(values)
    path = site / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def validate(config: pathlib.Path, *args: str):
    return CliRunner().invoke(cli, ["validate", str(config), *args], catch_exceptions=False)


# -- the image processor of the model directory ----------------------------------------------------


def test_a_config_without_image_processor_takes_the_model_directorys(site):
    dm = build_datamodule(write_config(site, "model-processor"))
    assert dm.image_processor_source == f"hf from {(site / 'model').resolve()}"
    encoder = dm.task_encoder
    assert encoder.image_processor is dm.image_processor
    assert encoder.image_processor.crop_size.height == 336
    processed, _ = encoder.process_images([torch.zeros((3, 40, 60))])
    assert encoder.image_token_counts(processed, 1) == [576]  # (336 / 14) ** 2


def test_a_named_image_processor_wins_and_a_plain_tokenizer_keeps_the_default(site):
    named = build_datamodule(write_config(site, "named", image_processor={"name": "hf"}))
    assert named.image_processor_source == "given"
    assert named.image_processor.crop_size.height == 224
    default = build_datamodule(write_config(site, "plain", tokenizer={"path": "tokenizer"}))
    assert default.image_processor.crop_size.height == 224


def test_the_constructor_takes_the_model_directorys_processor_too(site, vqa_dataset):
    from transformers import AutoTokenizer

    model_tokenizer = AutoTokenizer.from_pretrained(str(site / "model"), local_files_only=True)
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(vqa_dataset.path), model_tokenizer, seq_length=1024, num_workers=0
    )
    assert dm.image_processor.crop_size.height == 336
    assert dm.task_encoder.image_processor is dm.image_processor
    # Code shipped in a model directory is never run: that directory gives no processor.
    remote = AutoTokenizer.from_pretrained(str(site / "remote"), local_files_only=True)
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(vqa_dataset.path), remote, seq_length=1024, num_workers=0
    )
    assert dm.image_processor is None and dm.image_processor_source is None
    with pytest.raises(ConfigError, match="needs an image processor"):
        dm.task_encoder  # noqa: B018 - building it is the test


def test_validate_prints_the_resolved_processor(site):
    result = validate(write_config(site, "prints"))
    assert result.exit_code == 0, result.output
    model = (site / "model").resolve()
    assert f"image processor: hf from {model} (CLIPImageProcessor, 336x336)" in result.output
    plain = validate(write_config(site, "prints-default", tokenizer={"path": "tokenizer"}))
    assert plain.exit_code == 0, plain.output
    assert (
        "image processor: energon-plugins:hf (CLIPImageProcessor, 224x224); the default, "
        "as tokenizer.path holds no preprocessor_config.json" in plain.output
    )
    remote = validate(write_config(site, "prints-remote", tokenizer={"path": "remote"}))
    assert remote.exit_code == 0, remote.output
    assert (
        "(CLIPImageProcessor, 224x224); the default, as the preprocessor_config.json of "
        "tokenizer.path names code shipped in the directory (auto_map)" in remote.output
    )


def test_image_tokens_disagreeing_with_the_processor_is_an_error(site):
    config = write_config(site, "mismatch", task_encoder={"options": {"image_tokens": 256}})
    result = validate(config)
    assert result.exit_code == 1, result.output
    line = next(
        line
        for line in result.output.splitlines()
        if line.strip().startswith("task_encoder.options.image_tokens:")
    )
    assert "256 image tokens" in line and "image_processor" in line and "576" in line
    assert "validation_task_encoder" not in result.output  # said once, where it is set
    # The same count with a matching patch size (2 x 2 patches of 168 px) is fine.
    fixed = write_config(
        site, "mismatch-fixed", task_encoder={"options": {"image_tokens": 4, "patch_size": 168}}
    )
    assert validate(fixed).exit_code == 0


# -- the chat template ----------------------------------------------------------------------------


def test_a_tokenizer_without_chat_template_is_an_error_naming_its_path(site):
    result = validate(write_config(site, "no-template", tokenizer={"path": "no-template"}))
    assert result.exit_code == 1, result.output
    assert "tokenizer.path: the tokenizer loaded from" in result.output
    assert str((site / "no-template").resolve()) in result.output
    assert "chat_template: plain" in result.output and "Traceback" not in result.output


def test_the_plain_rendering_chosen_on_purpose_starts_with_bos(site):
    opt_in = {"conversation_template": {"chat_template": "plain"}}
    config = write_config(site, "plain-opt-in", tokenizer={"path": "no-template"}, sample_config=opt_in)
    result = validate(config)
    assert result.exit_code == 0, result.output
    dm = build_datamodule(config)
    sample = VQASample(
        __key__="k",
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        image=torch.full((3, 32, 32), 0.5),
        context="What is it?",
        answers=["A red circle."],
    )
    tokenizer = dm.tokenizer
    text = tokenizer.decode(dm.task_encoder.encode_sample(sample).input_ids)
    image = "<image>" * 256  # the tag (after the text), expanded to 224 px's tokens
    assert text == (
        f"{tokenizer.bos_token}user: What is it?\n{image}\nassistant: A red circle.{tokenizer.eos_token}\n"
    ), text


# -- the default sample read ----------------------------------------------------------------------


def test_validate_reads_samples_and_warns_when_answers_are_cut(site):
    # 224 px: 256 image tokens; the samples are 274-275 tokens, so 273 cuts their last
    # token or two (the answer keeps a label).
    config = write_config(site, "cut", tokenizer={"path": "tokenizer"}, seq_length=273)
    result = validate(config)
    assert result.exit_code == 0, result.output
    assert "samples read" in result.output
    read = next(line for line in result.output.splitlines() if line.strip().startswith("read "))
    seen = int(read.split()[1])
    assert 0 < seen <= 64 and " s (up to " in read
    warning = next(line for line in result.output.splitlines() if line.startswith("warning: seq_length:"))
    assert f"of {seen} samples" in warning and "longer than 273 tokens" in warning
    assert "their answers are cut" in warning


def test_validate_reports_skipped_samples_under_seq_length(site):
    config = write_config(site, "skip", tokenizer={"path": "tokenizer"}, seq_length=270)
    result = validate(config)
    assert result.exit_code == 1, result.output
    line = next(line for line in result.output.splitlines() if line.strip().startswith("seq_length:"))
    assert "longer than 270 tokens and are skipped (truncated_no_labels:" in line
    data = json.loads(validate(config, "--json").output)
    assert data["valid"] is False and data["errors"][0]["path"] == "seq_length"
    assert any(note.startswith("read ") for note in data["notes"])


def test_quick_reads_nothing(site):
    config = write_config(
        site,
        "quick",
        tokenizer={"path": "tokenizer"},
        seq_length=270,
        task_encoder={"options": {"truncation": "drop"}},
    )
    result = validate(config, "--quick")
    assert result.exit_code == 0, result.output
    assert "config only" in result.output and "read " not in result.output


def test_the_read_is_bounded_by_its_sample_limit(site):
    from energon_plugins.checks.sample_read import read_samples, sample_findings

    dm = build_datamodule(write_config(site, "bounded", tokenizer={"path": "tokenizer"}))
    read = read_samples(dm, limit=5, seconds=60)
    assert read.seen == 5 and read.stopped == "the 5-sample limit"
    errors, warnings, note = sample_findings(read, dm.seq_length)
    assert errors == [] and warnings == [] and note.startswith("read 5 samples in ")
    # Every sample skipped: the encoder gives up after the limit, and the counts say why.
    dm = build_datamodule(
        write_config(
            site,
            "bounded-drop",
            tokenizer={"path": "tokenizer"},
            seq_length=270,
            task_encoder={"options": {"truncation": "drop"}},
        )
    )
    read = read_samples(dm, limit=5, seconds=60)
    assert read.seen == 5 and read.skipped == {"too_long": 5}
    assert read.stopped == "5 skips in a row"
    errors, _, _ = sample_findings(read, 270, "drop")
    assert [e.path for e in errors] == ["seq_length"]
    assert "5 of 5 samples (100%) are longer than 270 tokens" in errors[0].message


@pytest.mark.slow
def test_validate_shows_a_status_on_a_terminal_while_it_works(site):
    """A real process on a pseudo-terminal: the status line comes before the verdict."""
    config = write_config(site, "status", tokenizer={"path": "tokenizer"})
    pid, fd = pty.fork()
    if pid == 0:  # the child: run the CLI with the pseudo-terminal as stdout and stderr
        os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        os.execv(str(SCRIPT), [str(SCRIPT), "validate", str(config)])
    output = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    text = output.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text[-2000:]
    verdict = text.index(": valid (")
    for step in ("checking ", "loading the tokenizer", "reading up to 64 training samples"):
        assert -1 < text.find(step) < verdict, (step, text[-2000:])


def test_piped_output_has_no_status_line(site):
    config = write_config(site, "piped", tokenizer={"path": "tokenizer"})
    proc = subprocess.run(
        [str(SCRIPT), "validate", "--quick", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "checking" not in proc.stdout
