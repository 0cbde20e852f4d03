"""Optuna studies that several workers share safely, and what a study records about itself.

* A study records what it was created for (a fingerprint of the inputs and the objectives) in its
  user attributes; a run with other inputs or another number of objectives is refused, instead of
  failing every trial forever. It also records, readably, the model, GPU, GPU count, framework,
  objectives, planner version and how knobs are stored (`study_attrs`): a study made by an older
  planner, which stored knobs as integer codes, is refused with a one-line error.
* Only the worker that creates a study enqueues the seed layouts (creation is atomic in the
  storage), so they are enqueued once, and before it records the fingerprint the others wait for,
  so no worker samples before the seeds are queued.
* SQLite: every transaction is `BEGIN IMMEDIATE`, so two workers cannot pop the same waiting trial
  (pysqlite starts no transaction on SELECT, which let both run it and the second crash with
  "Cannot tell a COMPLETE trial"); a 60 s busy timeout instead of 5 s.
* Heartbeats: each trial records one when asked; trials RUNNING without a heartbeat for
  STALE_AFTER_S (a killed worker's) are failed when a worker (re)opens the study.
* Storage URLs are shown without passwords and SQLite files by their name only (`public_storage`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sqlite3
import time
from contextlib import closing
import warnings
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode

from costmodels.errors import SpecError

FINGERPRINT_ATTR = "planner_fingerprint"
OBJECTIVES_ATTR = "planner_objectives"
CREATOR_ATTR = "planner_creator"       # the process that created the study (this_worker)
WORKER_ATTR = "worker"                 # a trial's user attribute: the process that ran it (this_worker)
ENCODING_ATTR = "planner_params"       # search_spaces.optuna_space.PARAMS_ENCODING
HEARTBEAT_S = 60
# A RUNNING trial whose worker has not been heard of for this long is failed (PLANNER_STALE_TRIAL_S overrides).
STALE_AFTER_S = 120           # a trial lives from ask to tell: one batch, well under a second of work


def study_fingerprint(space, profile, settings) -> str:
    """What a study's trial values depend on: model, cluster (every field but the price's currency),
    GPUs, knob domains, rules, the cost profile's constants (a refit changes the values), token budget
    and objectives (not the seed: workers of one study sample with their own seeds)."""
    key = json.dumps({
        "model": repr(space.model), "cluster": repr(replace(space.cluster, price_currency="")),
        "n": space.request.num_gpus, "domains": {k: list(v.domain) for k, v in space.knobs.items()},
        "profile": profile.name, "cost_profile": repr(profile.load_cost_profile()),
        "objectives": settings.objectives, "tokens": space.request.total_tokens,
        **({"cost_overrides": list(profile.cost_overrides)} if profile.cost_overrides else {}),
    }, sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()


def default_study_name(space, profile, settings) -> str:
    """plan-MODEL-NxGPU-HASH: one study per problem (the fingerprint) and seed."""
    key = study_fingerprint(space, profile, settings) + f"-seed{settings.seed}"
    return f"plan-{space.model.name}-{space.request.num_gpus}x{space.cluster.gpu.name}-" + \
        hashlib.sha256(key.encode()).hexdigest()[:12]


def study_attrs(space, profile, settings) -> dict:
    """What a new study records besides its fingerprint, for people (optuna-dashboard) and checks."""
    from search_spaces.optuna_space import PARAMS_ENCODING

    from .version import __version__

    return {"model": space.model.name, "gpu": space.cluster.gpu.name, "num_gpus": space.request.num_gpus,
            "gpus_per_node": space.cluster.gpus_per_node, "framework": profile.name,
            OBJECTIVES_ATTR: list(settings.objectives), "planner_version": __version__,
            ENCODING_ATTR: PARAMS_ENCODING}


# A libpq key=value pair ('password=x', "password = 'a b'"; libpq's conninfo_parse, fe-connect.c)
_KEY_VALUE = re.compile(r"(?<!\w)([A-Za-z_]\w*)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']*)")


def _hide_credentials(text: str) -> str:
    """A storage string that is not a URL, `user:password@host/db` or libpq's `host=db password=x`:
    the password, every other secret-like value and every local path hidden (_hidden_query_value)."""
    text = _KEY_VALUE.sub(lambda m: m.group(0) if not _hidden_query_value(m.group(1), m.group(3).strip("'"))
                          else f"{m.group(1)}{m.group(2)}***", text)
    cred, rest = _split_credentials(text)
    return text if cred is None or ":" not in cred else f"{cred.split(':', 1)[0]}:***@{rest}"


def _is_sqlite(text: str) -> bool:
    """sqlite:///x.db, and SQLAlchemy's driver forms (sqlite+pysqlite:///x.db)."""
    return text.split(":", 1)[0].split("+", 1)[0].lower() == "sqlite"


