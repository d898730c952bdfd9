"""Schema routing v1: labelled generated questions mixed with unlabelled ones (a user's question log),
paid by the label-free reward where no gold path exists (issue 17 B)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, SupportsFloat

import numpy as np

from core.dataset import load_dataset
from core.errors import ConfigError, DataError
from core.graph import JoinPath, SchemaGraph
from core.io import read_jsonl_lines
from core.samples import SPLITS, Sample
from core.values import ValueIndex
from envs.evidence import CachedRowCounter, QuestionEvidence, SpanFinder, question_evidence, read_judge
from envs.featurizers import FeatureTable, QuestionFeaturizer
from envs.schema_routing import ObsType, SchemaRoutingEnv, resolve_featurizer
from rewards.label_free import COMPONENTS as LABEL_FREE_COMPONENTS
from rewards.label_free import LabelFreeConfig, RowCounter, label_free_components
from rewards.router import COMPONENTS as LABELLED_COMPONENTS
from rewards.router import RewardConfig, path_reward_components


MAX_QUESTION_CHARS = 1000
"""Longest unlabelled question the env takes, in characters; a longer line of a question log is
refused (naming its file and line) rather than slowing every episode's value linking."""


def within_question_limit(question: str, where: str | Path, line: int | None = None) -> str:
    """``question`` itself; DataError naming ``where`` (and ``line``) when it is over :data:`MAX_QUESTION_CHARS`."""
    if len(question) > MAX_QUESTION_CHARS:
        raise DataError(f"question of {len(question)} characters (at most {MAX_QUESTION_CHARS})", where=where, line=line)
    return question


def read_judges(path: str | Path, graph: SchemaGraph) -> list[dict[JoinPath, float] | None]:
    """The ``judge`` field of each line of a question log as ``{route: p}`` (None for a line
    without one), in the order of :func:`read_unlabelled`.

    Raises:
        DataError: a malformed ``judge`` field (:func:`envs.evidence.read_judge`; file and line named).
    """
    return [read_judge(rec, graph, path, line) for line, rec in read_jsonl_lines(path)]


