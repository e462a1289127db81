# tools/env.sh - sourced by the tools: the repo's paths, and tools/setup when anything is missing.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/tools/setup" --if-needed
export PATH="$repo/.venv/bin:/usr/sbin:$PATH"
# The node code and the MicroPython libraries for the unix port.
export MICROPYPATH="$repo/lib:$repo/.mplib"
