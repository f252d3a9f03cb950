"""The error tree: every error class lives in rifflux.errors and says whether a retry helps."""

from __future__ import annotations

import ast
from pathlib import Path

import rifflux
from rifflux import errors

PACKAGE = Path(rifflux.__file__).parent
ERROR_BASES = {"Exception", "RiffluxError", "CacheUnusable"}
# Control flow inside one module, never raised past it: not errors.
SIGNALS = {"Unsure"}


def _error_classes_outside_errors_module() -> list[str]:
    found = []
    for path in [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "workers").rglob("*.py")]:
        if path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
            if bases & ERROR_BASES and node.name not in SIGNALS:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.name}")
    return found


def test_every_public_error_class_is_defined_in_the_errors_module() -> None:
    assert _error_classes_outside_errors_module() == []


def test_every_error_class_is_drawn_in_the_tree() -> None:
    tree = errors.__doc__ or ""
    classes = [
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type)
        and issubclass(obj, Exception)
        and obj.__module__ == errors.__name__
    ]
    assert classes
    for cls in classes:
        assert cls.__name__ in tree
        assert isinstance(cls.retryable, bool)


def test_permanent_errors_are_the_ones_no_retry_helps() -> None:
    permanent = errors.permanent_errors()
    assert errors.IndexWriteError in permanent
    assert errors.MessageVersionError in permanent
    assert errors.SecretPathError in permanent  # inherits from PathNotAllowedError
    assert errors.IndexLockedError not in permanent
    assert errors.JobStalled not in permanent
    assert errors.RiffluxError not in permanent
