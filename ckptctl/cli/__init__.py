"""placeholder"""

from __future__ import annotations


def main() -> None:
    """Placeholder."""
