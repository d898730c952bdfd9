"""Paraphrase augmentation: rule-based offline, or an OpenAI-compatible endpoint when configured.

A paraphraser turns one question (still holding the ``{E1}``/``{E2}`` entity slots) into ``n``
different wordings. Words listed as *protected* (the table and column names of the path) are
masked before any rule runs, so routing cues survive every rewrite.

Offline rules (:class:`RuleParaphraser`), one or two applied per variant:

- English: ``lead_verb`` (List -> Show me / Give me / Display...), ``which_what``,
  ``synonym`` (linked to -> associated with, total -> overall, average -> mean...),
  ``polite_prefix`` (Could you tell me..., Please...), ``polite_suffix`` (... Thanks.),
  ``reorder`` (two sentences swapped: "Give the name: which products ...?").
- Chinese: ``prefix`` (请问 / 帮我查一下 / 我想知道 / 麻烦查询一下 / 能否告诉我),
  ``synonym`` (列出 -> 列举, 关联的 -> 相关的, 多少个 -> 几个...), ``suffix`` (...呢？ / ，谢谢。),
  ``reorder`` (instruction first: "列出名称：…有哪些？"; topic first: "关于客户 X，…").

:class:`LLMParaphraser` asks ``POST {base_url}/chat/completions`` (urllib, no extra dependency)
and checks every answer keeps the slots and protected words; answers that do not are replaced
by rule paraphrases and counted.
"""

from __future__ import annotations

import json
import random
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Protocol

from core.errors import ConfigError

SLOTS = ("{E1}", "{E2}")

Rule = Callable[[str, random.Random], "str | None"]


class Paraphraser(Protocol):
    """``(text, language, n, rng, protected) -> [(variant, rule_name), ...]`` with at most ``n`` items,
    each different from ``text`` and from each other, keeping the slots and protected words."""

    def __call__(
        self, text: str, language: str, n: int, rng: random.Random, protected: Sequence[str]
    ) -> list[tuple[str, str]]: ...


# ---------------------------------------------------------------------------- masking


def _mask(text: str, protected: Sequence[str]) -> tuple[str, list[str]]:
    """Replace each protected word (any case, longest first) by a token ``\\x00i\\x00``."""
    used: list[str] = []

    def keep(m: re.Match[str]) -> str:
        used.append(m.group(0))
        return f"\x00{len(used) - 1}\x00"

    for w in sorted({p for p in protected if p}, key=len, reverse=True):
        text = re.sub(re.escape(w), keep, text, flags=re.IGNORECASE)
    return text, used


def _unmask(text: str, used: list[str]) -> str:
    for i, w in enumerate(used):
        text = text.replace(f"\x00{i}\x00", w)
    return text


def _lower_first(text: str) -> str:
    return text[0].lower() + text[1:] if text and text[0].isupper() and not text[:2].isupper() else text


def _upper_first(text: str) -> str:
    return text[0].upper() + text[1:] if text and text[0].islower() else text


# ---------------------------------------------------------------------------- English rules

_EN_LEADS: dict[str, tuple[str, ...]] = {
    "List": ("Show me", "Give me", "Display"),
    "Show me": ("List", "Display", "Give me"),
    "Show": ("Display", "List"),
    "Give me": ("Show me", "List", "Provide"),
    "Give": ("Show", "Provide"),
    "Find": ("Look up", "Search for"),
    "Look up": ("Find", "Fetch"),
    "Get": ("Fetch", "Retrieve"),
    "Count": ("Tell me the count of", "Give the number of"),
    "Compute": ("Calculate", "Work out"),
    "Calculate": ("Compute", "Work out"),
    "Tell me": ("Let me know", "Show me"),
}
_EN_SYNONYMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("linked to", ("associated with", "connected to", "related to")),
    ("related to", ("linked to", "associated with")),
    ("connected with", ("linked to", "associated with")),
    ("associated with", ("linked to", "related to")),
    ("tied to", ("linked to", "connected to")),
    ("belong to", ("are linked to", "go with")),
    ("total", ("overall", "summed")),
    ("average", ("mean", "typical average")),
    ("number of", ("count of",)),
    ("every", ("each",)),
    ("at least", ("no less than", "greater than or equal to")),
    ("I need", ("I want", "I'd like")),
    ("return", ("give back", "output")),
)
_EN_QUESTION_START = re.compile(r"^(Which|What|How many|How)\b")


def _en_lead_verb(text: str, rng: random.Random) -> str | None:
    for lead in sorted(_EN_LEADS, key=len, reverse=True):
        if text.startswith(lead + " "):
            return rng.choice(_EN_LEADS[lead]) + text[len(lead) :]
    return None


