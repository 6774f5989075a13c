"""python -m ckptctl."""

from __future__ import annotations

from ckptctl.cli import main

if __name__ == "__main__":
    main()
