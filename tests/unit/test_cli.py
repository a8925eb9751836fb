"""The ``shardstream`` command line: bench, ls, cat, stat, write, error handling and CPU accounting."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardstream.cli import _cpu, _options, main
from shardstream.cli.__main__ import _missing_dependency
from shardstream.compat import WebDataset
from shardstream.tar.sharded_writer import ShardWriter


@pytest.fixture
def shards(tmp_path: Path) -> list[str]:
    """Two shards of 12 samples each: txt + cls."""
    with ShardWriter(str(tmp_path / "d-%06d.tar"), maxcount=12, mtime=0) as sink:
        for i in range(24):
            sink.write({"__key__": f"k{i:04d}", "txt": f"text number {i}", "cls": i % 3})
    return [str(tmp_path / "d-000000.tar"), str(tmp_path / "d-000001.tar")]


def _lines(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines()[1:])}


def test_bench_prints_every_field(shards: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *shards, "--batch-size", "5"]) == 0
    out = capsys.readouterr().out
    fields = _lines(out)
    assert out.startswith("shardstream bench: 2 shards, batch 5, ss.Loader, 0 workers, 1 thread per process")
    assert fields["samples"] == "24"
    assert fields["batches"] == "5"  # 24 samples in batches of 5 (batches span shards), the last partial
    for name in (
        "samples/s",
        "MB/s",
        "payload MB/s",
        "first batch",
        "CPU",
        "CPU utilisation",
        "CPU-s/1k samples",
    ):
        assert name in fields, name
    shard_mb = sum(Path(s).stat().st_size for s in shards) / 1e6
    assert f"shard bytes: {shard_mb:,.1f} MB" in fields["MB/s"]


def test_bench_brace_spec_workers_and_to_tuple(
    tmp_path: Path, shards: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    spec = str(tmp_path / "d-{000000..000001}.tar")
    assert (
        main(["bench", spec, "--workers", "2", "--to-tuple", "txt", "cls", "--batch-size", "4", "--json"])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["samples"] == 24
    assert result["shards"] == 2
    assert result["first_batch"] > 0
    assert result["samples_per_s"] > 0
    assert result["cpu"]["processes"] >= 1 or result["cpu"]["children"] > 0  # the two workers were counted
    assert result["cpu_total"] >= result["cpu"]["main"]


def test_bench_max_samples_stops_early(shards: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *shards, "--batch-size", "4", "--max-samples", "8"]) == 0
    fields = _lines(capsys.readouterr().out)
    assert fields["samples"] == "8 (stopped early)"
    assert fields["MB/s"].startswith("n/a")


def test_bench_without_batching_counts_samples(shards: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", shards[0], "--batch-size", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["samples"] == result["batches"] == 12


def test_bench_bad_storage_option_is_an_error(shards: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *shards, "--storage-option", "no-equals-sign"]) == 1
    err = capsys.readouterr().err
    # (the text is not quoted: without its "=" it may be a secret pasted alone)
    assert "KEY=VALUE" in err and "number 1 of 1" in err and "no-equals-sign" not in err


def test_bench_missing_shard_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.tar")
    assert main(["bench", missing]) == 1
    assert "nope.tar" in capsys.readouterr().err


def test_bench_without_psutil_says_what_to_install(
    shards: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil -> ImportError
    assert main(["bench", *shards]) == 0
    captured = capsys.readouterr()
    assert "pip install 'shardstream[cli]'" in captured.err
    assert _lines(captured.out)["samples"] == "24"


def test_parse_options_converts_types() -> None:
    assert _options.parse_options(["a=1", "b=true", "c=x=y", "d=0.5", "e=False"]) == {
        "a": 1,
        "b": True,
        "c": "x=y",
        "d": 0.5,
        "e": False,
    }


def test_missing_dependency_message_names_the_extra() -> None:
    assert "shardstream[cli]" in _missing_dependency(ImportError("No module named 'psutil'", name="psutil"))
    assert "shardstream[demo]" in _missing_dependency(ImportError("No module named 'boto3'", name="boto3"))


def test_cpu_monitor_counts_child_processes() -> None:
    monitor = _cpu.CPUMonitor(interval=0.05).start()
    subprocess.run(
        [sys.executable, "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass"],
        check=True,
    )
    report = monitor.stop()
    assert report.children >= 0.25
    assert report.total >= report.children
    assert report.cores > 0


def test_cpu_monitor_without_psutil(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)
    assert not _cpu.have_psutil()
    monitor = _cpu.CPUMonitor().start()
    t = time.process_time()
    # os.times() counts in clock ticks (10 ms): burn 0.3 s so tick rounding cannot matter.
    while time.process_time() - t < 0.3:
        pass
    report = monitor.stop()
    assert report.main >= 0.25 and report.peak_rss_mb is None


# -- ls / cat / stat ---------------------------------------------------------------------------------


def test_ls_lists_members_with_offsets_and_sizes(
    shards: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ls", shards[0]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["OFFSET", "DATA", "SIZE", "NAME"]
    rows = [line.split() for line in lines[1:]]
    assert [r[3] for r in rows[:2]] == ["k0000.cls", "k0000.txt"]
    assert len(rows) == 24
    data = Path(shards[0]).read_bytes()
    for offset, data_offset, size, _name in rows:
        assert int(data_offset) == int(offset) + 512
        assert data[int(offset) + 124 : int(offset) + 136].strip(b"\0 ") == f"{int(size):o}".encode().rjust(
            11, b"0"
        )
    assert rows[1][2] == str(len("text number 0"))


def test_ls_without_header(shards: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", "--no-header", shards[1]]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[3] == "k0012.cls"


def test_cat_writes_member_bytes(shards: list[str], capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["cat", shards[0], "k0003.txt", "k0001.txt"]) == 0
    assert capfdbinary.readouterr().out == b"text number 1text number 3"  # shard order


def test_cat_missing_member_is_an_error(shards: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cat", shards[0], "k9999.txt"]) == 1
    err = capsys.readouterr().err
    assert "k9999.txt" in err and "shardstream ls" in err


def test_stat_summarizes_shards(shards: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stat", *shards]) == 0
    blocks = capsys.readouterr().out.split("\n\n")
    assert len(blocks) == 3  # two shards, then the dataset total
    assert _lines("\n" + blocks[2])["samples"] == "24"
    first = _lines("\n" + blocks[0])
    assert first["samples"] == "12"
    assert first["members"] == "24"
    assert first["size"] == f"{Path(shards[0]).stat().st_size:,} bytes (tar)"
    assert first["extensions"].startswith("cls x12") and "txt x12" in first["extensions"]
    assert first["keys"] == "k0000 .. k0011"


def test_stat_reports_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ShardWriter(str(tmp_path / "z-%06d.tar.gz"), maxcount=10, compress=True) as sink:
        for i in range(3):
            sink.write({"__key__": f"z{i}", "txt": "hello"})
    assert main(["stat", str(tmp_path / "z-000000.tar.gz")]) == 0
    assert "(tar+gzip)" in capsys.readouterr().out


def test_not_a_tar_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"x" * 2048)
    assert main(["ls", str(bad)]) == 1
    assert "bad.tar" in capsys.readouterr().err


# -- write ---------------------------------------------------------------------------------------


def test_write_packs_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    for i in range(5):
        (src / "train").mkdir(parents=True, exist_ok=True)
        (src / "train" / f"img{i}.jpg").write_bytes(b"\xff\xd8jpeg" + bytes([i]))
        (src / "train" / f"img{i}.cls").write_text(str(i))
    (src / "README").write_text("no extension: skipped")
    pattern = str(tmp_path / "out" / "packed-%06d.tar")
    (tmp_path / "out").mkdir()
    assert main(["write", str(src), pattern, "--maxcount", "2"]) == 0
    out = capsys.readouterr().out
    assert "wrote 5 samples from 10 files into 3 shards" in out and "skipped 1" in out
    urls = [pattern % i for i in range(3)]
    samples = list(WebDataset(urls, shardshuffle=False))
    assert [s["__key__"] for s in samples] == [f"train/img{i}" for i in range(5)]
    assert samples[2]["jpg"] == b"\xff\xd8jpeg\x02" and samples[2]["cls"] == b"2"


def test_write_rejects_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["write", str(tmp_path / "absent"), str(tmp_path / "o-%06d.tar")]) == 1
    assert "is not a directory" in capsys.readouterr().err


def test_module_entry_point_runs(shards: list[str]) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "shardstream.cli", "ls", "--no-header", shards[0]],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert len(res.stdout.splitlines()) == 24


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("bench", "demo", "ls", "cat", "stat", "write"):
        assert command in out


# -- lazy subcommands ---------------------------------------------------------------------------

_SUBCOMMAND_MODULES = ("_bench", "_demo", "_inspect", "_write", "_options")


def _forget_subcommand_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drop the subcommand modules from sys.modules (restored afterwards) to see which get imported."""
    for name in _SUBCOMMAND_MODULES:
        monkeypatch.delitem(sys.modules, f"shardstream.cli.{name}", raising=False)