def _en_which_what(text: str, rng: random.Random) -> str | None:
    if text.startswith("Which "):
        return "What " + text[6:]
    # "What products ..." -> "Which products ...", only before a table/column word
    return "Which " + text[5:] if text.startswith("What \x00") else None


def _en_synonym(text: str, rng: random.Random) -> str | None:
    options = [(p, alts) for p, alts in _EN_SYNONYMS if re.search(rf"\b{re.escape(p)}\b", text)]
    if not options:
        return None
    phrase, alts = rng.choice(options)
    return re.sub(rf"\b{re.escape(phrase)}\b", rng.choice(alts), text, count=1)


def _en_polite_prefix(text: str, rng: random.Random) -> str | None:
    if text.startswith(("Could", "Can", "Please", "I'd", "Do you")):
        return None
    if _EN_QUESTION_START.match(text):
        return rng.choice(("Could you tell me ", "Can you tell me ", "Do you know ")) + _lower_first(text)
    if text[0] in "\x00{":
        return rng.choice(("Please tell me: ", "Quick question: ")) + text
    prefix = rng.choice(("Please ", "Could you please ", "Kindly "))
    out = prefix + _lower_first(text)
    return out[:-1] + "?" if prefix.startswith("Could") and out.endswith(".") else out


def _en_polite_suffix(text: str, rng: random.Random) -> str | None:
    if text.endswith(("Thanks.", "Thank you.", "please.")):
        return None
    if text.endswith("."):
        return text[:-1] + rng.choice((", please.", ". Thanks.", ". Thank you."))
    return text + rng.choice((" Thanks.", " Thank you."))


def _en_reorder(text: str, rng: random.Random) -> str | None:
    m = re.match(r"^(.+?[?.])\s+(.+?)[.?]?$", text)
    if not m or not m.group(2):
        return None
    first, second = m.group(1), m.group(2)
    if not first.endswith("?"):
        return None
    return f"{second}: {_lower_first(first)}"


EN_RULES: dict[str, Rule] = {
    "reorder": _en_reorder,
    "lead_verb": _en_lead_verb,
    "which_what": _en_which_what,
    "synonym": _en_synonym,
    "polite_prefix": _en_polite_prefix,
    "polite_suffix": _en_polite_suffix,
}
"""English rules, in the order they are applied when two are drawn."""

# ---------------------------------------------------------------------------- Chinese rules

_ZH_PREFIXES = ("请问", "帮我查一下，", "我想知道", "麻烦查询一下，", "能否告诉我")
_ZH_SYNONYMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("列出", ("列举", "给出", "显示")),
    ("显示", ("展示", "列出")),
    ("给出", ("列出", "提供")),
    ("查询", ("查找", "检索")),
    ("找出", ("筛选出", "查出")),
    ("关联的", ("相关的", "对应的")),
    ("相关的", ("关联的", "有关的")),
    ("对应的", ("关联的", "相关的")),
    ("多少个", ("几个",)),
    ("一共", ("总共", "合计")),
    ("是什么", ("是啥",)),
    ("统计", ("计算", "汇总")),
    ("计算", ("算一下", "统计")),
    ("所有", ("全部",)),
    ("全部", ("所有",)),
    ("有哪些", ("都有哪些", "包括哪些")),
    ("不低于", ("至少为", "大于等于")),
)


_ZH_IMPERATIVE = re.compile(r"^(列出|列举|显示|展示|给出|提供|查|找出|筛选|统计|计算|汇总|算一下|告诉我|请给出|检索)")
"""A request, not a question: 请问 / 我想知道 / 能否告诉我 cannot go in front ("我想知道列出..." is not Chinese)."""


def _zh_prefix(text: str, rng: random.Random) -> str | None:
    if text.startswith(("请问", "帮我", "我想", "麻烦", "能否")):
        return None
    prefix = rng.choice([p for p in _ZH_PREFIXES if p.endswith("，")] if _ZH_IMPERATIVE.match(text) else _ZH_PREFIXES)
    body = re.sub(r"^(查询|查一下|告诉我|请给出)", "", text) if "查" in prefix or "告诉" in prefix else text
    return prefix + body


def _zh_synonym(text: str, rng: random.Random) -> str | None:
    options = [(p, alts) for p, alts in _ZH_SYNONYMS if p in text]
    if not options:
        return None
    phrase, alts = rng.choice(options)
    return text.replace(phrase, rng.choice(alts), 1)


def _zh_suffix(text: str, rng: random.Random) -> str | None:
    if text.endswith("？") and not text.endswith("呢？"):
        return text[:-1] + "呢？"
    if text.endswith("。") and not text.endswith("谢谢。"):
        return text[:-1] + rng.choice(("，谢谢。", "，多谢。"))
    return None


