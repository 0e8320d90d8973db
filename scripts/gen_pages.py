"""The pages of the documentation site written at each build: the reference and the home.

Run by MkDocs' ``gen-files`` plugin (``mkdocs.yml``), so the pages cannot drift from the
code: the CLI page walks the ``hal`` argparse tree and asks each Slurm command for its
``--help``; the REST page renders the control plane's OpenAPI document; the
configuration page asks the ``hal.toml`` loader which keys each table takes (by feeding
it an unknown key: its error lists them); the metrics page reads every Prometheus family
the source declares; the home page is the README. Nothing is started: the server object
is built on a throw-away SQLite file for its OpenAPI document and never served.

Run alone, ``python scripts/gen_pages.py OUT_DIR`` writes the same pages there.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import logging
import re
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
log = logging.getLogger("mkdocs.plugins.gen_pages")  # a warning fails --strict


def cell(text: object) -> str:
    """One Markdown table cell: no newlines, no bare pipes."""
    return " ".join(str(text).split()).replace("|", "\\|")


def rst_to_md(text: str) -> str:
    """A docstring's reST as Markdown: double backquotes become single ones, and the
    indented block after a line ending in ``::`` (``Example::``) a fenced TOML block."""
    lines = textwrap.dedent(text).strip("\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            head = line.rstrip()[:-2].rstrip()
            if head:
                out.append(head + ":")
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            out += ["", "```toml", textwrap.dedent("\n".join(block)).strip("\n"), "```", ""]
            continue
        out.append(line)
        i += 1
    return re.sub(r"``([^`]+)``", r"`\1`", "\n".join(out))


# -- the hal command ---------------------------------------------------------------------


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(
            action, argparse._SubParsersAction | argparse._HelpAction
        ):
            continue
        if action.option_strings:
            metavar = (
                ""
                if action.nargs == 0
                else " " + formatter._format_args(action, action.dest.upper())
            )
            name = ", ".join(f"`{o}{metavar}`" for o in action.option_strings)
        else:
            name = f"`{formatter._metavar_formatter(action, action.dest)(1)[0]}`"
        text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| {name} | {cell(text)} |")
    return rows


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def _command_section(name: str, help_text: str, parser: argparse.ArgumentParser, depth: int) -> str:
    parts = [f"{'#' * depth} `{name}`", ""]
    if help_text:
        parts += [help_text[:1].upper() + help_text[1:] + ".", ""]
    if parser.description:
        parts += [parser.description, ""]
    usage = parser.format_usage().removeprefix("usage: ").strip()
    parts += ["```", usage, "```", ""]
    rows = _option_rows(parser)
    if rows:
        parts += ["| Argument | Meaning |", "|---|---|", *rows, ""]
    for sub_name, sub_help, sub in _subcommands(parser):
        parts.append(_command_section(f"{name} {sub_name}", sub_help, sub, min(depth + 1, 4)))
    return "\n".join(parts)


def _slurm_help(command: str) -> tuple[int, str]:
    """What ``hal COMMAND --help`` prints, run in-process with no server to reach."""
    from hal.compat.commands import run

    def no_server(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("the reference is written without a server")

    out, err = io.StringIO(), io.StringIO()
    code = run(command, ["--help"], client_factory=no_server, stdout=out, stderr=err, environ={})
    return code, (out.getvalue() if code == 0 else err.getvalue()).rstrip()


def cli_page() -> str:
    from hal.cli.main import EXIT_CODES
    from hal.cli.parser import build_parser
    from hal.compat.names import SLURM_COMMANDS

    parser = build_parser(["bench"])  # with the benchmarks' own subcommands
    lines = [
        "# The `hal` command",
        "",
        "Every `hal` command with its options, as `hal COMMAND --help` prints them. The",
        "Slurm-named commands (`hal sbatch`, `hal squeue`, ...) take Slurm's options and",
        "print Slurm's output; [Slurm compatibility](../user/slurm.md) says what each",
        "supports. `hal submit` is `hal sbatch` and `hal prio` is `hal sprio`.",
        "`hal compat install-shims DIR` installs the Slurm commands under their own names.",
        "",
        "```",
        parser.format_usage().removeprefix("usage: ").strip(),
        "```",
        "",
        "## Exit status",
        "",
        "A request the server refuses ends the command with the status of its error code:",
        "",
        "| Error code | Exit status |",
        "|---|---|",
        *(f"| `{code}` | {status} |" for code, status in EXIT_CODES.items()),
        "",
        "## Native commands",
        "",
    ]
    for name, help_text, sub in _subcommands(parser):
        lines.append(_command_section(f"hal {name}", help_text, sub, 3))
    lines += ["## Slurm commands", ""]
    for command in SLURM_COMMANDS:
        code, text = _slurm_help(command)
        lines += [f"### `hal {command}`", ""]
        if code == 0 and text:
            lines += [f"`hal {command} --help`:", "", "```", text, "```", ""]
        else:
            lines += [
                f"HAL's `{command}` takes Slurm's options (it has no `--help`); see",
                "[Slurm compatibility](../user/slurm.md).",
                "",
            ]
    return "\n".join(lines)


# -- REST ----------------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The control plane's OpenAPI document, from a server object that is never started."""
    from hal.api.server import HalServer
    from hal.config.model import HalConfig

    with tempfile.TemporaryDirectory() as tmp:
        server = HalServer(HalConfig(), f"sqlite:///{tmp}/hal.db", data_dir=tmp)
        try:
            return dict(server.app.openapi())
        finally:
            server.store.close()


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(_schema_type(s) for s in schema[key])
    kind = schema.get("type", "")
    if kind == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_schema_type(schema['additionalProperties'])}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return str(kind or "any")


