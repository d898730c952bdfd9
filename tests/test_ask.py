"""generator.ask: the whole chain on the tiny shop (a router trained here, a tiny generator trained
here to answer in the project's format), route-constrained decoding with SmolLM2's real
tokenizer, self-consistency votes, and the command line's bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from data_pipeline.backends.sqlite import ExecutionResult
from core.errors import ConfigError
from core.graph import JoinPath, SchemaGraph
from core.schema import introspect
from generator.ask import AskConfig, AskPipeline
from generator.ask import main as ask_main
from generator.consistency import vote
from generator.constrained import JoinSkeletonProcessor
from generator.models import DEFAULT_GENERATOR, resolve_generator
from router.train_sft import train
from tests.test_router_sft import tiny_config, write_data_set
from tests.conftest import make_tiny_shop


def test_forced_clause_decodes_exactly_with_smollm2_tokens() -> None:
    tok = AutoTokenizer.from_pretrained(resolve_generator(DEFAULT_GENERATOR))
    clause = 'FROM "products" JOIN "order items" ON "order items"."product_id" = "products"."id"'
    prefix = tok.encode("<answer>\nSELECT DISTINCT \"products\".\"name\" FROM", add_special_tokens=False)
    ids = torch.tensor([prefix])
    proc = JoinSkeletonProcessor(tok, [clause], prompt_width=0)
    for _ in range(80):
        scores = proc(ids, torch.zeros(1, len(tok)))
        ids = torch.cat([ids, scores.argmax(-1, keepdim=True)], 1)
        if proc._done[0]:
            break
    text = tok.decode(ids[0].tolist())
    assert text.endswith(clause[len("FROM"):]) and text.count("FROM") == 1, text
    assert proc.forced[0] > 5


def test_a_query_that_already_aliased_t1_t2_gets_the_aliased_clause_and_runs(tmp_path: Path) -> None:
    """SELECT T2.name ... used to be forced FROM "products" JOIN "suppliers" ...: T2 undefined, an error."""
    import sqlite3

    from generator.constrained import aliased_clause

    tok = AutoTokenizer.from_pretrained(resolve_generator(DEFAULT_GENERATOR))
    graph = SchemaGraph(introspect(make_tiny_shop(tmp_path / "shop.sqlite")), max_hops=3)
    path = JoinPath("suppliers", ("products",), "categories")
    clause = graph.from_clause(path)
    assert aliased_clause(clause) == ("FROM suppliers AS T1 JOIN products AS T2 ON T2.supplier_id = T1.id "
                                      "JOIN categories AS T3 ON T2.category_id = T3.id")  # fmt: skip
    decoded = []
    for select in ("SELECT DISTINCT T3.name FROM", 'SELECT DISTINCT "categories"."name" FROM'):
        ids = torch.tensor([tok.encode("<answer>\n" + select, add_special_tokens=False)])
        proc = JoinSkeletonProcessor(tok, [clause], prompt_width=0)
        while not proc._done[0]:
            ids = torch.cat([ids, proc(ids, torch.zeros(1, len(tok))).argmax(-1, keepdim=True)], 1)
        decoded.append(tok.decode(ids[0].tolist()).split("<answer>\n")[1] + " WHERE T1.company = 'Tokyo Traders'")
    assert "AS T1" in decoded[0] and "AS T1" not in decoded[1]
    conn = sqlite3.connect(tmp_path / "shop.sqlite")
    gold = conn.execute(decoded[1].replace("T1.", '"suppliers".')).fetchall()
    assert conn.execute(decoded[0]).fetchall() == gold == [("Beverages",)]


def test_a_row_that_never_writes_from_is_left_alone() -> None:
    tok = AutoTokenizer.from_pretrained(resolve_generator(DEFAULT_GENERATOR))
    proc = JoinSkeletonProcessor(tok, ['FROM "a"', None], prompt_width=0)
    ids = torch.tensor([tok.encode("<answer>\nSELECT 1", add_special_tokens=False)] * 2)
    scores = torch.randn(2, len(tok))
    assert torch.equal(proc(ids, scores.clone()), scores)


def _ok(rows):
    return ExecutionResult(True, rows, ["x"], None, False, 0.0, False)


def test_vote_by_result_set() -> None:
    fail = ExecutionResult(False, None, None, "boom", False, 0.0, False)
    # rows in another order agree; errors and empty results never win; ties go to the first
    assert vote([_ok([(1,), (2,)]), _ok([(2,), (1,)]), _ok([(3,)])]) == 0
    assert vote([fail, _ok([(3,)]), _ok([(3,)]), _ok([(4,)])]) == 1
    assert vote([_ok([]), fail]) is None
    assert vote([_ok([(5,)]), _ok([(6,)])]) == 0


def test_the_rows_line_says_how_many_rows_were_shown_of_how_many() -> None:
    from generator.ask import Answer, _rows_line

    assert _rows_line(Answer("q", rows=[[i] for i in range(11)])) == "(10 of 11 rows shown)"
    assert _rows_line(Answer("q", rows=[[1], [2]])) == "(2 rows)"
    assert _rows_line(Answer("q")) == "(0 rows)" and _rows_line(Answer("q", rows=[[1]])) == "(1 row)"
    capped = Answer("q", rows=[[i] for i in range(100)], truncated=True)
    assert _rows_line(capped) == "(10 of the first 100 rows shown; the query returned more)"
    assert capped.to_dict()["truncated"] is True


def test_printed_answers_escape_control_characters(capsys: pytest.CaptureFixture[str]) -> None:
    """A value in the database (or a question, or the model's SQL) holding ESC [2J cleared the screen."""
    from generator.ask import Answer, _print

    _print(Answer("who\x1b]0;owned\x07?", sql="SELECT '\x1b[2J'", columns=["c"], rows=[["\x1b[2J\tok"]]))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "who\\x1b]0;owned\\x07?" in out and "\\x1b[2J\tok" in out


QUESTION = "which categories does the supplier Nordic Fish AS supply"
GOLD = JoinPath("suppliers", ("products",), "categories")


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A router trained on the tiny shop, and a tiny Llama taught the gold answers in the
    project's answer format with this very prompt builder (a few hundred steps, seconds)."""
    from generator.folders import save_generator
    from generator.prompt import prompt_token_ids
    from generator.prompt import build_prompt, render_completion
    from tests.test_generator_train import make_tiny_llama

    root = tmp_path_factory.mktemp("ask")
    db = make_tiny_shop(root / "shop.sqlite")
    data = write_data_set(db, root / "data")
    torch.manual_seed(0)
    train(tiny_config(data, root / "router"))
    schema = introspect(db)
    graph = SchemaGraph(schema)
    gold_sql = graph.from_clause(GOLD)
    sql = f'SELECT DISTINCT "categories"."name" {gold_sql} WHERE "suppliers"."company" = \'Nordic Fish AS\''
    tiny = make_tiny_llama(root / "llama", resolve_generator(DEFAULT_GENERATOR))
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    tok = AutoTokenizer.from_pretrained(tiny)
    prompt = prompt_token_ids(tok, build_prompt(QUESTION, GOLD, schema, graph, [], k=0, with_reasoning=False,
                                                schema_detail="compact"))  # fmt: skip
    target = tok.encode(render_completion(sql, None), add_special_tokens=False) + [tok.eos_token_id]
    ids = torch.tensor([prompt + target])
    labels = ids.clone()
    labels[0, : len(prompt)] = -100
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(300):
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if float(loss) < 0.01:
            break
    save_generator(root / "gen", model, tok, {"base_model": str(tiny), "prompt": {"k_examples": 0, "with_reasoning": False,
                                                                                  "schema_detail": "compact",
                                                                                  "quote_all_identifiers": False}})  # fmt: skip
    return {"root": root, "db": db, "router": root / "router", "generator": root / "gen", "sql": sql}


def test_ask_returns_route_sql_and_rows(chain: dict[str, Path]) -> None:
    with AskPipeline.from_pretrained(chain["router"], chain["generator"], chain["db"]) as pipe:
        a = pipe.ask(QUESTION)
    assert a.path == GOLD and 0 < a.confidence <= 1
    assert a.sql == chain["sql"] and a.error is None
    assert a.columns == ["name"] and a.rows == [["Seafood"]]


def test_ask_with_a_reranker_follows_its_pick(chain: dict[str, Path]) -> None:
    """With a reranker the query is written for the reranked route; weights that ignore the
    language model keep the router's route, so the answer is the plain one."""
    from generator.rerank import RerankConfig

    keep = RerankConfig(model=DEFAULT_GENERATOR, top_k=3, forward_weight=0.0, channel_weight=0.0)
    with AskPipeline.from_pretrained(chain["router"], chain["generator"], chain["db"], rerank=keep) as pipe:
        assert pipe.reranker is not None and pipe.reranker.examples  # the router's training folder is still there
        a = pipe.ask(QUESTION)
        assert a.path == GOLD and a.sql == chain["sql"] and a.rows == [["Seafood"]]
        routed = pipe.router.route(QUESTION, top_k=3)
        # the language model alone picks among the router's three best; the query follows it
        pipe.reranker.config = RerankConfig(model=DEFAULT_GENERATOR, top_k=3, forward_weight=1.0, channel_weight=1e6)
        pick = pipe.reranker.rerank([routed])[0].route.path
        b = pipe.ask(QUESTION)
    assert pick in [p for p, _ in routed.top_k]
    assert b.path == pick and b.sql is not None and pipe.router.graph.from_clause(pick) in b.sql


def test_ask_reports_bad_questions_in_the_answer_not_as_an_exception(chain: dict[str, Path]) -> None:
    with AskPipeline.from_pretrained(chain["router"], chain["generator"], chain["db"]) as pipe:
        empty, long = pipe.ask_batch(["   ", "word " * 200])
    assert empty.error == "empty question" and empty.sql is None
    assert "more than the router's limit" in str(long.error)


def test_ask_file_in_file_out(chain: dict[str, Path], tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "q1", "question": QUESTION}) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    ask_main(["--router", str(chain["router"]), "--generator", str(chain["generator"]), "--db", str(chain["db"]),
              "--file", str(src), "--out", str(out)])  # fmt: skip
    rec = json.loads(out.read_text(encoding="utf-8"))
    assert rec["id"] == "q1" and rec["path"] == GOLD.to_dict() and rec["error"] is None
    assert rec["rows"] == [["Seafood"]] and rec["sql"] == chain["sql"]
    assert set(rec) >= {"question", "path", "sql", "rows", "error", "confidence", "uncertain"}



