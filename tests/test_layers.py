"""Layering: imports only point downwards through the six layers (record -> log (+ tiered
storage beside it) -> cleaner -> coordinator -> the surfaces side by side -> cli), the surfaces
import none of each other, no module import cycle exists, and the cleaner reaches the data
directory from the layer above (``kafkalog.open`` hands it to the log manager).

The static checks read every module's imports from its source (module level, inside functions and
under ``if TYPE_CHECKING:``): an import that only runs later (a lazy one in a function) or only for
the type checker is an import all the same.

Inside the server, the sub-packages are Kafka's rooms in an order (:data:`SERVER_ROOMS`): a module
imports only modules of its own room or of rooms before it, so the broker's state never imports a
handler or the dispatch table; the serving edge composes them."""
import ast
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import kafkalog
from kafkalog.log.checkpoint import OffsetCheckpointFile
from kafkalog.log.naming import CLEANER_OFFSET_CHECKPOINT_FILE, TopicPartition

_PROBE = r"""
import importlib, json, pkgutil, sys
import kafkalog.{layer}
for m in pkgutil.iter_modules(kafkalog.{layer}.__path__):
    importlib.import_module("kafkalog.{layer}." + m.name)
print(json.dumps(sorted(n for n in sys.modules if n.startswith("kafkalog."))))
"""

_ABOVE = {
    "record": ("kafkalog.log", "kafkalog.tiered", "kafkalog.cleaner", "kafkalog.coordinator",
               "kafkalog.client", "kafkalog.aio", "kafkalog.server", "kafkalog.spark", "kafkalog.cli"),
    "log": ("kafkalog.tiered", "kafkalog.cleaner", "kafkalog.coordinator", "kafkalog.client",
            "kafkalog.aio", "kafkalog.server", "kafkalog.spark", "kafkalog.cli"),
    "tiered": ("kafkalog.cleaner", "kafkalog.coordinator", "kafkalog.client", "kafkalog.aio",
               "kafkalog.server", "kafkalog.spark", "kafkalog.cli"),
    "cleaner": ("kafkalog.coordinator", "kafkalog.client", "kafkalog.aio", "kafkalog.server",
                "kafkalog.spark", "kafkalog.cli"),
    "coordinator": ("kafkalog.client", "kafkalog.aio", "kafkalog.server", "kafkalog.spark",
                    "kafkalog.cli"),
    "client": ("kafkalog.aio", "kafkalog.server", "kafkalog.spark", "kafkalog.cli"),
    "server": ("kafkalog.client", "kafkalog.aio", "kafkalog.spark", "kafkalog.cli"),
    "spark": ("kafkalog.client", "kafkalog.aio", "kafkalog.server", "kafkalog.cli"),
}


#: the layer of each package of kafkalog (``errors``, ``_kernels``, the kernel selection, and
#: ``_kio``, kio imported without hypothesis: below every layer)
LAYERS = {"errors": 0, "_kernels": 0, "_kio": 0, "record": 1, "log": 2, "tiered": 2, "cleaner": 3, "coordinator": 4,
          "client": 5, "aio": 5, "server": 5, "spark": 5, "testing": 5, "cli": 6}
#: the surfaces of layer 5: none imports another (``aio`` is the client's asyncio face);
#: ``testing`` (a real broker for tests) runs the server and reads through the client, and nothing
#: imports it
SURFACES = {"client": "client", "aio": "client", "server": "server", "spark": "spark"}
PACKAGE = Path(kafkalog.__file__).parent


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def import_graph(type_checking: bool = True) -> dict:
    """``{module: {imported kafkalog module, ...}}`` of every module of the package, from their
    sources: every ``import kafkalog...`` / ``from kafkalog... import`` (a name imported from a
    package counts as its submodule when it is one), wherever it is; those under
    ``if TYPE_CHECKING:`` too unless ``type_checking`` is False. The sources are parsed once per
    flag for the whole run (~2 s each time); each call gets its own copy."""
    return {name: set(found) for name, found in _import_graph(type_checking).items()}


@functools.cache
def _import_graph(type_checking: bool) -> dict:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = path

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in modules.items():
        found = _imported(ast.parse(path.read_text(), str(path)), resolve, modules, type_checking)
        found.discard(name)
        found.discard("kafkalog")       # the root package: its lazy re-export of the client
        graph[name] = found
    return graph


def _imported(tree: ast.AST, resolve, modules: dict, type_checking: bool = True) -> set:
    """The kafkalog modules ``tree`` imports (under ``if TYPE_CHECKING:`` only if ``type_checking``)."""
    found: set = set()
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(resolve(a.name) for a in node.names if a.name.startswith("kafkalog"))
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
              and node.module.startswith("kafkalog")):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                found.add(full if full in modules else resolve(node.module))
        todo.extend(ast.iter_child_nodes(node))
    return found


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_every_module_is_in_a_layer():
    unplaced = sorted(m for m in import_graph() if m != "kafkalog" and _package(m) not in LAYERS)
    assert unplaced == [], "modules outside the six layers (add their package to LAYERS)"


