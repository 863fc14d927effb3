"""Shared fixtures: the built-in simulator, served from a background thread.

Sync tests get a URL and talk to it with their own ``asyncio.run(...)`` client code.
"""

from __future__ import annotations

import pytest

from loadgen.simulator import SimProfile, SimulatorThread
from tests.helpers.aws_env import start_moto

# Quick default for the whole session: 20 ms TTFT, 2 ms ITL.
QUICK_PROFILE = SimProfile(ttft_s=0.02, itl_s=0.002)


@pytest.fixture(scope="session")
def sim_url():
    """URL of one simulator shared by the session (profile ``QUICK_PROFILE``)."""
    with SimulatorThread(QUICK_PROFILE) as url:
        yield url


@pytest.fixture
def start_sim():
    """Factory: ``start_sim(profile=..., api_key=None, responder=None) -> url``.

    Every simulator it starts is stopped when the test ends. The started
    :class:`SimulatorThread` objects are in ``start_sim.threads`` (for statistics).
    """
    threads: list[SimulatorThread] = []

    def start(profile: SimProfile = QUICK_PROFILE, api_key: str | None = None,
              responder=None) -> str:
        thread = SimulatorThread(profile, api_key=api_key, responder=responder)
        url = thread.start()
        threads.append(thread)
        return url

    start.threads = threads
    yield start
    for thread in threads:
        thread.stop()


@pytest.fixture(scope="session")
def moto_url():
    """moto in server mode on 127.0.0.1, shared by the session (tests reset it themselves)."""
    server, url = start_moto()
    yield url
    server.stop()


@pytest.fixture
def script_status(monkeypatch):
    """``script_status("Creating", "Failed", failure_reason=...)``: what moto's DescribeEndpoint
    reports next (moto itself is InService at once). Each describe of an existing endpoint
    takes the next status; when the script runs out the endpoint keeps its last one."""
    from moto.sagemaker.models import SageMakerModelBackend

    def install(*statuses: str, failure_reason: str | None = None) -> list[str]:
        script = list(statuses)
        original = SageMakerModelBackend.describe_endpoint

        def describe(self, endpoint_name):
            endpoint = self.endpoints.get(endpoint_name)
            if endpoint is not None and script:
                endpoint.endpoint_status = script.pop(0)
                if endpoint.endpoint_status == "Failed":
                    endpoint.failure_reason = failure_reason
            return original(self, endpoint_name)

        monkeypatch.setattr(SageMakerModelBackend, "describe_endpoint", describe)
        return script

    return install


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory):
    """A small byte-level BPE tokenizer trained here on a tiny corpus (no downloads)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from loadgen.workload.prompts import _WORDS

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [" ".join(_WORDS[i:] + _WORDS[:i]) for i in range(0, len(_WORDS), 3)]
    corpus += ["request 123: 456 789 shared prefix", "the user asks a question about tokens"]
    tokenizer.train_from_iterator(corpus, trainer)
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture(scope="session")
def ray_cluster():
    """One real local Ray cluster for the session (2 CPUs), started on first use."""
    ray = pytest.importorskip("ray", reason="Ray tests need loadgen[ray] (in the test extra)")
    for attempt in (1, 2):  # Ray gives its raylet 30 s to register: a crowded box can miss it
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            break
        except Exception:  # noqa: BLE001 - Ray raises a bare Exception for that timeout
            ray.shutdown()
            if attempt == 2:
                raise
    yield ray
    ray.shutdown()
