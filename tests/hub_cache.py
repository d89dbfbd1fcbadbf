"""A Hugging Face hub cache of the test's own, offline, holding dataset repositories laid out
as `hf download --repo-type dataset` (or a first `load_dataset` online) leaves them:
`datasets--ORG--NAME/snapshots/SHA/data/train-00000-of-00001.parquet`, and `refs/main`
naming SHA. Nothing here reaches the network.

datasets 5.2's own `load_dataset("org/name")` does not read such a snapshot when offline (it
raises "Couldn't reach 'org/name' on the Hub (OfflineModeIsEnabled)" before any lookup, then
looks only in its own prepared cache), which is why tunedeck/data/sources.py resolves the
snapshot through huggingface_hub first.
"""
from __future__ import annotations

from pathlib import Path

import pytest

SNAPSHOT_SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    """HF_HUB_OFFLINE=1, an empty hub cache and a `datasets` cache of the test's own, for this
    process and the ranks it starts. huggingface_hub and datasets read them at import, so
    their constants are set as well as the environment."""
    import datasets.config
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    return cache


def add_hub_dataset(cache: Path, repo_id: str, columns: dict[str, list]) -> Path:
    """A dataset repository with one parquet file of its train split; its snapshot folder."""
    import pyarrow
    import pyarrow.parquet

    repo = cache / f"datasets--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / SNAPSHOT_SHA
    (snapshot / "data").mkdir(parents=True)
    (repo / "blobs").mkdir()
    # The hub keeps each file once, under its hash in blobs/; a snapshot links to it.
    blob = repo / "blobs" / "5a1e"
    pyarrow.parquet.write_table(pyarrow.table(columns), blob)
    (snapshot / "data" / "train-00000-of-00001.parquet").symlink_to(
        Path("..", "..", "..", "blobs", blob.name))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SNAPSHOT_SHA)
    return snapshot


@pytest.fixture
def offline_hub_error(offline_hub) -> str:
    """transformers' own words for a model it cannot fetch offline, quoted URLs and all (the
    text a failed job's error holds)."""
    from transformers import AutoConfig

    with pytest.raises(OSError) as raised:
        AutoConfig.from_pretrained("some-org/absent-model")
    return str(raised.value)
