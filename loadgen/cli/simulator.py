"""``loadgen mock-server``: serve the simulator until Ctrl-C."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
from dataclasses import replace

import click
import cloup

from ..errors import ConfigError
from ..runconfig import default
from ..simulator.plan import Responder
from ..simulator.profile import PROFILES, SimProfile, profile_named
from .._compat import run as run_with_best_loop
from ..simulator.runners import start_simulator


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1000.0


def _load_responder(spec: str) -> Responder:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--responder must look like MODULE:FUNCTION, got {spec!r}")
    try:
        responder = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load responder {spec!r}: {exc}") from None
    if not callable(responder):
        raise ConfigError(f"responder {spec!r} is not callable")
    return responder


def _api_key(env_name: str | None) -> str | None:
    if not env_name:
        return None
    key = os.environ.get(env_name)
    if not key:
        raise ConfigError(f"environment variable {env_name} (from --api-key-env) is empty or "
                          "unset; export the key there")
    return key


def _profile(preset: str, profile_json: str | None, **overrides) -> SimProfile:
    """The preset (or the child runner's JSON profile) with the given options replaced."""
    if not profile_json:
        return profile_named(preset, **overrides)
    try:
        base = SimProfile.from_dict(json.loads(profile_json))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--profile-json is not a simulator profile: {exc}") from None
    return replace(base, **{key: value for key, value in overrides.items() if value is not None})


async def _serve(profile: SimProfile, host: str, port: int, api_key: str | None,
                 responder: Responder | None, allow_remote: bool) -> None:
    simulator = await start_simulator(profile, host=host, port=port, api_key=api_key,
                                      responder=responder, allow_remote=allow_remote)
    try:
        # The first stdout line is the URL: the child-process runner waits for it.
        click.echo(f"loadgen mock-server: model {profile.model} at {simulator.url} "
                   "(Ctrl-C to stop)")
        await asyncio.Event().wait()
    finally:
        await simulator.stop()


PRESET = "the --profile preset's"  # what an unset model option means


@click.command("mock-server", cls=cloup.Command)
@cloup.option_group(
    "Server",
    click.option("--host", default="127.0.0.1", help="Address to listen on."),
    click.option("--port", default=8000, type=int, metavar="PORT", help="0 picks a free port."),
    click.option("--allow-remote", is_flag=True, help="Allow listening on a non-loopback address."),
    click.option("--api-key-env", default=None, show_default="no key",
                 help="Require this environment variable's value as a Bearer key on /v1."),
    click.option("--close-after-response", is_flag=True, default=None,
                 help="Close the connection after each streamed response, without saying so "
                 "(as llama.cpp's server does)."),
    click.option("--connection-close", is_flag=True, default=None,
                 help="Answer generation requests with 'Connection: close'."),
    click.option("--keepalive-timeout", "keepalive_timeout_s", type=float, default=None,
                 metavar="S", show_default=str(default(SimProfile, "keepalive_timeout_s")),
                 help="Seconds before an idle keep-alive connection is closed."),
)
@cloup.option_group(
    "Model behaviour",
    click.option("--profile", "preset", default="default", type=click.Choice(sorted(PROFILES)),
                 help="Preset to start from; the options below override it."),
    click.option("--model", default=None, show_default=PRESET, help="Served model id."),
    click.option("--ttft-ms", type=float, default=None, metavar="MS", show_default=PRESET,
                 help="Time to first token, in ms."),
    click.option("--itl-ms", type=float, default=None, metavar="MS", show_default=PRESET,
                 help="Single-stream inter-token latency, in ms; 0 = fast mode."),
    click.option("--jitter", type=float, default=None, metavar="FRACTION", show_default=PRESET,
                 help="Random spread of each delay, a fraction < 1."),
    click.option("--batch-slowdown", type=float, default=None, metavar="FRACTION",
                 show_default=PRESET, help="ITL growth per extra running request (fraction)."),
    click.option("--max-num-seqs", type=int, default=None, metavar="REQUESTS",
                 show_default=PRESET, help="Running slots; more requests queue."),
    click.option("--prefill-ms-per-1k", type=float, default=None, metavar="MS",
                 show_default=PRESET, help="Extra TTFT (ms) per 1000 prompt tokens."),
    click.option("--events-per-write", type=int, default=None, metavar="EVENTS",
                 show_default=PRESET, help="Most SSE events per socket write."),
    click.option("--seed", type=int, default=None, show_default=PRESET,
                 help="Seed for jitter, faults and answer lengths."),
    click.option("--responder", default=None, metavar="MODULE:FUNCTION",
                 show_default="canned text", help="Maps prompt text to answer text."),
)
@cloup.option_group(
    "Faults (fractions of requests)",
    click.option("--fault-500", type=float, default=None, metavar="FRACTION",
                 show_default=PRESET, help="Requests answered 500."),
    click.option("--fault-429", type=float, default=None, metavar="FRACTION",
                 show_default=PRESET, help="Requests answered 429."),
    click.option("--fault-disconnect", type=float, default=None, metavar="FRACTION",
                 show_default=PRESET, help="Streams whose connection is closed mid-stream."),
    click.option("--fault-stall", type=float, default=None, metavar="FRACTION",
                 show_default=PRESET, help="Streams that pause --stall-s mid-stream."),
    click.option("--stall-s", type=float, default=None, metavar="S", show_default=PRESET,
                 help="Seconds an injected stall lasts."),
)
@click.option("--profile-json", default=None, hidden=True)
def mock_server_command(host, port, allow_remote, preset, model, ttft_ms, itl_ms, jitter,
                        batch_slowdown, max_num_seqs, prefill_ms_per_1k, events_per_write, seed,
                        fault_500, fault_429, fault_disconnect, fault_stall, stall_s,
                        close_after_response, connection_close, keepalive_timeout_s,
                        api_key_env, responder, profile_json):
    """Serve a simulated vLLM OpenAI-compatible server (streaming, batching, faults)."""
    profile = _profile(
        preset, profile_json, model=model, ttft_s=_ms(ttft_ms), itl_s=_ms(itl_ms), jitter=jitter,
        batch_slowdown=batch_slowdown, max_num_seqs=max_num_seqs,
        prefill_s_per_1k_tokens=_ms(prefill_ms_per_1k), events_per_write=events_per_write,
        seed=seed, fault_500=fault_500, fault_429=fault_429, fault_disconnect=fault_disconnect,
        fault_stall=fault_stall, stall_s=stall_s, close_after_response=close_after_response,
        connection_close=connection_close, keepalive_timeout_s=keepalive_timeout_s)
    key = _api_key(api_key_env)
    answer = _load_responder(responder) if responder else None
    try:
        run_with_best_loop(_serve(profile, host, port, key, answer, allow_remote))
    except KeyboardInterrupt:
        click.echo("loadgen mock-server: stopped", err=True)
