"""$ per million output tokens against the L4 study's published table."""

from __future__ import annotations

import pytest

from loadgen.errors import ConfigError
from loadgen.report.cost import check_price, cost_per_million_tokens, tokens_per_dollar

L4_PRICE = 1.1267  # ml.g6.xlarge, us-east-2, $/h


@pytest.mark.parametrize("tokens_per_s, published", [
    (45.6, 6.86),      # bf16, 1 request
    (85.35, 3.67),     # QAT, 1 request
    (171.6, 1.82),     # bf16, 4 requests
    (328.7, 0.95),     # QAT, 4 requests
    (619.1, 0.51),     # bf16, 16 requests
    (1077.25, 0.29),   # QAT, 16 requests
])
def test_l4_study_table(tokens_per_s, published):
    assert round(cost_per_million_tokens(L4_PRICE, tokens_per_s), 2) == published


def test_formula_exactly():
    # $3.60/h at 1 token/s: 3600 tokens per hour, so 1M tokens cost $1000.
    assert cost_per_million_tokens(3.6, 1.0) == pytest.approx(1000.0)
    assert tokens_per_dollar(3.6, 1.0) == pytest.approx(1000.0)


@pytest.mark.parametrize("price, rate", [(None, 10.0), (1.0, None), (1.0, 0.0), (1.0, -3.0)])
def test_no_price_or_no_throughput_means_no_cost(price, rate):
    assert cost_per_million_tokens(price, rate) is None


@pytest.mark.parametrize("bad", [0, -1.5, float("nan"), float("inf"), "1.2", True])
def test_bad_prices_are_one_line_errors(bad):
    with pytest.raises(ConfigError) as err:
        check_price(bad)
    assert "price per hour must be a positive number" in str(err.value)
    assert "\n" not in str(err.value)
    assert check_price(1.1267) == 1.1267 and check_price(None) is None
