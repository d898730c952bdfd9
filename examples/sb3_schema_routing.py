"""Stable-Baselines3 PPO, unchanged, learns to route questions on a small schema.

The registered env ``route2sql/SchemaRouting-v1`` (``--version 1``, the default) observes a
question embedding (a ``Dict`` observation, so SB3's ``MultiInputPolicy``: an MLP on the
embedding) and answers with one of the schema's legal join paths. Its episodes mix the labelled
generated questions with unlabelled ones (a question log: ``--unlabelled FILE``, drawn with
probability ``--unlabelled-ratio``), which it pays with the label-free reward of
``rewards.label_free`` (the mentioned value in the anchor, rows on the route's joins, the
asked-for target). ``--version 0`` runs ``route2sql/SchemaRouting-v0`` (labelled questions only).
This script builds a labelled question set for a small shop database (6 tables, 5 foreign keys;
or any ``--db``), trains PPO and prints greedy full-path accuracy on train and test before and after.

    python examples/sb3_schema_routing.py                          # v1, hashed n-gram features, ~1 min
    python examples/sb3_schema_routing.py --version 0              # v0: labelled questions only
    python examples/sb3_schema_routing.py --featurizer encoder     # multilingual-e5-small embeddings
    python examples/sb3_schema_routing.py --db northwind --max-hops 1 --timesteps 20000   # data_pipeline/unlabelled/northwind.jsonl
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger

from data_pipeline import BuildConfig, build_dataset
from core.cli import parse, run_main
from core.errors import ConfigError
from envs import FeatureTable, SchemaRoutingEnv, read_unlabelled, resolve_featurizer  # importing envs registers the ids

SHOP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE suppliers (id INTEGER PRIMARY KEY, company TEXT NOT NULL, country TEXT);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL,
    category_id INTEGER REFERENCES categories(id), supplier_id INTEGER REFERENCES suppliers(id));
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), order_date TEXT);
CREATE TABLE "order items" (id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES orders(id),
    product_id INTEGER REFERENCES products(id), quantity INTEGER);
INSERT INTO customers VALUES (1,'Alice Martin','Berlin'),(2,'Bob Chen','Paris'),(3,'Carla Diaz','Madrid');
INSERT INTO categories VALUES (1,'Beverages'),(2,'Seafood');
INSERT INTO suppliers VALUES (1,'Nordic Fish AS','Norway'),(2,'Tokyo Traders','Japan');
INSERT INTO products VALUES (1,'Green Tea',4.5,1,2),(2,'Smoked Salmon',18.0,2,1),(3,'Black Coffee',6.0,1,2);
INSERT INTO orders VALUES (1,1,'2024-01-03'),(2,1,'2024-02-10'),(3,2,'2024-02-11'),(4,3,'2024-03-01');
INSERT INTO "order items" VALUES (1,1,1,2),(2,1,2,1),(3,2,3,5),(4,3,2,2),(5,4,1,1),(6,4,3,3);
"""


@dataclass
class Args:
    db: str = "shop"
    """shop (a 6-table shop made here), a sample name (northwind, chinook, hospital, projects) or a SQLite file."""
    max_hops: int = 2
    """Longest path in joins (the action space is every legal path up to this)."""
    featurizer: str = "hashed"
    """Question features: hashed (offline n-grams), encoder (multilingual-e5-small) or hashed:<dim>."""
    timesteps: int = 8192
    """PPO env steps (one question each)."""
    seed: int = 0
    """Seed of data generation, PPO and the env."""
    out: Path | None = None
    """Write results.json here (optional)."""
    version: int = 1
    """Env version: 1 (labelled and unlabelled questions, label-free reward) or 0 (labelled only)."""
    unlabelled: Path | None = None
    """Unlabelled questions, one JSON object with a question a line (v1). Default: data_pipeline/unlabelled/DB.jsonl for a sample database, SHOP_LOG for the shop."""
    unlabelled_ratio: float = 0.3
    """Share of episodes that draw an unlabelled question (v1)."""