def test_interactive_answers_each_piped_line_and_survives_bad_ones(chain: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Blank lines are skipped; undecodable bytes and an over-long line are answered with an error
    instead of ending the session; the good question after them is still answered."""
    import io
    import sys

    typed = b"\n".join([QUESTION.encode(), b"   ", b"\xff\xfe which?", ("word " * 200).encode(), QUESTION.encode()]) + b"\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(typed)))
    answers = ask_main(["--router", str(chain["router"]), "--generator", str(chain["generator"]), "--db", str(chain["db"]),
                        "--interactive"])  # fmt: skip
    assert [a.question for a in answers] == [QUESTION, "\ufffd\ufffd which?", ("word " * 200).strip(), QUESTION]
    assert answers[0].rows == [["Seafood"]] and answers[-1].rows == [["Seafood"]]
    assert "more than the router's limit" in str(answers[2].error)
    assert capsys.readouterr().out.count("Seafood") == 2


def test_sampled_candidates_repeat_with_their_seed_and_leave_torch_random_state_alone(chain: dict[str, Path]) -> None:
    from transformers import AutoModelForCausalLM

    from generator.sampling import generate_answers

    tok = AutoTokenizer.from_pretrained(chain["root"] / "llama")  # untrained: its samples vary
    model = AutoModelForCausalLM.from_pretrained(chain["root"] / "llama")
    prompts = [tok.encode(QUESTION)] * 3
    state = torch.get_rng_state()
    a = generate_answers(model, tok, prompts, max_new_tokens=8, temperature=1.0, seed=3)
    b = generate_answers(model, tok, prompts, max_new_tokens=8, temperature=1.0, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    c = generate_answers(model, tok, prompts, max_new_tokens=8, temperature=1.0, seed=4)
    assert a == b and a != c and len(set(a)) > 1



def test_ask_file_answers_in_chunks_with_progress_and_keeps_the_order(chain: dict[str, Path], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from generator.ask import FILE_CHUNK

    n = FILE_CHUNK + 2  # two chunks: the answers file is rewritten after each
    src = tmp_path / "in.jsonl"
    lines = [json.dumps({"id": i, "question": QUESTION if i % 2 else "which suppliers?"}) for i in range(n)]
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    ask_main(["--router", str(chain["router"]), "--generator", str(chain["generator"]), "--db", str(chain["db"]),
              "--file", str(src), "--out", str(out), "--threads", "1"])  # fmt: skip
    recs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in recs] == list(range(n))
    assert all(r["sql"] == chain["sql"] for r in recs if r["id"] % 2)
    err = capsys.readouterr().err
    assert f"{n}/{n}" in err and "question/s" in err and f"wrote {n} answers" in err

@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--file", "x.jsonl"], "--file needs --out"),
        (["q", "--samples", "0"], "--samples"),
        (["q", "--samples", "100000"], "^--samples: at most 64"),
        (["q", "--seed", "-1"], "^--seed: "),
        (["q", "--seed", str(2**64)], "^--seed: "),
        (["--file", "q.jsonl", "--out", "./q.jsonl"], "^--out: is the question file q.jsonl"),
        (["Which orders \udcff\udcfe"], "question 1 is not UTF-8 text"),  # undecodable argv bytes crashed the tokenizer
        (["  "], "question 1 is empty"),  # as router.route: exit 2, not an answer with an error
        ([], "^questions: give a question, --file or --interactive"),
        (["q", "--interactive"], "^--interactive: reads its questions as they are typed"),
    ],
)
def test_bad_options_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AskConfig(router=Path("r"), generator="g", **_kw(argv))


def _kw(argv: list[str]) -> dict:
    kw: dict = {}
    it = iter(argv)
    for a in it:
        if a == "--file":
            kw["file"] = Path(next(it))
        elif a == "--out":
            kw["out"] = Path(next(it))
        elif a in ("--samples", "--seed"):
            kw[a[2:]] = int(next(it))
        elif a == "--interactive":
            kw["interactive"] = True
        else:
            kw["questions"] = (a,)
    return kw


def test_bad_input_on_the_command_line_is_one_line_exit_2(chain: dict[str, Path], tmp_path: Path) -> None:
    import subprocess
    import sys

    other = make_tiny_shop(tmp_path / "other.sqlite")
    import sqlite3

    sqlite3.connect(other).execute("CREATE TABLE extra (id INTEGER PRIMARY KEY)").connection.commit()
    # a generator folder whose tokenizer is another model's (multilingual-e5-small's, 250k tokens)
    import shutil

    from data_pipeline.encoders import resolve_encoder

    foreign = tmp_path / "gen_foreign_tokenizer"
    shutil.copytree(chain["generator"], foreign)
    for f in foreign.glob("*"):
        if f.name.startswith(("tokenizer", "special_tokens")) or f.suffix == ".model":
            f.unlink()
    for f in resolve_encoder("multilingual-e5-small").iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "sentencepiece")):
            shutil.copy(f, foreign / f.name)
    broken = tmp_path / "gen_broken_tokenizer"
    shutil.copytree(chain["generator"], broken)
    (broken / "tokenizer.json").write_text("garbage", encoding="utf-8")
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"question": QUESTION}) + "\n", encoding="utf-8")
    cases = [
        (["--router", str(chain["router"]), "--generator", str(foreign), "--db", str(chain["db"]), "q"], "belongs to another model"),
        (["--router", str(chain["router"]), "--generator", str(broken), "--db", str(chain["db"]), "q"],
         "tokenizer files are missing or broken"),
        (["--router", str(chain["router"]), "--generator", str(chain["generator"]), "--file", str(src), "--out", str(tmp_path)],
         "is a folder; give a file name"),
        (["--router", str(chain["router"]), "--generator", str(chain["generator"]), "--db", "nowhere.sqlite", "q"], "nowhere.sqlite"),
        (["--router", str(tmp_path), "--generator", str(chain["generator"]), "q"], "router checkpoint"),
        (["--router", str(chain["router"]), "--generator", str(chain["generator"]), "--db", str(other), "q"], "trained on schema"),
        (["--router", str(chain["router"]), "--generator", str(tmp_path / "nogen"), "--db", str(chain["db"]), "q"], "nogen"),
        (["--router", str(chain["router"]), "--generator", str(chain["generator"]), "--db", str(chain["db"]),
          "--rerank-model", str(tmp_path / "nolm"), "q"], "--rerank-model: "),
    ]
    for argv, needle in cases:
        r = subprocess.run([sys.executable, "-m", "generator.ask", *argv], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2, (argv, r.stderr[-1500:])
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], (argv, r.stderr[-1500:])


def test_a_bad_record_after_a_blank_line_names_its_own_line(tmp_path: Path) -> None:
    """Blank lines are skipped; the line named was the record's count (2), not its line (3)."""
    from core.errors import DataError

    f = tmp_path / "q.jsonl"
    f.write_text('{"question": "which customers?"}\n\n{"question": 5}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"q\.jsonl:3: record needs a non-empty string field 'question'"):
        ask_main(["--router", str(tmp_path / "r"), "--generator", str(tmp_path / "g"), "--file", str(f), "--out", str(tmp_path / "o.jsonl")])
