# Sourced by bench/zero_bench.sh and bench/hybrid_bench.sh (from the repository root, with
# BUILD_DIR and WORK set): builds ztrain into BUILD_DIR, makes the synthetic token shard, and
# defines the model and training arguments both benchmarks run.
# Model: 4 layers x 256 wide x 4 heads, seq 256, vocab 50257 (padded 50304): 16.1M
# parameters, 80% of them in the tied embedding, so the collectives are not toy-sized.
# Data: synthetic random tokens. fp32, micro_batch 2, grad_accum 2, 1 thread per rank.
mkdir -p "$WORK" bench/results
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=OFF > "$WORK/build.log" 2>&1
cmake --build "$BUILD_DIR" -j2 --target ztrain >> "$WORK/build.log" 2>&1

[ -f "$WORK/train.bin" ] || /usr/bin/python3 bench/make_shard.py "$WORK/train.bin" 400000 50257

# shellcheck disable=SC2034  # used by the scripts that source this file
MODEL=(--model.n_layer=4 --model.n_head=4 --model.n_embd=256 --model.seq_len=256
       --model.vocab_size=50257 --model.vocab_pad_to=128)
# shellcheck disable=SC2034
TRAIN=(--data.train="$WORK/train.bin" --train.micro_batch=2 --train.grad_accum=2
       --train.eval_every=0 --train.sample_tokens=0 --train.log_every=1000 --train.threads=1
       --train.warmup_steps=2)
