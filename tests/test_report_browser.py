"""The HTML report in a real headless browser (Debian's chromium): every plot decodes."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from loadgen.report import write_reports
from tests.helpers.report_fixtures import L4_PRICE, l4_study

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHROMIUM = next(filter(None, map(shutil.which, BROWSERS)), None)
if CHROMIUM is None:
    # README command 2 must pass on a machine with only Python; CI (.ci/run) installs
    # Chromium and sets LOADGEN_REQUIRE_BROWSER=1, which turns this skip into a failure.
    reason = f"no Chromium/Chrome on PATH (looked for {', '.join(BROWSERS)})"
    if os.environ.get("LOADGEN_REQUIRE_BROWSER") == "1":
        pytest.fail(f"LOADGEN_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
# The overlaid comparison plots lead (issue 18: the answer first), then the per-run details.
PLOTS = ["latency_throughput", "cdf_ttft_ms", "cdf_itl_ms", "cost", "decode", "throughput",
         "latency_ttft_ms", "latency_itl_ms", "latency_e2e_ms"]
# After load, write each image's plot key and decoded size into a data attribute, so
# --dump-dom shows what the browser really decoded.
PROBE = """<script>
window.addEventListener("load", () => {
  document.body.dataset.images = JSON.stringify([...document.images].map(
    (img) => [img.closest("figure").dataset.plot, img.naturalWidth, img.naturalHeight]));
  document.body.dataset.banner = document.getElementById("simulated-banner")
    ? getComputedStyle(document.getElementById("simulated-banner")).display : "missing";
  // Table of contents: every link's section exists. Width: the page never scrolls sideways
  // (wide tables scroll in their own box) and the metadata table wraps to the page.
  document.body.dataset.toc = JSON.stringify([...document.querySelectorAll("nav.toc a")].map(
    (a) => [a.getAttribute("href"), !!document.querySelector(a.getAttribute("href"))]));
  const meta = document.querySelector("#run-metadata table").getBoundingClientRect().width;
  document.body.dataset.wide = JSON.stringify({
    page: document.documentElement.scrollWidth > window.innerWidth,
    metadata: meta > document.body.clientWidth + 1});
});
</script>"""


def _browser_view(page: Path, tmp_path: Path) -> dict:
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=90, check=True).stdout
    attributes = dict(re.findall(r'data-(images|banner|toc|wide)="([^"]*)"', dom))
    assert "images" in attributes, dom[:500]
    return {"images": json.loads(html.unescape(attributes["images"])),
            "banner": attributes.get("banner"),
            "toc": json.loads(html.unescape(attributes["toc"])),
            "wide": json.loads(html.unescape(attributes["wide"]))}


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    directory = tmp_path_factory.mktemp("browser")
    write_reports(directory, l4_study(simulated=True), formats=("html",),
                  price_per_hour=L4_PRICE)
    return directory / "report.html"


def _png_sizes(page: Path) -> list[tuple[int, int]]:
    """Each embedded PNG's own width and height (its IHDR chunk), in page order."""
    sizes = []
    for data in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page.read_text()):
        head = base64.b64decode(data[:44])
        sizes.append((int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")))
    return sizes


def test_every_plot_is_present_and_decoded(report_page, tmp_path):
    view = _browser_view(report_page, tmp_path)
    assert [key for key, _, _ in view["images"]] == PLOTS
    # The browser decoded every image to the PNG's own size (900 px wide at the report's DPI).
    decoded = [(width, height) for _, width, height in view["images"]]
    assert decoded == _png_sizes(report_page)
    assert all(width == 900 and height >= 480 for width, height in decoded), decoded
    assert view["banner"] == "block"  # the SIMULATED banner is shown
    assert len(view["toc"]) >= 8 and all(found for _, found in view["toc"])
    assert "#run-metadata" in [href for href, _ in view["toc"]]
    assert view["wide"] == {"page": False, "metadata": False}  # wraps, never overflows


def test_a_broken_image_is_caught(report_page, tmp_path):
    """The check can fail: corrupt one PNG and the browser decodes it to nothing."""
    page = report_page.read_text()
    start = page.index("data:image/png;base64,") + len("data:image/png;base64,")
    broken = tmp_path / "broken.html"
    broken.write_text(page[:start] + "AAAA" + page[start + 4:])
    view = _browser_view(broken, tmp_path)
    assert view["images"][0] == [PLOTS[0], 0, 0]
    assert all(width > 0 for _, width, _ in view["images"][1:])
