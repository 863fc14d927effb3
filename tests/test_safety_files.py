"""Files loadgen writes (issue 16, items 1-3): devices, FIFOs and symlinks are never replaced,
a failed export stops only itself, and an export can't overwrite the results file."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.atomic import check_writable, open_for_writing, write_atomic
from loadgen.cli.main import cli
from loadgen.errors import ConfigError

RUN = ("run", "--requests", "3", "--warmup", "0", "--output-tokens", "4", "--quiet")


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def make_device(path: Path, major: int, minor: int, kind: int = stat.S_IFCHR) -> Path:
    try:
        os.mknod(path, 0o666 | kind, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("os.mknod needs CAP_MKNOD (root, or a container that grants it)")
    return path


class FifoReader:
    """Reads a FIFO to its end in a thread (bounded: joined with a timeout)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as fh:
            self.data = fh.read()

    def join(self) -> bytes:
        self.thread.join(timeout=30)
        if self.thread.is_alive():  # nobody wrote: release the reader's open()
            os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            self.thread.join(timeout=5)
            pytest.fail("nothing was written to the FIFO")
        return self.data


# -- write_atomic / open_for_writing / check_writable ---------------------------------

def test_a_character_device_is_written_through_not_replaced(tmp_path):
    null = make_device(tmp_path / "null", 1, 3)
    assert write_atomic(null, b'{"a": 1}') == null
    assert stat.S_ISCHR(os.stat(null).st_mode)
    with open_for_writing(null, "--save-requests") as fh:
        fh.write("line\n")
    assert stat.S_ISCHR(os.stat(null).st_mode)
    check_writable(null)  # a writable device passes the pre-run check


def test_a_full_device_raises_instead_of_becoming_a_file(tmp_path):
    full = make_device(tmp_path / "full", 1, 7)
    with pytest.raises(OSError) as caught:
        write_atomic(full, b"x")
    assert caught.value.strerror == "No space left on device"
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_a_block_device_is_refused_in_one_line(tmp_path):
    disk = make_device(tmp_path / "loop", 7, 0, stat.S_IFBLK)
    with pytest.raises(OSError, match="is a block device"):
        write_atomic(disk, b"x")
    with pytest.raises(ConfigError, match="--out .* is a block device"):
        check_writable(disk)
    assert stat.S_ISBLK(os.stat(disk).st_mode)


