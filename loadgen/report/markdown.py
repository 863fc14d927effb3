"""The report as Markdown, for pull requests and terminals (plots are in the HTML page)."""

from __future__ import annotations

import re

from .document import Bullets, Figure, Paragraph, Table, build_document, simulated_banner

# Characters that would change the meaning of Markdown text or break a table cell.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|~])")


def escape(text: str) -> str:
    """Plain text as literal Markdown: specials backslash-escaped, one line."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))
    return "\\" + escaped if escaped.startswith(("#", "-", "+", ">")) else escaped


def _table(table: Table) -> list[str]:
    lines = ["| " + " | ".join(escape(h) for h in table.headers) + " |",
             "|" + "|".join(" --- " for _ in table.headers) + "|"]
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in table.rows]
    return lines


def _block(block: object) -> list[str]:
    if isinstance(block, Paragraph):
        text = escape(block.text)
        return [f"> **{text}**" if block.warning else (f"**{text}**" if block.headline
                                                        else text)]
    if isinstance(block, Bullets):
        return [f"- {escape(item)}" for item in block.items]
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Figure):
        return []  # images live in report.html
    raise TypeError(f"unknown block {block!r}")


def render_markdown(summary: dict) -> str:
    title, sections = build_document(summary)
    lines = [f"# {escape(title)}", ""]
    banner = simulated_banner(summary)
    if banner:  # the one SIMULATED notice of the report
        lines += [f"> **{escape(banner)}**", ""]
    for section in sections:
        if all(isinstance(block, Figure) for block in section.blocks):
            continue  # only plots: they are in report.html
        lines += [f"## {escape(section.title)}", ""]
        for block in section.blocks:
            rendered = _block(block)
            if rendered:
                lines += rendered + [""]
    lines.append("_Plots: see report.html next to this file._")
    return "\n".join(lines) + "\n"
