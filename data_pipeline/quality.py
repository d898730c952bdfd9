"""Can a router learn these labels? The masked-question ambiguity of a generated data set.

When several legal routes join the same anchor and target, a question whose words are the same
for two of them cannot say which one it means: the via cannot be learned, and the label is
noise. :func:`route_ambiguity` measures it. Each question's entity surfaces are masked; a
sample is *ambiguous* when its masked text is also generated for another route.

Two masks, because a value names its table (value linking finds "Tunnbröd" in Products):

- ``by_table`` replaces a surface by its table (``<Products>``): words plus the value's table
  must decide the route. This is the measure a data set must keep low (<= 2%).
- ``strict`` replaces every surface by one token (``<E>``): words alone must decide. Questions
  that name an entity by its value alone ("Which customers ordered <E>?") are ambiguous under
  this mask by design, so it is reported, not bounded.

>>> from core.graph import JoinPath
>>> from core.samples import Entity, Sample
>>> a = Sample("1", "s", "teachers of course Math", "en", JoinPath("c", (), "t"), "", (Entity("c", "n", "Math", "Math"),))
>>> b = Sample("2", "s", "teachers of course Art", "en", JoinPath("c", ("d",), "t"), "", (Entity("c", "n", "Art", "Art"),))
>>> masked_question(a, by_table=True)
'teachers of course <c>'
>>> route_ambiguity([a, b])["by_table"]
1.0
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from core.samples import Sample


def masked_question(sample: Sample, *, by_table: bool) -> str:
    """``sample.question`` with each entity surface replaced by ``<table>`` (or ``<E>``), lower-cased."""
    q = sample.question
    for e in sorted(sample.entities, key=lambda e: -len(e.surface)):
        if e.surface:
            q = q.replace(e.surface, f"<{e.table}>" if by_table else "<E>")
    return " ".join(q.lower().split())


def route_ambiguity(samples: Sequence[Sample]) -> dict[str, float | int]:
    """Shares of ``samples`` whose masked question is also generated for another route.

    Returns:
        ``{"by_table": share, "strict": share, "n": len(samples)}``; shares in ``[0, 1]``.
    """
    out: dict[str, float | int] = {"n": len(samples)}
    for key, by_table in (("by_table", True), ("strict", False)):
        routes: dict[str, set[str]] = defaultdict(set)
        masked = [masked_question(s, by_table=by_table) for s in samples]
        for s, m in zip(samples, masked, strict=True):
            routes[m].add(str(s.path))
        hit = sum(1 for m in masked if len(routes[m]) > 1)
        out[key] = round(hit / len(samples), 4) if samples else 0.0
    return out
