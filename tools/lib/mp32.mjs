// tools/lib/mp32.mjs - run a MicroPython script on a 32-bit MicroPython: the WebAssembly port
// (npm package @micropython/micropython-webassembly-pyscript, pinned by package-lock.json,
// installed into node_modules/ by tools/setup), under node.
//
//   node tools/lib/mp32.mjs [--heap-kib N] [--copy PATH]... SCRIPT [ARG...]
//
// Why: the unix port here is a 64-bit build (small ints of 63 bits, 8-byte pointers, 32-byte GC
// blocks), so an int of 2**30 or more, which is a heap object on an ESP32, passes its
// heap_lock() tests, and its heap figures are twice an ESP32's. This port is 32-bit as an ESP32
// is (31-bit small ints, 4-byte pointers, 16-byte GC blocks). It differs from an ESP32 in its
// double floats (the ESP32's are single), and it has no sockets, no machine module.
//
// As the unix port does: sys.path is the script's folder then $MICROPYPATH's folders, sys.argv
// the script and its arguments, the working directory the same path as here, and the exit
// status the script's sys.exit() (1 after an uncaught exception, its traceback on stderr).
//
// Files: the port sees a file system in memory. The runner copies into it, each at its own
// path, the folders on $MICROPYPATH, the script and every --copy PATH (a folder or a file;
// __pycache__ skipped): modules beside the script need a --copy of its folder. What the script
// writes stays in memory (tests write under /tmp).
//
// What the runner adds, from tools/lib/mp32/ (put on sys.path after $MICROPYPATH):
//   os.py        the port's os plus getenv (node's environment) and urandom (an ESP32 has it)
//   socket.py    no sockets: imports work (umqtt.simple imports usocket at load), making a
//   usocket.py   socket raises OSError; tests that need one skip themselves and say why
//   mp32run.py   runs the script as __main__, and its steps (below)
//
// The heap: this port's garbage collector runs only between calls from JavaScript (it cannot
// scan the wasm stack for roots); within a call it grows the heap instead of collecting. So
// --heap-kib (default 100: an ESP32 without PSRAM has about 60-100 KiB free with Wi-Fi up) is
// the heap it starts with, not a limit: a fixed heap would fail on uncollected garbage, not
// on what the script keeps. A script that runs long leaves a generator in the global
// `mp32_steps`; the runner resumes it once per call until it ends, and the garbage of each step
// is collected before the next (tests/device/run.py: one step per test). Live heap is measured
// between steps (tools/bench/heap_parts.py).

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const PACKAGE = "@micropython/micropython-webassembly-pyscript";

function usage(why) {
  process.stderr.write(`mp32: ${why}\nusage: node tools/lib/mp32.mjs [--heap-kib N] [--copy PATH]... SCRIPT [ARG...]\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { heapKib: 100, copies: [], script: null, args: [] };
  let i = 0;
  for (; i < argv.length && argv[i].startsWith("--"); i += 2) {
    if (i + 1 >= argv.length) usage(`${argv[i]} needs a value`);
    if (argv[i] === "--heap-kib") opts.heapKib = Number.parseInt(argv[i + 1], 10);
    else if (argv[i] === "--copy") opts.copies.push(path.resolve(argv[i + 1]));
    else usage(`unknown option ${argv[i]}`);
  }
  if (!(opts.heapKib > 0)) usage("--heap-kib takes a positive number of KiB");
  if (i >= argv.length) usage("no script given");
  opts.script = path.resolve(argv[i]);
  opts.args = argv.slice(i + 1);
  return opts;
}

async function loadPort(heapKib, out) {
  const entry = path.join(REPO, "node_modules", PACKAGE, "micropython.mjs");
  if (!fs.existsSync(entry)) {
    process.stderr.write(`mp32: ${entry} is missing: run tools/setup\n`);
    process.exit(2);
  }
  const { loadMicroPython } = await import(entry);
  return loadMicroPython({
    heapsize: heapKib * 1024, linebuffer: false,
    stdout: (bytes) => out(process.stdout, bytes), stderr: (bytes) => out(process.stderr, bytes),
  });
}

// The port hands over its output a byte at a time: a line at a time to node.
function lineWriter() {
  const pending = new Map();
  const out = (stream, bytes) => {
    const buf = pending.get(stream) || [];
    pending.set(stream, buf);
    for (const b of bytes) {
      buf.push(b);
      if (b === 10) flush(stream);
    }
  };
  const flush = (stream) => {
    const buf = pending.get(stream);
    if (buf && buf.length) stream.write(Buffer.from(buf));
    pending.set(stream, []);
  };
  return { out, flushAll: () => { flush(process.stdout); flush(process.stderr); } };
}

function copyInto(FS, src, dest = src) {
  const st = fs.statSync(src, { throwIfNoEntry: false });
  if (!st) return;  // gone meanwhile (a temporary file of another program)
  if (st.isDirectory()) {
    FS.mkdirTree(dest);
    for (const name of fs.readdirSync(src)) {
      if (name !== "__pycache__") copyInto(FS, path.join(src, name), path.join(dest, name));
    }
  } else {
    FS.mkdirTree(path.dirname(dest));
    FS.writeFile(dest, fs.readFileSync(src));
  }
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(opts.script)) usage(`${opts.script}: no such file`);
  const micropypath = (process.env.MICROPYPATH || "").split(":").filter((p) => p);
  const { out, flushAll } = lineWriter();
  const mp = await loadPort(opts.heapKib, out);
  const FS = mp.FS;
  const own = "/mp32";
  copyInto(FS, path.join(HERE, "mp32"), own);
  for (const p of [...micropypath, opts.script, ...opts.copies]) copyInto(FS, p);
  FS.mkdirTree(process.cwd());
  FS.chdir(process.cwd());
  const sysPath = [path.dirname(opts.script), ...micropypath, own, ".frozen"];
  const call = (code) => {
    mp.runPython(`import mp32run\nmp32run.${code}`);
    flushAll();
    return mp.pyimport("mp32run").status;
  };
  mp.runPython(`
import sys
sys.path[:] = ${JSON.stringify(sysPath)}
sys.argv[:] = ${JSON.stringify([opts.script, ...opts.args])}
import os
os._environ.update(${JSON.stringify(process.env)})
`);
  let status = call(`run(${JSON.stringify(opts.script)})`);
  while (status === null) status = call("step()");
  return status;
}

try {
  process.exitCode = await main();
} catch (e) {  // the runner's own Python failed, or the port did (an abort): never node's source dump
  const why = e && e.name === "PythonError" ? e.message : `${e && e.message ? e.message.split("\n")[0] : e}\n`;
  process.stderr.write(`mp32: the WebAssembly port failed: ${why}`);
  process.exitCode = 1;
}
