"""Flags built from a typed config's fields, their help the fields' docstrings, so that flags and fields never drift:
TrainConfig's in every entry point, CompareConfig's in `compare`."""

import argparse
import ast
import inspect
from collections.abc import Iterable
from dataclasses import MISSING, fields
from typing import Any

from contract.config import AFFINITIES, AMP, COMPRESSIONS, DATASETS, PLACEMENTS, TrainConfig

CHOICES = {"dataset": DATASETS, "compression": COMPRESSIONS, "amp": AMP, "cpu_affinity": AFFINITIES,
           "placement_strategy": PLACEMENTS}
"""Fields that take one of a few names: --help shows them as {a,b,c}; the config refuses others in one line."""


def add(parser: argparse.ArgumentParser | Any, config: type = TrainConfig, exclude: Iterable[str] = (),
        defaults: dict[str, object] | None = None, only: Iterable[str] | None = None,
        aliases: dict[str, str] | None = None, bare: dict[str, str] | None = None) -> None:
    """One flag per field of `config` (those in `only`, where given), its help the field's docstring; `defaults`
    overrides a field's default for this command (and its --help says so); `aliases` adds a second name to a flag,
    `bare` the value a flag given without one takes. `parser` may be an argument group."""
    docs, aliases, bare = field_docs(config), aliases or {}, bare or {}
    for f in fields(config):
        if f.name in exclude or not f.init or (only is not None and f.name not in only):
            continue
        names = ["--" + f.name.replace("_", "-"), *([aliases[f.name]] if f.name in aliases else [])]
        default = (defaults or {}).get(f.name, f.default if f.default is not MISSING else None)
        if f.type in (bool, "bool"):
            parser.add_argument(*names, action="store_true", help=docs.get(f.name))
            continue
        choices = CHOICES.get(f.name)
        extra = {"nargs": "?", "const": bare[f.name]} if f.name in bare else {}
        shown = "the model's" if default is None else default
        parser.add_argument(*names, type=_kind(f.type), default=default,
                            help=f"{docs.get(f.name, '')} (default: {shown})",
                            metavar="{" + ",".join(choices) + "}" if choices else None, dest=f.name, **extra)


def _kind(annotation: object) -> type:
    """int, float or str from a field's annotation (`int | None`: int, unset by default)."""
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return {"int": int, "float": float, "str": str}[name.split("|")[0].strip()]


def to_args(cfg: Any, exclude: Iterable[str] = ()) -> list[str]:
    """The flags that rebuild `cfg` in another entry point (the inverse of from_args)."""
    out = []
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if f.name in exclude or value is False or not f.init:
            continue
        out += ["--" + f.name.replace("_", "-")] + ([] if value is True else [str(value)])
    return out


def from_args(args: argparse.Namespace, config: type = TrainConfig, **overrides: object) -> Any:
    values = {f.name: getattr(args, f.name) for f in fields(config) if hasattr(args, f.name)}
    return config(**{**values, **overrides})


def field_docs(config: type) -> dict[str, str]:
    tree = ast.parse(inspect.getsource(config))
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr):
            # Plain text: the docstrings' Markdown backticks would print as they are.
            docs[node.target.id] = " ".join(str(following.value.value).split()).replace("%", "%%").replace("`", "")
    return docs
