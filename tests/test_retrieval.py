"""Few-shot retrieval: the char n-gram fallback and the encoder path, with self-exclusion."""

from __future__ import annotations

import numpy as np
import pytest

from data_pipeline import JoinPath, Sample
from core.errors import ConfigError, DataError
from generator.retrieval import CharNgramIndex, ExampleRetriever

P = JoinPath("t", (), "t")


def _pool(questions: list[str]) -> list[Sample]:
    return [Sample(f"s{i}", "db", q, "en", P, f"SELECT {i}") for i, q in enumerate(questions)]


POOL = _pool([
    "How many orders did each customer place?",
    "List all products in the Beverages category",
    "What is the total freight of orders shipped to Germany?",
    "Which employees report to Andrew Fuller?",
    "每个客户下了多少订单？",
    "列出饮料类别的所有产品",
])


def test_fallback_finds_shared_wording():
    r = ExampleRetriever(POOL)
    assert r.top_k("how many orders has each customer placed", k=1)[0].id == "s0"
    assert r.top_k("products of the beverages category", k=1)[0].id == "s1"
    assert r.top_k("饮料类别有哪些产品", k=1)[0].id == "s5"  # Chinese, no segmentation
    assert r.top_k("每个客户的订单数", k=1)[0].id == "s4"


def test_cosine_scores_are_bounded_and_self_is_one():
    idx = CharNgramIndex([s.question for s in POOL])
    for i, s in enumerate(POOL):
        sims = idx.scores(s.question)
        assert sims.shape == (len(POOL),)
        assert sims[i] == pytest.approx(1.0)
        assert np.all(sims <= 1.0 + 1e-9) and np.all(sims >= 0)
    assert np.all(idx.scores("zzzz qqqq") == 0)  # unseen n-grams only


def test_self_and_same_question_are_excluded():
    pool = POOL + [Sample("dup", "db", POOL[0].question, "en", P, "SELECT 0")]
    r = ExampleRetriever(pool)
    got = r.for_sample(pool[0], k=3)
    assert len(got) == 3
    assert all(s.id not in ("s0", "dup") for s in got)
    assert r.top_k(POOL[0].question, k=1)[0].id == "s0"  # without exclude it would be first


def test_k_bounds():
    r = ExampleRetriever(POOL)
    assert r.top_k("anything", k=0) == []
    assert len(r.top_k("orders", k=50)) == len(POOL)
    with pytest.raises(ConfigError):
        r.top_k("orders", k=-1)
    with pytest.raises(DataError):
        ExampleRetriever([])


class _AxisEncoder:
    """A toy encoder: one axis per keyword, rows L2-normalised; records the prefixes it saw."""

    KEYWORDS = ("order", "product", "employee", "freight")

    def __init__(self):
        self.prefixes: list[str] = []

    def encode(self, texts, prefix):
        self.prefixes.append(prefix)
        m = np.array([[float(k in (prefix + t).lower()) for k in self.KEYWORDS] + [0.1] for t in texts])
        return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_encoder_path_ranks_by_cosine():
    enc = _AxisEncoder()
    r = ExampleRetriever(POOL, encoder=enc, prefix="")
    assert r.top_k("Who are the employees?", k=1)[0].id == "s3"
    # "freight" + "order": s2 has both keywords, s0 only "order"
    assert [s.id for s in r.top_k("freight per order", k=2)] == ["s2", "s0"]
    sims = r.scores("products")
    assert sims.shape == (len(POOL),) and sims[1] == pytest.approx(1.0)


def test_encoder_prefix_defaults_to_spec_query_prefix():
    class Spec:
        query_prefix = "query: "

    enc = _AxisEncoder()
    enc.spec = Spec()
    ExampleRetriever(POOL, encoder=enc).top_k("orders", k=1)
    assert set(enc.prefixes) == {"query: "}


def test_encoder_with_wrong_shape_is_a_data_error():
    class Bad:
        def encode(self, texts, prefix):
            return np.zeros((len(texts) + 1, 3))

    with pytest.raises(DataError, match="encoder returned shape"):
        ExampleRetriever(POOL, encoder=Bad())


@pytest.mark.parametrize("use_encoder", [False, True])
def test_batch_retrieval_equals_one_by_one(use_encoder):
    enc = _AxisEncoder() if use_encoder else None
    r = ExampleRetriever(POOL, encoder=enc, prefix="")
    calls_before = len(enc.prefixes) if enc else 0
    batch = r.for_samples(POOL, k=2)
    if enc:
        assert len(enc.prefixes) == calls_before + 1  # one encoder call for the whole batch
    assert batch == [r.for_sample(s, k=2) for s in POOL]
    assert all(s not in got for s, got in zip(POOL, batch, strict=True))
    assert r.for_samples(POOL, k=0) == [[]] * len(POOL)
    assert r.for_samples([], k=3) == []
