"""``shardstream ls | stat | verify | index`` on local datasets, good and broken, and the help texts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shardstream.cli import main
from shardstream.sources.file import FileSource
from shardstream.tar.index import read_index_entries
from shardstream.tar.offsets import decode_sidecar, encode_sidecar, sidecar_url
from shardstream.tar.samples import TarFormat
from shardstream.tar.sharded_writer import ShardWriter
from shardstream.tar.writer import TarWriter


def _write(directory: Path, *, samples: int = 30, per_shard: int = 10, index: bool = True) -> Path:
    with ShardWriter(str(directory / "d-%06d.tar"), maxcount=per_shard, mtime=0, index=index) as sink:
        for i in range(samples):
            sink.write({"__key__": f"k{i:04d}", "txt": f"text {i}", "json": {"i": i}, "cls": i % 3})
    return directory


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """Three shards of 10 samples (txt, json, cls) and the _info.json ShardWriter writes."""
    return _write(tmp_path / "d")


def _json(capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


# -- ls / stat ------------------------------------------------------------------------------------


def test_ls_lists_a_directory_of_shards_with_totals(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ls", str(dataset), "--scan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SAMPLES", "BYTES", "EXTENSIONS", "SHARD"]
    assert [line.split()[-1] for line in lines[1:4]] == [str(dataset / f"d-{i:06d}.tar") for i in range(3)]
    assert lines[1].split()[2] == "cls:10"
    total = lines[4].split()
    size = sum((dataset / f"d-{i:06d}.tar").stat().st_size for i in range(3))
    assert total[:2] == ["30", f"{size:,}"] and "total: 3 shards" in lines[4]


def test_ls_brace_spec_json_reads_the_index(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", str(dataset / "d-{000000..000001}.tar"), "--json"]) == 0
    result = _json(capsys)
    assert [s["from"] for s in result["shards"]] == ["index", "index"]
    assert result["total"]["samples"] == 20 and result["total"]["shards"] == 2
    assert main(["ls", str(dataset / "d-{000000..000001}.tar"), "--json", "--scan"]) == 0
    scanned = _json(capsys)
    assert scanned["total"]["extensions"] == {"cls": 20, "json": 20, "txt": 20}
    assert [s["bytes"] for s in scanned["shards"]] == [s["bytes"] for s in result["shards"]]


def test_ls_reads_extensions_from_the_index_shardwriter_wrote(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ls", str(dataset)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all("cls:10 json:10 txt:10 " in line for line in lines[1:4]), lines
    assert "cls:30 json:30 txt:30 " in lines[4] and "? (--scan)" not in "".join(lines)
    assert main(["ls", str(dataset), "--json"]) == 0
    result = _json(capsys)
    assert [s["from"] for s in result["shards"]] == ["index"] * 3
    assert [s["extensions"] for s in result["shards"]] == [{"cls": 10, "json": 10, "txt": 10}] * 3
    assert result["total"]["extensions"] == {"cls": 30, "json": 30, "txt": 30}
    assert main(["ls", str(dataset), "--json", "--scan"]) == 0
    assert _json(capsys)["shards"] == [{**s, "from": "scan"} for s in result["shards"]]


def test_ls_of_an_index_without_extensions_says_how_to_get_them(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    info = dataset / "_info.json"
    data = json.loads(info.read_text())
    for entry in data["shards"]:
        del entry["extensions"]  # as indexes written before ShardWriter recorded them
    info.write_text(json.dumps(data))
    assert main(["ls", str(dataset)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all("? (--scan)" in line for line in lines[1:5]) and "total: 3 shards" in lines[4]
    assert [line.split()[0] for line in lines[1:4]] == ["10", "10", "10"]  # counts still from it


def test_ls_does_not_take_a_truncated_shard_s_figures_from_the_index(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = dataset / "d-000001.tar"
    indexed = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[: _member_offsets(shard)["k0015.cls"]])  # cut before k0015
    assert main(["ls", str(dataset), "--json"]) == 1
    captured = capsys.readouterr()
    rows = json.loads(captured.out)["shards"]
    # k0010-k0013 read whole; k0014 may miss fields (no end-of-archive marker after it): dropped
    assert [(r["from"], r["samples"]) for r in rows] == [("index", 10), ("scan", 4), ("index", 10)]
    assert rows[1]["bytes"] == shard.stat().st_size
    assert (
        f"problem: {shard}: index says {indexed:,} bytes, the shard has {shard.stat().st_size:,} "
        f"(cut short or rewritten since {dataset}/_info.json was written; its row is read from the "
        f"shard): run `shardstream verify {dataset}`\n"
    ) in captured.err
    assert f"problem: {shard} at byte {shard.stat().st_size}: " in captured.err  # what reading found
    assert main(["verify", str(dataset)]) == 1
    out = capsys.readouterr().out
    assert f"{shard}: size differs from the index: {indexed:,} bytes listed" in out


def test_ls_one_shard_lists_members_and_members_flag(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ls", str(dataset / "d-000000.tar"), "--no-header"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[3] == "k0000.cls"
    assert main(["ls", str(dataset), "--members", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 90 and rows[-1]["name"] == "k0029.txt"


def test_stat_expands_braces_and_directories_and_totals(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stat", str(dataset), "--json"]) == 0
    result = _json(capsys)
    assert [s["samples"] for s in result["shards"]] == [10, 10, 10]
    assert result["total"]["samples"] == 30 and result["total"]["members"] == 90
    assert result["total"]["extensions"]["txt"][0] == 30
    assert main(["stat", "--summary", str(dataset / "d-{000000..000002}.tar")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dataset:    3 shards") and "samples:    30" in out


def test_stat_missing_directory_or_empty_glob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["stat", str(tmp_path / "empty")]) == 1
    assert "holds no shards" in capsys.readouterr().err
    assert main(["stat", str(tmp_path / "nothing-*.tar")]) == 1
    assert "matches no files" in capsys.readouterr().err


def test_help_texts_are_per_command_and_plain(capsys: pytest.CaptureFixture[str]) -> None:
    texts = {}
    for command in ("ls", "cat", "stat", "verify", "index", "cache"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0
        texts[command] = capsys.readouterr().out
        assert "``" not in texts[command] and ":func:" not in texts[command]
    assert len({t.split("\n\n")[1] for t in texts.values()}) == 6  # six different descriptions
    assert (
        "--decode" in texts["verify"] and "--no-offsets" in texts["index"] and "--max-size" in texts["cache"]
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import shardstream

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"shardstream {shardstream.__version__}"


# -- verify ---------------------------------------------------------------------------------------


def test_verify_good_dataset(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(dataset), "--decode", "json,txt,cls"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == (
        f"verified 3 shards, 30 samples, {sum(p.stat().st_size for p in dataset.glob('*.tar')):,} bytes, "
        "1 index, decoded cls,json,txt: 0 problems"
    )


def _flip_header_byte(path: Path, member_offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[member_offset + 100] ^= 0x10  # inside the mode field: the checksum no longer matches
    path.write_bytes(bytes(data))


def _member_offsets(path: Path) -> dict[str, int]:
    from shardstream.tar.reader import iter_members

    with open(path, "rb") as f:
        return {name: offset for name, _, offset in iter_members(f, str(path))}


def test_verify_reports_each_broken_case(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard0, shard1, shard2 = (dataset / f"d-{i:06d}.tar" for i in range(3))
    offsets = _member_offsets(shard0)
    _flip_header_byte(shard0, offsets["k0004.json"])  # bad header checksum
    indexed_size = shard1.stat().st_size
    shard1.write_bytes(shard1.read_bytes()[: _member_offsets(shard1)["k0015.txt"] + 700])  # truncated
    with TarWriter(str(dataset / "d-000003.tar")) as w:  # a duplicate key and a bad JSON, not indexed
        w.write({"__key__": "k0025", "txt": "again"})
        w.write({"__key__": "x", "json": b"{not json"})
    assert main(["verify", str(dataset), "--decode", "json", "--json"]) == 1
    report = _json(capsys)
    problems = {
        (p["url"].rsplit("/", 1)[-1], p["member"], p["offset"]): p["problem"] for p in report["problems"]
    }
    assert problems[("d-000000.tar", None, offsets["k0004.json"])].startswith("bad tar header checksum")
    truncated = [v for (url, *_), v in problems.items() if url == "d-000001.tar"]
    assert len(truncated) == 2 and "truncated" in truncated[0]
    # the index's size for it is no longer true either: both sizes, with the shard's URL
    assert truncated[1] == (
        f"size differs from the index: {indexed_size:,} bytes listed in {dataset}/_info.json, "
        f"{shard1.stat().st_size:,} in the shard (cut short or rewritten since it was indexed)"
    )
    dup = [(k, v) for k, v in problems.items() if "duplicate key 'k0025'" in v]
    assert len(dup) == 1 and dup[0][0][:3] == ("d-000003.tar", None, 0) and str(shard2) in dup[0][1]
    bad_json = [(k, v) for k, v in problems.items() if k[1] == "x.json"]
    assert len(bad_json) == 1 and bad_json[0][1].startswith("cannot decode .json: JSONDecodeError")
    assert "index out of date: it does not list d-000003.tar" in problems.values()
    assert report["ok"] is False and report["problem_count"] == len(report["problems"]) == 6
    # the plain report: one line per problem with URL, member and byte offset, then the summary
    assert main(["verify", str(dataset)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert f"{shard0} at byte {offsets['k0004.json']}: bad tar header checksum" in lines[0]
    assert lines[-1].endswith(": 5 problems")


def test_verify_index_out_of_date(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", str(dataset)]) == 0
    capsys.readouterr()
    info = dataset / "_info.json"
    data = json.loads(info.read_text())
    data["shards"][0]["samples"] = 11
    data["shards"].append({"url": "d-000009.tar", "samples": 5, "bytes": 100})
    info.write_text(json.dumps(data))  # (another tool's layout: read in full, counts table unused)
    sidecar = Path(sidecar_url(str(dataset), "d-000001.tar"))
    offsets, sizes = decode_sidecar(str(sidecar), sidecar.read_bytes())
    assert sizes is not None
    offsets[3] += 512
    sizes[2] += 512
    sizes[3] -= 512
    sidecar.write_bytes(encode_sidecar(offsets.tolist(), sizes.tolist()))
    Path(sidecar_url(str(dataset), "d-000002.tar")).write_bytes(b"SSOFFS01 cut short")
    assert main(["verify", str(dataset)]) == 1
    out = capsys.readouterr().out
    assert f"{info}: index out of date for d-000000.tar: 11 samples listed, 10 in the shard" in out
    assert "index out of date for d-000001.tar: sample 3 listed at byte" in out
    assert "index lists d-000009.tar, which does not exist" in out
    assert f"{dataset}/_offsets/d-000002.tar.bin: {dataset}/_offsets/d-000002.tar.bin is truncated" in out
    assert main(["verify", str(dataset), "--no-index"]) == 0


def test_verify_unknown_decode_extension_is_a_usage_error(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(dataset), "--decode", "nosuchext"]) == 2
    assert "usage error: --decode nosuchext" in capsys.readouterr().err


# -- index ----------------------------------------------------------------------------------------


def test_index_writes_counts_and_the_offsets_resume_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = _write(tmp_path / "plain", samples=25, per_shard=10, index=False)
    assert not (dataset / "_info.json").exists()
    assert main(["index", str(dataset / "d-{000000..000002}.tar")]) == 0
    assert capsys.readouterr().out == f"wrote {dataset}/_info.json: 3 shards, 25 samples\n"
    entries = read_index_entries(str(dataset), offsets=True)
    assert [(e["url"], e["samples"]) for e in entries] == [
        ("d-000000.tar", 10),
        ("d-000001.tar", 10),
        ("d-000002.tar", 5),
    ]
    fmt, source = TarFormat(), FileSource()
    for entry in entries:
        url = str(dataset / entry["url"])
        assert entry["bytes"] == Path(url).stat().st_size
        assert entry["extensions"] == {
            "cls": entry["samples"],
            "json": entry["samples"],
            "txt": entry["samples"],
        }
        keys = [s["__key__"] for s in fmt.samples(source, url)]
        # every offset is where the reader (resume, sample_at) finds that sample
        assert [fmt.sample_at(source, url, o)["__key__"] for o in entry["offsets"]] == keys
    assert main(["index", str(dataset), "--no-offsets", "--json"]) == 0
    assert _json(capsys) == [{"index": f"{dataset}/_info.json", "shards": 3, "samples": 25}]
    assert "offsets" not in read_index_entries(str(dataset), offsets=True)[0]


def test_index_refuses_a_broken_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = _write(tmp_path / "broken", index=False)
    shard = dataset / "d-000002.tar"
    shard.write_bytes(shard.read_bytes()[:3000])
    assert main(["index", str(dataset)]) == 1
    err = capsys.readouterr().err
    assert f"problem: {shard}" in err and "no index written" in err
    assert not (dataset / "_info.json").exists()


def test_ls_of_a_copied_prefix_uses_the_index(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A directory holding only an index (as an S3 prefix looks to us: never listed) names its shards.
    other = tmp_path / "only-index"
    other.mkdir()
    shutil.copy(dataset / "_info.json", other / "_info.json")
    # The index names the shards; that none of them exists is reported, not hidden behind its figures.
    assert main(["ls", str(other)]) == 1
    captured = capsys.readouterr()
    assert "total: 3 shards" in captured.out
    for i in range(3):
        assert f"problem: {other}/d-00000{i}.tar: cannot open: " in captured.err
