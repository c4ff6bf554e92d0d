import html


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
    return html.escape(text)
