"""The Hugging Face Hub, for what a run makes and what it starts from: each adapter folder's model card (README.md
with the Hub's metadata block: base model, `library_name: peft`, the harness, tags; the recipe's numbers; the run's
progress; an eval table once eval.py scored it), uploading an adapter folder, and fetching a model that is not in
the local cache. The hub library (`huggingface_hub`, optional) is imported only to upload and to fetch.

    python hub.py upload runs/r/adapters/pi-v24 --repo you/lfm3-1.7b-pi      # `hf auth login` or HF_TOKEN first
    python hub.py card runs/r/adapters/pi-v24                               # print a folder's card

Left out: uploading runs, checkpoints, rollouts or merged models; cards in other languages than English.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

CARD = "README.md"
EVAL_HEADING = "## Evaluation"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
RECIPE_KEYS = ("rank", "alpha", "lr", "group_size", "micro_batches", "token_budget", "max_staleness", "sessions",
               "bonus", "bonus_scale", "loss", "advantage", "temperature", "max_tokens", "guard", "suite", "seed")


class HubError(RuntimeError):
    """A folder that is no adapter, no hub library, or a refused upload / download: one line saying which."""


def is_repo_id(name) -> bool:
    """'org/name' as the Hub spells repositories (not a local path)."""
    part = r"[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?"       # the Hub's rule: no '.' or '-' at either end
    return bool(re.fullmatch(f"{part}/{part}", str(name))) and not Path(str(name)).exists()


def card(*, name, base, harness, harness_release="", cfg=None, progress=None, eval_md="") -> str:
    """The model card of adapter `name`: trained on `base` (a Hub repo id goes into the metadata; a local checkpoint
    is named in the text only: the Hub links base_model to a repository) inside `harness`. cfg: the run's config
    (its recipe numbers are listed); progress: the run's numbers at this version (step, reward, ...)."""
    tags = ["lora", "peft", "grpo", "reinforcement-learning", "coding-agent", "harness-rl", f"harness-{harness}"]
    meta = {"library_name": "peft", **({"base_model": str(base)} if is_repo_id(base) else {}),
            "pipeline_tag": "text-generation", "tags": tags}
    lines = ["---", *(f"{k}: {json.dumps(v)}" for k, v in meta.items()), "---", "",
             f"# {name}: a LoRA adapter of {base} for the {harness} coding agent", "",
             f"Trained with GRPO by harness-rl inside the unmodified `{harness}"
             f"{f' {harness_release}' if harness_release else ''}` harness, every tool call checked by a rule-based "
             "guard (a rollout with a blocked call earns 0). Use it with the harness it was trained in: the adapter "
             f"learned {harness}'s prompts and tool shapes.", "",
             "```bash", f"vllm serve {base} --enable-lora --lora-modules {name}=<this folder or repo>",
             "```", ""]
    if cfg:
        rows = [(k, cfg[k]) for k in RECIPE_KEYS if k in cfg]
        lines += ["## Training", "", "| setting | value |", "|---|---|",
                  *(f"| {k} | {v} |" for k, v in rows), "",
                  f"Reward: verifier score + {cfg.get('bonus', 0.1)} x (1 - tool calls / {cfg.get('bonus_scale', 15)}) "
                  "on fully correct rollouts only; 0 after a guard note.", ""]
    if progress:
        lines += ["## Run", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in progress.items()), ""]
    text = "\n".join(lines)
    return with_eval(text, eval_md) if eval_md else text


def with_eval(text, eval_md) -> str:
    """A card with its evaluation section replaced by (or given) `eval_md`."""
    head = text.split(f"\n{EVAL_HEADING}\n", 1)[0].rstrip("\n")
    return f"{head}\n\n{EVAL_HEADING}\n\n{eval_md.strip()}\n"


def write_eval(folder, eval_md):
    """Put eval.py's table into an adapter folder's card (a folder without one gets a minimal card first)."""
    path = Path(folder) / CARD
    text = path.read_text() if path.is_file() else card(name=Path(folder).name, base=_base_of(folder),
                                                        harness=Path(folder).name.split("-v")[0])
    path.write_text(with_eval(text, eval_md))


def _base_of(folder):
    try:
        return json.loads((Path(folder) / "adapter_config.json").read_text()).get("base_model_name_or_path") or "?"
    except (OSError, ValueError):
        return "?"


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise HubError("the Hub needs huggingface_hub: pip install huggingface_hub") from None
    return huggingface_hub


def check_folder(folder) -> Path:
    folder = Path(folder)
    missing = [f for f in (*ADAPTER_FILES, CARD) if not (folder / f).is_file()]
    if missing:
        raise HubError(f"{folder}: not an adapter folder with its card ({', '.join(missing)} missing)")
    return folder


def upload(folder, repo, private=False, token=None) -> str:
    """Upload an adapter folder (adapter_config.json, adapter_model.safetensors, README.md) to model repo `repo`,
    made if missing. Returns the repo's URL. Raises HubError naming what failed."""
    folder = check_folder(folder)
    if not is_repo_id(repo):
        raise HubError(f"--repo {repo!r}: expected a Hub repo id, org/name")
    hf = _hub()
    api = hf.HfApi(token=token)
    try:
        url = api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                          allow_patterns=[*ADAPTER_FILES, CARD], commit_message=f"harness-rl: {folder.name}")
    except Exception as e:          # auth, network, a refused name: the library's own words
        raise HubError(f"uploading {folder} to {repo} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return str(url)


def fetch(repo) -> tuple[Path | None, str]:
    """Download model repo `repo` into the Hugging Face cache (weights, config, tokenizer, chat template):
    (its folder, "") or (None, why not: no library, offline, not found)."""
    try:
        hf = _hub()
    except HubError as e:
        return None, str(e)
    try:
        path = hf.snapshot_download(repo, allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.model", "*.txt"])
    except Exception as e:
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return Path(path), ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Adapters on the Hugging Face Hub: print a card, upload a folder.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("upload", help="upload an adapter folder (its card included) to a model repo")
    u.add_argument("folder", help="runs/<run>/adapters/<harness>-v<N>")
    u.add_argument("--repo", required=True, help="the model repo, org/name (made if missing)")
    u.add_argument("--private", action="store_true", help="make the repo private (default: public)")
    c = sub.add_parser("card", help="print an adapter folder's model card")
    c.add_argument("folder")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "card":
            print(check_folder(args.folder).joinpath(CARD).read_text(), end="")
        else:
            print(f"uploaded {args.folder} to {upload(args.folder, args.repo, args.private)}")
    except HubError as e:
        print(f"hub.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
