"""`streamdeid batch`: shards, manifests, the local pool against `run`, resuming, and a real local Ray
cluster with a worker killed mid-file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import run_cli

from streamdeid.batch import collect_tasks, run_batch, shard
from streamdeid.batch.inputs import Task, shard_of
from streamdeid.run.outcome import output_is_complete

CLIPS = ("classroom.mp4", "face-demographics-walking-and-pause.mp4")  # 45 and 41 frames, 480x270


def _tasks(keys):
    return [Task(f"/in/{k}", f"/out/{k}", k) for k in keys]


def test_shards_partition_every_file_exactly_once_and_deterministically() -> None:
    keys = [f"cam{c}/2026-11-{d:02d}.mp4" for c in range(7) for d in range(1, 31)]
    tasks = _tasks(keys)
    for count in (1, 2, 3, 8):
        parts = [shard(tasks, i, count) for i in range(count)]
        seen = [t.key for p in parts for t in p]
        assert sorted(seen) == sorted(keys) and len(seen) == len(set(seen))
        assert parts == [shard(list(reversed(tasks)), i, count)[::-1] for i in range(count)]  # order-free
        if count == 3:
            assert all(len(p) > len(keys) / count / 2 for p in parts)  # no shard is starved
    # a file's shard depends on its own key only: adding files moves no other file
    assert [shard_of(k, 5) for k in keys] == [shard_of(k, 5) for k in keys + ["new.mp4"]][: len(keys)]
    with pytest.raises(Exception, match="shard-index"):
        shard(tasks, 3, 3)


def test_manifests_and_folders(tmp_path: Path, media: Path) -> None:
    from streamdeid.batch.cli import batch_command
    from streamdeid.cli import run

    (tmp_path / "a" / "deep").mkdir(parents=True)
    shutil.copy(media / CLIPS[0], tmp_path / "a" / "deep" / "x.mp4")
    shutil.copy(media / "obama-240p.jpg", tmp_path / "a" / "y.jpg")
    (tmp_path / "list.txt").write_text(f"# two\n{media / CLIPS[1]}\n\n")
    (tmp_path / "m.csv").write_text(f"input,output,anonymizer,detect-every,crf\n{media / CLIPS[0]},c/z.mp4,solid,3,20\n")
    params = batch_command(run).params
    tasks = collect_tasks([str(tmp_path / "a"), str(tmp_path / "list.txt"), str(tmp_path / "m.csv")],
                          tmp_path / "out", params)
    assert [t.key for t in tasks] == ["c/z.mp4", "deep/x.mp4", CLIPS[1], "y.jpg"]
    assert tasks[0].options == {"method": "solid", "detect_every": 3, "crf": 20}
    with pytest.raises(Exception, match="y.jpg is listed twice"):
        collect_tasks([str(tmp_path / "a"), str(tmp_path / "a")], tmp_path / "out")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "y.jpg").write_bytes((tmp_path / "a" / "y.jpg").read_bytes())
    with pytest.raises(Exception, match="two inputs would write"):
        collect_tasks([str(tmp_path / "a" / "y.jpg"), str(tmp_path / "b" / "y.jpg")], tmp_path / "out")
    (tmp_path / "bad.csv").write_text(f"input,colour\n{media / CLIPS[0]},red\n")
    with pytest.raises(Exception, match="unknown column"):
        collect_tasks([str(tmp_path / "bad.csv")], tmp_path / "out", params)
    # a flag column takes yes or no in click's words; a typo is not read as "no"
    (tmp_path / "flags.csv").write_text(f"input,no-vault\n{media / CLIPS[0]},Yes\n")
    assert collect_tasks([str(tmp_path / "flags.csv")], tmp_path / "out", params)[0].options == {"no_vault": True}
    (tmp_path / "flags.csv").write_text(f"input,no-vault\n{media / CLIPS[0]},maybe\n")
    with pytest.raises(Exception, match="'maybe' is not a yes or no"):
        collect_tasks([str(tmp_path / "flags.csv")], tmp_path / "out", params)


def _clips(media: Path, folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in CLIPS:
        shutil.copy(media / name, folder / name)
    return folder


def _report(path: Path) -> dict[str, dict]:
    return {Path(f["input"]).name: f for f in json.loads(path.read_text())["files"]}


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return kids


@pytest.mark.slow
def test_workers_leave_with_a_killed_driver_and_ctrl_c_prints_no_traceback(tmp_path: Path, media: Path) -> None:
    import subprocess
    import sys

    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(media / "one-by-one-person-detection.mp4", src / "long.mp4")  # about 10 s of work
    args = [sys.executable, "-m", "streamdeid", "batch", str(src), "-o", str(tmp_path / "out"), "--no-progress"]

    def busy_driver() -> subprocess.Popen:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 60
        while not (tmp_path / "out" / "long.partial.mp4").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return proc

    driver = busy_driver()
    workers = _children(driver.pid)
    assert workers
    driver.kill()  # SIGKILL: no cleanup in the driver
    driver.wait()
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{w}") for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if os.path.exists(f"/proc/{w}")], "a worker outlived its driver"

    shutil.rmtree(tmp_path / "out")  # the partial the killed run left
    driver = busy_driver()  # Ctrl-C reaches the whole group, as from a terminal
    os.killpg(driver.pid, signal.SIGINT)
    err = driver.communicate(timeout=60)[1].decode()
    assert driver.returncode == 130 and "Traceback" not in err, (driver.returncode, err)
    assert "streamdeid: WARNING: interrupted:" in err  # the worker's line, in the CLI's form


@pytest.mark.slow
def test_local_pool_matches_run_resumes_and_retries(tmp_path: Path, media: Path) -> None:
    src = _clips(media, tmp_path / "in")
    (src / "bad.mp4").write_bytes(os.urandom(4000))  # refused: not retried, it would fail the same way
    key = tmp_path / "k.bin"
    args = ("batch", str(src), "-o", str(tmp_path / "out"), "--key-file", str(key), "--new-key", "--workers", "2",
            "--retries", "1", "--no-progress")
    proc = run_cli(*args)
    assert proc.returncode == 1, proc.stderr.decode()  # bad.mp4 failed
    err = proc.stderr.decode()
    assert "2 ok, 1 failed, 0 skipped;" in err and "failed: " in err and "bad.mp4" in err and "retrying" not in err
    got = _report(tmp_path / "out" / "streamdeid-batch.json")
    assert got["bad.mp4"]["status"] == "failed" and got["bad.mp4"]["attempts"] == 1
    csv_lines = (tmp_path / "out" / "streamdeid-batch.csv").read_text().splitlines()
    assert csv_lines[0].startswith("input,output,vault,status,error,frames,faces,tracks") and len(csv_lines) == 4

    # the same clips through `streamdeid run` (a folder run, same key): same frames, faces and tracks
    (src / "bad.mp4").unlink()
    ran = tmp_path / "run.json"
    proc = run_cli("run", str(src), "-o", str(tmp_path / "ref"), "--key-file", str(key), "--report", str(ran),
                   "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()
    want = _report(ran)
    vault_ids = set()
    for name in CLIPS:
        b, r = got[name], want[name]
        assert b["status"] == "ok" and b["attempts"] == 1
        assert (b["frames"], b["faces"], b["tracks"]) == (r["frames"], r["faces"], r["tracks"]), name
        assert b["frames"] > 0 and b["faces"] > 0
        out = Path(b["output"])
        assert out == tmp_path / "out" / name and output_is_complete(out, Path(b["vault"]))
        from streamdeid.vault import VaultReader

        with VaultReader(b["vault"]) as reader:
            vault_ids.add(reader.video_id)
    assert len(vault_ids) == len(CLIPS)  # one master key, a video id (and vault) per file

    # rerun: everything is complete and verified, nothing is touched
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir() if p.suffix in (".mp4", ".sdv")}
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "0 ok, 0 failed, 2 skipped" in proc.stderr.decode()
    assert mtimes == {p: p.stat().st_mtime_ns for p in mtimes}
    again = _report(tmp_path / "out" / "streamdeid-batch.json")
    assert all(again[n]["status"] == "skipped" and again[n]["frames"] == got[n]["frames"] for n in CLIPS)


@pytest.fixture
def ray_cluster():
    """A real local Ray cluster of 2 CPUs, started by and for this test (its processes only)."""
    ray = pytest.importorskip("ray", reason="ray not installed (pip install -e '.[test]' brings it)")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}})
    yield ray
    ray.shutdown()


def _actor_pids(title: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if (p / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").startswith(title):
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


@pytest.mark.slow
def test_ray_cluster_worker_killed_mid_file_is_retried_and_rerun_skips(tmp_path: Path, media: Path,
                                                                         ray_cluster) -> None:
    src = _clips(media, tmp_path / "in")
    opts = {"key_file": str(tmp_path / "k.bin"), "new_key": True}
    killed: list[int] = []

    def kill_one_busy_actor() -> None:  # the first actor seen working on a file is killed (SIGKILL)
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            busy = _actor_pids("ray::BatchWorker.process")
            if busy:
                # inside the file: the title is seen within 50 ms of its start, and a file of CLIPS takes about
                # 1 s (files_per_minute 52 in a CI run where a 1 s wait landed after the file had finished)
                time.sleep(0.25)
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_busy_actor, daemon=True)
    killer.start()
    result = run_batch([str(src)], tmp_path / "out", opts, ray="auto", workers=2, progress=False)
    killer.join(timeout=5)
    assert killed, "no actor was seen at work"
    by_name = {Path(o.input).name: o for o in result.outcomes}
    assert all(o.status == "ok" for o in by_name.values()), result.outcomes
    assert result.retried == 1 and sorted(o.attempts for o in by_name.values()) == [1, 2]
    assert "Ray at auto: 2 CPU actors" in result.line()
    for o in by_name.values():
        assert output_is_complete(Path(o.output), Path(o.vault))

    again = run_batch([str(src)], tmp_path / "out", opts, ray="auto", workers=2, progress=False)
    assert [o.status for o in again.outcomes] == ["skipped", "skipped"]


def test_manifest_outputs_outside_the_output_folder_are_refused_row_by_row(tmp_path: Path, media: Path) -> None:
    out, elsewhere = tmp_path / "a" / "b" / "out", tmp_path / "elsewhere"
    out.mkdir(parents=True)
    elsewhere.mkdir()
    (out / "link").symlink_to(elsewhere, target_is_directory=True)  # a folder inside that leads out
    photo = media / "obama-240p.jpg"
    rows = ["ok.jpg", "../../escape.jpg", str(tmp_path / "absolute.jpg"), "link/through.jpg", "sub/../fine.jpg"]
    (tmp_path / "m.csv").write_text("input,output\n" + "".join(f"{photo},{r}\n" for r in rows))
    proc = run_cli("batch", str(tmp_path / "m.csv"), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "2 ok, 3 failed" in err and err.count("is outside the output folder") >= 3, err
    assert (out / "ok.jpg").exists() and (out / "fine.jpg").exists()
    assert not (tmp_path / "a" / "escape.jpg").exists() and not (tmp_path / "absolute.jpg").exists()
    assert list(elsewhere.iterdir()) == []
    report = json.loads((out / "streamdeid-batch.json").read_text())["files"]
    refused = [f for f in report if f["status"] == "failed"]
    assert len(refused) == 3 and all(f["error"].startswith("refused: output ") for f in refused), report


def test_the_batch_report_never_replaces_the_key_or_an_input(tmp_path: Path, media: Path) -> None:
    """A batch rewrites its report on every run, but never over its key file or one of its inputs; a CSV
    manifest saved with a byte-order mark (a spreadsheet's "CSV UTF-8") reads as any other."""
    photo = tmp_path / "a.jpg"
    photo.write_bytes((media / "obama.jpg").read_bytes())
    key = tmp_path / "k.key"
    assert run_cli("keygen", str(key)).returncode == 0
    secret = key.read_bytes()
    for target in (key, photo):
        proc = run_cli("batch", str(photo), "-o", str(tmp_path / "out"), "--key-file", str(key), "--report",
                       str(target), "--no-progress")
        assert proc.returncode == 1 and b"itself" in proc.stderr, proc.stderr
    assert key.read_bytes() == secret and photo.read_bytes() == (media / "obama.jpg").read_bytes()
    (tmp_path / "m.csv").write_bytes(b"\xef\xbb\xbfinput,anonymizer\na.jpg,mosaic\n")
    tasks = collect_tasks([str(tmp_path / "m.csv")], tmp_path / "out", batch_params())
    assert [(t.key, t.options) for t in tasks] == [("a.jpg", {"method": "mosaic"})]


def batch_params():
    from streamdeid.batch.cli import batch_command
    from streamdeid.cli import run

    return batch_command(run).params


def test_a_batch_or_folder_run_into_its_own_input_folder_never_replaces_an_input(tmp_path: Path, media: Path) -> None:
    """`batch DIR -o DIR --overwrite` (and a single file into its own folder) replaced the originals with
    anonymized copies, exit 0: the output folder was the input's, so each output path was its input. Whatever
    --overwrite says, each such file is refused and left as it was; `run DIR -o DIR` was refused already."""
    same = tmp_path / "same"
    same.mkdir()
    for name in ("a.jpg", "b.jpg"):
        (same / name).write_bytes((media / "obama-240p.jpg").read_bytes())
    before = {p.name: p.read_bytes() for p in same.iterdir()}
    for args in ((str(same), "-o", str(same)), (str(same / "a.jpg"), "-o", str(same))):
        proc = run_cli("batch", *args, "--overwrite", "--anonymizer", "solid", "--no-progress")
        err = proc.stderr.decode()
        assert proc.returncode == 1 and "Traceback" not in err and "the input itself" in err, err
        assert {p.name: p.read_bytes() for p in same.iterdir() if p.suffix == ".jpg"} == before
    # a folder run whose file would land on itself (the per-file guard of Runner.file)
    from streamdeid.run.options import RunOptions
    from streamdeid.run.runner import Runner

    outcome, _ = Runner(RunOptions()).file(same / "b.jpg", same / "b.jpg")
    assert outcome.status == "failed" and "the input itself" in outcome.error
    assert (same / "b.jpg").read_bytes() == before["b.jpg"]


def test_a_report_replaces_only_an_earlier_report(tmp_path: Path, media: Path) -> None:
    """--report is rewritten by every run, but a path that holds anything else (a video given by mistake)
    is refused without --overwrite: it was replaced by 400 bytes of JSON, exit 0 (new-user review)."""
    photo = tmp_path / "a.jpg"
    photo.write_bytes((media / "obama-240p.jpg").read_bytes())
    precious = tmp_path / "precious.mp4"
    precious.write_bytes((media / "head-pose-face-detection-male.mp4").read_bytes()[:200_000])
    for cmd in (("run", str(photo), "-o", str(tmp_path / "o.jpg")), ("batch", str(photo), "-o", str(tmp_path / "b"))):
        proc = run_cli(*cmd, "--report", str(precious), "--anonymizer", "solid", "--no-progress")
        err = proc.stderr.decode()
        assert proc.returncode == 1 and "report exists" in err and "--overwrite" in err, err
        assert precious.read_bytes() == (media / "head-pose-face-detection-male.mp4").read_bytes()[:200_000]
        report = tmp_path / f"{cmd[0]}-report.json"
        for i in range(2):  # written, then rewritten by the next run without --overwrite
            again = (*cmd[:3], str(tmp_path / f"o{i}.jpg")) if cmd[0] == "run" else cmd
            proc = run_cli(*again, "--report", str(report), "--anonymizer", "solid", "--no-progress")
            assert proc.returncode == 0, proc.stderr.decode()
            assert json.loads(report.read_text())["totals"]["files"] == 1


def test_a_ray_address_where_no_cluster_answers_is_one_line(tmp_path: Path, media: Path) -> None:
    """`--ray 127.0.0.1:1` (nothing listens) waited past two minutes while Ray retried, a line every 30 s; `--ray
    bogus` ended in an internal error."""
    pytest.importorskip("ray")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jpg").write_bytes((media / "obama-240p.jpg").read_bytes())
    for address, says in (("127.0.0.1:1", "no Ray cluster answers there"), ("bogus", "give host:port")):
        proc = run_cli("batch", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--ray", address, "--no-progress",
                       timeout=60)
        err = proc.stderr.decode()
        assert proc.returncode == 1 and says in err and "Traceback" not in err, err
        assert len([line for line in err.splitlines() if line.strip()]) == 1, err


def test_a_batch_that_kept_nothing_removes_the_key_it_made(tmp_path: Path) -> None:
    """`batch BAD --key-file new.bin --new-key`: every file failed, and the key the batch had made (which opens
    nothing) was left behind. It is removed; a key that was there before the batch is kept."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.mp4").write_bytes(b"this is not a video\n" * 50)
    key = tmp_path / "new.bin"
    args = ("batch", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--key-file", str(key), "--no-progress")
    proc = run_cli(*args, "--new-key")
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err and not key.exists(), err
    assert run_cli("keygen", str(key)).returncode == 0
    secret = key.read_bytes()
    proc = run_cli(*args, "--new-key")
    assert proc.returncode == 1 and key.read_bytes() == secret, proc.stderr.decode()
