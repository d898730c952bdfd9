"""The schema-routing environment: read a question, choose a join path, get the rule reward."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import InvalidAction, ResetNeeded

from core.dataset import load_dataset
from core.errors import ConfigError, DataError
from core.graph import JoinPath, SchemaGraph
from core.samples import SPLITS, Sample
from envs.featurizers import EncoderFeaturizer, FeatureTable, HashedNgramFeaturizer, QuestionFeaturizer
from rewards.router import RewardConfig, path_reward_components

ObsType = dict[str, np.ndarray]


class SchemaRoutingEnv(gym.Env[ObsType, np.int64]):
    """
    ## Description

    One episode is one analyst question over a database. The agent reads the question and answers
    with a join path ``anchor -> via... -> target`` (seed 002's router task), chosen among the
    legal paths of the schema's foreign-key graph (:attr:`SchemaGraph.legal_paths`), and is paid
    by the rule reward of ``rewards.router`` against the sample's gold path.

    ## Action Space

    ``Discrete(n_legal_paths)``: index ``i`` means ``graph.legal_paths[i]`` (sorted by hops,
    anchor, via, target). Every action is a legal path, so the policy cannot emit an illegal route.
    :meth:`path_of` and :meth:`action_of` convert between indices and :class:`JoinPath`.

    ## Observation Space

    A ``Dict`` with the question's features from the featurizer (precomputed once per sample set)
    plus the legal-action mask:

    - ``question``: ``Box(-1, 1, (dim,), float32)``, an L2-normalised embedding:
      ``EncoderFeaturizer`` (the router's sentence encoder, dim = hidden size) or
      ``HashedNgramFeaturizer`` (offline hashed character n-grams, dim 512 by default);
    - ``input_ids``, ``attention_mask``: ``Box(0, vocab-1, (L,), int64)`` and
      ``Box(0, 1, (L,), int64)`` when a ``TokenFeaturizer`` is added (optional);
    - ``action_mask``: ``MultiBinary(n_legal_paths)``, 1 = legal choice. All ones in v0, because
      the action space holds legal paths only.

    ``action_mask`` (on by default, ``include_action_mask``) is the hook for maskable policies
    (also returned by :meth:`action_masks`, the method sb3-contrib's ``MaskablePPO`` calls).

    ## Rewards

    ``rewards.router.path_reward_components(predicted, gold, graph, reward_config)``; with the
    default :class:`RewardConfig`:

    - ``anchor``: +0.5 when the anchor is right;
    - ``via``: conditional on a right anchor: +1.0 for a right non-null via (0.1 x 10),
      +0.1 for a right null via;
    - ``target``: +0.5 when the target is right;
    - ``legal``: -1.0 for an illegal path (never happens here: every action is legal);
    - the total is clipped to ``[-2, 2]``. A right path pays 2.0 (non-null via) or 1.1 (null).

    Every component, ``raw_total`` and ``total`` are in ``info["reward_components"]``.

    ## Starting State

    ``reset`` draws a sample index uniformly from ``self.np_random`` (seeded by ``reset(seed=...)``);
    ``options={"sample_index": i}`` pins the sample instead (evaluation walks all indices).

    ## Episode End

    Every episode *terminates* after one step (the question is answered). There is no truncation
    and no step limit is registered: a ``TimeLimit`` of 1 would also mark every step truncated.

    ## Info

    ``reset``: ``sample_index``, ``sample_id``. ``step`` adds ``path`` and ``gold_path``
    (:class:`JoinPath`), ``hops`` (of the gold path), ``is_success`` (path == gold, read by
    stable-baselines3's ``Monitor`` as ``rollout/success_rate``) and ``reward_components``.

    ## Arguments

    ```python
    import gymnasium as gym
    import envs  # registers the ids
    env = gym.make("route2sql/SchemaRouting-v0", data_dir="data/northwind", split="train")
    env = gym.make("route2sql/SchemaRouting-v0", graph=graph, samples=samples, featurizer="hashed")
    ```

    - ``graph``, ``samples``: a :class:`SchemaGraph` and its labelled :class:`Sample` list; or
    - ``data_dir`` (a folder from ``python -m data_pipeline.build``) and ``split`` (one of
      ``train``, ``validation``, ``test``, ``test_heldout``; None for all samples).
    - ``featurizer``: a :class:`QuestionFeaturizer`, a list of them, or a name: ``"encoder"``
      (``data_pipeline.encoders.load_encoder()``), ``"encoder:<name or dir>"``, ``"hashed"``
      (512-dim hashed n-grams), ``"hashed:<dim>"``.
    - ``features``: a prebuilt :class:`FeatureTable` for exactly these samples (shared between
      the environments of a vector env); overrides ``featurizer``.
    - ``reward_config``: the :class:`RewardConfig` (default weights above).
    - ``include_action_mask``: add ``action_mask`` to the observation (default True).
    - ``render_mode``: None or ``"ansi"`` (a text line: question, chosen path, gold path).

    ## Version History

    - v0: initial version (actions index legal paths; reward = ``rewards.router`` defaults).

    Raises (constructor):
        ConfigError: both or neither of ``graph``/``samples`` and ``data_dir``; a bad split,
            featurizer name or render mode; ``features`` built for another sample count.
        DataError: no samples, or a sample whose gold path is not legal in ``graph``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        graph: SchemaGraph | None = None,
        samples: Sequence[Sample] | None = None,
        *,
        data_dir: str | Path | None = None,
        split: str | None = "train",
        featurizer: QuestionFeaturizer | Sequence[QuestionFeaturizer] | str = "encoder",
        features: FeatureTable | None = None,
        reward_config: RewardConfig | None = None,
        include_action_mask: bool = True,
        render_mode: str | None = None,
    ):
        self.graph, self.samples = _normalise_data(graph, samples, data_dir, split)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"must be None or one of {self.metadata['render_modes']}, got {render_mode!r}", where="render_mode")
        self.render_mode = render_mode
        self.reward_config = reward_config or RewardConfig()
        self.include_action_mask = include_action_mask
        if features is None:
            features = FeatureTable.build(resolve_featurizer(featurizer), self.samples)
        elif features.n != len(self.samples):
            raise ConfigError(f"features hold {features.n} rows but there are {len(self.samples)} samples", where="features")
        self.features = features
        self.n_paths = len(self.graph.legal_paths)
        self.gold_actions = np.array([self.graph.path_index[s.path] for s in self.samples], dtype=np.int64)

        obs_spaces: dict[str, spaces.Space[Any]] = dict(features.spaces)
        if include_action_mask:
            obs_spaces["action_mask"] = spaces.MultiBinary(self.n_paths)
        self.observation_space = spaces.Dict(obs_spaces)
        self.action_space = spaces.Discrete(self.n_paths)
        self._mask = np.ones(self.n_paths, dtype=np.int8)
        self._index: int | None = None
        self._last: tuple[JoinPath, JoinPath] | None = None

    # -- conversions -------------------------------------------------------------------------
    def path_of(self, action: int | np.integer) -> JoinPath:
        """The legal path an action index stands for."""
        return self.graph.legal_paths[int(action)]

    def action_of(self, path: JoinPath) -> int:
        """The action index of a legal path (KeyError when the path is not legal)."""
        return self.graph.path_index[path]

    def action_masks(self) -> np.ndarray:
        """Legal actions, shape ``(n_legal_paths,)`` int8 (all ones in v0)."""
        return self._mask.copy()

    def observation_of(self, index: int) -> ObsType:
        """The observation of sample ``index`` (what ``reset`` returns for it)."""
        obs = self.features.row(index)
        if self.include_action_mask:
            obs["action_mask"] = self._mask.copy()
        return obs

    # -- gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[ObsType, dict[str, Any]]:
        """Start an episode on a random sample (``self.np_random``) or ``options["sample_index"]``.

        Raises:
            ConfigError: an unknown option key or a sample index out of range.
        """
        super().reset(seed=seed)
        options = options or {}
        unknown = set(options) - {"sample_index"}
        if unknown:
            raise ConfigError(f"unknown reset option(s) {sorted(unknown)}; known: ['sample_index']", where="options")
        if "sample_index" in options:
            index = options["sample_index"]
            if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self.samples):
                raise ConfigError(f"must be an int in [0, {len(self.samples)}), got {index!r}", where="options['sample_index']")
            self._index = int(index)
        else:
            self._index = int(self.np_random.integers(len(self.samples)))
        self._last = None
        return self.observation_of(self._index), {"sample_index": self._index, "sample_id": self.samples[self._index].id}

    def _end_episode(self, action: int | np.integer | np.ndarray) -> int:
        """The current question's index, after checking that an episode is open and ``action`` legal; closes the episode.

        Raises:
            ResetNeeded: ``step`` before ``reset`` or after the episode ended.
            InvalidAction: an action outside ``Discrete(n_legal_paths)``.
        """
        if self._index is None:
            raise ResetNeeded("call reset() before step(); each episode is one question and one step")
        if not self.action_space.contains(action):
            raise InvalidAction(f"action must be an int in [0, {self.n_paths}), got {action!r}")
        index, self._index = self._index, None
        return index

    def step(self, action: int | np.integer | np.ndarray) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        """Answer the current question with the path ``legal_paths[action]``; always terminates.

        Raises:
            ResetNeeded: ``step`` before ``reset`` or after the episode ended.
            InvalidAction: an action outside ``Discrete(n_legal_paths)``.
        """
        index = self._end_episode(action)
        sample = self.samples[index]
        path = self.path_of(int(action))
        comp = path_reward_components(path, sample.path, self.graph, self.reward_config)
        self._last = (path, sample.path)
        info = {
            "sample_index": index,
            "sample_id": sample.id,
            "path": path,
            "gold_path": sample.path,
            "hops": sample.path.hops,
            "is_success": path == sample.path,
            "reward_components": comp,
        }
        return self.observation_of(index), float(comp["total"]), True, False, info

    def render(self) -> str | None:
        """``"ansi"``: the current question, or after a step the chosen and the gold path; else None."""
        if self.render_mode != "ansi":
            return None
        if self._last is None:
            return "" if self._index is None else self.samples[self._index].question
        path, gold = self._last
        return f"{'OK ' if path == gold else 'BAD'} {path}  (gold: {gold})"


def _normalise_data(
    graph: SchemaGraph | None,
    samples: Sequence[Sample] | None,
    data_dir: str | Path | None,
    split: str | None,
) -> tuple[SchemaGraph, list[Sample]]:
    if data_dir is not None:
        if graph is not None or samples is not None:
            raise ConfigError("give either data_dir or graph and samples, not both", where="data_dir")
        if split is not None and split not in SPLITS:
            raise ConfigError(f"must be None or one of {SPLITS}, got {split!r}", where="split")
        ds = load_dataset(data_dir)
        graph, samples = ds.graph, ds.samples if split is None else ds.split(split)
    elif graph is None or samples is None:
        raise ConfigError("needs graph and samples, or data_dir", where="graph")
    samples = list(samples)
    if not samples:
        raise DataError(f"no samples{f' in split {split!r}' if data_dir is not None else ''}", where=str(data_dir or "samples"))
    for s in samples:
        if not graph.is_legal(s.path):
            raise DataError(f"gold path {s.path} is not a legal path of the graph", where=f"sample {s.id}")
    return graph, samples


def resolve_featurizer(
    featurizer: QuestionFeaturizer | Sequence[QuestionFeaturizer] | str,
) -> QuestionFeaturizer | Sequence[QuestionFeaturizer]:
    """A featurizer from its name (``"hashed"``, ``"hashed:<dim>"``, ``"encoder"``, ``"encoder:<name or dir>"``);
    featurizer objects pass through.

    Raises:
        ConfigError: an unknown name or a non-integer dim.
    """
    if not isinstance(featurizer, str):
        return featurizer
    kind, _, arg = featurizer.partition(":")
    if kind == "hashed":
        if not arg:
            return HashedNgramFeaturizer()
        if not arg.isdigit():
            raise ConfigError(f"'hashed:<dim>' needs an integer dim, got {arg!r}", where="featurizer")
        return HashedNgramFeaturizer(dim=int(arg))
    if kind == "encoder":
        return EncoderFeaturizer.from_name(arg or None)
    raise ConfigError(f"unknown featurizer {featurizer!r}; use 'encoder', 'encoder:<name>', 'hashed' or 'hashed:<dim>'", where="featurizer")