def test_imports_point_downwards_through_the_six_layers():
    """No module imports a higher layer, no surface imports another, and the log layer never
    imports tiered storage (which builds on it)."""
    wrong = []
    for a, imported in import_graph().items():
        pa = _package(a)
        if pa not in LAYERS:
            continue
        for b in imported:
            pb = _package(b)
            if LAYERS[pb] > LAYERS[pa]:
                wrong.append(f"{a} -> {b} (layer {LAYERS[pa]} imports layer {LAYERS[pb]})")
            elif pb == "testing" and pa != "testing":
                wrong.append(f"{a} -> {b} (nothing imports kafkalog.testing)")
            elif pa in SURFACES and pb in SURFACES and SURFACES[pa] != SURFACES[pb]:
                wrong.append(f"{a} -> {b} (a surface imports another)")
            elif (pa, pb) in (("log", "tiered"), ("client", "aio")):
                wrong.append(f"{a} -> {b} ({pa} imports {pb}, which builds on it)")
    assert wrong == []


def strongly_connected(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    found: list = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_cycle():
    """No two modules import each other, directly or through others (a lazy import in a function,
    or one only for the type checker, breaks nothing at import time, but the modules still depend
    on each other)."""
    assert strongly_connected(import_graph()) == []


def test_the_graph_sees_type_checking_and_function_imports():
    """Not vacuous: the imports only the type checker runs and those inside functions are edges."""
    graph = import_graph()
    assert "kafkalog.server.broker" in graph["kafkalog.server.handlers.api_versions"]      # TYPE_CHECKING
    assert "kafkalog.server.broker" not in import_graph(type_checking=False)["kafkalog.server.handlers.api_versions"]
    assert "kafkalog.server.coordinator.assignors" in graph["kafkalog.server.config"]       # in a function


#: the rooms of ``kafkalog.server`` in their order: a module imports only its own room's and those
#: of the rooms before it (a name ending in "." is a sub-package, else one module)
SERVER_ROOMS = (
    ("base", ("kafkalog.server", "kafkalog.server.error_codes", "kafkalog.server.features",
              "kafkalog.server.config_docs", "kafkalog.server.topic_ids",
              "kafkalog.server.heap")),
    ("requests", ("kafkalog.server.requests.",)),
    ("coordinator", ("kafkalog.server.coordinator.",)),
    ("config", ("kafkalog.server.config",)),
    ("security", ("kafkalog.server.security.",)),
    # the request path's instruments and the client telemetry receiver (Broker.metrics,
    # Broker.client_metrics): below the state that holds them; the rest of
    # metrics/ (the metered network layer, the scrape-time collectors, the endpoint) comes last
    ("quota", ("kafkalog.server.quota.",)),
    ("instruments", ("kafkalog.server.metrics.broker_metrics", "kafkalog.server.metrics.client_metrics",
                     "kafkalog.server.metrics.telemetry_payload")),
    ("state", ("kafkalog.server.broker", "kafkalog.server.fetch_session", "kafkalog.server.share_session")),
    ("handlers", ("kafkalog.server.handlers.",)),
    ("network", ("kafkalog.server.network.",)),
    ("metrics", ("kafkalog.server.metrics.",)),
)


def _room(module: str) -> int:
    for i, (_name, members) in enumerate(SERVER_ROOMS):
        for m in members:
            if module == m or module == m.rstrip(".") or (m.endswith(".") and module.startswith(m)):
                return i
    raise KeyError(module)


def test_every_server_module_is_in_a_room():
    server = [m for m in import_graph() if m == "kafkalog.server" or m.startswith("kafkalog.server.")]
    unplaced = []
    for m in server:
        try:
            _room(m)
        except KeyError:
            unplaced.append(m)
    assert unplaced == [], "server modules in no room of SERVER_ROOMS"
    top = sorted(PACKAGE.joinpath("server").glob("*.py"))
    assert len(top) <= 10, f"{len(top)} modules at the top of kafkalog/server: {[p.name for p in top]}"


def test_server_rooms_import_only_earlier_rooms():
    """The sub-packages' allowed imports: the requests' bytes know nothing of the broker; the group
    coordinators neither of requests nor of security; the broker's state no handler and not the
    dispatch table; the handlers not the network."""
    wrong = []
    for a, imported in import_graph().items():
        if not (a == "kafkalog.server" or a.startswith("kafkalog.server.")):
            continue
        for b in imported:
            if b.startswith("kafkalog.server.") and _room(b) > _room(a):
                wrong.append(f"{a} -> {b} ({SERVER_ROOMS[_room(a)][0]} imports {SERVER_ROOMS[_room(b)][0]})")
    assert wrong == []


def test_the_room_check_places_modules():
    """Not vacuous: the state is before the handlers, the handlers before the network."""
    assert _room("kafkalog.server.broker") < _room("kafkalog.server.handlers.kafka_apis") \
        < _room("kafkalog.server.network.socket_server")
    assert _room("kafkalog.server.requests.protocol") < _room("kafkalog.server.coordinator.consumer_group")


def test_the_cycle_check_finds_a_cycle():
    """The check is not vacuous: a cycle, direct or through a third module, is found."""
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _loaded_after_importing(layer: str) -> list:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(layer=layer)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_log_manager_does_not_import_the_cleaner():
    code = ("import sys, kafkalog.log.manager; "
            "print(sorted(n for n in sys.modules if n.startswith('kafkalog.cleaner')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_layer_imports_only_downwards():
    for layer, above in _ABOVE.items():
        loaded = _loaded_after_importing(layer)
        assert f"kafkalog.{layer}" in loaded
        upward = [n for n in loaded if f"kafkalog.{_package(n)}" in above]
        assert upward == [], f"kafkalog.{layer} imports {upward}"


def _fill(dl, topic: str, n: int, keys: int) -> None:
    for i in range(n):
        dl.produce(topic, b"v%d" % i, key=b"k%d" % (i % keys), partition=0)


def test_open_with_the_cleaner_enabled_compacts(tmp_path):
    d = str(tmp_path / "data")
    cfg = {"log.cleaner.backoff.ms": 20, "log.cleaner.dedupe.buffer.size": 1 << 20,
           "log.initial.task.delay.ms": 0}
    with kafkalog.open(d, cfg) as dl:
        dl.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 700,
                                 "min.cleanable.dirty.ratio": 0.01})
        _fill(dl, "c", 200, 5)
        checkpoint = os.path.join(d, CLEANER_OFFSET_CHECKPOINT_FILE)
        deadline = time.monotonic() + 60
        cleaned_to = 0
        while time.monotonic() < deadline:
            if os.path.exists(checkpoint):
                cleaned_to = OffsetCheckpointFile(checkpoint, create=False).read().get(
                    TopicPartition("c", 0), 0)
                if cleaned_to > 0:
                    break
            time.sleep(0.02)
        assert cleaned_to > 0, "the background cleaner never cleaned the compacted topic"
        records = list(dl.consume("c", 0))
    latest = {}
    for r in records:
        latest[r.key] = r.value
    assert latest == {b"k%d" % k: b"v%d" % max(i for i in range(200) if i % 5 == k)
                      for k in range(5)}
    # the cleaned range holds at most one record per key
    below = [r.key for r in records if r.offset < cleaned_to]
    assert len(below) == len(set(below))
    assert len(records) < 200


