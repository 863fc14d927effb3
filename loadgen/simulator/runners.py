"""Three ways to run the simulator: in the current event loop, in a thread, in a child process."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from ..errors import ConfigError, TargetError
from .plan import Responder
from .profile import SimProfile
from .server import build_app
from .._compat import new_event_loop
from .state import SimState

_KEY_ENV = "LOADGEN_SIM_API_KEY"  # how the child process gets its key (never via argv)
_URL_LINE = re.compile(r"(http://\S+)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RunningSimulator:
    """A simulator serving in the current event loop. ``url`` has no trailing slash."""

    def __init__(self, runner: web.AppRunner, state: SimState, url: str) -> None:
        self._runner = runner
        self.state = state
        self.url = url

    def statistics(self) -> dict:
        return self.state.statistics()

    async def stop(self) -> None:
        await self._runner.cleanup()


async def start_simulator(profile: SimProfile = SimProfile(), host: str = "127.0.0.1",
                          port: int = 0, api_key: str | None = None,
                          responder: Responder | None = None,
                          allow_remote: bool = False) -> RunningSimulator:
    """Serve the simulator on ``host:port`` (0 = any free port) until ``await .stop()``."""
    if not allow_remote and not is_loopback(host):
        raise ConfigError(f"refusing to serve the simulator on non-loopback host {host!r}; "
                          "use 127.0.0.1 or pass --allow-remote")
    state = SimState(profile)
    # Short shutdown: in-flight streams (e.g. stalled ones) are cut after half a second.
    runner = web.AppRunner(build_app(state, responder, api_key), access_log=None,
                           shutdown_timeout=0.5, keepalive_timeout=profile.keepalive_timeout_s)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); "
                          "choose another port") from None
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return RunningSimulator(runner, state, f"http://{shown}:{bound_port}")


class SimulatorThread:
    """The simulator on its own event loop in a background thread (for sync code and tests).

    ``with SimulatorThread(profile) as url: ...``, or ``start()`` / ``stop()``.
    ``simulator`` gives access to the running server (statistics, log).
    """

    def __init__(self, profile: SimProfile = SimProfile(), *, api_key: str | None = None,
                 responder: Responder | None = None, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self._start_args = dict(profile=profile, host=host, port=port, api_key=api_key,
                                responder=responder)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.simulator: RunningSimulator | None = None

    def _call(self, make: Callable[[], Coroutine[Any, Any, Any]], timeout: float = 10.0) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(timeout)

    def start(self) -> str:
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="loadgen-simulator", daemon=True)
        self._thread.start()
        try:
            self.simulator = self._call(lambda: start_simulator(**self._start_args))
        except BaseException:
            self._stop_loop()
            raise
        return self.simulator.url

    def stop(self) -> None:
        if self.simulator is not None:
            simulator, self.simulator = self.simulator, None
            self._call(simulator.stop)
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


@contextmanager
def simulator_process(profile: SimProfile = SimProfile(), *, api_key: str | None = None,
                      host: str = "127.0.0.1", port: int = 0,
                      startup_timeout_s: float = 20.0) -> Iterator[str]:
    """Run ``loadgen mock-server`` as a child process; yield its URL; always stop it.

    The simulator's CPU then never competes with the client's event loop. Responders
    can't cross the process boundary: use ``loadgen mock-server --responder MODULE:FUNC``.
    """
    command = [sys.executable, "-m", "loadgen.cli", "mock-server", "--host", host,
               "--port", str(port), "--profile-json", json.dumps(profile.to_dict())]
    env = dict(os.environ)
    if api_key:
        env[_KEY_ENV] = api_key
        command += ["--api-key-env", _KEY_ENV]
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=env)
        try:
            url = _wait_for_url(child, stderr, startup_timeout_s)
            _wait_for_health(url, child, stderr, startup_timeout_s)
            yield url
        finally:
            _terminate(child)


def _child_failure(child: subprocess.Popen, stderr) -> str:
    stderr.seek(0)
    lines = [line for line in stderr.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {child.returncode}"


def _wait_for_url(child: subprocess.Popen, stderr, timeout_s: float) -> str:
    """The child prints its URL on its first stdout line once it listens."""
    assert child.stdout is not None
    lines: queue.Queue[bytes] = queue.Queue()
    # A reader thread keeps this portable (select() does not take pipes on Windows).
    threading.Thread(target=lambda: lines.put(child.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout_s).decode(errors="replace")
    except queue.Empty:
        line = ""
    match = _URL_LINE.search(line)
    if match:
        return match.group(1)
    child.poll()
    reason = _child_failure(child, stderr) if child.returncode is not None else \
        f"no URL printed within {timeout_s:g}s"
    raise TargetError(f"the built-in simulator did not start: {reason}")


def _wait_for_health(url: str, child: subprocess.Popen, stderr, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise TargetError(f"the built-in simulator exited: {_child_failure(child, stderr)}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1.0) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise TargetError(f"the built-in simulator at {url} did not answer /health "
                      f"within {timeout_s:g}s")


def _terminate(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    if child.stdout is not None:
        child.stdout.close()
