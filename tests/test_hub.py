"""Adapters ready to publish: model cards the Hub's own card loader parses, the upload up to the library's call,
and a recipe model fetched through the same library (offline: the message that says what to download)."""
import subprocess
import sys
from pathlib import Path

import huggingface_hub as hf
import pytest

import checkpoint
import hub
import lora
import tiny

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def adapter(tmp_path):
    ckpt = tiny.write_tiny_checkpoint(tmp_path / "base", "lfm3")
    m = checkpoint.load_model(ckpt, device="cpu")
    lora.add_lora(m, rank=4, alpha=8, adapters=("pi",), seed=0)
    config, tensors = lora.snapshot(m, "pi", str(ckpt))
    card = hub.card(name="pi-v3", base="LiquidAI/LFM3-1.7B", harness="pi", harness_release="0.73.1",
                    cfg={"rank": 32, "alpha": 32, "lr": 1e-5, "group_size": 8, "bonus": 0.1, "bonus_scale": 15},
                    progress={"adapter version": 3, "reward": 0.25})
    return lora.write_adapter(tmp_path / "pi-v3", config, tensors, {hub.CARD: card})


def test_a_recipe_models_card_names_its_base_and_harness_as_the_hub_reads_it(adapter):
    card = hf.ModelCard.load(adapter / hub.CARD)
    assert card.data.base_model == "LiquidAI/LFM3-1.7B" and card.data.library_name == "peft"
    assert "harness-pi" in card.data.tags and "grpo" in card.data.tags
    assert "| lr | 1e-05 |" in card.text and "pi 0.73.1" in card.text and "| reward | 0.25 |" in card.text


def test_a_local_base_is_named_in_the_text_not_as_a_hub_link(tmp_path):
    text = hub.card(name="mini-v2", base=str(tmp_path), harness="mini")
    card = hf.ModelCard(text)
    assert card.data.base_model is None and str(tmp_path) in card.text and "harness-mini" in card.data.tags


def test_an_eval_table_replaces_the_last_one(adapter):
    hub.write_eval(adapter, "| model | pass@1 |\n|---|---|\n| pi-v3 | 10% |")
    hub.write_eval(adapter, "| model | pass@1 |\n|---|---|\n| pi-v3 | 20% |")
    text = (adapter / hub.CARD).read_text()
    assert text.count(hub.EVAL_HEADING) == 1 and "20%" in text and "10%" not in text
    assert hf.ModelCard.load(adapter / hub.CARD).data.base_model == "LiquidAI/LFM3-1.7B"


def test_upload_sends_the_adapter_and_its_card_to_the_named_repo(adapter, monkeypatch):
    calls = []
    monkeypatch.setattr(hf.HfApi, "create_repo", lambda self, repo, **kw: calls.append(("create", repo, kw)) or
                        f"https://huggingface.co/{repo}")
    monkeypatch.setattr(hf.HfApi, "upload_folder", lambda self, **kw: calls.append(("upload", kw)))
    url = hub.upload(adapter, "me/lfm3-pi", private=True)
    assert url == "https://huggingface.co/me/lfm3-pi"
    assert calls[0] == ("create", "me/lfm3-pi", {"repo_type": "model", "private": True, "exist_ok": True})
    up = calls[1][1]
    assert up["repo_id"] == "me/lfm3-pi" and Path(up["folder_path"]) == adapter
    assert set(up["allow_patterns"]) == {"adapter_config.json", "adapter_model.safetensors", "README.md"}


@pytest.mark.parametrize("missing", ["README.md", "adapter_model.safetensors"])
def test_upload_refuses_a_folder_that_is_not_a_whole_adapter(adapter, missing):
    (adapter / missing).unlink()
    p = subprocess.run([sys.executable, str(ROOT / "hub.py"), "upload", str(adapter), "--repo", "me/x"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 1 and missing in p.stderr and p.stderr.count("\n") == 1


@pytest.mark.parametrize("repo", ["not a repo", "../evil", "me/x-", "me"])
def test_upload_refuses_a_repo_that_is_no_repo_id(adapter, repo):
    with pytest.raises(hub.HubError, match="org/name"):
        hub.upload(adapter, repo)


def test_a_missing_recipe_model_offline_says_what_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.resolve_model("LFM3-1.7B")
    assert "hf download LiquidAI/LFM3-1.7B" in str(e.value) and "could not be downloaded" in str(e.value)