def read_question_records(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """The ``(line, object)`` pairs of a JSONL question log, one ``{"question": "...", ...}``
    object per line (``line`` is 1-based, blank lines counted; objects kept whole).

    Raises:
        DataError: the file is missing or not JSONL, a line lacks a non-empty string ``question``
            or holds one over :data:`MAX_QUESTION_CHARS` characters (file and line named), or it
            holds no question.
    """
    out = []
    for line, rec in read_jsonl_lines(path):
        q = rec.get("question")
        if not isinstance(q, str) or not q.strip():
            raise DataError("field 'question' must be a non-empty string", where=path, line=line)
        within_question_limit(q.strip(), where=path, line=line)
        out.append((line, rec))
    if not out:
        raise DataError("no questions in the question log", where=path)
    return out


def read_question_log(path: str | Path) -> list[tuple[int, str]]:
    """The ``(line, question)`` pairs of :func:`read_question_records`, questions stripped.

    Raises:
        DataError: as :func:`read_question_records`.
    """
    return [(line, rec["question"].strip()) for line, rec in read_question_records(path)]


def read_unlabelled(path: str | Path) -> list[str]:
    """The questions of :func:`read_question_log`, without their line numbers.

    Raises:
        DataError: as :func:`read_question_records`.
    """
    return [q for _, q in read_question_log(path)]


class SchemaRoutingV1Env(SchemaRoutingEnv):
    """
    ## Description

    The v0 task (:class:`~envs.schema_routing.SchemaRoutingEnv`: read a question, answer with one
    of the schema's legal join paths, one step per episode) over two pools of questions: the
    **labelled** generated samples and **unlabelled** questions without a gold path (a user's
    question log, ``unlabelled=FILE``). Each episode draws from the unlabelled pool with
    probability ``unlabelled_ratio``.

    ## Action Space

    As v0: ``Discrete(n_legal_paths)``, index ``i`` = ``graph.legal_paths[i]``.

    ## Observation Space

    As v0 (the featurizer's keys plus ``action_mask``); the feature table holds the labelled
    questions first, then the unlabelled ones (``features`` given: ``n_labelled + n_unlabelled`` rows).

    ## Rewards

    - unlabelled question: the label-free reward
      :func:`rewards.label_free.label_free_components` (legal, value_anchor, rows, detour,
      target_evidence; at most 1.5 with the default :class:`LabelFreeConfig`). A question of a
      judged log (``python -m generator.judge``: a ``judge`` field on its line, or ``judges``)
      is paid ``judge`` instead, the language-model judge's p of the route (the heuristic
      components scaled by ``LabelFreeConfig.heuristics_with_judge``, default 0);
    - labelled question: v0's conditional reward (:func:`rewards.router.path_reward_components`:
      no via credit when the anchor is wrong, 10x on a right non-null via), plus
      ``label_free_weight`` x the label-free total when ``label_free_weight > 0`` (default 0: the
      gold label is the better signal where it exists);
    - the total is clipped to ``[-reward_config.clip, reward_config.clip]``.

    ``info["reward_components"]`` always holds the same keys: v0's (``anchor``, ``via``,
    ``target``, ``legal``; 0 on unlabelled questions), ``label_free/<name>`` for each label-free
    component plus ``label_free/anchor_ok`` and ``label_free/n_rows`` (computed on every
    question, so training can log how the two rewards agree), ``labelled`` (1.0 or 0.0),
    ``raw_total`` and ``total``.

    ## Starting State

    ``reset`` first draws the pool (``self.np_random``, probability ``unlabelled_ratio``), then a
    question uniformly within it. ``options={"sample_index": i}`` pins question ``i`` of the joint
    index (labelled ``0 .. n_labelled - 1``, then unlabelled).

    ## Episode End

    As v0: every episode terminates after one step; no truncation, no step limit.

    ## Info

    ``reset``: ``sample_index`` (joint), ``sample_id`` (``"unlabelled-<k>"`` for the k-th
    unlabelled question), ``labelled``. ``step`` adds ``path``, ``gold_path`` (None when
    unlabelled), ``hops`` (of the gold path; -1 when unlabelled), ``is_success`` (path == gold;
    False when unlabelled) and ``reward_components``.

    ## Arguments

    v0's (``graph``/``samples`` or ``data_dir``/``split``, ``featurizer``, ``features``,
    ``reward_config``, ``include_action_mask``, ``render_mode``), plus:

    - ``unlabelled``: a JSONL file of ``{"question": ...}`` lines (a line may carry the ``judge``
      field of ``python -m generator.judge``) or a list of question strings; None: labelled
      questions only (the reward is then v0's, plus the label-free part when
      ``label_free_weight > 0``).
    - ``judges``: with a list of questions, the judge's ``{route: p}`` of each (or None).
    - ``unlabelled_ratio``: probability that an episode draws an unlabelled question (default
      0.5 when ``unlabelled`` is given; must be 0 without it).
    - ``label_free``: the :class:`LabelFreeConfig`.
    - ``label_free_weight``: weight of the label-free total added on labelled questions (>= 0).
    - ``values``: the value index (default: the data set's ``values.json`` with ``data_dir``).
    - ``db_path``: the SQLite database the label-free row counts run on (default: the data set's);
      or ``count_rows``: a ``count_rows(sql) -> int | None`` function instead.
    - ``mention_spans``: a ``(question, tables) -> spans per table`` function for the target
      evidence (default :func:`data_pipeline.mentions.mention_spans`, which the router reads too).
    - ``evidence``: precomputed :class:`~envs.evidence.QuestionEvidence` per question of the joint
      index (shared between vector envs); overrides ``values`` and ``mention_spans``.

    ## Version History

    - v1: unlabelled questions, label-free reward (issue 17), the judge's reward on judged questions.
    - v0: initial version.

    Raises (constructor):
        ConfigError: v0's; ``unlabelled_ratio`` outside [0, 1] or > 0 without unlabelled
            questions; a negative ``label_free_weight``; the label-free reward is needed but there
            is neither ``db_path`` (nor a data set's) nor ``count_rows``; ``features`` or
            ``evidence`` of the wrong length.
        DataError: v0's; a malformed unlabelled file (file and line named).
    """

    def __init__(
        self,
        graph: SchemaGraph | None = None,
        samples: Sequence[Sample] | None = None,
        *,
        data_dir: str | Path | None = None,
        split: str | None = "train",
        unlabelled: str | Path | Sequence[str] | None = None,
        unlabelled_ratio: float | None = None,
        judges: Sequence[Mapping[JoinPath, float] | None] | None = None,
        featurizer: QuestionFeaturizer | Sequence[QuestionFeaturizer] | str = "encoder",
        features: FeatureTable | None = None,
        reward_config: RewardConfig | None = None,
        label_free: LabelFreeConfig | None = None,
        label_free_weight: float = 0.0,
        values: ValueIndex | None = None,
        db_path: str | Path | None = None,
        count_rows: RowCounter | None = None,
        mention_spans: SpanFinder | None = None,
        evidence: Sequence[QuestionEvidence] | None = None,
        include_action_mask: bool = True,
        render_mode: str | None = None,
    ):
        if data_dir is not None:
            if graph is not None or samples is not None:
                raise ConfigError("give either data_dir or graph and samples, not both", where="data_dir")
            if split is not None and split not in SPLITS:
                raise ConfigError(f"must be None or one of {SPLITS}, got {split!r}", where="split")
            ds = load_dataset(data_dir)
            graph, samples = ds.graph, ds.samples if split is None else ds.split(split)
            values = values if values is not None else ds.values
            db_path = db_path if db_path is not None or count_rows is not None else (ds.db_path if str(ds.db_path) else None)
        if isinstance(unlabelled, str | Path):
            if judges is not None:
                raise ConfigError("give judges with a list of questions; a file's judges are read from its lines", where="judges")
            self.unlabelled_file: Path | None = Path(unlabelled)
            questions = read_unlabelled(unlabelled)
        else:
            self.unlabelled_file = None
            questions = [str(q) for q in (unlabelled or ())]
            for i, q in enumerate(questions):
                if not q.strip():
                    raise DataError("empty question", where=f"unlabelled[{i}]")
                within_question_limit(q.strip(), where=f"unlabelled[{i}]")
        self.unlabelled = questions
        if unlabelled_ratio is None:
            unlabelled_ratio = 0.5 if questions else 0.0
        if not (isinstance(unlabelled_ratio, int | float) and math.isfinite(unlabelled_ratio) and 0.0 <= unlabelled_ratio <= 1.0):
            raise ConfigError(f"must be in [0, 1], got {unlabelled_ratio!r}", where="unlabelled_ratio")
        if unlabelled_ratio > 0 and not questions:
            raise ConfigError(f"is {unlabelled_ratio} but there are no unlabelled questions", where="unlabelled_ratio")
        if not (math.isfinite(label_free_weight) and label_free_weight >= 0):
            raise ConfigError(f"must be >= 0, got {label_free_weight}", where="label_free_weight")
        self.unlabelled_ratio = float(unlabelled_ratio)
        self.label_free = label_free or LabelFreeConfig()
        self.label_free_weight = float(label_free_weight)

        if graph is None or samples is None:
            raise ConfigError("needs graph and samples, or data_dir", where="graph")
        labelled = list(samples)
        if not labelled:
            raise DataError("no labelled samples", where=str(data_dir or "samples"))
        self.n_labelled = len(labelled)
        if features is None:
            featurizer_obj = resolve_featurizer(featurizer)
            features = FeatureTable.build(featurizer_obj, labelled + self._placeholders(graph, labelled[0]))
        elif features.n != self.n_labelled + len(questions):
            raise ConfigError(
                f"features hold {features.n} rows but there are {self.n_labelled} labelled + {len(questions)} unlabelled questions",
                where="features",
            )
        # v0's constructor checks the labelled samples, render mode, spaces; it sees all rows as samples
        super().__init__(graph, labelled + self._placeholders(graph, labelled[0]), features=features,
                         reward_config=reward_config, include_action_mask=include_action_mask, render_mode=render_mode)  # fmt: skip
        self.questions = [s.question for s in labelled] + questions

        if count_rows is None and db_path is not None:
            count_rows = CachedRowCounter(db_path)
        needs_label_free = bool(questions) or self.label_free_weight > 0
        if needs_label_free and count_rows is None:
            raise ConfigError("the label-free reward runs row counts: pass db_path (or data_dir with a SQLite data set) or count_rows", where="db_path")
        self.count_rows = count_rows
        if evidence is not None:
            if len(evidence) != len(self.questions):
                raise ConfigError(f"evidence holds {len(evidence)} rows but there are {len(self.questions)} questions", where="evidence")
            self.evidence = list(evidence)
        else:
            self.evidence = [question_evidence(q, self.graph, values, mention_spans) for q in self.questions] if needs_label_free else []
        if self.unlabelled_file is not None:
            judges = read_judges(self.unlabelled_file, self.graph)
        if judges is not None:
            if len(judges) != len(questions):
                raise ConfigError(f"judges hold {len(judges)} entries but there are {len(questions)} unlabelled questions", where="judges")
            for k, j in enumerate(judges):
                if j is not None:
                    self.evidence[self.n_labelled + k] = dataclasses.replace(self.evidence[self.n_labelled + k], judge=dict(j))

    def _placeholders(self, graph: SchemaGraph, first: Sample) -> list[Sample]:
        """The unlabelled questions as rows of v0's sample list (their ``path`` is never read)."""
        return [
            Sample(id=f"unlabelled-{k}", db=first.db, question=q, language="zh" if any("\u3400" <= ch <= "\u9fff" for ch in q) else "en",
                   path=first.path, sql="", meta={"unlabelled": True})
            for k, q in enumerate(self.unlabelled)
        ]  # fmt: skip

    def is_labelled(self, index: int) -> bool:
        """True when joint index ``index`` is a labelled sample."""
        return index < self.n_labelled

    # -- gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[ObsType, dict[str, Any]]:
        """Start an episode: draw the pool, then a question (module docstring), or ``options["sample_index"]``.

        Raises:
            ConfigError: an unknown option key or an index out of range.
        """
        if options and "sample_index" in options:
            obs, info = super().reset(seed=seed, options=options)
        else:
            super(SchemaRoutingEnv, self).reset(seed=seed)
            if options:
                unknown = set(options) - {"sample_index"}
                raise ConfigError(f"unknown reset option(s) {sorted(unknown)}; known: ['sample_index']", where="options")
            if self.unlabelled and self.np_random.random() < self.unlabelled_ratio:
                self._index = self.n_labelled + int(self.np_random.integers(len(self.unlabelled)))
            else:
                self._index = int(self.np_random.integers(self.n_labelled))
            self._last = None
            obs, info = self.observation_of(self._index), {"sample_index": self._index, "sample_id": self.samples[self._index].id}
        info["labelled"] = self.is_labelled(info["sample_index"])
        return obs, info

    def reward_components(self, index: int, action: int) -> dict[str, float]:
        """Every reward component of answering question ``index`` with ``action`` (keys in the class docstring)."""
        path = self.path_of(action)
        labelled = self.is_labelled(index)
        comp: dict[str, float] = {k: 0.0 for k in LABELLED_COMPONENTS}
        if labelled:
            lab = path_reward_components(path, self.samples[index].path, self.graph, self.reward_config)
            comp.update({k: lab[k] for k in LABELLED_COMPONENTS})
        lf_total = 0.0
        if self.evidence:
            ev = self.evidence[index]
            assert self.count_rows is not None
            lf = label_free_components(path, self.graph, ev.matches, ev.evidence, self.count_rows, self.label_free, ev.judge)
            for k in (*LABEL_FREE_COMPONENTS, "anchor_ok", "n_rows"):
                comp[f"label_free/{k}"] = lf[k]
            lf_total = lf["total"]
        else:
            for k in (*LABEL_FREE_COMPONENTS, "anchor_ok", "n_rows"):
                comp[f"label_free/{k}"] = 0.0
        if labelled:
            raw = sum(comp[k] for k in LABELLED_COMPONENTS) + self.label_free_weight * lf_total
        else:
            raw = lf_total
        clip = self.reward_config.clip
        comp["labelled"] = float(labelled)
        comp["raw_total"] = raw
        comp["total"] = max(-clip, min(clip, raw))
        return comp

    def step(self, action: int | np.integer | np.ndarray) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        """Answer the current question with ``legal_paths[action]``; always terminates.

        Raises:
            ResetNeeded: ``step`` before ``reset`` or after the episode ended.
            InvalidAction: an action outside ``Discrete(n_legal_paths)``.
        """
        index = self._end_episode(action)
        labelled = self.is_labelled(index)
        path = self.path_of(int(action))
        comp = self.reward_components(index, int(action))
        gold = self.samples[index].path if labelled else None
        self._last = (path, gold)  # type: ignore[assignment]
        info = {
            "sample_index": index,
            "sample_id": self.samples[index].id,
            "labelled": labelled,
            "path": path,
            "gold_path": gold,
            "hops": gold.hops if gold is not None else -1,
            "is_success": bool(gold is not None and path == gold),
            "reward_components": comp,
        }
        return self.observation_of(index), float(comp["total"]), True, False, info

    def render(self) -> str | None:
        """``"ansi"``: the current question, or after a step the chosen path and the gold path (or "unlabelled")."""
        if self.render_mode != "ansi" or self._last is None or self._last[1] is not None:
            return super().render()
        return f"UNL {self._last[0]}  (unlabelled question)"