SHOP_LOG = (
    "Which customers ordered Green Tea?", "who bought smoked salmon", "products supplied by Tokyo Traders",
    "Where does Bob Chen live?", "哪些客户买过 Black Coffee？", "categories of the products Nordic Fish AS supplies",
    "orders placed by Carla Diaz", "how many products are in Beverages",
)  # fmt: skip
"""A few questions without labels for the shop database (the default log of ``--db shop``)."""


def accuracy(model: PPO, env: SchemaRoutingEnv) -> float:
    """Greedy full-path accuracy over every sample of ``env``."""
    ok = 0
    for i in range(len(env.samples)):
        obs, _ = env.reset(options={"sample_index": i})
        action, _ = model.predict(obs, deterministic=True)
        ok += int(action) == int(env.gold_actions[i])
    return ok / len(env.samples)


def main() -> None:
    args = parse(Args, description=__doc__.split("\n\n")[0])
    if args.version not in (0, 1):
        raise ConfigError(f"must be 0 or 1, got {args.version}", where="--version")
    torch.set_num_threads(1)  # a small MLP is fastest on one thread
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        if db == "shop":
            db = str(Path(tmp) / "shop.sqlite")
            with sqlite3.connect(db) as conn:
                conn.executescript(SHOP)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds, _ = build_dataset(BuildConfig(db=db, out=Path(tmp) / "data", max_hops=args.max_hops, languages="en", seed=args.seed))
        featurizer = resolve_featurizer(args.featurizer)
        train_s, test_s = ds.split("train"), ds.split("test") + ds.split("test_heldout")
        env_id = f"route2sql/SchemaRouting-v{args.version}"
        kwargs: dict = {"graph": ds.graph, "samples": train_s}
        if args.version == 1:
            log = args.unlabelled or Path(__file__).resolve().parent.parent / "data_pipeline" / "unlabelled" / f"{args.db}.jsonl"
            questions = read_unlabelled(log) if args.db != "shop" or args.unlabelled else list(SHOP_LOG)
            rows = train_s + [replace(train_s[0], id=f"unlabelled-{k}", question=q) for k, q in enumerate(questions)]
            kwargs |= {"unlabelled": questions, "unlabelled_ratio": args.unlabelled_ratio, "values": ds.values,
                       "db_path": ds.db_path, "features": FeatureTable.build(featurizer, rows)}  # fmt: skip
        else:
            kwargs["features"] = FeatureTable.build(featurizer, train_s)
        train_env = gym.make(env_id, **kwargs)
        test_env = SchemaRoutingEnv(ds.graph, test_s, features=FeatureTable.build(featurizer, test_s))
        n_unl = len(kwargs.get("unlabelled", ()))
        print(f"{ds.schema.name}: {len(ds.graph.legal_paths)} legal paths, {len(train_s)} train ({n_unl} unlabelled) / "
              f"{len(test_s)} test questions; {env_id}")  # fmt: skip

        model = PPO("MultiInputPolicy", train_env, n_steps=256, batch_size=64, learning_rate=1e-3, seed=args.seed, verbose=0)
        model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default makes an empty /tmp/SB3-<time> folder
        labelled = SchemaRoutingEnv(ds.graph, train_s, features=FeatureTable.build(featurizer, train_s))
        before = {"train": accuracy(model, labelled), "test": accuracy(model, test_env)}
        start = time.perf_counter()
        model.learn(args.timesteps)
        seconds = time.perf_counter() - start
        after = {"train": accuracy(model, labelled), "test": accuracy(model, test_env)}
    for split in ("train", "test"):
        print(f"{split:5s} full-path accuracy {100 * before[split]:5.1f}% -> {100 * after[split]:5.1f}%")
    print(f"{args.timesteps} steps in {seconds:.1f} s ({args.timesteps / seconds:.0f} steps/s, updates included)")
    if args.out is not None:
        from core.io import write_json

        write_json(args.out / "results.json", {"args": {k: str(v) for k, v in vars(args).items()}, "before": before,
                                               "after": after, "seconds": seconds})  # fmt: skip
        print(json.dumps({"before": before, "after": after}))


if __name__ == "__main__":
    run_main(main)