def test_a_fifo_is_written_through_to_its_reader(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    check_writable(fifo)  # must not open it (that would wait for a reader)
    reader = FifoReader(fifo)
    write_atomic(fifo, b"hello\n")
    assert reader.join() == b"hello\n"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_symlink_is_followed_and_kept(tmp_path):
    target = tmp_path / "real" / "results.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]  # no temp file left


def test_a_symlink_to_a_device_writes_through_the_device(tmp_path):
    null = make_device(tmp_path / "null", 1, 3)
    link = tmp_path / "out.json"
    link.symlink_to(null)
    write_atomic(link, "x")
    assert link.is_symlink() and stat.S_ISCHR(os.stat(null).st_mode)


# -- the command line -------------------------------------------------------------------


@pytest.mark.integration
def test_out_on_a_full_device_keeps_the_device_and_falls_back(sim_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    full = make_device(tmp_path / "full", 1, 7)
    result = invoke(*RUN, "--target", sim_url, "--out", str(full))
    assert result.exit_code == 4, result.output
    assert stat.S_ISCHR(os.stat(full).st_mode)
    fallback = list(tmp_path.glob("loadgen-results-*.json"))
    assert len(fallback) == 1
    assert json.loads(fallback[0].read_text())["levels"][0]["requests"]["completed"] == 3


@pytest.mark.integration
def test_out_on_a_fifo_gets_one_document(sim_url, tmp_path):
    fifo = tmp_path / "results.pipe"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    result = invoke("sweep", "--concurrency", "1,2", *RUN[1:], "--target", sim_url,
                    "--out", str(fifo))
    assert result.exit_code == 0, result.output
    data = json.loads(reader.join())  # one document: no partial copy per level before it
    assert len(data["levels"]) == 2 and data["partial"] is False
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.integration
def test_out_through_a_symlink_writes_its_target(sim_url, tmp_path):
    target = tmp_path / "results.json"
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    result = invoke(*RUN, "--target", sim_url, "--out", str(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    assert json.loads(target.read_text())["levels"][0]["requests"]["completed"] == 3


# -- item 2: a failed export stops only itself ------------------------------------------

@pytest.mark.integration
def test_save_requests_on_a_full_disk_stops_only_that_export(sim_url, tmp_path):
    out = tmp_path / "r.json"
    full = make_device(tmp_path / "full", 1, 7)
    result = invoke(*RUN, "--target", sim_url, "--out", str(out), "--save-requests", str(full))
    assert result.exit_code == 4, result.output
    warnings = [line for line in result.output.splitlines() if "--save-requests" in line]
    assert warnings == [f"warning: --save-requests {full}: No space left on device; that "
                        "export stopped, the run goes on"]
    data = json.loads(out.read_text())
    assert data["exports"] == {"requests": "failed: No space left on device"}
    assert data["levels"][0]["requests"]["completed"] == 3


@pytest.mark.integration
def test_hdr_log_on_a_full_disk_stops_only_that_export(sim_url, tmp_path):
    out, hdr = tmp_path / "r.json", tmp_path / "hdr"
    hdr.mkdir()
    full = make_device(tmp_path / "full", 1, 7)
    (hdr / "01-concurrency-1.ttft_ms.hlog").symlink_to(full)  # one of the level's files
    result = invoke(*RUN, "--target", sim_url, "--out", str(out), "--save-requests",
                    str(tmp_path / "req.jsonl"), "--hdr-log", str(hdr))
    assert result.exit_code == 4, result.output
    assert sum("warning: --hdr-log" in line for line in result.output.splitlines()) == 1
    data = json.loads(out.read_text())
    assert data["exports"] == {"requests": "ok", "hdr_log": "failed: No space left on device"}
    assert len((tmp_path / "req.jsonl").read_text().splitlines()) == 3  # the other export


@pytest.mark.integration
def test_exports_that_worked_say_ok_and_exit_0(sim_url, tmp_path):
    out = tmp_path / "r.json"
    result = invoke(*RUN, "--target", sim_url, "--out", str(out), "--save-requests",
                    str(tmp_path / "req.jsonl"))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["exports"] == {"requests": "ok"}


# -- item 3: an export can't be the results file ---------------------------------------

@pytest.mark.parametrize("spelling", ["same", "relative", "symlink"])
def test_save_requests_into_the_results_file_is_refused_before_any_load(tmp_path, spelling,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.json"
    other = {"same": str(out), "relative": "./sub/../r.json", "symlink": "link.json"}[spelling]
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.json").symlink_to(out)
    # Port 9 (discard) is closed: a check that came after the preflight would say so instead.
    result = invoke(*RUN, "--target", "http://127.0.0.1:9", "--out", str(out),
                    "--save-requests", other)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"Error: --save-requests {other} and --out {out} are the same file; give each its "
        "own path"]
    assert not out.exists()


# -- report files and a real size limit ------------------------------------------------

def test_report_files_follow_symlinks_and_refuse_block_devices(tmp_path):
    from loadgen.report import write_reports
    from tests.helpers.report_fixtures import l4_study

    kept = tmp_path / "kept.md"
    kept.write_text("old")
    out = tmp_path / "reports"
    out.mkdir()
    (out / "report.md").symlink_to(kept)
    write_reports(out, l4_study(), formats=("md",))
    assert (out / "report.md").is_symlink() and kept.read_text().startswith("#")
    make_device(out / "report.csv", 7, 0, stat.S_IFBLK)
    with pytest.raises(ConfigError, match=r"cannot write the reports \(.*report.csv is a block "
                                          "device"):
        write_reports(out, l4_study(), formats=("csv",))
    assert stat.S_ISBLK(os.stat(out / "report.csv").st_mode)


@pytest.mark.integration
def test_save_requests_over_a_file_size_limit_stops_only_that_export(sim_url, tmp_path):
    """RLIMIT_FSIZE in a child process: the export hits "File too large", the results
    file (far smaller) is still written."""
    import resource
    import subprocess
    import sys

    limit = 16 * 1024

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out, saved = tmp_path / "r.json", tmp_path / "req.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", "--target", sim_url, "--concurrency", "8",
         "--requests", "64", "--warmup", "0", "--output-tokens", "2", "--quiet",
         "--out", str(out), "--save-requests", str(saved)],
        preexec_fn=small_files, capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 4, proc.stderr
    assert "warning: --save-requests" in proc.stderr and "Traceback" not in proc.stderr
    data = json.loads(out.read_text())
    assert data["exports"] == {"requests": "failed: File too large"}
    assert data["levels"][0]["requests"]["completed"] == 64
    assert saved.stat().st_size <= limit


@pytest.mark.integration
def test_a_failed_export_with_workers_stops_only_that_export(sim_url, tmp_path):
    """With --workers the parent writes the workers' rows: the same guard applies."""
    out = tmp_path / "r.json"
    full = make_device(tmp_path / "full", 1, 7)
    result = invoke("run", "--workers", "2", "--concurrency", "2", "--requests", "8",
                    "--warmup", "0", "--output-tokens", "4", "--quiet", "--target", sim_url,
                    "--out", str(out), "--save-requests", str(full))
    assert result.exit_code == 4, result.output
    data = json.loads(out.read_text())
    assert data["exports"] == {"requests": "failed: No space left on device"}
    assert data["levels"][0]["requests"]["completed"] == 8
