"""One rule each, defined in one place: how wall-clock time is written (loadgen/timefmt.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from loadgen.timefmt import iso, now_iso, stamp
from tests.helpers.import_graph import ROOT, module_files

# Where a time is formatted another way on purpose: a wire protocol's own format.
OWN_FORMATS = {"loadgen.targets.sagemaker_aws"}  # SigV4's X-Amz-Date (20261202T014616Z)
_FORMATTING = re.compile(r"strftime\(|\.isoformat\(|datetime\.now\(|\.utcnow\(|time\.localtime")


def test_wall_clock_is_formatted_only_in_timefmt():
    found = [f"{module}:{number}: {line.strip()}"
             for module, path in module_files().items()
             if module not in OWN_FORMATS | {"loadgen.timefmt"}
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if _FORMATTING.search(line)]
    assert found == []


def test_times_are_utc_whatever_the_local_zone():
    code = ("from loadgen.timefmt import iso, stamp; import time; "
            "print(iso(0), stamp(0), stamp(0, '%m%d%H%M'), time.strftime('%H', time.localtime(0)))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TZ": "Asia/Kathmandu"}  # UTC+05:45
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert out[:3] == ["1970-01-01T00:00:00+00:00", "19700101-000000", "01010000"]
    assert out[3] != "00"  # the zone did apply to local time: the check above means something


def test_aware_datetimes_are_written_in_utc():
    kathmandu = timezone(timedelta(hours=5, minutes=45))
    assert iso(datetime(2026, 12, 2, 7, 31, 16, tzinfo=kathmandu)) == "2026-12-02T01:46:16+00:00"


def test_iso_reads_back():
    written = now_iso()
    assert datetime.fromisoformat(written).utcoffset() == timedelta(0)
    assert re.fullmatch(r"\d{8}-\d{6}", stamp())


def test_secret_values_are_masked_by_one_function():
    """Hiding a secret's value is loadgen.redact.redact_values, wherever it happens: the
    AWS errors, the MCP outputs and the records call it (a local copy once masked in the
    order given, so a secret containing another leaked its tail)."""
    from loadgen.aws.errors import _masked
    from loadgen.errors import AwsError
    from loadgen.mcp.redact import scrub

    secrets = ["hf_abcdefgh", "hf_abcdefgh_and_more"]  # the shorter one first
    text = "token hf_abcdefgh_and_more rejected"
    assert str(_masked(AwsError(text), secrets)) == "token *** rejected"
    assert scrub({"error": text}, secrets) == {"error": "token *** rejected"}
    replaced = [path for path in module_files().values()
                if re.search(r"\.replace\([a-z_]*secret", path.read_text())]
    assert replaced == [ROOT / "loadgen/redact.py"]


def test_a_run_file_written_with_the_old_status_word_reads_as_complete(tmp_path):
    """One word for a run that did everything: ``complete`` (scenario phases, reports and
    MCP runs); MCP's run.json files from before said ``completed``."""
    import json

    from loadgen.mcp.options import ServerOptions
    from loadgen.mcp.runs import RunManager
    from loadgen.status import COMPLETE

    manager = RunManager(ServerOptions(workdir=tmp_path))
    for run_id, state in (("20261201-012845-994d", "completed"),
                          ("20261201-012846-994e", "running")):
        (tmp_path / "runs" / run_id).mkdir(parents=True)
        (tmp_path / "runs" / run_id / "run.json").write_text(
            json.dumps({"run_id": run_id, "kind": "load", "state": state}))
    states = {record["run_id"]: record["state"] for record in manager.list_records()}
    assert states == {"20261201-012845-994d": COMPLETE, "20261201-012846-994e": "abandoned"}
    assert COMPLETE == "complete"
