# Shared by the CLI test scripts (sourced, not run): root permission for Open MPI, a scratch
# directory removed at exit, a failure counter, expect(), check() and the data makers.
# shellcheck shell=bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# expect CODE PATTERN CMD...: runs CMD, checks its exit status and that its output matches PATTERN.
expect() {
  local want=$1 pattern=$2
  shift 2
  local out rc
  out=$(timeout 120 "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: exit $rc (expected $want): $*"
    # Open MPI's start-up failures name their cause at the top, not in the last lines.
    if grep -qE "before MPI_INIT completed|orte_init failed|ompi_mpi_init: " <<<"$out"; then
      echo "$out" | head -25
    else
      echo "$out" | tail -5
    fi
    failures=$((failures + 1)); return
  fi
  if ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: output lacks /$pattern/: $*"; echo "$out" | tail -5; failures=$((failures + 1)); return
  fi
  echo "ok: exit $rc /$pattern/: ${*: -1}"
}

# check DESCRIPTION CMD...: runs CMD; "ok: DESCRIPTION" when it succeeds, else a FAIL counted.
check() {
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

# make_corpus: a small text corpus ($work/text.txt) prepared into $work/data (train, val and
# tokenizer.json) with $BIN/zt-prepare; exits 1 when that fails.
make_corpus() {
  for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog"; echo "%"; done > "$work/text.txt"
  "$BIN/zt-prepare" --input "$work/text.txt" --output "$work/data" --doc-separator % > /dev/null || {
    echo "FAIL: zt-prepare"; exit 1; }
}

# make_prompt_examples COUNT SEED [ZT_PREPARE_ARGS...]: COUNT prompt/completion examples in
# $work/examples.jsonl (prompts of 3-40 random letters and spaces from SEED, the completion
# always " OK!", so only the completion can be learned), prepared into $work/ex with
# $BIN/zt-prepare and the extra arguments; exits 1 when that fails.
make_prompt_examples() {
  local count=$1 seed=$2
  shift 2
  python3 - "$work/examples.jsonl" "$count" "$seed" <<'PY'
import json, random, sys
r = random.Random(int(sys.argv[3]))
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        prompt = "".join(r.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(r.randint(3, 40)))
        f.write(json.dumps({"prompt": prompt, "completion": " OK!"}) + "\n")
PY
  "$BIN/zt-prepare" --input "$work/examples.jsonl" --output "$work/ex" "$@" > /dev/null || {
    echo "FAIL: zt-prepare --format jsonl"; exit 1; }
}
