#!/usr/bin/env bash
# The docs test's stand-in for `scripts/run.sh` in docs/examples.md (tests/docs/docs_test.py): the
# model run.sh leaves in exp/main/models/calc-sft, without its minutes of SFT warm-up and RL. Same
# tokenizer (`ajet tasks corpus`, 1024 ids), so prompts have the lengths of the real one; a random micro
# model with the positions the document's config allows. Runs from the repository root, like the document.
set -euo pipefail
mkdir -p exp/main/models
build/bin/ajet tasks corpus --out exp/main/corpus.txt
build/bin/ajet tokenizer train --corpus exp/main/corpus.txt --vocab-size 1024 --out exp/main/tokenizer
build/bin/ajet model init --preset micro --tokenizer exp/main/tokenizer --seed 7 --out exp/main/models/calc-sft
sed -i 's/"max_position_embeddings": 512/"max_position_embeddings": 1024/' exp/main/models/calc-sft/config.json