def _first_paragraph(text: str) -> str:
    return re.sub(r"``([^`]+)``", r"`\1`", text.strip().split("\n\n", 1)[0]) if text else ""


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", ""]
    summary = _first_paragraph(op.get("description", "")) or op.get("summary", "")
    if summary:
        lines += [" ".join(summary.split()), ""]
    params = [p for p in op.get("parameters", []) if p["name"] != "authorization"]
    if params:
        lines += ["| Parameter | In | Type | Required |", "|---|---|---|---|"]
        for p in params:
            kind = _schema_type(p.get("schema", {}))
            required = "yes" if p.get("required") else ""
            lines.append(f"| `{p['name']}` | {p['in']} | {cell(kind)} | {required} |")
        lines.append("")
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        lines += [f"Body ({media}): {_schema_type(content.get('schema', {}))}", ""]
    answers = []
    for status, answer in op.get("responses", {}).items():
        schemas = [c.get("schema", {}) for c in answer.get("content", {}).values()]
        shape = f": {_schema_type(schemas[0])}" if schemas and schemas[0] else ""
        answers.append(f"{status}{shape}")
    if answers:
        lines += ["Answers: " + "; ".join(answers) + ".", ""]
    return lines


def _schema_section(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{#schema-{name.lower()}}}", ""]
    if schema.get("description"):
        lines += [" ".join(_first_paragraph(schema["description"]).split()), ""]
    props = schema.get("properties", {})
    required = set(schema.get("required", ()))
    if props:
        lines += ["| Field | Type | Required | Meaning |", "|---|---|---|---|"]
        for field, spec in props.items():
            text = spec.get("description", "")
            lines.append(
                f"| `{field}` | {cell(_schema_type(spec))} | "
                f"{'yes' if field in required else ''} | {cell(text)} |"
            )
        lines.append("")
    elif "enum" in schema:
        lines += ["One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
    return lines


def rest_page() -> str:
    doc = openapi_document()
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((method, path, op))
    lines = [
        "# REST API",
        "",
        f"{doc['info']['title']} {doc['info'].get('version', '')}: "
        f"{doc['info'].get('description', '')}",
        "A running server serves this document at `/openapi.json` and browsable at `/docs`.",
        "Clients send their token as `Authorization: Bearer TOKEN` (left out of the",
        "parameters below); errors are `application/problem+json` with a stable `code`. The",
        "slurmrestd-compatible routes under `/slurm/` are in [slurmrestd facade](slurmrest.md).",
        "",
    ]
    for tag in sorted(by_tag):
        lines += [f"## {tag}", ""]
        for method, path, op in by_tag[tag]:
            lines += _operation(method, path, op)
    lines += ["## Schemas", ""]
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        lines += _schema_section(name, schema)
    return "\n".join(lines)


# -- hal.toml --------------------------------------------------------------------------------

UNKNOWN = "zz_not_a_key"
# each table, a document that puts an unknown key in it, and the module that documents it
TABLES: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = [
    ("(top level)", lambda k: k),
    ("[[partitions]]", lambda k: {"partitions": [{"name": "p", **k}]}),
    ("[scheduler]", lambda k: {"scheduler": k}),
    ("[data]", lambda k: {"data": {"cache_url": "http://cache:8480", **k}}),
    ("[priority]", lambda k: {"priority": k}),
    ("[[accounts]]", lambda k: {"priority": {}, "accounts": [{"name": "a", **k}]}),
    ("[[users]]", lambda k: {"priority": {}, "users": [{"name": "u", **k}]}),
    ("[[qos]]", lambda k: {"priority": {}, "qos": [{"name": "q", **k}]}),
    ("TRES limits (grp_tres, max_tres_per_job, borrow_limit)",
     lambda k: {"priority": {}, "qos": [{"name": "q", "grp_tres": k}]}),
    ("[preemption]", lambda k: {"preemption": k}),
    ("[accounting]", lambda k: {"accounting": k}),
    ("[mail]", lambda k: {"mail": k}),
    ("[cloud]", lambda k: {"cloud": k}),
    ("[harmonic]", lambda k: {"harmonic": k}),
    ("[artifacts]", lambda k: {"artifacts": k}),
    ("[[cloud.groups]]", lambda k: {"cloud": {"groups": [
        {"name": "g", "provider": "local", "nodes": "c[1-2]", "cpus": 1, "memory": "1G", **k}
    ]}}),
    ("[topology]", lambda k: {"topology": k}),
    ("[[topology.switches]]", lambda k: {"topology": {"switches": [{"name": "s", **k}]}}),
    ("[[topology.blocks]]", lambda k: {"topology": {"blocks": [{"name": "b", **k}]}}),
    ("[[topology.labels]]", lambda k: {"topology": {"labels": [{"nodes": "n1", **k}]}}),
]  # fmt: skip
# the module whose docstring introduces each group of tables, and the group's title
MODULE_OF = {
    "(top level)": ("hal.config.model", "The file and its top level"),
    "[priority]": ("hal.config.priority", "Priority, accounts, users and QoS"),
    "[preemption]": ("hal.config.preemption", "Preemption"),
    "[accounting]": ("hal.config.accounting", "Accounting records"),
    "[mail]": ("hal.config.mail", "Job mail"),
    "[cloud]": ("hal.config.cloud", "Nodes on demand"),
    "[harmonic]": ("hal.config.harmonic", "The traffic graph"),
    "[artifacts]": ("hal.config.artifacts", "Artifacts on the nodes"),
    "[topology]": ("hal.config.topology", "Topology"),
}


def accepted_keys(document: dict[str, Any]) -> list[str]:
    """The keys the loader names when it refuses ``UNKNOWN`` in one table."""
    from hal.config.model import config_from_dict
    from hal.core.errors import HalError

    try:
        config_from_dict(document, source="hal.toml")
    except HalError as err:
        message = str(err)
    else:
        raise RuntimeError(f"the loader took an unknown key: {document}")
    tail = re.split(r"known keys are|known:|takes|labels are", message)[-1]
    return sorted(set(re.findall(r"[a-z][a-z0-9_]*", tail)) - {UNKNOWN})


def config_page() -> str:
    import importlib

    from hal.cloud import ec2, local

    lines = [
        "# Configuration keys",
        "",
        "Every key `hal.toml` takes, table by table, as the loader reads them; the examples",
        "are the configuration modules' own. [Configuration](../admin/configuration.md) says",
        "where the file is, when it is read and what `scontrol reconfigure` changes.",
        "",
    ]
    for table, document in TABLES:
        if table in MODULE_OF:
            module, title = MODULE_OF[table]
            doc = importlib.import_module(module).__doc__ or ""
            lines += [f"## {title}", "", rst_to_md(doc), ""]
        keys = accepted_keys(document({UNKNOWN: 1}))
        lines += [f"### {table}", "", "Keys: " + ", ".join(f"`{k}`" for k in keys) + ".", ""]
        if table == "[[cloud.groups]]":
            lines += [
                "#### [cloud.groups.ec2]",
                "",
                "Required: "
                + ", ".join(f"`{k}`" for k in ec2.REQUIRED)
                + "; optional: "
                + ", ".join(f"`{k}`" for k in ec2.OPTIONAL)
                + ".",
                "",
                "#### [cloud.groups.local]",
                "",
                ", ".join(f"`{k}`" for k in local.SETTINGS),
                "",
            ]
    lines += [
        "## Licenses",
        "",
        "One key per license, its count: `matlab = 10` (Slurm's `Licenses=matlab:10`); jobs",
        "hold them with `sbatch -L matlab:2`. See [Licenses](../user/licenses.md).",
        "",
    ]
    return "\n".join(lines)


# -- metrics ---------------------------------------------------------------------------------

FAMILIES = {
    "Counter": "counter",
    "CounterMetricFamily": "counter",
    "Gauge": "gauge",
    "GaugeMetricFamily": "gauge",
    "Histogram": "histogram",
    "HistogramMetricFamily": "histogram",
    "Summary": "summary",
    "SummaryMetricFamily": "summary",
    "InfoMetricFamily": "info",
}
# where a module's families are served; anything else is the control plane's /metrics
SERVED_BY = [
    ("hal.agent", "agent"),
    ("hal.cache", "cache node"),
    ("hal.observe.cachemetrics", "control plane (with [data]) and cache node"),
]


class _Unknown(Exception):
    pass


def _bindings(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> Iterator[dict[str, ast.AST]]:
    """The names a literal loop around ``node`` binds, one mapping per iteration
    (``for name, text in (("a", "..."), ...)`` and comprehensions alike)."""
    loops: list[tuple[ast.expr, ast.expr, ast.AST]] = []
    here: ast.AST | None = node
    while here is not None:
        up = parents.get(here)
        if isinstance(up, ast.For) and here in up.body:
            loops.append((up.target, up.iter, up))
        if isinstance(up, ast.DictComp | ast.ListComp | ast.GeneratorExp):
            loops += [(g.target, g.iter, up) for g in up.generators]
        here = up
    envs: list[dict[str, ast.AST]] = [{}]
    for target, source, where in loops:
        while isinstance(source, ast.Name):  # `for x in gauges:` with gauges = (...) above
            assigned = _assigned(source.id, where, parents)
            if assigned is None:
                break
            source = assigned
        if not isinstance(source, ast.List | ast.Tuple):
            continue  # not a literal loop: its names stay unknown
        names = [target] if isinstance(target, ast.Name) else getattr(target, "elts", [])
        new_envs = []
        for env in envs:
            for item in source.elts:
                values = item.elts if isinstance(item, ast.Tuple) and len(names) > 1 else [item]
                new_envs.append(env | {
                    n.id: v for n, v in zip(names, values, strict=False)
                    if isinstance(n, ast.Name)
                })  # fmt: skip
        envs = new_envs
    yield from envs


def _assigned(name: str, where: ast.AST, parents: dict[ast.AST, ast.AST]) -> ast.expr | None:
    """The value last assigned to ``name`` in the function (or module) around ``where``."""
    scope: ast.AST | None = where
    while scope is not None and not isinstance(scope, ast.FunctionDef | ast.Module):
        scope = parents.get(scope)
    found = None
    for node in ast.walk(scope) if scope is not None else ():
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            found = node.value
    return found


def _literal(node: ast.AST, env: dict[str, ast.AST], parents: dict[ast.AST, ast.AST],
             where: ast.AST) -> Any:  # fmt: skip
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        value = env.get(node.id) or _assigned(node.id, where, parents)
        if value is None:
            raise _Unknown(node.id)
        return _literal(value, env, parents, where)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        out: list[Any] = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                out += _literal(elt.value, env, parents, where)
            else:
                out.append(_literal(elt, env, parents, where))
        return out
    if isinstance(node, ast.JoinedStr):
        return "".join(_part(v, env, parents, where) for v in node.values)
    raise _Unknown(ast.unparse(node))


def _part(node: ast.expr, env: dict[str, ast.AST], parents: dict[ast.AST, ast.AST],
          where: ast.AST) -> str:  # fmt: skip
    """One piece of an f-string; a value known only at run time (a help text's setting,
    ``f"at most {rule.max_nodes} nodes"``) is shown by its name, ``<max_nodes>``."""
    value = node.value if isinstance(node, ast.FormattedValue) else node
    try:
        return str(_literal(value, env, parents, where))
    except _Unknown:
        if isinstance(value, ast.Attribute):
            return f"<{value.attr}>"
        raise


def metric_families() -> list[tuple[str, str, str, list[str], str]]:
    """(served by, name, type, labels, help) of every ``hal_*`` family in the source.

    A family's name, help and labels are read where it is made: literals, names bound by a
    loop over a literal tuple, f-strings of those. A name built any other way is not
    found, so keep metric names literal."""
    found: dict[tuple[str, str], tuple[str, str, str, list[str], str]] = {}
    for path in sorted((SRC / "hal").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts)
        if module.startswith(("hal.testing", "hal.bench")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call) or not call.args:
                continue
            func = (
                call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
            )
            if func not in FAMILIES:
                continue
            served = next(
                (s for prefix, s in SERVED_BY if module.startswith(prefix)), "control plane"
            )
            for env in _bindings(call, parents):
                try:
                    name = _literal(call.args[0], env, parents, call)
                except _Unknown:
                    continue
                if not isinstance(name, str) or not re.fullmatch(r"hal_[a-z0-9_]+", name):
                    continue
                try:
                    text = _literal(call.args[1], env, parents, call) if len(call.args) > 1 else ""
                    labels_node = next(
                        (k.value for k in call.keywords if k.arg in ("labels", "labelnames")),
                        call.args[2] if len(call.args) > 2 else None,
                    )
                    labels = _literal(labels_node, env, parents, call) if labels_node else []
                except _Unknown as err:
                    log.warning("metrics reference: %s in %s: cannot read %s", name, module, err)
                    continue
                kind = FAMILIES[func]
                shown = f"{name}_total" if kind == "counter" else name
                found[(served, shown)] = (served, shown, kind, list(labels), str(text))
    return sorted(found.values(), key=lambda f: (f[0] != "control plane", f[0], f[1]))


def metrics_page() -> str:
    lines = [
        "# Metrics",
        "",
        "Every Prometheus family HAL exports, read from the source at each build: name, type,",
        "labels and help text, by the process that serves it. The control plane serves",
        "`/metrics` (`HAL_METRICS=0` turns it off); an agent with `--metrics-listen HOST:PORT`",
        "and a cache node with `--metrics-listen HOST:PORT` serve their own. Each also",
        "exports prometheus-client's `process_*` families. Some families appear only when",
        "their feature is in use (`[data]`, `[cloud]`, HTC, artifacts, GPUs).",
        "[Observability](../admin/observability.md) explains the labels' values, the alerts",
        "and the dashboards built on them.",
        "",
    ]
    served = ""
    for where, name, kind, labels, text in metric_families():
        if where != served:
            served = where
            lines += ["", f"## {where[:1].upper() + where[1:]}", "",
                      "| Metric | Type | Labels | Help |", "|---|---|---|---|"]  # fmt: skip
        shown = ", ".join(f"`{label}`" for label in labels)
        lines.append(f"| `{name}` | {kind} | {shown} | {cell(text)} |")
    return "\n".join(lines) + "\n"


# -- the home page ---------------------------------------------------------------------------


def index_page() -> str:
    """The README, its links into ``docs/`` made the site's own."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = text.replace("](docs/", "](")
    for link in re.findall(r"\]\(([^)#]+)", text):
        if not link.startswith(("http://", "https://")) and not link.endswith(".md"):
            log.warning("README links to %s, which is not a page of the site", link)
    return text


# -- entry points -----------------------------------------------------------------------------

PAGES: dict[str, Callable[[], str]] = {
    "index.md": index_page,
    "reference/cli.md": cli_page,
    "reference/rest.md": rest_page,
    "reference/configuration.md": config_page,
    "reference/metrics.md": metrics_page,
}


def write_all(open_file: Callable[[str], Any]) -> None:
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    for page, render in PAGES.items():
        with open_file(page) as out:
            out.write(render())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/gen_pages.py OUT_DIR", file=sys.stderr)
        return 2
    target = Path(argv[0])

    def open_file(page: str) -> Any:
        path = target / page
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("w", encoding="utf-8")

    write_all(open_file)
    print(json.dumps(sorted(str(target / p) for p in PAGES)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
else:  # run by mkdocs-gen-files
    import mkdocs_gen_files

    write_all(lambda page: mkdocs_gen_files.open(page, "w"))
