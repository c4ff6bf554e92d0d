import html
import re


def render(text):
    """A tiny Markdown subset: '#'-headers and paragraphs separated by blank lines."""
    out = []
    for block in text.strip().split("\n\n"):
        block = block.strip()
        level = len(block) - len(block.lstrip("#"))
        if 1 <= level <= 6 and block[level:level + 1] == " ":
            out.append(f"<h{level}>{inline(block[level + 1:])}</h{level}>")
        elif block:
            out.append(f"<p>{inline(block)}</p>")
    return "\n".join(out)


def inline(text):
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
        else:
            part = html.escape(part)
            part = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", part)
            part = re.sub(r"\*(.+?)\*", r"<em>\1</em>", part)
            out.append(part)
    return "".join(out)