# The credentials of a URL as SQLAlchemy, which opens the storage, reads them (sqlalchemy/engine/url.py
# _parse_url, 2.1.9): a user without ':' or '/', an optional ':password' without '@', then '@'.
_CREDENTIALS = re.compile(r"([^:/]*)(?::([^@]*))?@")


def _sqlalchemy_host(rest: str) -> tuple[int, str] | None:
    """(where SQLAlchemy's credentials end, the host text after them up to '/', '?' or '#'), or None
    without credentials."""
    m = _CREDENTIALS.match(rest)
    return None if m is None else (m.end(), re.split(r"[/?#]", rest[m.end():], maxsplit=1)[0])


def _split_credentials(rest: str) -> tuple[str | None, str]:
    """`user:password@host/db?query` (the text after '://') -> ('user:password', 'host/db?query'), or
    (None, rest) without credentials, where SQLAlchemy ends them (`_CREDENTIALS`): a password may hold
    '/', '?' and '#' but not '@', and a query may hold an '@' (an e-mail user) without being taken
    for credentials. A further '@' in the host (a password whose '@' was not written %40, which
    SQLAlchemy would send to the server as part of the host name) is counted in the credentials too,
    so that no part of such a password is shown; `raw_at_in_password` refuses those URLs."""
    found = _sqlalchemy_host(rest)
    if found is None:
        return None, rest
    end, host = found
    if "=" in host:
        # 'host/db?user=me@corp&password=x': the '@' sat in a query (which SQLAlchemy misreads as a
        # password ending there): the last '@' followed by a host-like text, or none
        for at in reversed([i for i, ch in enumerate(rest) if ch == "@"]):
            if not any(ch in rest[at + 1:].split("/", 1)[0] for ch in "=&?"):
                return rest[:at], rest[at + 1:]
        return None, rest
    if "@" in host:
        end += host.rindex("@") + 1
    return rest[:end - 1], rest[end:]


def raw_at_in_password(url: str) -> bool:
    """Whether a storage URL's host holds an '@' after its credentials: a password with a raw '@'."""
    found = _sqlalchemy_host(str(url).split("://", 1)[1] if "://" in str(url) else str(url))
    return found is not None and "@" in found[1]


def _url_password(text: str) -> str | None:
    """The password of a storage URL (`_split_credentials`), or None."""
    cred, _ = _split_credentials(text.split("://", 1)[1] if "://" in text else text)
    return cred.split(":", 1)[1] if cred is not None and ":" in cred else None


SECRET_KEYS = ("pass", "secret", "token", "key", "cert")


def _hidden_query_value(key: str, value: str) -> bool:
    """A storage URL's query value that no output shows: a secret (password=...) or a local path."""
    return any(x in key.lower() for x in SECRET_KEYS) or value.startswith("/")


def public_storage(url: str | None) -> str:
    """The storage as it may appear in outputs and messages: no password, no local path."""
    if not url:
        return "in-memory"
    text = str(url)
    if _is_sqlite(text):
        db = sqlite_file(text)
        return f"sqlite:///{quote(db.name)}" if db is not None else "sqlite://"
    if "://" not in text:          # not a URL: hide anything shaped like user:password@
        return _hide_credentials(text)
    scheme, rest = text.split("://", 1)
    cred, rest = _split_credentials(rest)
    if cred is not None:
        rest = (cred.split(":", 1)[0] + ":***" if ":" in cred else cred) + "@" + rest
    head, _, query = rest.split("#", 1)[0].partition("?")
    if query:
        # a secret, or a local path (a Unix-socket folder, host=/var/run/postgresql): neither is shown
        query = urlencode([(k, "***" if _hidden_query_value(k, v) else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)], safe="*")
        head = f"{head}?{query}"
    return f"{scheme}://{head}"


def stale_after() -> float:
    try:
        return max(1.0, float(os.environ.get("PLANNER_STALE_TRIAL_S", STALE_AFTER_S)))
    except ValueError:
        return STALE_AFTER_S