def test_open_with_the_cleaner_disabled_starts_none(tmp_path):
    with kafkalog.open(str(tmp_path / "d"), {"log.cleaner.enable": False}) as dl:
        assert dl.manager.cleaner is None
    with kafkalog.open(str(tmp_path / "e"), {"log.cleaner.enable": True}) as dl:
        assert dl.manager.cleaner is not None


def test_typed_errors_are_reexported_from_kafkalog():
    import kafkalog.errors
    assert "KafkalogError" in kafkalog.errors.__all__
    for name in kafkalog.errors.__all__:
        assert getattr(kafkalog, name) is getattr(kafkalog.errors, name)
        assert issubclass(getattr(kafkalog, name), kafkalog.KafkalogError)
        assert name in kafkalog.__all__
    star: dict = {}
    exec("from kafkalog import *", star)
    assert star["LogDirError"] is kafkalog.errors.LogDirError
    assert star.get("open", open) is open          # the builtin is not shadowed


def test_public_client_classes_are_lazy_exports_of_kafkalog():
    """``import kafkalog`` stays light (the client is imported on first use), and every name of
    the client's API the README uses is reachable as ``kafkalog.<name>``."""
    code = (
        "import sys, kafkalog\n"
        "assert 'kafkalog.client' not in sys.modules, 'import kafkalog imported the client'\n"
        "import kafkalog.client as c\n"
        "for name in c.__all__:\n"
        "    assert getattr(kafkalog, name) is getattr(c, name), name\n"
        "    assert name in dir(kafkalog), name\n"
        "    assert (name in kafkalog.__all__) == (name != 'open'), name\n"
        "assert kafkalog.Consumer.__name__ == 'Consumer'\n"
        "star = {}\n"
        "exec('from kafkalog import *', star)\n"
        "assert star['Consumer'] is c.Consumer and star['TopicPartition'] is c.TopicPartition\n"
        "try:\n"
        "    kafkalog.NoSuchThing\n"
        "except AttributeError as e:\n"
        "    assert 'NoSuchThing' in str(e)\n"
        "else:\n"
        "    raise AssertionError('kafkalog.NoSuchThing did not raise')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
