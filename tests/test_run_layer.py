"""The run layer (streamdeid/run/): one mapping from options, one vault decision, models loaded once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from conftest import decode, face_frames, make_video
from streamdeid import cli
from streamdeid.api import anonymize
from streamdeid.keys import generate_master_key
from streamdeid.run import Models, RunOptions, Runner, batch_options, run_options
from streamdeid.run.options import manifest_options, run_params
from streamdeid.vault import VaultReader


def test_cli_flags_batch_dict_and_manifest_row_map_to_the_same_options(tmp_path: Path) -> None:
    """``run``'s flags, a batch's option dict and a manifest row's columns go through one mapping."""
    key = tmp_path / "k.bin"
    generate_master_key(key)
    flags = ["--anonymizer", "solid", "--detect-every", "3", "--crf", "20", "--mask-margin", "0.3",
             "--no-vault", "--key-file", str(key), "--no-progress"]
    ctx = cli.run.make_context("run", ["in.mp4", *flags])
    from_cli = run_options(ctx.params)

    params = run_params(cli.run)
    batch = {p.name: ctx.params[p.name] for p in params}  # what `streamdeid batch` passes its workers
    from_batch = batch_options(batch)
    row = manifest_options(params, {"input": "x.mp4", "anonymizer": "solid", "detect-every": "3", "crf": "20",
                                    "mask_margin": "0.3", "no-vault": "yes"}, "m.csv:2")
    from_row = batch_options({"key_file": str(key), "no_progress": True, **row})

    for opts in (from_batch, from_row):
        assert opts.config == from_cli.config
        assert (opts.key_file, opts.vault, opts.store_crops) == (str(key), False, True)
        assert opts.skip_existing  # a batch resumes by default; --overwrite redoes every file
    assert (from_cli.config.anonymize.method, from_cli.config.detect.every, from_cli.config.output.crf,
            from_cli.config.blend.margin) == ("solid", 3, 20, 0.3)
    assert not from_cli.skip_existing
    overwrite = batch_options({**batch, "overwrite": True})
    assert not overwrite.skip_existing and overwrite.config.output.overwrite


def test_the_vault_is_decided_in_one_place(tmp_path: Path) -> None:
    """A vault beside a file output of a video, with a kept key and without --no-vault; never for a still, a
    stream output, an ephemeral key or --no-vault."""
    key = tmp_path / "k.bin"
    generate_master_key(key)
    out = tmp_path / "out.mp4"
    keyed = Runner(RunOptions(key_file=str(key)))
    assert keyed.vault_for("clip.mp4", out) == tmp_path / "out.mp4.sdv"
    assert keyed.vault_for("-", out) == tmp_path / "out.mp4.sdv"  # stdin into a file
    assert keyed.vault_for("photo.jpg", tmp_path / "photo.jpg") is None
    assert keyed.vault_for("clip.mp4", "-") is None and keyed.vault_for("clip.mp4", "rtsp://h/x") is None
    assert Runner(RunOptions(key_file=str(key), vault=False)).vault_for("clip.mp4", out) is None
    assert Runner(RunOptions()).vault_for("clip.mp4", out) is None  # ephemeral key: nobody could open it


def test_a_runner_loads_the_generator_once_and_runs_many_inputs(tmp_path: Path, media: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One runner (dbaf, a key file) anonymizes two videos through ``anonymize(runner=...)``: the generator is
    loaded once, each video has its own video id and vault, and each vault opens with the key."""
    import streamdeid.backends as backends

    loads = []
    create = backends.create_backend
    monkeypatch.setattr(backends, "create_backend", lambda *a, **k: loads.append(a) or create(*a, **k))
    frames = face_frames(media, 6)
    clips = [make_video(tmp_path / f"c{i}.mp4", frames[i:] + frames[:i]) for i in range(2)]
    key = tmp_path / "k.bin"
    generate_master_key(key)
    options = run_options({"method": "dbaf", "key_file": str(key), "no_progress": True})
    runner = Runner(options, Models())

    results = [anonymize(str(c), tmp_path / f"out{i}.mp4", runner=runner) for i, c in enumerate(clips)]

    assert len(loads) == 1, loads
    ids = set()
    for res, clip in zip(results, clips):
        assert res.vault is not None and res.vault.exists() and res.summary.faces >= 5
        with VaultReader(res.vault) as reader:
            ids.add(reader.video_id)
            assert reader.inspect()["complete"]
        out, src = decode(res.output), decode(clip)
        assert len(out) == len(src) and not all(np.array_equal(a, b) for a, b in zip(out, src))
    assert len(ids) == 2  # a fresh video id per video, one master key


def test_a_manifest_row_runner_shares_the_models_and_the_key(tmp_path: Path) -> None:
    key = tmp_path / "k.bin"
    generate_master_key(key)
    base = Runner(RunOptions(key_file=str(key)))
    other = base.with_options(dataclasses.replace(base.options, vault=False))
    assert other.models is base.models
    assert other.next_keys().master == base.next_keys().master
    assert other.next_keys().video_id != base.next_keys().video_id


def test_a_runner_whose_new_key_was_removed_writes_it_again_before_its_next_vault(tmp_path: Path,
                                                                                  media: Path) -> None:
    """A runner made with new_key removes the key it made when its run fails having kept nothing (a missing
    input); its next run's vault needs that key, so it is written again, the same key, before the run."""
    from streamdeid.keys import load_key
    from streamdeid.types import StreamdeidError

    key = tmp_path / "k.bin"
    runner = Runner(RunOptions(key_file=str(key), new_key=True))
    assert key.exists()
    with pytest.raises(StreamdeidError, match="no such file"):
        anonymize(str(tmp_path / "missing.mp4"), tmp_path / "o.mp4", runner=runner)
    assert not key.exists()
    clip = make_video(tmp_path / "c.mp4", face_frames(media, 3))
    res = anonymize(str(clip), tmp_path / "out.mp4", runner=runner)
    assert res.vault is not None and load_key(key) == runner.next_keys().master