def _serialise_sqlite(engine) -> None:
    """Make every SQLite transaction BEGIN IMMEDIATE (the SQLAlchemy recipe for pysqlite)."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        # Write-ahead log without an fsync per commit: every transaction is now explicit (reads too),
        # and with the default rollback journal each commit cost ~10 ms. A crash may lose the last
        # trials, never corrupt the file. (Where WAL is unavailable the journal mode stays as it is.)
        cur = dbapi_connection.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        except Exception:   # noqa: BLE001 - e.g. a read-only file: keep SQLite's defaults
            pass
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _begin(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()     # connections opened while the storage was set up predate the events


def sqlite_file(url) -> Path | None:
    """The database file of an SQLite storage URL (sqlite:///rel/x.db, sqlite:////abs/x.db), else None:
    the file SQLAlchemy opens, read by SQLAlchemy's own parser (it decodes %20 and %2F, and keeps a '#'),
    so the checks look at the file the study is written to."""
    text = str(url or "")
    if not _is_sqlite(text) or ":///" not in text:
        return None
    try:
        from sqlalchemy.engine import make_url
        path = make_url(text).database
    except Exception:      # noqa: BLE001 - a URL SQLAlchemy cannot read: its own error comes later
        path = unquote(text.split(":///", 1)[1].split("?", 1)[0])
    return Path(path) if path and path != ":memory:" else None


def sqlite_url(path) -> str:
    """The SQLite URL of the file `path`, escaped so that SQLAlchemy reads back this file ('?', '#', '%'
    and spaces in a folder's name would otherwise end the path or be decoded)."""
    return f"sqlite:///{quote(str(path), safe='/')}"


def _sqlite_uri_query(url) -> bool:
    """Whether an SQLite URL asks for SQLite's URI file names (?uri=true): 'file:x.db?mode=...' names a
    file other than the path the checks see."""
    try:
        from sqlalchemy.engine import make_url
        value = make_url(str(url)).query.get("uri", "")
    except Exception:      # noqa: BLE001
        return False
    return str(value).lower() not in ("", "0", "false", "no", "off")


# The tables Optuna's RDBStorage creates (optuna/storages/_rdb/models.py) and its schema-version table.
OPTUNA_TABLES = frozenset({"studies", "version_info", "study_directions", "study_user_attributes",
                           "study_system_attributes", "trials", "trial_user_attributes",
                           "trial_system_attributes", "trial_params", "trial_values", "trial_intermediate_values",
                           "trial_heartbeats", "alembic_version"})


def check_sqlite_file(db: Path, url) -> None:
    """An SQLite storage is a new file or an Optuna database: not a device, a FIFO or a folder (SQLite
    would write its journal beside it, /dev/null-journal), and not a database of other tables (Optuna
    would add its own to a user's data)."""
    shown = public_storage(url)
    if db.exists() and not db.is_file():
        raise SpecError(f"--storage {shown!r}: '{db.name}' exists and is not a regular file; give an SQLite file "
                        "name (a new one, or a study database this planner wrote)")
    if not db.exists() or db.stat().st_size == 0:
        return
    try:
        tables = {r[0] for r in _sqlite_rows(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        if "unable to open" in str(exc):
            # a study database in write-ahead-log mode needs its -shm file beside it, even to be read
            raise SpecError(f"--storage {shown!r}: cannot open '{db.name}' ({exc}); SQLite needs the file and its "
                            "folder writable (it keeps its -wal and -shm files beside the database)") from None
        raise SpecError(f"--storage {shown!r}: '{db.name}' is not an SQLite database ({exc}); give a new file "
                        "name or a study database") from None
    foreign = sorted(tables - OPTUNA_TABLES)
    if foreign:
        raise SpecError(f"--storage {shown!r}: '{db.name}' holds tables Optuna did not make ({', '.join(foreign[:5])}); "
                        "the planner keeps its studies apart from other data: give another file name")


# SQLite's longest file name on Unix (SQLITE_MAX_PATHNAME, os_unix.c: MAX_PATHNAME 512): a longer
# path fails as 'unable to open database file', which blamed a writable folder.
SQLITE_MAX_PATHNAME = 512


def check_scheme(url: str) -> None:
    """The URL's scheme must name a database SQLAlchemy has a dialect for, in lower case (file://,
    redis:// and SQLITE:// ended in "Can't load plugin: sqlalchemy.dialects:..."). Any installed
    dialect is accepted (Optuna's RDB storage runs on SQLAlchemy)."""
    if "://" not in url:
        return
    scheme = url.split("://", 1)[0]
    dialect = scheme.split("+", 1)[0]
    if dialect.lower() in ("postgres", "pg"):
        raise SpecError(f"--storage {public_storage(url)!r}: write the scheme as postgresql:// (SQLAlchemy's name "
                        "for PostgreSQL)")
    if dialect != dialect.lower():
        raise SpecError(f"--storage: the scheme '{scheme[:30]}' must be written in lower case ({scheme.lower()}://...)")
    try:
        from sqlalchemy.dialects import registry
        registry.load(scheme.replace("+", "."))
    except ImportError:
        pass               # the dialect exists but its driver is missing: SQLAlchemy's own message says which
    except Exception:      # noqa: BLE001 - NoSuchModuleError: no such database
        raise SpecError(f"--storage {public_storage(url)!r}: '{scheme[:30]}' is not a database Optuna keeps "
                        "studies in; give sqlite:///FILE.db, or postgresql://USER@HOST/DB for several workers") \
            from None


def this_worker() -> str:
    """The name a trial records of the process that ran it (user attribute 'worker'): host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _sqlite_rows(db: Path, query: str, params=(), timeout: float = 60.0) -> list:
    """Rows of a read-only query on an SQLite file (sqlite3.Error when it cannot be read)."""
    with closing(sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=timeout)) as con:
        return con.execute(query, params).fetchall()


def remove_unshared_study_file(db: Path) -> bool:
    """Remove the SQLite study file a failed run found missing (and its journal, WAL and shared-memory
    files), unless another process may be using it: every study in it must have been created by this
    process (CREATOR_ATTR) and every trial past WAITING run by it (WORKER_ATTR). A second run sharing
    the new file (the same --out at once) keeps its study; a file that cannot be read is kept too.
    Returns whether it was removed."""
    me = json.dumps(this_worker())
    try:
        tables = {r[0] for r in _sqlite_rows(db, "SELECT name FROM sqlite_master WHERE type = 'table'", timeout=1.0)}
        if "studies" in tables:
            foreign_studies = _sqlite_rows(db, (
                "SELECT s.study_id FROM studies s WHERE NOT EXISTS (SELECT 1 FROM study_user_attributes a "
                "WHERE a.study_id = s.study_id AND a.key = ? AND a.value_json = ?)"), (CREATOR_ATTR, me), 1.0)
            foreign_trials = _sqlite_rows(db, (
                "SELECT t.trial_id FROM trials t WHERE t.state != 'WAITING' AND NOT EXISTS (SELECT 1 FROM "
                "trial_user_attributes a WHERE a.trial_id = t.trial_id AND a.key = ? AND a.value_json = ?)"),
                (WORKER_ATTR, me), 1.0)
            if foreign_studies or foreign_trials:
                return False
    except (sqlite3.Error, OSError):
        return False
    try:
        for suffix in ("", "-journal", "-wal", "-shm"):
            db.with_name(db.name + suffix).unlink(missing_ok=True)
    except OSError:          # never in place of the failure being reported
        return False
    return True


def make_storage(optuna, url: str | None):
    """An Optuna storage for `url` (None: in memory) with heartbeats and, for SQLite, serialised access."""
    if not url:
        return None
    check_scheme(str(url))
    if raw_at_in_password(str(url)):
        raise SpecError(f"--storage {public_storage(url)!r}: the password holds an '@', which ends it for "
                        "SQLAlchemy (the rest would go to the server as the host name); write it as %40")
    is_sqlite = _is_sqlite(str(url))
    if is_sqlite and _sqlite_uri_query(url):
        raise SpecError(f"--storage {public_storage(url)!r}: SQLite URI file names (uri=true) are not taken; give "
                        "the file as sqlite:///FILE.db")
    db = sqlite_file(url)
    if db is not None and db.parent.exists() and not db.parent.is_dir():
        raise SpecError(f"--storage {public_storage(url)!r}: '{db.parent.name}', which should be the folder "
                        "holding the SQLite file, is a file; give a file in an existing folder")
    if db is not None and not db.parent.is_dir():
        raise SpecError(f"--storage {public_storage(url)!r}: the folder '{db.parent.name or db.parent}' that "
                        "should hold the SQLite file does not exist; create it, or give a file in an existing folder")
    if db is not None and len(os.fsencode(db.resolve())) > SQLITE_MAX_PATHNAME:
        raise SpecError(f"--storage {public_storage(url)!r}: the database's path is {len(os.fsencode(db.resolve()))} "
                        f"bytes and SQLite opens paths of at most {SQLITE_MAX_PATHNAME}; give a shorter --out or "
                        "--storage path")
    if db is not None:
        check_sqlite_file(db, url)
    kwargs = {"connect_args": {"timeout": 60}} if is_sqlite else {}
    for attempt in range(10):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")        # heartbeat_interval is marked experimental
                storage = optuna.storages.RDBStorage(str(url), engine_kwargs=kwargs,
                                                     heartbeat_interval=HEARTBEAT_S, grace_period=stale_after())
            break
        except ImportError:
            raise
        except Exception as exc:   # noqa: BLE001 - workers starting together race to create the tables
            text = str(exc)
            racing = ("already exists", "locked", "UniqueViolation", "UNIQUE constraint", "duplicate key",
                      "IntegrityError")
            if attempt == 9 or not any(r in text or r in exc.__class__.__name__ for r in racing):
                raise
            time.sleep(0.1 * (attempt + 1))
    if is_sqlite:
        _serialise_sqlite(storage.engine)
    return storage


def open_study(optuna, name: str, storage_url: str | None, sampler, objectives: tuple[str, ...],
               fingerprint: str, seeds=(), attrs=None):
    """Create the study (recording `attrs`, see study_attrs, and enqueueing `seeds`, once) or load it
    and check it was made for these inputs by this planner's encoding. Returns (study, storage, created)."""
    shown = public_storage(storage_url)
    text = str(storage_url or "")
    if _is_sqlite(text) and "://" not in text:
        # 'sqlite:x.db' (slashes left out) was called an in-memory database
        typed = text if "@" not in text else shown
        raise SpecError(f"--storage {typed[:60]!r}: an SQLite URL is sqlite:///FILE.db (a colon, three slashes, "
                        "then the file)")
    if _is_sqlite(text) and sqlite_file(text) is None:
        after = text.split("://", 1)[1]
        if after.strip("/") and after.strip("/") != ":memory:" and ":///" not in text:
            raise SpecError(f"--storage {shown!r}: an SQLite URL takes a file, not a user, password or host; write "
                            "sqlite:///FILE.db (three slashes, then the file)")
        typed = text if not after.strip("/") or after.strip("/") == ":memory:" else shown   # nothing secret in it
        raise SpecError(f"--storage {typed[:40]!r} is an in-memory SQLite database, which holds no study past "
                        "this run; give a file (sqlite:///studies.db), or leave --storage out for the default")
    db = sqlite_file(text)
    if db is not None and db.is_dir():
        # 'sqlite:////' names the root folder ('' was said to exist and not be a regular file)
        raise SpecError(f"--storage {shown!r}: the URL names the folder '{db.name or db}', not a file; give an "
                        "SQLite file in it (sqlite:///FOLDER/studies.db)")
    try:
        storage = make_storage(optuna, storage_url)
    except ImportError as exc:
        scheme = str(storage_url).split(":", 1)[0].split("+", 1)[0].lower()
        hint = ("pip install 'llm-train-planner[postgres]', which brings psycopg" if scheme.startswith("postgres")
                else f"install the Python driver SQLAlchemy uses for {scheme[:20]}:// ({_first_line(exc.__cause__ or exc.__context__ or exc, storage_url)[:80]}); "
                "PostgreSQL and SQLite are the storages this planner is tested with")
        raise SpecError(f"storage {shown!r} needs its database driver: {hint}") from None
    except SpecError:
        raise
    except Exception as exc:   # noqa: BLE001 - SQLAlchemy / Optuna errors for a bad URL or an unreachable server
        raise SpecError(f"cannot open Optuna storage {shown!r}: {_first_line(exc, storage_url)}"
                        f"{_storage_hint(exc, storage_url)}") from None
    directions = ["minimize"] * len(objectives)
    last = None
    for attempt in range(5):
        try:
            study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                        directions=directions, load_if_exists=False)
        except optuna.exceptions.DuplicatedStudyError:
            try:
                study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
            except Exception as exc:   # noqa: BLE001 - deleted in between: try again
                last = exc
                time.sleep(0.2 * (attempt + 1))
                continue
            _check_study(study, name, objectives, fingerprint)
            _fail_stale(optuna, study)
            return study, storage, False
        except Exception as exc:   # noqa: BLE001 - a transient database error
            last = exc
            time.sleep(0.2 * (attempt + 1))
            continue
        for key, value in {**(attrs or {}), OBJECTIVES_ATTR: list(objectives), CREATOR_ATTR: this_worker()}.items():
            study.set_user_attr(key, value)
        for params in seeds:        # before the fingerprint: a worker that reached its target before
            study.enqueue_trial(params)     # they were queued left them WAITING for ever
        study.set_user_attr(FINGERPRINT_ATTR, fingerprint)        # last: others wait for it (_check_study)
        return study, storage, True
    raise SpecError(f"cannot open Optuna study '{name}' in {shown!r}: {_first_line(last, storage_url)}"
                    f"{_storage_hint(last, storage_url)}")


def _check_study(study, name, objectives, fingerprint) -> None:
    attrs = study.user_attrs
    for _ in range(150):                     # its creator writes the fingerprint after queueing the seeds
        if FINGERPRINT_ATTR in attrs:
            break
        time.sleep(0.1)
        attrs = study.user_attrs
    made_for = attrs.get(OBJECTIVES_ATTR)
    if len(study.directions) != len(objectives) or (made_for is not None and list(made_for) != list(objectives)):
        was = ",".join(made_for) if made_for else f"{len(study.directions)} objective(s)"
        raise SpecError(f"study '{name}' was created for --objective {was}, not {','.join(objectives)}; "
                        "give another --study-name (or --storage) to start a new study")
    if FINGERPRINT_ATTR in attrs and ENCODING_ATTR not in attrs:
        raise SpecError(f"study '{name}' was made by an older planner that stored knobs as integer codes; "
                        "give another --study-name (or --storage) to start a new study")
    if attrs.get(FINGERPRINT_ATTR) != fingerprint:
        why = "other inputs (model, cluster, GPUs, batch or pinned knobs)" if FINGERPRINT_ATTR in attrs \
            else "another program or an older planner"
        raise SpecError(f"study '{name}' was created for {why}; give another --study-name (or --storage) "
                        "to start a new study")


def _fail_stale(optuna, study) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # fail_stale_trials is marked experimental
        optuna.storages.fail_stale_trials(study)


def count_taken(study, storage) -> int:
    """Trials of the study complete or running, counted in the database (one small query, so a
    worker can look before every trial it asks for); other storages count the trials they hold."""
    states = ("COMPLETE", "RUNNING")
    if storage is not None:
        try:
            from sqlalchemy import text

            with storage.engine.connect() as con:
                return int(con.execute(text("SELECT COUNT(*) FROM trials WHERE study_id = :s AND state IN "
                                            "('COMPLETE', 'RUNNING')"), {"s": study._study_id}).scalar())
        except Exception:   # noqa: BLE001 - another Optuna schema: count through the API
            pass
    import optuna

    return len(study.get_trials(deepcopy=False, states=tuple(optuna.trial.TrialState[x] for x in states)))


def record_heartbeat(storage, trial) -> None:
    if storage is not None:
        storage.record_heartbeat(trial._trial_id)


def _storage_hint(exc, url) -> str:
    """What would fix an SQLite file that cannot be opened or written (SQLite needs to write a journal
    beside the file, so its directory must be writable too)."""
    text = str(exc)
    if str(url).startswith("sqlite:") and ("unable to open database file" in text or "readonly" in text
                                           or "read-only" in text):
        return ("; SQLite needs the file and its directory writable (it writes a journal beside it): give "
                "--storage a file in a writable directory, or --out somewhere writable")
    return ""


def _first_line(exc, url) -> str:
    text = str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else \
        exc.__class__.__name__ if exc is not None else "unknown error"
    if url:
        text = text.replace(str(url), public_storage(url))
        password = _url_password(str(url))
        secrets = [password] if password else []
        if "?" in str(url):              # secret query values (password=...), as public_storage hides them
            # and local paths (a Unix-socket folder, host=/var/run/...), which the driver repeats in
            # its own message ('connection to server on socket "/var/run/.../.s.PGSQL.5432" failed')
            secrets += [v for k, v in parse_qsl(str(url).rsplit("?", 1)[1], keep_blank_values=True)
                        if _hidden_query_value(k, v)]
        if "://" not in str(url):        # libpq's key=value form: its secrets and paths likewise
            secrets += [m.group(3).strip("'") for m in _KEY_VALUE.finditer(str(url))
                        if _hidden_query_value(m.group(1), m.group(3).strip("'"))]
        for secret in secrets:
            for shown in {secret, unquote(secret)}:
                # a password under 3 characters is left: blanking it would also blank unrelated letters
                # of the message (the URL itself is replaced whole above)
                if len(shown) >= 3:
                    text = text.replace(shown, "***")
    return text
