"""A checkpoint's agent loaded in the background, so that an engine answers its protocol's
handshake at once: ``uci`` gets ``uciok`` and GTP's ``protocol_version`` its answer while the
net is read and compiled (13-16 s on 2 cores), where GUIs and python-chess's ``popen_uci``
(10 s) give up on a silent engine. The first command that needs the net waits for it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any


class Loading:
    """``agent_from_checkpoint(...)`` run on a thread from the start; ``get()`` waits for its
    (Config, Agent), or raises what the load raised, or a ConfigError when the checkpoint's
    game does not speak ``protocol`` (``Game.protocols``: ``azserve uci`` plays chess)."""

    def __init__(
        self,
        checkpoint: str,
        config: str | None,
        overrides: Sequence[str],
        protocol: str | None = None,
        plays: str = "",
    ) -> None:
        """``plays``: what the engine plays, for the error (``"chess"``)."""
        self._args = (checkpoint, config, list(overrides))
        self._protocol, self._plays = protocol, plays
        self._done = threading.Event()
        self._value: tuple[Any, Any] | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._load, name="engine-load", daemon=True).start()

    def _load(self) -> None:
        try:
            import torch

            from azserve.arena.agent import agent_from_checkpoint

            # One position at a time: a second thread only adds overhead, and with another
            # engine (or a second match) on the cores, torch's spinning threads slowed a Go
            # game 40-fold (205 s against 5 s, measured).
            torch.set_num_threads(1)
            path, config, overrides = self._args
            cfg, agent = agent_from_checkpoint(path, config, overrides, None)
            if self._protocol is not None and self._protocol not in agent.game.protocols:
                from azserve.errors import ConfigError

                raise ConfigError(
                    f"--checkpoint: azserve {self._protocol} plays {self._plays or 'other games'}; "
                    f"this checkpoint plays {cfg.game}"
                )
            self._value = (cfg, agent)
        except BaseException as exc:  # handed to whoever waits, in its thread
            self._error = exc
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def get(self) -> tuple[Any, Any]:
        """(Config, Agent), once loaded."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


__all__ = ["Loading"]