def _zh_reorder(text: str, rng: random.Random) -> str | None:
    m = re.match(r"^(.+？)(.+?)。?$", text)
    if m and m.group(2):
        return f"{m.group(2)}：{m.group(1)}"
    m = re.match(r"^(\x00\d+\x00 \{E1\}) ?(的)?(.+)$", text)
    if m:
        return f"关于{m.group(1)}，{m.group(3)}"
    return None


ZH_RULES: dict[str, Rule] = {
    "reorder": _zh_reorder,
    "synonym": _zh_synonym,
    "prefix": _zh_prefix,
    "suffix": _zh_suffix,
}
"""Chinese rules, in the order they are applied when two are drawn."""


class RuleParaphraser:
    """Offline paraphrases: each variant applies one or two randomly drawn rules (see module doc).

    >>> p = RuleParaphraser()
    >>> out = p("List the name of every product related to customer {E1}.", "en", 3, random.Random(1), ["product"])
    >>> len(out), all("{E1}" in v and "product" in v for v, _ in out)
    (3, True)
    """

    max_tries = 30

    def __call__(
        self, text: str, language: str, n: int, rng: random.Random, protected: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        rules = ZH_RULES if language == "zh" else EN_RULES
        masked, used = _mask(text, protected)
        seen = {text}
        out: list[tuple[str, str]] = []
        names = list(rules)
        for _ in range(self.max_tries):
            if len(out) >= n:
                break
            k = 1 if rng.random() < 0.5 else 2
            chosen = rng.sample(names, k)
            current, applied = masked, []
            for name in sorted(chosen, key=names.index):
                new = rules[name](current, rng)
                if new is not None and new != current:
                    current, applied = new, [*applied, name]
            if not applied:
                continue
            variant = _unmask(_upper_first(current) if language == "en" else current, used)
            if variant not in seen:
                seen.add(variant)
                out.append((variant, "+".join(applied)))
        return out


# ---------------------------------------------------------------------------- LLM endpoint


class LLMParaphraser:
    """Paraphrases from an OpenAI-compatible chat endpoint (a local vLLM server, for example).

    Args:
        base_url: e.g. ``http://localhost:8000/v1``; ``/chat/completions`` is appended.
        model: the model name the server expects.
        timeout_s: seconds per request.

    Answers that drop a slot (``{E1}``, ``{E2}``) or a protected word, or repeat the input, are
    replaced by :class:`RuleParaphraser` output; ``fallbacks`` counts those.

    Raises:
        ConfigError: (on the first call that fails) the endpoint cannot be reached, answers with
            an HTTP error, or does not answer in the chat-completions format; ``where`` is the URL.
    """

    def __init__(self, base_url: str, model: str, timeout_s: float = 30.0):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.fallback = RuleParaphraser()
        self.fallbacks = 0
        self.requests = 0

    def _ask(self, text: str, language: str, n: int, protected: Sequence[str]) -> list[str]:
        lang = "Chinese" if language == "zh" else "English"
        keep = ", ".join(f'"{p}"' for p in protected if p)
        prompt = (
            f"Rewrite this database question in {n} different ways, in {lang}. Keep the placeholders "
            f"{{E1}} and {{E2}} exactly as written, and keep these words unchanged: {keep}. "
            f"Answer with one rewrite per line and nothing else.\n\n{text}"
        )
        body = json.dumps(
            {"model": self.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0.8}
        ).encode()
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                answer = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise ConfigError(f"paraphrasing endpoint answered HTTP {exc.code} ({exc.reason})", where=self.url) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConfigError(
                f"cannot reach the paraphrasing endpoint ({reason}); fix --llm-base-url or leave it out "
                "to use the offline paraphraser",
                where=self.url,
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"paraphrasing endpoint did not answer JSON ({exc})", where=self.url) from None
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ConfigError("paraphrasing endpoint did not answer in the chat-completions format", where=self.url) from None
        lines = [re.sub(r"^\s*(?:\d+[.)]|[-*•])\s*", "", ln).strip() for ln in str(content).splitlines()]
        return [ln for ln in lines if ln]

    def __call__(
        self, text: str, language: str, n: int, rng: random.Random, protected: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        if n <= 0:
            return []
        slots = [s for s in SLOTS if s in text]
        seen = {text}
        out: list[tuple[str, str]] = []
        for line in self._ask(text, language, n, protected):
            ok = all(s in line for s in slots) and all(p in line for p in protected if p in text)
            if ok and line not in seen:
                seen.add(line)
                out.append((line, "llm"))
            if len(out) >= n:
                break
        if len(out) < n:
            self.fallbacks += n - len(out)
            for variant, rule in self.fallback(text, language, n, rng, protected):
                if variant not in seen and len(out) < n:
                    seen.add(variant)
                    out.append((variant, rule))
        return out
