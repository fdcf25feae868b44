"""How to install an extra, said where one is missing (one wording for every message)."""

from __future__ import annotations

__all__ = ["install_hint"]


def install_hint(extra: str) -> str:
    """The commands that install ``extra``: from a checkout first, the way the
    documentation installs everything (aiokafka07 is not on a package index, so the
    index's form is given second, as that)."""
    return (
        f"in a checkout of aiokafka07, python -m pip install -e '.[{extra}]' "
        f"(a package installed from an index: python -m pip install 'aiokafka07[{extra}]')"
    )
