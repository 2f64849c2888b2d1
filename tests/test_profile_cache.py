"""Parsed calibration files kept between processes (cbsim.cost.profile_cache)."""

from __future__ import annotations

import json
import marshal
import os
from pathlib import Path

import pytest

from cbsim.common.errors import CbsimError
from cbsim.cost import profile_cache
from cbsim.cost.profile import _shipped_dir, read_profile

SHIPPED = Path(str(_shipped_dir())) / "h100-sxm" / "aiconfigurator-vllm.json"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(profile_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / profile_cache.SUBFOLDER


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.marshal")) if folder.is_dir() else []


def _small_profile(tmp_path: Path, elementwise_s: float = 1e-6) -> Path:
    data = json.loads(SHIPPED.read_text())
    data["elementwise"] = {**data["elementwise"], "floor_s": elementwise_s}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    return path


def test_a_second_read_comes_from_the_cache_and_is_the_same_profile(cache: Path) -> None:
    first = read_profile(SHIPPED)
    (entry,) = _entries(cache)
    second = read_profile(SHIPPED)
    assert _entries(cache) == [entry]
    assert second.model_dump() == first.model_dump()
    assert json.loads(SHIPPED.read_text()) == profile_cache.cached_json(SHIPPED.read_bytes())


def test_an_edited_file_is_read_again_not_from_its_old_entry(cache: Path, tmp_path: Path) -> None:
    path = _small_profile(tmp_path, 1e-6)
    assert read_profile(path).elementwise.floor_s == 1e-6
    path.write_text(path.read_text().replace('"floor_s": 1e-06', '"floor_s": 2e-06', 1))
    assert read_profile(path).elementwise.floor_s == 2e-06
    assert len(_entries(cache)) == 2


def test_a_corrupt_entry_is_parsed_again_and_rewritten(cache: Path) -> None:
    expected = read_profile(SHIPPED).model_dump()
    (entry,) = _entries(cache)
    entry.write_bytes(b"\x00not marshal")
    assert read_profile(SHIPPED).model_dump() == expected
    assert profile_cache.cached_json(SHIPPED.read_bytes()) is not None


def test_an_entry_holding_another_schema_version_is_not_used(cache: Path, tmp_path: Path) -> None:
    path = _small_profile(tmp_path)
    raw = path.read_bytes()
    read_profile(path)
    (entry,) = _entries(cache)
    entry.write_bytes(marshal.dumps({"schema_version": 999}))
    assert read_profile(path).elementwise.floor_s == 1e-6
    assert profile_cache.cached_json(raw) == json.loads(raw)


def test_invalid_files_are_never_cached_and_fail_every_time(cache: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "gemm": ')
    for _ in range(2):
        with pytest.raises(CbsimError, match="not valid JSON"):
            read_profile(bad)
    old = tmp_path / "old.json"
    old.write_text('{"schema_version": 0}')
    for _ in range(2):
        with pytest.raises(CbsimError, match="schema_version 0"):
            read_profile(old)
    assert _entries(cache) == []


def test_an_empty_cache_variable_turns_the_cache_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(profile_cache.CACHE_ENV, "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert profile_cache.cache_folder() is None
    read_profile(_small_profile(tmp_path))
    assert not (tmp_path / "xdg").exists()


def test_without_the_variable_the_cache_follows_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(profile_cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert profile_cache.cache_folder() == tmp_path / "xdg" / "cbsim" / "profiles"
    read_profile(_small_profile(tmp_path))
    assert len(_entries(tmp_path / "xdg" / "cbsim" / "profiles")) == 1


def test_a_folder_that_cannot_be_written_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv(profile_cache.CACHE_ENV, str(blocker))
    path = _small_profile(tmp_path)
    assert read_profile(path).elementwise.floor_s == 1e-6
    assert read_profile(path).elementwise.floor_s == 1e-6
    assert blocker.read_text().startswith("a file")


def test_without_a_home_folder_there_is_no_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv(profile_cache.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert profile_cache.cache_folder() is None
    assert read_profile(_small_profile(tmp_path)).elementwise.floor_s == 1e-6


def test_the_folder_keeps_the_entries_used_last(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new entry evicts the least recently used beyond ``MAX_ENTRIES``; a read marks its
    entry used, so the entries a user's runs keep reading stay."""
    monkeypatch.setattr(profile_cache, "MAX_ENTRIES", 3)
    raws = [json.dumps({"n": i}).encode() for i in range(4)]
    for i, raw in enumerate(raws[:3]):
        profile_cache.store_json(raw, {"n": i})
        entry = profile_cache._entry(raw)
        assert entry is not None
        os.utime(entry, (1000.0 + i, 1000.0 + i))  # stored long ago, the first first
    assert profile_cache.cached_json(raws[0]) == {"n": 0}  # read: used now
    profile_cache.store_json(raws[3], {"n": 3})
    assert len(_entries(cache)) == 3
    assert profile_cache.cached_json(raws[1]) is None  # the least recently used: evicted
    assert [profile_cache.cached_json(raws[i]) for i in (0, 2, 3)] == [{"n": 0}, {"n": 2}, {"n": 3}]
