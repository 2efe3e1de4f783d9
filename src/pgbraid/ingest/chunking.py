"""Split a document into fragments that keep paragraphs and code blocks whole.

Text is first cut into blocks: a paragraph, a heading, a fenced code block
(Markdown), or a literal/directive block (reStructuredText ``::`` and ``.. x::``
with everything indented under it, blank lines included). Blocks are then
packed into fragments of about ``target`` characters; a heading starts a new
fragment, and only a block longer than ``2 * target`` is cut, at line or
sentence boundaries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+_:.])\1{2,}\s*$")
_MD_HEADING = re.compile(r"^#{1,6}\s+\S")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Block:
    text: str
    heading: bool = False


@dataclass(frozen=True)
class Chunk:
    text: str
    section: str | None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def split_blocks(text: str) -> list[Block]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if _FENCE.match(line):
            i = _take_fence(lines, i, blocks)
            continue
        if _MD_HEADING.match(line):
            blocks.append(Block(line.lstrip("#").strip(), heading=True))
            i += 1
            continue
        if i + 1 < len(lines) and _RST_UNDERLINE.match(lines[i + 1]) and len(lines[i + 1].strip()) >= len(line.strip()):
            blocks.append(Block(line.strip(), heading=True))
            i += 2
            continue
        if _RST_UNDERLINE.match(line) and i + 2 < len(lines) and _RST_UNDERLINE.match(lines[i + 2]):
            blocks.append(Block(lines[i + 1].strip(), heading=True))  # over- and underlined title
            i += 3
            continue
        i = _take_paragraph(lines, i, blocks)
    return blocks


def _take_fence(lines: list[str], start: int, blocks: list[Block]) -> int:
    fence = _FENCE.match(lines[start]).group(1)  # type: ignore[union-attr]
    end = start + 1
    while end < len(lines) and not lines[end].strip().startswith(fence):
        end += 1
    blocks.append(Block("\n".join(lines[start : end + 1]).strip("\n")))
    return end + 1


def _take_paragraph(lines: list[str], start: int, blocks: list[Block]) -> int:
    end = start
    while end < len(lines) and lines[end].strip():
        end += 1
    last = lines[end - 1].rstrip()
    first = lines[start].strip()
    # A literal block (`::`) or a directive owns everything indented below it.
    if last.endswith("::") or first.startswith(".. "):
        base = _indent(lines[start])
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > base):
            end += 1
        while end > start and not lines[end - 1].strip():
            end -= 1
    blocks.append(Block("\n".join(lines[start:end]).strip("\n")))
    return end


def _cut(text: str, limit: int) -> list[str]:
    """Cut an over-long block at line breaks, or at sentence ends for prose."""
    units = text.split("\n") if "\n" in text else _SENTENCE_END.split(text)
    joiner = "\n" if "\n" in text else " "
    pieces: list[str] = []
    current = ""
    for unit in units:
        while len(unit) > limit:  # a single enormous line: hard cut
            if current:
                pieces.append(current)
                current = ""
            pieces.append(unit[:limit])
            unit = unit[limit:]
        if current and len(current) + len(unit) + 1 > limit:
            pieces.append(current)
            current = unit
        else:
            current = f"{current}{joiner}{unit}" if current else unit
    if current.strip():
        pieces.append(current)
    return [p for p in pieces if p.strip()]


def chunk(text: str, *, target: int = 1000) -> list[Chunk]:
    limit = 2 * target
    chunks: list[Chunk] = []
    parts: list[str] = []
    size = 0
    section: str | None = None
    part_section: str | None = None

    def flush() -> None:
        nonlocal parts, size
        if parts:
            chunks.append(Chunk("\n\n".join(parts), part_section))
        parts, size = [], 0

    for block in split_blocks(text):
        if block.heading:
            if size >= target // 4:
                flush()
            section = block.text
            if not parts:
                part_section = section
            parts.append(block.text)
            size += len(block.text)
            continue
        if not parts:
            part_section = section
        pieces = _cut(block.text, limit) if len(block.text) > limit else [block.text]
        for piece in pieces:
            if parts and size + len(piece) > target and size >= target // 4:
                flush()
                part_section = section
            parts.append(piece)
            size += len(piece) + 2
    flush()
    return chunks
