"""The report as one self-contained HTML page: inline CSS, plots as base64 PNG data
URIs, no script, no external resource. Every string from the results is escaped."""

from __future__ import annotations

import base64
import re
from html import escape

from .document import Bullets, Figure, Paragraph, Table, build_document, simulated_banner

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1100px; padding: 0 1rem; color: #1b1b1b; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem;
     border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
table { border-collapse: collapse; margin: .8rem 0; font-size: .85rem; }
th, td { border: 1px solid #d0d0d0; padding: .25rem .55rem; text-align: left; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td:first-child, td.num { white-space: nowrap; }
td:nth-child(2):not(:last-child) { white-space: nowrap; }
td { overflow-wrap: break-word; } .table-wrap { overflow-x: auto; max-width: 100%; }
#run-metadata td:last-child { overflow-wrap: anywhere; }
nav.toc { background: #f7f7f7; border: 1px solid #e0e0e0; padding: .4rem 1rem; }
nav.toc ol { margin: .3rem 0; padding-left: 1.2rem; columns: 2; }
.warning { background: #fff1f0; border: 2px solid #c62828; color: #8e0000;
           padding: .6rem .9rem; font-weight: 600; }
.banner { position: sticky; top: 0; background: #c62828; color: #fff; text-align: center;
          font-weight: 600; padding: .35rem .8rem; z-index: 1; font-size: .9rem; }
.headline { font-size: 1.15rem; font-weight: 600; background: #f2f7ff;
            border-left: 4px solid #1565c0; padding: .6rem .9rem; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto;
                                        border: 1px solid #e0e0e0; }
figcaption { font-size: .85rem; color: #555; }
"""


# Cells that hold a number ("1,077.25", "$0.29", "2.05×", "1.0%", "40/0", "113.9†") align right.
_NUMERIC = re.compile(r"^[-$]?[\d,.]+(?:[×%]|/[\d,]+)?†?$")


def _cell(text: str) -> str:
    css = ' class="num"' if _NUMERIC.match(text) else ""
    return f"<td{css}>{escape(text)}</td>"


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in table.rows)
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _figure(figure: Figure, plots: dict[str, bytes]) -> str:
    png = plots.get(figure.key)
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    caption = escape(figure.caption)
    return (f'<figure data-plot="{escape(figure.key)}"><img alt="{caption}" '
            f'src="data:image/png;base64,{data}"><figcaption>{caption}</figcaption></figure>')


def _block(block: object, plots: dict[str, bytes]) -> str:
    if isinstance(block, Paragraph):
        css = ' class="warning"' if block.warning else (
            ' class="headline" id="headline"' if block.headline else "")
        return f"<p{css}>{escape(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{escape(item)}</li>" for item in block.items) + "</ul>"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Figure):
        return _figure(block, plots)
    raise TypeError(f"unknown block {block!r}")


def _anchor(title: str) -> str:
    """A section id from its title: ``Latency percentiles`` -> ``latency-percentiles``."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def render_html(summary: dict, plots: dict[str, bytes] | None = None) -> str:
    """The whole page; ``plots`` maps figure keys to PNG bytes (see plots.render_plots)."""
    plots = plots or {}
    title, sections = build_document(summary)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"]
    banner = simulated_banner(summary)
    if banner:  # the one SIMULATED notice of the page
        parts.append(f'<div class="banner" id="simulated-banner">{escape(banner)}</div>')
    parts.append(f"<h1>{escape(title)}</h1>")
    anchors = [_anchor(section.title) for section in sections]
    parts.append('<nav class="toc" id="contents"><strong>Contents</strong><ol>' + "".join(
        f'<li><a href="#{a}">{escape(s.title)}</a></li>' for a, s in zip(anchors, sections))
        + "</ol></nav>")
    for anchor, section in zip(anchors, sections):
        parts.append(f'<section id="{anchor}"><h2>{escape(section.title)}</h2>')
        parts += [_block(block, plots) for block in section.blocks]
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