def _imported_subcommand_modules() -> set[str]:
    return {name for name in _SUBCOMMAND_MODULES if f"shardstream.cli.{name}" in sys.modules}


def test_help_imports_no_subcommand_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _forget_subcommand_modules(monkeypatch)
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "needs torch" in capsys.readouterr().out  # bench and demo say so
    assert _imported_subcommand_modules() == set()


@pytest.mark.parametrize("command", ["ls", "cat", "stat"])
def test_inspect_commands_import_only_their_module(
    command: str, shards: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _forget_subcommand_modules(monkeypatch)
    args = ["-v", command, shards[0]] + (["k0000.txt"] if command == "cat" else [])
    assert main(args) == 0
    assert _imported_subcommand_modules() == {"_inspect", "_options"}


def test_subcommand_help_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["-v", "ls", "--help"])
    assert exc.value.code == 0 and "--no-header" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["nonsense"])
    assert exc.value.code == 2 and "invalid choice: 'nonsense'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["bench", "demo"])
def test_bench_and_demo_without_torch_say_what_to_install(
    command: str,
    shards: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    args = ["bench", shards[0]] if command == "bench" else ["demo", "--dir", str(tmp_path / "demo")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"shardstream {command}: missing dependency" in err
    assert "pip install torch" in err and "deliberately does not depend on torch" in err
    assert not (tmp_path / "demo").exists()  # demo stops before writing its dataset
