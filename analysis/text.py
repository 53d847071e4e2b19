"""How every report writes its figures: a number, seconds, a link rate, bytes, a flag and its value, and a Markdown
table; written once, so that the same figure reads the same in every report."""

from collections.abc import Sequence


def number(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def seconds(value: float) -> str:
    if value == 0:
        return "0 s"
    return f"{value:.2f} s" if abs(value) < 1 else f"{value:.1f} s"


def duration(value: float) -> str:
    """A time a person waits: `45 s`, `4 min 5 s`, `1 h 2 min`."""
    value = round(value)
    if value < 60:
        return f"{value} s"
    if value < 3600:
        return f"{value // 60} min {value % 60} s"
    return f"{value // 3600} h {value % 3600 // 60} min"


def rate(bits_per_s: float | None) -> str:
    """A link rate: `20 Mbit/s`, `1.5 Gbit/s`, or `unshaped` (None)."""
    if bits_per_s is None:
        return "unshaped"
    for unit, size in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits_per_s >= size:
            return f"{bits_per_s / size:.3g} {unit}"
    return f"{bits_per_s:.3g} bit/s"


def size(count: float) -> str:
    """Bytes in powers of 1000: `45.2 MB`."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def flag(name: str) -> str:
    """The command-line flag of a config field: `--bucket-mb` for bucket_mb."""
    return "--" + name.replace("_", "-")


def option(value: object) -> str:
    """An option's value as its flag takes it: `on` or `off` for a switch, anything else as written."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def md_table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table: the header, its rule, a line per row."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
