"""The learner: trajectory intake, fresh replay, training, checkpoints, version numbers and
publishing. Its config sections (``learner.config``) are torch-free; the rest loads torch."""

from __future__ import annotations

from azserve.lazy import lazy_getattr

_LAZY = {
    "CheckpointConfig": "learner.config",
    "LearnerConfig": "learner.config",
    "LearnerSettings": "learner.config",
    "ReplayConfig": "learner.config",
    "TrainerConfig": "learner.config",
    "Learner": "learner.learn",
    "Publisher": "learner.publisher",
    "TrajectoryReceiver": "learner.receiver",
    "Replay": "learner.replay",
    "Trainer": "learner.trainer",
    "VersionCounter": "learner.versions",
}

__all__ = list(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
