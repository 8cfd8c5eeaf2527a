"""A sweep's Optuna study: where it is stored, what samples and prunes its trials, and which sweep it is.

The study is stored beside the sweep's output by default, in a journal file (``study.journal``) that
several local processes append to under a file lock; a database URL (``postgresql://...``: the production
instance's Postgres; ``sqlite:///...``) stores it there instead. The study records the sweep it belongs to
(``sweep``: the base config, the data's identity, the space and the settings that change what is searched;
``sweep_id``: their hash) in its user attributes: opening it for another sweep is refused, naming both, so
that no trial of one sweep is ever ranked beside a trial of another. ``trials`` is not part of a sweep's
identity: asking for more continues it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
from optuna.pruners import BasePruner, HyperbandPruner, MedianPruner, NopPruner
from optuna.samplers import BaseSampler, GridSampler, RandomSampler, TPESampler
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

from marin_pipelines.store import version_hash
from marin_pipelines.sweeps.settings import SweepSettings
from marin_pipelines.sweeps.space import SearchSpace

JOURNAL_FILE = "study.journal"
JOURNAL_STUDY = "sweep"  # a journal file holds one sweep's study
SWEEP_ATTR, SWEEP_ID_ATTR = "sweep", "sweep_id"
REDUCTION_FACTOR = 3  # Hyperband's: a third of each rung's trials go on to the next


class OtherSweep(ValueError):
    """The study found where a sweep keeps its study belongs to another sweep."""


def journal_path(out: str, storage: str | None) -> str | None:
    """The study's journal file: ``storage`` where it is a path, else ``out``'s; None where ``storage`` is a
    database URL. A journal file elsewhere than on local disk is refused."""
    if storage is not None and "://" in storage:
        return None
    path = storage or f"{out.rstrip('/')}/{JOURNAL_FILE}"
    if "://" in path and not path.startswith("file://"):  # by its scheme: no bucket client is started
        raise ValueError(
            f"a sweep's journal file is a local file, not {path}: give a database URL as the storage "
            "(postgresql://...) for a sweep whose output is in a bucket"
        )
    return path


def storage_of(out: str, storage: str | None) -> tuple[BaseStorage, str, str]:
    """The study's storage, the study's name in it and where it is (for messages): ``storage`` a database URL
    (the study named by the sweep's output) or a journal file's path; by default ``out``'s journal file."""
    path = journal_path(out, storage)
    if path is None:
        assert storage is not None
        return RDBStorage(storage), out.rstrip("/"), storage.split("@")[-1]  # no password in messages
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(path)), JOURNAL_STUDY, path


def open_study(
    storage: BaseStorage, name: str, where: str, identity: dict[str, Any], pruner: BasePruner
) -> optuna.Study:
    """The study of the sweep ``identity`` (created where there is none); another sweep's is refused. Call it
    under the sweep's lock: creating a study and recording its sweep are two writes."""
    study = optuna.create_study(
        storage=storage, study_name=name, direction="minimize", pruner=pruner, load_if_exists=True
    )
    asked = json.loads(json.dumps(identity))  # as stored: lists for tuples
    sweep_id = version_hash(asked)
    found = study.user_attrs.get(SWEEP_ID_ATTR)
    if found is None:
        study.set_user_attr(SWEEP_ATTR, asked)
        study.set_user_attr(SWEEP_ID_ATTR, sweep_id)
    elif found != sweep_id:
        differ = differences(study.user_attrs.get(SWEEP_ATTR, {}), asked)
        raise OtherSweep(
            f"{where} holds the study of another sweep ({found}) than this one ({sweep_id}); they differ in "
            f"{'; '.join(differ) or 'their records'}. Give another output folder (or storage), or the "
            "config, data, space and settings of the sweep it holds"
        )
    return study


def differences(found: Any, asked: Any, path: str = "", most: int = 6) -> list[str]:
    """What differs between two sweeps' records, one line per value: ``path: found -> asked``."""
    if isinstance(found, dict) and isinstance(asked, dict):
        lines = []
        for key in sorted(found.keys() | asked.keys()):
            lines += differences(found.get(key), asked.get(key), f"{path}.{key}" if path else key, most)
        return lines[:most]
    return [] if found == asked else [f"{path}: {_short(found)} there, {_short(asked)} here"]


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Grid(GridSampler):
    """Optuna's grid sampler, which stops the study once every point is asked for: only possible inside
    ``Study.optimize``; a sweep asks for ``trials`` itself."""

    def after_trial(self, *args: Any, **kwargs: Any) -> None:
        pass


def make_sampler(settings: SweepSettings, space: SearchSpace, seed: int) -> BaseSampler:
    """The sampler that draws one trial, seeded by ``seed`` (each trial its own: workers that share the study
    never draw the same sequence). The grid is shuffled by the sweep's seed, the same for every trial: its
    trial n takes the n-th point of that order."""
    if settings.sampler == "grid":
        return Grid(space.grid(), seed=settings.seed)
    if settings.sampler == "random":
        return RandomSampler(seed=seed)
    return TPESampler(seed=seed, n_startup_trials=settings.startup_trials)


def make_pruner(settings: SweepSettings, report_every: int, steps: int) -> BasePruner:
    """Hyperband over reports from ``report_every`` to ``steps`` steps, the median rule, or none."""
    if settings.pruner == "hyperband":
        return HyperbandPruner(
            min_resource=report_every,
            max_resource=max(steps, report_every),
            reduction_factor=REDUCTION_FACTOR,
        )
    if settings.pruner == "median":
        return MedianPruner(n_startup_trials=settings.startup_trials, n_warmup_steps=0)
    return NopPruner()


def trial_seed(seed: int, number: int) -> int:
    """The sampler's seed for trial ``number`` of a sweep seeded ``seed``."""
    return int(version_hash([seed, number]), 16) % 2**32
