"""``tenure import``: supervisord, PM2 and Procfile setups → tenure.toml."""

from __future__ import annotations

__all__: list[str] = []
