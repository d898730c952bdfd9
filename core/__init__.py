"""The ground floor: the contracts every other floor shares.

``schema`` (tables, columns, keys), ``catalog`` (the one reader of SQLite's catalogue), ``sqlite``
(the one read-only opener), ``graph`` (the schema graph and
its join paths anchor -> via -> target), ``samples`` (one question with its path and gold query),
``dataset`` (a built data set on disk), ``values`` (the value index behind value linking),
``errors`` (one error type that names the file, line or field), ``io`` (atomic writes, JSONL) and
``cli`` (dataclass options on the command line). Nothing here imports another floor.
"""
