#!/usr/bin/env bash
# The README's main command: install, build, then run the main job on the embedded default.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
"$here/scripts/setup.sh"
"$here/scripts/build.sh"
echo "run: the end-to-end demo (tiny model, calc agent trained through the swarm) arrives with the"
echo "run: classic-mode capability; what exists today is the text layer: try"
echo "run:   echo 'hello world' | $here/build/bin/ajet tokenize --tokenizer <dir with tokenizer.json>"
