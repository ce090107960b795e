"""The learner's weights version numbers, in one place.

A version number names one set of weights for ever. Every ``publish_every`` steps the learner
takes the next number, writes the checkpoint carrying it, and only then publishes it: a learner
killed in between resumes from that checkpoint and re-publishes the same bytes under the same
number. Weights trained past the last published version that are checkpointed on a stop take
the next number too, so a resumed run never serves two sets of weights under one number.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class VersionCounter:
    """``current`` names the weights of step ``named_step``; ``bump`` takes the next number."""

    publish_every: int
    current: int = 0
    """The newest version number taken (0: the initial weights, ``model.initial_weights``)."""
    named_step: int = 0
    """The training step whose weights ``current`` names."""

    def due(self, step: int) -> bool:
        """True right after every ``publish_every``-th step (once per step)."""
        return step > 0 and step % self.publish_every == 0 and step != self.named_step

    def bump(self, step: int) -> int:
        """Take the next number for the weights of ``step``."""
        self.current += 1
        self.named_step = step
        return self.current

    def settle(self, step: int) -> int:
        """The number for the weights of ``step``: ``current`` if it names them, else the next."""
        if step != self.named_step:
            self.bump(step)
        return self.current
