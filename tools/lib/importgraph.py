"""importgraph.py - the import graph of the collector (host/wattlog) and the node (lib/wattnode),
read from the source (ast: every `import` and `from ... import`, at the top of a module or
inside a function, since a lazy import is an arrow too), and checked:

- no circle on either side: a module that imports, through any path, a module that imports
  it back (on the node, a circle also keeps both modules in the heap: neither can be
  forgotten);
- the collector's layers run one way (LOWER): store/ imports no other part and, of the
  top-level modules, only times and complaints; bridges/, fleet/ and runs/ import the store,
  not each other; serve/ imports the store, fleet/ (the operator's session, the plugs'
  firmware record) and runs/ (the appliances' runs); none of them imports what builds the service (collector, service, cli).

    python tools/lib/importgraph.py          # prints the problems; exit status 1 if any
    python tools/lib/importgraph.py --dot    # the graph, for Graphviz

tools/test runs it with the host suite (tests/host/test_imports.py).
"""

import ast
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOTS = {"wattlog": os.path.join(REPO, "host", "wattlog"),
         "wattnode": os.path.join(REPO, "lib", "wattnode")}
PARTS = ("store", "serve", "bridges", "fleet", "runs")  # the collector's packages
LOWER = {"store": (), "bridges": ("store",), "fleet": ("store",), "runs": ("store",),
         "serve": ("store", "fleet", "runs")}
STORE_MAY = ("wattlog", "wattlog.times", "wattlog.complaints")  # top-level modules
BUILDERS = ("wattlog.collector", "wattlog.cluster", "wattlog.service", "wattlog.cli")


def modules(package):
    """{dotted name: path} of every module of a package."""
    root = ROOTS[package]
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), root)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                found[".".join([package] + rel)] = os.path.join(folder, name)
    return found


def imports(name, path, known):
    """The modules of `known` that the module `name` imports."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            subs = ["%s.%s" % (base, a.name) for a in node.names]
            # `from package import module` runs the package's __init__, but what the module
            # depends on is the module: the arrow goes there, not to the package
            targets = [t for t in subs if t in known] or [base]
            targets += [base] if any(t not in known for t in subs) else []
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph():
    known = {}
    for package in ROOTS:
        known.update(modules(package))
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(edges):
    """Each import circle once, as the list of modules around it (Tarjan's strongly connected
    components of more than one module)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))
    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def part(name):
    """The collector package a module lies in (store, serve, ...), else None."""
    bits = name.split(".")
    return bits[1] if bits[0] == "wattlog" and len(bits) > 1 and bits[1] in PARTS else None


def layering(edges):
    """Arrows that run against the collector's layers, in words."""
    wrong = []
    for a, targets in sorted(edges.items()):
        pa = part(a)
        if pa is None:
            continue
        for b in sorted(targets):
            pb = part(b)
            if not b.startswith("wattlog") or pb == pa:
                continue
            if any(b == x or b.startswith(x + ".") for x in BUILDERS):
                wrong.append("%s imports %s, which builds the service" % (a, b))
            elif pb is None and pa == "store" and b not in STORE_MAY:
                wrong.append("%s imports %s: the store imports only %s"
                             % (a, b, ", ".join(STORE_MAY[1:])))
            elif pb is not None and pb not in LOWER[pa]:
                wrong.append("%s imports %s: %s may import only %s"
                             % (a, b, pa, ", ".join(LOWER[pa]) or "itself"))
    return wrong


def main(argv):
    edges = graph()
    if "--dot" in argv:
        print("digraph imports {")
        for a, targets in sorted(edges.items()):
            for b in sorted(targets):
                print('  "%s" -> "%s";' % (a, b))
        print("}")
        return 0
    problems = ["import circle: " + " <-> ".join(c) for c in circles(edges)] + layering(edges)
    for p in problems:
        print(p)
    print("import graph: %d modules, %d arrows, %d problems"
          % (len(edges), sum(len(t) for t in edges.values()), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
